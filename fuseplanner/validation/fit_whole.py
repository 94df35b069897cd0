"""Fit a spec's graph-context terms to whole-model runs (`fuseplanner validate --whole`), without a GPU:
what `fuseplanner calibrate --from-whole` runs, in this order (each fit reads the values before it).

1. The operator-library steps (`cost.library`: `library_stream_bw_fraction`, `library_gemm_slice_cycles`,
   `library_row_iter_cycles`, `library_direct_terms_per_cycle`): least squares on log(predicted /
   measured) over every measured library step.
2. The per-class launch terms (`graph_<class>_kernel_s`, `core.kinds.LAUNCH_CLASSES`): every step of
   fuseplanner's own kernels timed in graph mode (planned and unfused) is a sample, predicted in the
   graph context with the terms at zero plus the term of each of its launches' classes (held at least
   at the launch interval); the terms minimise a robust loss (soft L1, scale 0.1) on log(predicted /
   measured), so the few steps the rest of the model misses by 2x do not pull them. Each gets a
   bootstrap interval over the runs (a run's steps move together: they share its plan and GPU state).
3. The graph context's fuse threshold (`graph_fuse_min_speedup`): the runs measured with `--decisions`
   decided again in the graph context at each candidate value (`whole_redecide.redecide`) and scored
   against their step times (`whole_decisions.score`): most right decisions win, then the least time
   the wrong ones lose, then the smaller value.

Each run's step times are read net of the replay's once cost where one replay timed them
(`whole.net_of_replay`), and costed with the plan it measured (`planning.recost`). No held-out model
(`models/holdout.toml`) may be fitted on: `check_fit_set` refuses them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from fuseplanner.core.errors import RecordsError
from fuseplanner.core.kinds import KERNEL_KINDS, LAUNCH_CLASSES
from fuseplanner.cost.execution import class_field, launch_terms, predict
from fuseplanner.cost.library import graph_seconds
from fuseplanner.hw.kernel_fit import GRAPH_THRESHOLD_FIELD
from fuseplanner.validation.microbench import apply_measured

TERM_FIELDS = tuple(class_field(c) for c in LAUNCH_CLASSES)
LIBRARY_FIELDS = ("library_stream_bw_fraction", "library_gemm_slice_cycles", "library_row_iter_cycles",
                  "library_direct_terms_per_cycle")  # fmt: skip
#: Library fit: starting point and bounds of LIBRARY_FIELDS (fraction, cycles, cycles, terms per cycle).
LIBRARY_START = (0.5, 2000.0, 200.0, 8.0)
LIBRARY_BOUNDS = ((0.05, 0.0, 0.0, 0.1), (2.0, 1e5, 1e4, 1e3))
#: Candidate values of the graph fuse threshold (from the schema's least value).
THRESHOLDS = (0.8, 0.85, 0.9, 0.95, 0.97, 1.0, 1.02, 1.05, 1.1)


# ---- the runs ------------------------------------------------------------------------------------
def check_fit_set(results: Sequence, where: str = "") -> None:
    """Raise RecordsError when a result is of a held-out model or was saved without its plan."""
    from fuseplanner.frontend.holdout import holdout_models

    held = {m.name for m in holdout_models()}
    for r in results:
        if r.model in held:
            raise RecordsError(f"{where or r.model}: {r.model} is a held-out model (models/holdout.toml): no fit may see it")
        if r.plan is None:
            raise RecordsError(f"{where or r.model}: {r.model} was saved without its plan: add it with "
                               "scripts/store_whole_plans.py --gpu SPEC FILE")  # fmt: skip


@dataclass(frozen=True)
class Run:
    """One saved whole run costed with a spec: its graph, its measured plan and the unfused plan, the
    measured step times of each (label -> seconds), and the measured replay medians."""

    graph: object
    plans: tuple[object, object]
    measured: tuple[dict, dict]
    replays_s: tuple[float, float]


def runs(paths: Sequence[str], spec) -> list[Run]:
    """The whole runs in `paths` (whole.json, plain or gzip), each costed with `spec`."""
    from fuseplanner.frontend.load import load_model
    from fuseplanner.planning.recost import recost
    from fuseplanner.validation.whole import net_of_replay, read, unfused_plan

    out = []
    for path in paths:
        results = [net_of_replay(x, spec) for x in read(path)]
        check_fit_set(results, str(path))
        for r in results:
            graph = load_model(r.model, None, r.batch)
            unfused = unfused_plan(graph, spec, r.dtype, r.precision, r.batch)
            planned = recost(graph, r.plan, spec, unfused)
            out.append(Run(graph, (planned, unfused), ({s.label: s.measured_s for s in r.steps},
                                                      {s.label: s.measured_s for s in r.unfused_steps}),
                           (r.measured_planned.median_s, r.measured_unfused.median_s)))  # fmt: skip
    return out


# ---- 1. operator-library steps -----------------------------------------------------------------------
@dataclass(frozen=True)
class LibraryStep:
    op_type: str
    launches: object  # the `cost.library` launches the executor runs for the step
    measured_s: float


def library_steps(rows: Sequence[Run], spec) -> list[LibraryStep]:
    """Every measured operator-library step of the planned run of `rows`."""
    from fuseplanner.planning.whole import steps as whole_steps

    out = []
    for run in rows:
        measured = run.measured[0]
        for s in whole_steps(run.graph, run.plans[0], spec):
            if s.library and measured.get(s.label, 0) > 0:
                out.append(LibraryStep(s.op_type, s.library, measured[s.label]))
    return out


def library_seconds(steps: Sequence[LibraryStep], spec, x) -> np.ndarray:
    """Graph-context seconds of `steps` with LIBRARY_FIELDS at `x`."""
    hw = dataclasses.replace(spec.hw, **dict(zip(LIBRARY_FIELDS, x, strict=True)))
    terms = launch_terms(spec)
    return np.array([graph_seconds(s.launches, terms, hw) for s in steps])


def identified(steps: Sequence[LibraryStep], spec) -> list[str]:
    """The LIBRARY_FIELDS some step's time depends on (a field moved by a quarter moves a prediction):
    the others cannot be fitted to `steps`."""
    x0 = np.array(LIBRARY_START)
    base = library_seconds(steps, spec, x0)
    out = []
    for i, f in enumerate(LIBRARY_FIELDS):
        x = x0.copy()
        x[i] *= 1.25
        if np.any(np.abs(library_seconds(steps, spec, x) / base - 1) > 1e-6):
            out.append(f)
    return out


def fit_library(steps: Sequence[LibraryStep], spec) -> dict[str, float]:
    """The `identified` LIBRARY_FIELDS minimising the squares of log(predicted / measured) over `steps`
    (the others keep the spec's values and are not returned)."""
    free = identified(steps, spec)
    if not free:
        return {}
    idx = [LIBRARY_FIELDS.index(f) for f in free]
    meas = np.array([s.measured_s for s in steps])
    now = np.array([getattr(spec.hw, f) for f in LIBRARY_FIELDS], dtype=float)

    def full(v):
        x = now.copy()
        x[idx] = v
        return x

    lo, hi = (np.array(b)[idx] for b in LIBRARY_BOUNDS)
    fit = least_squares(lambda v: np.log(library_seconds(steps, spec, full(v)) / meas), np.array(LIBRARY_START)[idx],
                        bounds=(lo, hi))  # fmt: skip
    return {f: float(v) for f, v in zip(free, fit.x, strict=True)}


def library_errors(steps: Sequence[LibraryStep], spec, x) -> np.ndarray:
    return np.abs(library_seconds(steps, spec, x) / np.array([s.measured_s for s in steps]) - 1)


# ---- 2. per-class launch terms -----------------------------------------------------------------------
@dataclass(frozen=True)
class Sample:
    """One timed step of run number `run`: its graph prediction with the terms at zero, its launches
    per class, the least graph time of its launches, and its measured seconds."""

    run: int
    base_s: float
    launches: tuple[int, ...]
    least_s: float
    measured_s: float


def term_values(x) -> dict[str, float]:
    return dict(zip(TERM_FIELDS, (float(v) for v in x), strict=True))


def samples(rows: Sequence[Run], spec) -> list[Sample]:
    """Every measured own-kernel step of `rows`, predicted with the terms at zero."""
    from fuseplanner.planning.whole import steps as whole_steps

    zero = apply_measured(spec, term_values(np.zeros(len(TERM_FIELDS))))
    interval = launch_terms(zero).interval_s
    out = []
    for i, run in enumerate(rows):
        for plan, measured in zip(run.plans, run.measured, strict=True):
            st = whole_steps(run.graph, plan, zero)
            pred = predict(st, zero, "graph")
            for s, p in zip(st, pred.steps, strict=True):
                m = measured.get(s.label)
                if s.kind not in KERNEL_KINDS or not m or m <= 0:
                    continue
                cls = [k.graph_class for k in s.cost.kernels if k.kind in KERNEL_KINDS]
                out.append(Sample(i, p.time_s, tuple(cls.count(c) for c in LAUNCH_CLASSES), s.cost.launches * interval, m))
    return out


def arrays(s: Sequence[Sample]) -> tuple[np.ndarray, ...]:
    """(zero-term seconds, launches per class, least seconds, measured seconds) of samples `s`."""
    return (np.array([v.base_s for v in s]), np.array([v.launches for v in s], dtype=float),
            np.array([v.least_s for v in s]), np.array([v.measured_s for v in s]))  # fmt: skip


def step_residuals(data: tuple[np.ndarray, ...], x: np.ndarray) -> np.ndarray:
    base, launches, least, measured = data
    return np.log(np.maximum(least, base + launches @ x) / measured)


def fit_terms(data: tuple[np.ndarray, ...]) -> np.ndarray:
    """The terms (seconds) minimising the soft-L1 loss of `step_residuals`, each within +-5 us."""
    n = len(TERM_FIELDS)
    fit = least_squares(lambda v: step_residuals(data, v * 1e-6), np.zeros(n), loss="soft_l1", f_scale=0.1,
                        bounds=([-5.0] * n, [5.0] * n))  # fmt: skip
    return fit.x * 1e-6


def intervals(s: Sequence[Sample], resamples: int, seed: int = 0) -> np.ndarray:
    """5th and 95th percentiles of the terms refitted on runs drawn with replacement (rows: fields)."""
    rng = np.random.default_rng(seed)
    by_run: dict[int, list[Sample]] = {}
    for v in s:
        by_run.setdefault(v.run, []).append(v)
    keys = list(by_run)
    fits = [fit_terms(arrays([v for r in rng.choice(keys, len(keys)) for v in by_run[r]])) for _ in range(resamples)]
    return np.percentile(np.array(fits), [5, 95], axis=0).T


def replay_errors(rows: Sequence[Run], spec) -> np.ndarray:
    """|error| of the whole-replay prediction of each run's planned and unfused model."""
    from fuseplanner.planning.whole import predict_whole

    out = []
    for run in rows:
        w = predict_whole(run.graph, spec, run.plans[0], "graph", unfused_plan=run.plans[1])
        out += [w.planned.time_s / run.replays_s[0] - 1, w.unfused.time_s / run.replays_s[1] - 1]
    return np.abs(out)


# ---- 3. the graph fuse threshold ---------------------------------------------------------------------
def graph_scores(job: tuple[str, object, tuple[float, ...]]) -> list[tuple[int, int, float]]:
    """(right, scored, seconds lost) of the graph context's decisions in one results file, decided with
    the spec at each threshold of `values` (the tile searches made once: they do not read it)."""
    from fuseplanner.planning.search import shared_searches
    from fuseplanner.validation.whole import read
    from fuseplanner.validation.whole_decisions import score
    from fuseplanner.validation.whole_redecide import redecide

    path, spec, values = job
    results = read(path)
    out = []
    with shared_searches():
        for value in values:
            at = apply_measured(spec, {GRAPH_THRESHOLD_FIELD: value})  # a fit parameter: it replaces the fit's value
            right = scored = 0
            lost = 0.0
            for r in results:
                for d in score(redecide(r, at)):
                    if d.context == "graph" and d.right is not None:
                        right, scored, lost = right + d.right, scored + 1, lost + (d.lost_s or 0.0)
            out.append((right, scored, lost))
    return out


@dataclass(frozen=True)
class ThresholdScore:
    value: float
    right: int
    scored: int
    lost_s: float


def scan_threshold(paths: Sequence[str], spec, values: Sequence[float] = THRESHOLDS, jobs: int = 1,
                   say: Callable[[str], None] = lambda _: None) -> list[ThresholdScore]:  # fmt: skip
    """Each value's score over the decision runs in `paths` (`graph_scores`, one job per file), `jobs`
    processes at once."""
    work = [(p, spec, tuple(values)) for p in paths]
    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            return _totals(values, len(work), pool.map(graph_scores, work), say)
    return _totals(values, len(work), map(graph_scores, work), say)


def _totals(values: Sequence[float], n: int, parts, say: Callable[[str], None]) -> list[ThresholdScore]:
    """Each value's score: the sum over the `n` files of `parts` (each file's scores in `values` order)."""
    sums = np.zeros((len(values), 3))
    for i, part in enumerate(parts, 1):
        sums += np.asarray(part, dtype=float)
        say(f"scored the decisions of {i} of {n} files at {len(values)} thresholds")
    out = [ThresholdScore(v, int(r), int(n), float(lost)) for v, (r, n, lost) in zip(values, sums, strict=True)]
    for s in out:
        say(f"{GRAPH_THRESHOLD_FIELD} {s.value:g}: {s.right} of {s.scored} right, {s.lost_s * 1e6:.0f} us lost")
    return out


def best_threshold(scores: Sequence[ThresholdScore]) -> ThresholdScore:
    """Most right, then least time lost, then the smaller value."""
    return max(scores, key=lambda s: (s.right, -s.lost_s, -s.value))


# ---- all three, and the spec they go into ------------------------------------------------------------
@dataclass(frozen=True)
class WholeFit:
    """What `fit` found: the fitted values, bootstrap intervals (5-95%) of the launch terms, a source
    note per value and the report lines (before / after errors)."""

    values: dict
    ci: dict
    notes: dict
    lines: tuple[str, ...]


def _pct(e: np.ndarray) -> str:
    return f"median {100 * np.median(e):.1f}% p90 {100 * np.percentile(e, 90):.1f}%"


def _with_decisions(paths: Sequence[str]) -> list[str]:
    from fuseplanner.validation.whole import read

    return [p for p in paths if any(r.decisions is not None for r in read(p))]


def fit(paths: Sequence[str], spec, *, resamples: int = 50, jobs: int = 1, thresholds: Sequence[float] = THRESHOLDS,
        say: Callable[[str], None] = lambda _: None) -> WholeFit:  # fmt: skip
    """Fit the library costs, the launch terms and the graph fuse threshold of `spec` to the whole runs
    in `paths`, in that order (module docstring)."""
    import datetime

    rows = runs(paths, spec)
    if not rows:
        raise RecordsError("no whole run in these files")
    models = sorted({r.graph.name for r in rows})
    what = f"{len(rows)} whole runs of {', '.join(models)} ({datetime.date.today().isoformat()}; no held-out model)"
    values: dict[str, float] = {}
    notes: dict[str, str] = {}
    lines: list[str] = []
    lib = library_steps(rows, spec)
    if lib:
        say(f"fitting the operator-library costs to {len(lib)} steps")
        got = fit_library(lib, spec)
        values.update(got)
        now = [getattr(spec.hw, f) for f in LIBRARY_FIELDS]
        before, after = (library_errors(lib, spec, [v.get(f, n) for f, n in zip(LIBRARY_FIELDS, now, strict=True)])
                         for v in ({}, got))  # fmt: skip
        kept = [f for f in LIBRARY_FIELDS if f not in got]
        lines.append(f"library steps: {len(lib)}, |error| {_pct(before)} -> {_pct(after)}"
                     + (f"; kept (no step depends on them): {', '.join(kept)}" if kept else ""))  # fmt: skip
        notes.update({f: f"`fuseplanner calibrate --from-whole` (cost.library, least squares on log(predicted / "
                         f"measured) of {len(lib)} operator-library steps): {what}" for f in got})  # fmt: skip
    spec1 = apply_measured(spec, values)
    smp = samples(rows, spec1)
    say(f"fitting the launch terms to {len(smp)} steps of fuseplanner's kernels")
    data = arrays(smp)
    x = fit_terms(data)
    values.update(term_values(x))
    ci = {}
    if resamples:
        band = intervals(smp, resamples)
        ci = {f: (float(band[i, 0]), float(band[i, 1])) for i, f in enumerate(TERM_FIELDS)}
    spec2 = apply_measured(spec1, values)
    now = np.array([getattr(spec.fit, f) for f in TERM_FIELDS])
    step_before, step_after = (np.abs(np.expm1(step_residuals(data, v))) for v in (now, x))
    rep_before, rep_after = replay_errors(rows, spec), replay_errors(rows, spec2)
    lines.append(f"own-kernel steps: {len(smp)}, |error| {_pct(step_before)} -> {_pct(step_after)}")
    lines.append(f"whole replays: {len(rep_after)}, |error| {_pct(rep_before)} -> {_pct(rep_after)}")
    spread = "; ".join(f"{f} {ci[f][0] * 1e6:+.2f} .. {ci[f][1] * 1e6:+.2f} us" for f in ci)
    notes.update({f: f"`fuseplanner calibrate --from-whole` (graph context, per launch of its class, soft-L1 on "
                     f"log(predicted / measured) of {len(smp)} graph-mode steps): {what}"
                     + (f"; 5-95% bootstrap intervals over the runs ({resamples} resamples): {spread}" if ci else "")
                  for f in TERM_FIELDS})  # fmt: skip
    decided = _with_decisions(paths)
    if decided:
        say(f"scanning {GRAPH_THRESHOLD_FIELD} over {len(thresholds)} values on {len(decided)} files with decisions")
        scores = scan_threshold(decided, spec2, thresholds, jobs, say)
        best = best_threshold(scores)
        values[GRAPH_THRESHOLD_FIELD] = best.value
        table = ", ".join(f"{s.value:g} {s.right} of {s.scored}" for s in scores)
        lines.append(f"graph fuse decisions right: {table}; chosen {best.value:g}")
        notes[GRAPH_THRESHOLD_FIELD] = (f"`fuseplanner calibrate --from-whole` (graph fuse decisions measured with "
                                        f"--decisions, most right wins, then least time lost): {table}; {what}")  # fmt: skip
    else:
        lines.append(f"{GRAPH_THRESHOLD_FIELD} kept: no run was measured with --decisions")
    return WholeFit(values, ci, notes, tuple(lines))


def spec_with(base, result: WholeFit) -> dict:
    """`base` as a plain dict (`microbench.spec_dict`) with `result`'s values: into its own fit (values,
    notes, intervals), or for a spec that borrows another GPU's fit into its ``[refit]`` table, whose
    notes go under ``sources`` as ``refit.FIELD``. No name: the file's stem names the written spec."""
    from fuseplanner.validation.microbench import spec_dict, with_own_fit

    if not base.fit.borrowed:
        fit_ = base.fit.model_copy(update={**result.values, "sources": {**base.fit.sources, **result.notes},
                                           "ci": {**base.fit.ci, **result.ci}})  # fmt: skip
        return with_own_fit(base, fit_)
    d = spec_dict(base)
    d.pop("name", None)
    d["refit"] = {**d.get("refit", {}), **result.values}
    d["sources"] = {**d.get("sources", {}), **{f"refit.{k}": v for k, v in result.notes.items()}}
    return d
