"""Fit a GPU spec's kernel-efficiency fields to saved validation measurements (no GPU needed).

`fuseplanner validate` writes every measured kernel sequence beside the tiles it ran. This module
replays those records through the cost model with candidate values of the fields that describe
fuseplanner's own kernels rather than the chip (the spec's `kernel_fit.KernelFit`):

- `fused_weight_l2_fraction` (fp32 storage) and `fused_weight_l2_fraction_fp16`, from the L2 read
  counters of fused kernels of that storage dtype (grid search 0.05 .. 1.5, minimising the median
  absolute percentage error of GMA);
- `fuse_min_speedup`, the smallest predicted unfused/fused time ratio at which fusing agrees best
  with the measured outcomes of the groups measured both ways;
- the `*_warp_flops_per_cycle` rates of the math modes present in the records and the
  `*block_warp_exponent`s, from the cold event times (Nelder-Mead on their logarithms from several
  starts, minimising mean + median/2 of |log(predicted/measured)| plus the mean error of
  log(fused/unfused) over the groups measured both ways, so that fuse decisions come out right).
  `fused_weight_load_fraction`, the share of fused kernels' weight reads the time model charges, is
  kept as the spec has it (the bundled rates were fitted with it).

    samples = load_samples(["records.jsonl"])
    fit = fit_spec(spec, samples)          # fit.values -> the spec's fit; fit.before / fit.after
    own = kernel_fit(spec, fit, paths, meta)   # the spec's own KernelFit, with its provenance
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from fuseplanner.core.errors import FusePlannerError, ModelError
from fuseplanner.core.kinds import LAYER_KINDS
from fuseplanner.hw.kernel_fit import PARAMS, KernelFit
from fuseplanner.validation.microbench import apply_measured
from fuseplanner.validation.records import (
    Record,
    RecordLike,
    RunLike,
    RunMeta,
    ValidationRun,
    as_records,
    as_run,
    prediction_of,
    read_run,
)
from fuseplanner.validation.validate import Step, steps_cost

RATE_FIELDS = {
    ("dw", "fp32"): "dw_warp_flops_per_cycle_fp32",
    ("dw", "fp16"): "dw_warp_flops_per_cycle_fp16",
    ("pw", "fp32"): "pw_warp_flops_per_cycle_fp32",
    ("pw", "tf32"): "pw_warp_flops_per_cycle_tf32",
    ("pw", "fp16"): "pw_warp_flops_per_cycle_fp16",
    ("fused", "fp32"): "fused_pw_warp_flops_per_cycle_fp32",
    ("fused", "tf32"): "fused_pw_warp_flops_per_cycle_tf32",
    ("fused", "fp16"): "fused_pw_warp_flops_per_cycle_fp16",
    ("fused_dw", "any"): "fused_dw_warp_flops_per_cycle",
}
L2_FRACTION_FIELDS = {"fp32": "fused_weight_l2_fraction", "fp16": "fused_weight_l2_fraction_fp16"}
EXPONENT_FIELDS = ("block_warp_exponent", "fused_block_warp_exponent")
EXPONENT_STARTS = (0.35, 0.9)
LOAD_FIELD = "warp_load_bytes_per_cycle"
CORESIDENT_FIELD = "coresident_exponent"
SM_CAP_FIELD = "fused_sm_issue_warps"
LBL_SM_CAP_FIELD = "sm_issue_warps"
LBL_LOAD_WEIGHT_FIELDS = ("pw_shared_load_weight", "pw_mma_load_weight")  # exact fp32, tensor cores
LBL_LOAD_WEIGHT_START = 1.0  # where the fit starts a layer-by-layer load weight the spec has off (0)
CHUNK_FIELD = "pw_chunk_cycles"
CHUNK_START = 300.0  # cycles: where the fit starts the per-chunk step when the spec has it off (0)
LOAD_WEIGHT_FIELD = "fused_shared_load_weight"
EPILOGUE_FIELD = "fused_epilogue_weight"
WINDOW_EPILOGUE_FIELD = "fused_window_epilogue_weight"
FIXED_FIELDS = ("kernel_fixed_s", "fused_kernel_fixed_s")
OVERLAP_FIELD = "launch_overlap_s"
SECONDS_FIELDS = (*FIXED_FIELDS, OVERLAP_FIELD)  # fitted from FIXED_START, kept to 4 significant digits
FIXED_START = 1e-6  # s: where the fit starts a fixed launch time the spec has at 0
SM_CAP_START = 8.0  # warps: where the fit starts when the spec has no cap (0)
THRESHOLD_FIELD = "fuse_min_speedup"
FRACTIONS = tuple(round(0.05 * i, 2) for i in range(1, 31))


@dataclass(frozen=True)
class Sample:
    """One measured kernel sequence: its launches and what was measured."""

    id: str
    kind: str
    steps: tuple[Step, ...]
    dtype: str
    batch: int
    precision: str
    time_s: float
    gma_bytes: float | None
    role: str = ""
    group: str | None = None  # "<file>:<group id>" for a fused group's records and its unfused run

    @property
    def mode(self) -> str:
        return "fp16" if self.dtype == "fp16" else ("tf32" if self.precision == "tf32" else "fp32")

    @property
    def fused(self) -> bool:
        return any(s.kind not in LAYER_KINDS for s in self.steps)


@dataclass
class Fit:
    values: dict[str, float]
    n_time: int
    n_gma: int
    before: dict[str, float] = field(default_factory=dict)  # median APE (%) of time and GMA
    after: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"values": self.values, "n_time": self.n_time, "n_gma": self.n_gma,
                "before": self.before, "after": self.after}  # fmt: skip


def _as_measured(ops: list, rec: Record, batch: int) -> list:
    """`ops` as `rec` measured them. Records of ops whose leading dimension is not the batch (`Op.images`)
    saved before ops counted images were measured with that dimension set to the batch: their FLOPs
    say so, and those ops are rebuilt the same way."""
    if not rec.flops or not any(op.images for op in ops):
        return ops
    legacy = [replace(op, images=0).with_batch(batch) for op in ops]

    def gap(cand) -> float:
        return abs(math.log(max(1, sum(op.flops for op in cand)) / rec.flops))

    return legacy if gap(legacy) < gap(ops) else ops


def record_steps(rec: Record, graph, batch: int) -> tuple[Step, ...]:
    """The launches of a saved record (its nodes in `graph` at `batch`, its tiles and step kinds)."""
    ops = _as_measured([graph.op(n).with_batch(batch) for n in rec.nodes], rec, batch)
    kinds = rec.step_kinds
    if len(kinds) == 1:
        return (Step(kinds[0], tuple(ops), rec.tiles[0], rec.residual),)
    last = len(ops) - 1
    return tuple(Step(k, (op,), t, rec.residual and i == last)
                 for i, (k, op, t) in enumerate(zip(kinds, ops, rec.tiles, strict=True)))  # fmt: skip


def results_graph(path: str | Path, name: str, batch: int, cache: dict[tuple[str, int], Any]):
    """The model a results file was measured on, loaded with its batch as `validate --batch` loads it
    (a 2-D Gemm's token count is the batch, which `Op.with_batch` leaves alone)."""
    from fuseplanner.frontend.load import load_model

    if (name, batch) not in cache:
        try:
            cache[(name, batch)] = load_model(name, None, batch)
        except ModelError as exc:
            raise FusePlannerError(f"{path}: cannot load model {name!r} ({exc}); pass --model PATH") from None
    return cache[(name, batch)]


def _sample(path: str | Path, meta: RunMeta, rec: Record, graph) -> Sample | None:
    """The record as a sample; None unless it ran, was timed and checked correct."""
    m = rec.measured
    if m is None or not m.time_cold_s or not (rec.check is not None and rec.check.ok):
        return None
    return Sample(
        id=f"{Path(path).parent.name}:{rec.id}", kind=rec.kind, steps=record_steps(rec, graph, meta.batch),
        dtype=meta.dtype, batch=meta.batch, precision=meta.precision, time_s=float(m.time_cold_s),
        gma_bytes=m.gma_bytes if m.traffic == "ncu" else None, role=rec.role,
        group=f"{path}:{rec.group}" if rec.group else None,
    )  # fmt: skip


def load_samples(paths: Iterable[str | Path], model: str | None = None) -> list[Sample]:
    """Every correctly measured record of the results files (`model` overrides the model they name)."""
    samples: list[Sample] = []
    graphs: dict[tuple[str, int], Any] = {}
    for path in paths:
        run = read_run(path)
        graph = results_graph(path, model or run.meta.model, run.meta.batch, graphs)
        samples += [s for s in (_sample(path, run.meta, rec, graph) for rec in run.records) if s is not None]
    return samples


def _repredicted(rec: Record, spec: Any, meta: RunMeta, graph) -> Record:
    """`rec` with its `ours` prediction recomputed (None for a launch the current model refuses: no
    prediction, and never the planner's tile) and without an uncalibrated one."""
    predicted = dict(rec.predicted)
    if rec.nodes and rec.tiles and rec.step_kinds:
        total = steps_cost(record_steps(rec, graph, meta.batch), meta.dtype, meta.batch, spec, meta.precision)
        predicted["ours"] = None if total is None else prediction_of(total)
    predicted.pop("ours_uncalibrated", None)
    return rec.model_copy(update={"predicted": predicted})


def repredict(data: RunLike, spec: Any, model: str | None = None) -> ValidationRun:
    """A copy of a validation run whose `ours` predictions are recomputed with the current cost model
    and `spec`, and whose plan is re-derived from them as the planner would choose among the measured
    tiles: each group's planned tile becomes its fused record of least predicted time, and the group
    counts as fused when its predicted unfused/fused time at that tile reaches `fuse_min_speedup` (the
    planner itself might pick an unmeasured tile; the measurements are unchanged)."""
    run = as_run(data)
    meta = run.meta
    graph = results_graph("results", model or meta.model, meta.batch, {})
    recs, planned = replan(_repredicted(rec, spec, meta, graph) for rec in run.records)
    chosen: dict[str, Record] = {}  # each group's (first) planned fused record
    for r in recs:
        if r.group and r.planned and r.role != "unfused":
            chosen.setdefault(r.group, r)
    tau = float(spec.eff(THRESHOLD_FIELD))
    groups = {}
    for g, info in run.groups.items():
        update: dict[str, Any] = {}
        if g in chosen and len(chosen[g].tiles) == 1:
            update["planned_tile"] = chosen[g].tiles[0]
        if (g, "group") in planned and (g, "unfused") in planned:
            update["planner_fused"] = planned[(g, "unfused")] >= tau * planned[(g, "group")]
        groups[g] = info.model_copy(update=update)
    note = (f"`ours` predictions and fuse decisions recomputed by `fuseplanner validate --from-results "
            f"--repredict` with spec {spec.name} (fuse_min_speedup {tau:g}); measurements as recorded")
    models = tuple(m for m in meta.models or ("ours", "paper") if m != "ours_uncalibrated")
    meta = meta.model_copy(update={"models": models, "calibrated": False, "repredicted": note})
    return run.model_copy(update={"meta": meta, "groups": groups, "records": tuple(recs)})


def replan(records: Iterable[RecordLike]) -> tuple[list[Record], dict[tuple[str, str], float]]:
    """The records with each group's `planned` mark moved to its fused record (role "group" or
    "tile") of least `ours` predicted time, and `planned_times` of the result."""
    records = as_records(records)
    best: dict[str, int] = {}
    for i, rec in enumerate(records):
        ours = rec.prediction("ours")
        if rec.group and rec.role in ("group", "tile") and ours and ours.feasible:
            b = best.get(rec.group)
            if b is None or ours.time_s < records[b].predicted["ours"].time_s:
                best[rec.group] = i
    out = [rec.model_copy(update={"planned": i == best[rec.group]})
           if rec.group in best and rec.role in ("group", "tile") else rec
           for i, rec in enumerate(records)]  # fmt: skip
    return out, planned_times(out)


def planned_times(records: Iterable[RecordLike]) -> dict[tuple[str, str], float]:
    """`ours` predicted time of each group's planned-tile record and of its unfused run, keyed
    (group, "group" | "unfused"): what a fuse decision compares."""
    out: dict[tuple[str, str], float] = {}
    for rec in as_records(records):
        ours = rec.prediction("ours")
        if rec.group and ours and (rec.role == "unfused" or rec.planned):
            out.setdefault((rec.group, "unfused" if rec.role == "unfused" else "group"), ours.time_s)
    return out


def feasible(spec: Any, samples: Sequence[Sample]) -> tuple[list[Sample], list[str]]:
    """(the samples every launch of which the current kernels can run with `spec`, the ids of the
    others): a record measured with an earlier kernel (a tile whose shared memory then fitted) no
    longer describes a launch, and cannot be fitted or re-predicted."""
    keep, dropped = [], []
    for s in samples:
        (keep if steps_cost(s.steps, s.dtype, s.batch, spec, s.precision) is not None else dropped).append(s)
    return keep, [s.id for s in dropped]


def predict(spec: Any, s: Sample) -> tuple[float, float]:
    """(time_s, gma_bytes) the cost model predicts for a sample with `spec`."""
    c = steps_cost(s.steps, s.dtype, s.batch, spec, s.precision)
    if c is None:
        raise FusePlannerError(f"{s.id}: a launch of this record is infeasible with spec {spec.name}")
    return c.time_s, c.gma_bytes


def _predictions(spec: Any, samples: Sequence[Sample]) -> np.ndarray:
    """(time_s, gma_bytes) of every sample, one row each."""
    return np.array([predict(spec, s) for s in samples], dtype=float).reshape(-1, 2)


def _ape(pred: Sequence[float], meas: Sequence[float]) -> float:
    p, m = np.asarray(pred), np.asarray(meas)
    return float(np.median(np.abs(p - m) / m) * 100) if len(m) else math.nan


def _summary(preds: np.ndarray, samples: Sequence[Sample], tau: float) -> dict[str, float]:
    """Median APE (%) of time over all samples and of GMA over those with counters, and the percentage
    of agreeing fuse decisions at threshold `tau` when some groups were measured both ways."""
    with_gma = [(p[1], s.gma_bytes) for p, s in zip(preds, samples, strict=True) if s.gma_bytes]
    out = {"time": _ape(preds[:, 0], [s.time_s for s in samples]),
           "gma": _ape([a for a, _ in with_gma], [b for _, b in with_gma])}  # fmt: skip
    ratios = _pair_ratios(preds[:, 0], samples)
    if ratios:
        out["decisions"] = 100.0 * _agreeing(ratios, tau) / len(ratios)
    return out


def _rate_fields(samples: Sequence[Sample]) -> list[str]:
    names: set[str] = {LOAD_FIELD}
    for s in samples:
        for st in s.steps:
            fused = st.kind not in LAYER_KINDS
            names.add(EXPONENT_FIELDS[fused])
            if st.kind == "dw":
                names.add(RATE_FIELDS[("dw", "fp16" if s.dtype == "fp16" else "fp32")])
            elif fused:  # the DW stencil, and the staged epilogues (pw_pw's too)
                names.add(RATE_FIELDS[("fused_dw", "any")])
            family = "pw" if st.kind in ("pw", "linear") else ("fused" if st.kind != "dw" else None)
            if family:
                names.add(RATE_FIELDS[(family, s.mode)])
    return sorted(names)


def _fit_fractions(spec: Any, samples: Sequence[Sample]) -> dict[str, float]:
    """The weight-read factor of each storage dtype with fused records that have counters."""
    out: dict[str, float] = {}
    for dtype, name in L2_FRACTION_FIELDS.items():
        fused = [s for s in samples if s.fused and s.gma_bytes and s.dtype == dtype]
        if not fused:
            continue

        def err(f: float, name: str = name, fused: list[Sample] = fused) -> float:
            sp = apply_measured(spec, {name: f})
            return _ape([predict(sp, s)[1] for s in fused], [s.gma_bytes for s in fused])

        out[name] = min(FRACTIONS, key=err)
    return out


def decision_pairs(samples: Sequence[Sample]) -> list[tuple[int, int]]:
    """(fused, unfused) sample indices of each group measured both ways (the planned-tile record)."""
    fused: dict[str, int] = {}
    unfused: dict[str, int] = {}
    for i, s in enumerate(samples):
        if s.group and s.role == "group":
            fused[s.group] = i
        elif s.group and s.role == "unfused":
            unfused[s.group] = i
    return [(fused[g], unfused[g]) for g in fused if g in unfused]


def _time_loss(spec: Any, names: Sequence[str], samples: Sequence[Sample]) -> Callable[[np.ndarray], float]:
    """mean + median/2 of |log(predicted / measured)| over the samples, plus the mean error of
    log(fused / unfused) over the groups measured both ways (what a fuse decision rests on)."""
    meas = np.log(np.array([s.time_s for s in samples]))
    pairs = np.array(decision_pairs(samples), dtype=int).reshape(-1, 2)

    def loss(logs: np.ndarray) -> float:
        sp = apply_measured(spec, {n: float(math.exp(v)) for n, v in zip(names, logs, strict=True)})
        pred = np.array([predict(sp, s)[0] for s in samples])
        if not (pred > 0).all():  # e.g. a launch overlap longer than the launches it overlaps
            return math.inf
        d = np.log(pred) - meas
        r = np.abs(d)
        pair = np.abs(d[pairs[:, 0]] - d[pairs[:, 1]]).mean() if len(pairs) else 0.0
        return float(r.mean() + 0.5 * np.median(r) + pair)

    return loss


THRESHOLDS = tuple(round(1.0 + 0.05 * i, 2) for i in range(61))  # 1.00 .. 4.00


def _pair_ratios(times: np.ndarray, samples: Sequence[Sample]) -> list[tuple[float, bool]]:
    """(predicted unfused/fused time, whether fusing measured faster) of each group measured both ways."""
    return [(times[j] / times[i], samples[i].time_s < samples[j].time_s) for i, j in decision_pairs(samples)]


def _agreeing(ratios: Sequence[tuple[float, bool]], tau: float) -> int:
    return sum((r >= tau) == faster for r, faster in ratios)


def decision_agreement(spec: Any, samples: Sequence[Sample], tau: float) -> tuple[int, int]:
    """(agreeing, total) fuse decisions over the groups measured both ways when a group is fused
    exactly when its predicted unfused/fused time ratio reaches `tau`."""
    ratios = _pair_ratios(_predictions(spec, samples)[:, 0], samples)
    return _agreeing(ratios, tau), len(ratios)


def _fit_threshold(ratios: Sequence[tuple[float, bool]]) -> float | None:
    """The smallest `fuse_min_speedup` with the most agreeing decisions (None without pairs)."""
    if not ratios:
        return None
    return max(THRESHOLDS, key=lambda t: (_agreeing(ratios, t), -t))


#: Every field `fit_spec` can fit (`only` must name a subset).
FITTABLE = (*RATE_FIELDS.values(), *L2_FRACTION_FIELDS.values(), *EXPONENT_FIELDS, LOAD_FIELD, CORESIDENT_FIELD,
            SM_CAP_FIELD, LOAD_WEIGHT_FIELD, EPILOGUE_FIELD, WINDOW_EPILOGUE_FIELD, LBL_SM_CAP_FIELD,
            *LBL_LOAD_WEIGHT_FIELDS, CHUNK_FIELD, *SECONDS_FIELDS, THRESHOLD_FIELD)


def fit_spec(spec: Any, samples: Sequence[Sample], max_iter: int = 400, only: Sequence[str] | None = None,
             restart: bool = True) -> Fit:  # fmt: skip
    """Fit the kernel-efficiency fields the samples can inform; `spec` is not changed. `only` restricts
    the fit to those fields (the others keep the spec's values): e.g. the fused kernels' fields after a
    change to the fused kernels alone, measured on fewer models than the spec was fitted on. Without
    `restart`, the time fields are fitted from the spec's values alone (a bootstrap refit from the point fit)."""
    from scipy.optimize import minimize

    if not samples:
        raise FusePlannerError("no correctly measured records to fit")
    unknown = sorted(set(only or ()) - set(FITTABLE))
    if unknown:
        raise FusePlannerError(f"cannot fit {', '.join(unknown)}: fittable fields are {', '.join(FITTABLE)}")
    keep = (lambda n: True) if only is None else (lambda n: n in only)
    fractions = _fit_fractions(spec, samples) if any(keep(k) for k in L2_FRACTION_FIELDS.values()) else {}
    values: dict[str, float] = {k: v for k, v in fractions.items() if keep(k)}
    names = [n for n in _rate_fields(samples) if keep(n)]
    for name in (CORESIDENT_FIELD, SM_CAP_FIELD, LOAD_WEIGHT_FIELD, EPILOGUE_FIELD, WINDOW_EPILOGUE_FIELD,
                 LBL_SM_CAP_FIELD, *LBL_LOAD_WEIGHT_FIELDS, CHUNK_FIELD, *SECONDS_FIELDS):  # fitted only on request: they move every prediction
        if only is not None and name in only:
            names.append(name)
    if not names and not values and not keep(THRESHOLD_FIELD):
        raise FusePlannerError(f"these records inform none of {', '.join(only or ())}")
    start = apply_measured(spec, values)
    loss = _time_loss(start, names, samples)
    best = None
    restarts = EXPONENT_STARTS if restart and any(n in EXPONENT_FIELDS for n in names) else ()
    for exponent in (None, *restarts) if names else ():  # the loss is flat along the exponents: restart there
        x0 = np.log([exponent if (exponent and n in EXPONENT_FIELDS)
                     else (float(start.eff(n)) or SM_CAP_START) if n in (SM_CAP_FIELD, LBL_SM_CAP_FIELD)
                     else (float(start.eff(n)) or LBL_LOAD_WEIGHT_START) if n in LBL_LOAD_WEIGHT_FIELDS
                     else (float(start.eff(n)) or CHUNK_START) if n == CHUNK_FIELD
                     else (float(start.eff(n)) or FIXED_START) if n in SECONDS_FIELDS
                     else max(float(start.eff(n)), 0.05) for n in names])  # fmt: skip
        res = minimize(loss, x0, method="Nelder-Mead", options={"maxiter": max_iter, "xatol": 1e-3, "fatol": 1e-5})
        if best is None or res.fun < best.fun:
            best = res
    fitted = {n: float(f"{math.exp(v):.4g}") if n in SECONDS_FIELDS else round(float(math.exp(v)), 3)
              for n, v in zip(names, best.x, strict=True)} if names else {}  # fmt: skip
    for name in (*EXPONENT_FIELDS, CORESIDENT_FIELD):
        if name in fitted:
            fitted[name] = min(1.0, fitted[name])
    values.update(fitted)
    after = _predictions(apply_measured(spec, values), samples)  # the threshold changes no prediction
    tau = _fit_threshold(_pair_ratios(after[:, 0], samples)) if keep(THRESHOLD_FIELD) else None
    if tau is not None:
        values[THRESHOLD_FIELD] = tau
    fit = Fit(values, len(samples), sum(1 for s in samples if s.gma_bytes))
    fit.before = _summary(_predictions(spec, samples), samples, float(spec.eff(THRESHOLD_FIELD)))
    fit.after = _summary(after, samples, float(spec.eff(THRESHOLD_FIELD)) if tau is None else tau)
    return fit


def notes(fit: Fit, paths: Sequence[str | Path]) -> dict[str, str]:
    """Source notes for the fitted fields."""
    files = ", ".join(str(p) for p in paths)
    note = (f"fuseplanner calibrate --from-results: fitted to {fit.n_time} measured kernel sequences "
            f"({fit.n_gma} with counters) of {files}; median time APE {fit.before['time']:.1f}% -> "
            f"{fit.after['time']:.1f}%, GMA {fit.before['gma']:.1f}% -> {fit.after['gma']:.1f}%"
            + (f", fuse decisions agreeing {fit.before['decisions']:.1f}% -> {fit.after['decisions']:.1f}%"
               if "decisions" in fit.after else ""))  # fmt: skip
    return {k: note for k in fit.values}


def kernel_fit(spec: Any, fit: Fit, paths: Sequence[str | Path], meta: RunMeta) -> KernelFit:
    """`spec`'s kernel fit with `fit`'s values, as a fit of the GPU the records were measured on (`meta`:
    a run's metadata): named after it, with its driver, today's date and the record set. The
    values not fitted keep the spec's, with a note saying where they came from."""
    versions = meta.versions
    driver = ", ".join(f"{k} {versions[k]}" for k in ("driver", "cuda_runtime", "cupy") if k in versions)
    base = spec.fit
    sources = dict(base.sources)
    if base.borrowed:  # a value the spec's [refit] table gave was fitted on this GPU: its note stays
        refit = getattr(spec, "refit", None) or {}
        sources.update({k: f"kept from the fit of {base.source_gpu} (not fitted on this GPU)" for k in PARAMS
                        if k not in refit})  # fmt: skip
    sources.update(notes(fit, paths))
    return KernelFit.model_validate({
        **base.model_dump(), **fit.values, "borrowed": False, "sources": sources,
        "ci": {k: v for k, v in base.ci.items() if k not in fit.values},  # a refitted value's interval is stale
        "source_gpu": str(meta.device_name or meta.gpu or spec.name), "driver": driver,
        "date": datetime.date.today().isoformat(), "records": ", ".join(str(p) for p in paths),
        "record_count": fit.n_time,
    })
