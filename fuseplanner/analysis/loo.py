"""Leave-one-model-out accuracy: how well a spec fitted without a model predicts that model.

For each model of the training runs, the kernel fields are refitted (`fit_records.staged_fit`: the
bundled fit's stages and fields) on the training records of the other models, and the left-out
model's records (its training and test runs) are scored with the refit spec: time median / p90 APE
over every record and over those whose layers no training model has (`generalisation.layer_key`),
GMA median / p90, and fuse decisions agreeing with measurement. The same records scored with the
spec as given (fitted on every model) are the in-sample reference.

    result = leave_one_model_out(spec, test_paths, train_paths, max_iter=400, jobs=2)
    tables = loo_tables(result)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from fuseplanner.analysis.accuracy import Errors, metric_apes
from fuseplanner.analysis.generalisation import layer_key
from fuseplanner.analysis.runs import Run, run_label
from fuseplanner.analysis.tables import Table, cell_mp
from fuseplanner.core.errors import AnalysisError
from fuseplanner.validation import fit, report
from fuseplanner.validation.fit_records import BUNDLED_STAGES, staged_fit
from fuseplanner.validation.microbench import apply_measured

#: fitter(spec, training samples, stages, max_iter) -> fitted values (`staged_fit`, or a test's probe).
Fitter = Callable[[Any, Sequence[fit.Sample], Sequence[Sequence[str]], int], dict[str, float]]


def no_refit(spec: Any, samples: Sequence[fit.Sample], stages: Sequence[Sequence[str]], max_iter: int) -> dict[str, float]:
    """A `Fitter` that keeps the spec as given (only the in-sample table is wanted)."""
    return {}


@dataclass(frozen=True)
class ModelScore:
    """One model's (or "all" models') scores with one spec. `fit_records`: timed records the spec was
    fitted on (0: the spec as given); `records`: scored records with a measured time; `kept`: those
    whose layers no training model has."""

    model: str
    fit_records: int
    records: int
    kept: int
    time: Errors
    time_kept: Errors
    gma: Errors
    agreeing: int
    groups: int


@dataclass(frozen=True)
class LooResult:
    """Per-model rows then "all", with the refit specs (`refit`) and the spec as given (`bundled`);
    `values`: each left-out model's refitted values."""

    refit: tuple[ModelScore, ...]
    bundled: tuple[ModelScore, ...]
    values: tuple[tuple[str, tuple[tuple[str, float], ...]], ...]
    stages: tuple[tuple[str, ...], ...]
    max_iter: int


@dataclass(frozen=True)
class _Tally:
    time: tuple[float, ...] = ()
    time_kept: tuple[float, ...] = ()
    gma: tuple[float, ...] = ()
    agreeing: int = 0
    groups: int = 0

    def __add__(self, o: _Tally) -> _Tally:
        return _Tally(self.time + o.time, self.time_kept + o.time_kept, self.gma + o.gma,
                      self.agreeing + o.agreeing, self.groups + o.groups)  # fmt: skip

    def score(self, model: str, fit_records: int) -> ModelScore:
        return ModelScore(model, fit_records, len(self.time), len(self.time_kept), Errors.of(self.time),
                          Errors.of(self.time_kept), Errors.of(self.gma), self.agreeing, self.groups)  # fmt: skip


def _model_of(path: str | Path) -> str:
    return report.load_results(path).meta.model or "?"


def _by_model(paths: Sequence[str | Path]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for p in paths:
        if not Path(p).is_file():
            raise AnalysisError(f"no such results file: {p}")
        out.setdefault(_model_of(p), []).append(str(p))
    return out


def _keys(paths: Sequence[str], graphs: dict) -> frozenset[tuple]:
    keys = set()
    for p in paths:
        run = Run(p, "", report.load_results(p))
        graph = fit.results_graph(p, run.data.meta.model, run.data.meta.batch, graphs)
        keys.update(layer_key(run, rec, graph) for rec in run.records)
    return frozenset(keys)


def _tally(path: str, spec: Any, seen: frozenset[tuple], graphs: dict) -> _Tally:
    """Errors and decisions of one run re-predicted with `spec`, its records' layers checked against `seen`."""
    data = fit.repredict(report.load_results(path), spec)
    run = Run(path, run_label(data.meta), data)
    graph = fit.results_graph(path, data.meta.model, data.meta.batch, graphs)
    kept = [rec for rec in run.records if layer_key(run, rec, graph) not in seen]
    groups = list(report.decisions(data)["groups"].values())
    return _Tally(tuple(metric_apes(run.records, "time")), tuple(metric_apes(kept, "time")),
                  tuple(metric_apes(run.records, "gma")), sum(1 for g in groups if g["fuse_agrees"]), len(groups))  # fmt: skip


def _fold(spec: Any, model: str, test: dict[str, list[str]], train: dict[str, list[str]],
          samples: dict[str, list[fit.Sample]], stages, max_iter: int, fitter: Fitter):  # fmt: skip
    """(refitted values, n fitted, tally with the refit spec, tally with `spec`) of one left-out model."""
    others = [s for m, ss in samples.items() if m != model for s in ss]
    values = fitter(spec, others, stages, max_iter)
    refit = apply_measured(spec, values)
    graphs: dict = {}
    seen = _keys([p for m, ps in train.items() if m != model for p in ps], graphs)
    paths = [*train.get(model, []), *test.get(model, [])]
    new = sum((_tally(p, refit, seen, graphs) for p in paths), _Tally())
    old = sum((_tally(p, spec, seen, graphs) for p in paths), _Tally())
    return values, len(others), new, old


def _samples(spec: Any, train: dict[str, list[str]]) -> dict[str, list[fit.Sample]]:
    return {m: fit.feasible(spec, fit.load_samples(ps))[0] for m, ps in train.items()}


def leave_one_model_out(spec: Any, test_paths: Sequence[str | Path], train_paths: Sequence[str | Path],
                        stages: Sequence[Sequence[str]] = BUNDLED_STAGES, max_iter: int = 400, jobs: int = 1,
                        fitter: Fitter = staged_fit) -> LooResult:  # fmt: skip
    """Refit without each training model in turn and score it (module docstring); `jobs` folds at once."""
    train, test = _by_model(train_paths), _by_model(test_paths)
    if len(train) < 2:
        raise AnalysisError(f"leave-one-model-out needs training runs of at least two models (got {len(train)})")
    samples = _samples(spec, train)
    stages = tuple(tuple(s) for s in stages)
    work = partial(_fold, spec, test=test, train=train, samples=samples, stages=stages, max_iter=max_iter,
                   fitter=fitter)  # fmt: skip
    models = sorted(train)
    if jobs > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=min(jobs, len(models))) as pool:
            folds = list(pool.map(work, models))
    else:
        folds = [work(m) for m in models]
    return _result(models, folds, stages, max_iter)


def _result(models: Sequence[str], folds: Sequence[tuple], stages, max_iter: int) -> LooResult:
    refit = [f[2].score(m, f[1]) for m, f in zip(models, folds, strict=True)]
    bundled = [f[3].score(m, 0) for m, f in zip(models, folds, strict=True)]
    refit.append(sum((f[2] for f in folds), _Tally()).score("all", 0))
    bundled.append(sum((f[3] for f in folds), _Tally()).score("all", 0))
    values = tuple((m, tuple(sorted(f[0].items()))) for m, f in zip(models, folds, strict=True))
    return LooResult(tuple(refit), tuple(bundled), values, stages, max_iter)


def _cells(s: ModelScore) -> tuple[str, ...]:
    dec = f"{s.agreeing} of {s.groups}" + (f" ({100.0 * s.agreeing / s.groups:.1f}%)" if s.groups else "")
    return (s.model, str(s.fit_records or "-"), str(s.records), cell_mp(s.time.median, s.time.p90),
            f"{s.kept}: {cell_mp(s.time_kept.median, s.time_kept.p90)}", cell_mp(s.gma.median, s.gma.p90), dec)  # fmt: skip


COLUMNS = ("model", "fitted on", "n", "time", "time, new layers only (n)", "GMA", "fuse decisions")


def loo_tables(result: LooResult, spec_name: str) -> list[Table]:
    """The refit table, then the same records with the spec as given."""
    note = ("time, GMA: median / 90th percentile APE over the left-out model's records (training and test runs); "
            "new layers only: records whose layers (kind, shapes, epilogue), dtype, batch and tiles no training "
            "model's record has; fitted on: timed records of the other models the refit saw.")  # fmt: skip
    return [
        Table("Leave one model out: kernel fields refitted without the model", COLUMNS,
              tuple(_cells(s) for s in result.refit), (False, True, True), note),
        Table(f"In sample: the same records with spec {spec_name} (fitted on every model)", COLUMNS,
              tuple(_cells(s) for s in result.bundled), (False, True, True)),
    ]  # fmt: skip
