"""Predicted versus measured: run every planned layer and fused group on the GPU and record each
measurement beside the cost models' predictions.

For a plan, `validate` builds the items to measure:

- ``layer``: every layer the plan runs unfused with a tiled kernel (dw, pw, linear);
- ``group``: every fused group with its planned tile;
- ``unfused``: each group's members run layer by layer (each with the tile the planner would give it
  alone), the alternative the planner rejected;
- with ``tiles="sweep"`` also ``tile``: several other feasible tiles of each group, spread over the
  range of predicted times, and the candidate groups the planner chose not to fuse (fused with their
  best tile, and unfused), so fuse/no-fuse decisions can be checked both ways;
- with ``tiles="layers"`` instead: the planned items, plus every distinct tiled layer of the model run
  alone with several other feasible tiles (``layer_tile``), so the layer-by-layer model's tile ranking
  and the tile the planner gives a layer are checked too: a standalone layer ``L<j>`` with its planned
  tile, and each member of a fused group alone, ``M<k>`` (role ``member``), with the tile the planner
  would give it alone (the one its group's unfused alternative runs).

Each item runs on fresh random data (outputs poisoned with NaN first) and is checked against the
float64 NumPy reference; then it is timed with CUDA events (warm-up, median of `repeat` runs) with the
L2 flushed before each run (cold) and without (warm). Traffic comes from Nsight Compute counters when
available (a subprocess re-runs the items between marker kernels, ``--cache-control all`` for cold and
``none`` for warm); otherwise the run is counter-free and records the effective bandwidth (modelled
bytes / measured time), labelled as such. Results go through `fuseplanner.validation.report`.
"""

from __future__ import annotations

import datetime
import pickle
import platform
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from fuseplanner.core.errors import DeviceError, FusePlannerError
from fuseplanner.core.ir import Cost, KernelResources, ModelGraph, Op, Tile
from fuseplanner.core.kinds import LAYER_KINDS as TILED_KINDS
from fuseplanner.kernels import tiles as tiles_mod
from fuseplanner.validation import ncu as ncu_mod
from fuseplanner.validation import report as report_mod
from fuseplanner.validation.records import (
    Check,
    Measurement,
    Prediction,
    Record,
    ValidationRun,
    as_run,
    prediction_of,
)

#: Relative-error tolerance of a result against the float64 reference, by (dtype, precision).
TOLERANCE = {("fp32", "fp32"): 1e-5, ("fp32", "tf32"): 2e-3, ("fp16", "fp32"): 1e-2}
WARMUP = 10
REPEAT = 100
#: Alternative tiles measured per group with tiles="sweep", per layer with tiles="layers" (besides the
#: planned one).
SWEEP_TILES = 6
TILE_MODES = ("planned", "sweep", "layers")
#: Regex of kernel names ncu profiles: our kernels (kernels/families/*/*.cu: dw_kernel, pw_kernel, fused_*) and the
#: region markers; CuPy's helper kernels (fills, casts) are not profiled.
KERNEL_REGEX = f"{ncu_mod.MARK_BEGIN}|{ncu_mod.MARK_END}|_kernel|fused_"

@dataclass(frozen=True)
class Validation:
    """What `validate` returns: the typed run (as written to records.jsonl) and its statistics."""

    run: ValidationRun
    summary: dict[str, Any]


@dataclass(frozen=True)
class Step:
    """One kernel launch: kernel kind, member ops (batch applied) and tile."""

    kind: str
    ops: tuple[Op, ...]
    tile: Tile
    residual: bool = False


@dataclass(frozen=True)
class Item:
    """A measured kernel sequence: a layer, a fused group (one tile), or a group run unfused."""

    id: str
    role: str  # "layer" | "group" | "tile" | "unfused" | "member" | "layer_tile"
    kind: str  # kernel kind of a layer, group kind otherwise
    ops: tuple[Op, ...]  # every member op (the reference runs over these)
    steps: tuple[Step, ...]
    group: str | None = None
    planned: bool = False
    residual: bool = False
    residual_from_input: bool = False

    @property
    def nodes(self) -> list[str]:
        return [op.name for op in self.ops]


@dataclass
class Context:
    """Settings shared by every item of one validation run."""

    gpu: Any
    dtype: str
    batch: int
    precision: str
    objective: str
    warmup: int = WARMUP
    repeat: int = REPEAT
    seed: int = 0
    datasheet_gpu: Any = None
    cache: dict = field(default_factory=dict)


# ---- what to measure --------------------------------------------------------------------------------


def _ops(graph: ModelGraph, names: Iterable[str], batch: int) -> tuple[Op, ...]:
    return tuple(graph.op(n).with_batch(batch) for n in names)


def _search(ctx: Context):
    from fuseplanner.planning.search import TileSearch

    if "search" not in ctx.cache:
        ctx.cache["search"] = TileSearch(ctx.gpu, ctx.dtype, ctx.batch, ctx.objective, "ours", ctx.precision)
    return ctx.cache["search"]


def _unfused_steps(ops: Sequence[Op], residual: bool, ctx: Context) -> tuple[Step, ...] | str:
    """Each member alone with the tile the planner's search gives it; a reason string if one has none."""
    steps = []
    for j, op in enumerate(ops):
        last = residual and j == len(ops) - 1
        choice = _search(ctx).best(op.kind, (op,), last)
        if choice.tile is None:
            return f"{op.name} has no feasible {op.kind} tile: {choice.reason}"
        steps.append(Step(op.kind, (op,), choice.tile, last))
    return tuple(steps)


def _estimator() -> Callable[..., Cost]:
    """`fuseplanner.cost.estimate`, imported lazily (tests substitute a transparent model here)."""
    from fuseplanner.cost import estimate

    return estimate


def _predicted_time(kind: str, ops: Sequence[Op], tile: Tile, residual: bool, ctx: Context) -> float:
    c = _estimator()(kind, ops, tile, ctx.dtype, ctx.batch, ctx.gpu, model="ours", residual=residual,
                 precision=ctx.precision)
    return c.time_s if c.feasible else float("inf")


def sweep_tiles(kind: str, ops: Sequence[Op], planned: Tile, residual: bool, ctx: Context,
                count: int = SWEEP_TILES) -> list[Tile]:
    """Up to `count` feasible tiles other than `planned`, evenly spread over the predicted-time ranking
    (the best few and the worst are both represented, so rank correlation means something)."""
    cands = [t for t in tiles_mod.candidates(kind, ops, ctx.dtype, ctx.gpu, ctx.precision) if t != planned]
    if not cands:
        return []
    timed = sorted(((_predicted_time(kind, ops, t, residual, ctx), t) for t in cands), key=lambda p: (p[0], p[1]))
    timed = [p for p in timed if np.isfinite(p[0])]
    if len(timed) <= count:
        return [t for _, t in timed]
    idx = np.unique(np.round(np.linspace(0, len(timed) - 1, count)).astype(int))
    return [timed[i][1] for i in idx]


def _group_items(gid: str, kind: str, ops: tuple[Op, ...], tile: Tile | None, residual: bool, from_input: bool,
                 fused_by_planner: bool, sweep: bool, ctx: Context) -> tuple[list[Item], str | None]:
    items: list[Item] = []
    common = {"kind": kind, "ops": ops, "group": gid, "residual": residual, "residual_from_input": from_input}
    if tile is not None:
        items.append(Item(id=gid, role="group", steps=(Step(kind, ops, tile, residual),),
                          planned=fused_by_planner, **common))
        if sweep:
            for j, t in enumerate(sweep_tiles(kind, ops, tile, residual, ctx)):
                items.append(Item(id=f"{gid}.t{j + 1}", role="tile", steps=(Step(kind, ops, t, residual),), **common))
    steps = _unfused_steps(ops, residual, ctx)
    if isinstance(steps, str):
        return items, steps
    items.append(Item(id=f"{gid}.u", role="unfused", steps=steps, planned=not fused_by_planner, **common))
    return items, None


def _layer_tiles(item: Item, ctx: Context) -> list[Item]:
    """`item` (one layer with its tile) as the head of its own tile group, then the layer with up to
    SWEEP_TILES other feasible tiles (`sweep_tiles`), role "layer_tile"."""
    (step,) = item.steps
    gid = item.id
    head = replace(item, group=gid)
    alts = [Item(id=f"{gid}.t{j + 1}", role="layer_tile", kind=item.kind, ops=item.ops,
                 steps=(Step(step.kind, step.ops, t, step.residual),), group=gid, residual=item.residual)
            for j, t in enumerate(sweep_tiles(step.kind, step.ops, step.tile, step.residual, ctx))]  # fmt: skip
    return [head, *alts]


def _member_sweeps(items: Sequence[Item], ctx: Context) -> list[Item]:
    """Each distinct layer (and residual flag) of the unfused alternatives in `items`, alone with the
    tile its unfused alternative runs (`M<k>`, role "member"), and with other tiles (`_layer_tiles`)."""
    seen: dict[tuple[str, bool], None] = {}
    out: list[Item] = []
    for it in items:
        if it.role != "unfused":
            continue
        for s in it.steps:
            key = (s.ops[0].name, s.residual)
            if key in seen or s.kind not in TILED_KINDS:
                continue
            seen[key] = None
            head = Item(id=f"M{len(seen) - 1}", role="member", kind=s.kind, ops=s.ops, steps=(s,),
                        residual=s.residual)  # fmt: skip
            out += _layer_tiles(head, ctx)
    return out


def build_items(graph: ModelGraph, plan, ctx: Context, *, sweep: bool = False,
                layers: bool = False) -> tuple[list[Item], dict, list[dict]]:  # fmt: skip
    """Items to measure for `plan`, the group table for decisions, and what was skipped (with reasons).
    `sweep`: also other tiles of each group and the candidates the planner rejected; `layers`: also
    other tiles of every tiled layer (standalone, and each group member alone)."""
    from fuseplanner.planning.candidates import find_candidates

    # a group with and without its residual Add has the same members: key by both
    cands = {(c.members, c.absorbed): c for c in find_candidates(graph, plan.kinds or None).groups}
    items: list[Item] = []
    groups: dict[str, dict] = {}
    skipped: list[dict] = []
    for i, g in enumerate(plan.groups):
        gid = f"g{i}"
        ops = _ops(graph, g.nodes, ctx.batch)
        from_input = bool(g.residual_input) and g.residual_input in ops[0].inputs
        new, why = _group_items(gid, g.kind, ops, g.tile, g.residual, from_input, True, sweep, ctx)
        items += new
        groups[gid] = {"kind": g.kind, "nodes": list(g.nodes), "planner_fused": True,
                       "planned_tile": g.tile.as_dict(), "residual": g.residual}
        if why:
            skipped.append({"id": f"{gid}.u", "nodes": list(g.nodes), "reason": why})
    if sweep:
        for j, r in enumerate(x for x in plan.rejected if x.stage == "gain"):
            cand = cands.get((tuple(r.nodes), tuple(r.absorbed)))
            if cand is None:
                continue
            rid = f"r{j}"
            ops = _ops(graph, cand.members, ctx.batch)
            best = _search(ctx).best(cand.kind, ops, cand.residual)
            from_input = bool(cand.residual_tensor) and cand.residual_tensor in ops[0].inputs
            new, why = _group_items(rid, cand.kind, ops, best.tile, cand.residual, from_input, False, False, ctx)
            items += new
            groups[rid] = {"kind": cand.kind, "nodes": list(cand.members), "planner_fused": False,
                           "planned_tile": best.tile.as_dict() if best.tile else None, "residual": cand.residual,
                           "reason": r.reason}
            if why:
                skipped.append({"id": f"{rid}.u", "nodes": list(cand.members), "reason": why})
    for j, lay in enumerate(plan.layers):
        if lay.tile is None or lay.kind not in TILED_KINDS:
            skipped.append({"id": f"L{j}", "nodes": [lay.node],
                            "reason": f"{lay.op_type or lay.kind} runs in a library kernel, not a fuseplanner kernel"})
            continue
        ops = _ops(graph, [lay.node], ctx.batch)
        from_input = bool(lay.residual_input) and lay.residual_input in ops[0].inputs
        item = Item(id=f"L{j}", role="layer", kind=lay.kind, ops=ops, steps=(Step(lay.kind, ops, lay.tile, lay.residual),),
                    planned=True, residual=lay.residual, residual_from_input=from_input)  # fmt: skip
        items += _layer_tiles(item, ctx) if layers else [item]
    if layers:
        items += _member_sweeps(items, ctx)
    position = {n: i for i, n in enumerate(graph.order)}
    items.sort(key=lambda it: position.get(it.ops[0].name, 0))  # model order; stable within a group
    return items, groups, skipped


# ---- predictions ------------------------------------------------------------------------------------


def steps_cost(steps: Iterable[Step], dtype: str, batch: int, gpu: Any, precision: str = "fp32",
               model: str = "ours") -> Cost | None:  # fmt: skip
    """The cost model's prediction for consecutive launches, summed (each launch after the first
    overlapped by the spec's `launch_overlap_s` in our model); None when a step is infeasible."""
    estimate = _estimator()
    total = Cost()
    for s in steps:
        try:
            c = estimate(s.kind, s.ops, s.tile, dtype, batch, gpu, model=model, residual=s.residual,
                         precision=precision)  # fmt: skip
        except FusePlannerError:
            return None
        if not c.feasible:
            return None
        total = total + c
    return total.overlapped(_overlap(gpu)) if model == "ours" else total


def _overlap(gpu: Any) -> float:
    """The spec's `launch_overlap_s` (`gpu`: a spec, or a bundled spec's name or a TOML path)."""
    from fuseplanner.hw.spec import gpu as named

    return float((gpu if hasattr(gpu, "eff") else named(gpu)).eff("launch_overlap_s"))


def _as_prediction(total: Cost | None) -> Prediction | None:
    return None if total is None else prediction_of(total)


def predict(item: Item, ctx: Context, model: str = "ours", gpu: Any = None) -> Prediction | None:
    """The cost model's prediction for the item's launches, summed; None when a step is infeasible."""
    return _as_prediction(steps_cost(item.steps, ctx.dtype, ctx.batch, gpu or ctx.gpu, ctx.precision, model))


def predictions(item: Item, ctx: Context, ours: Cost | None = None) -> dict[str, Prediction | None]:
    """Every model's prediction for the item; `ours` is its cost on `ctx.gpu` when the caller already
    has it (None: computed here)."""
    out = {"ours": _as_prediction(ours) if ours is not None else predict(item, ctx, "ours"),
           "paper": predict(item, ctx, "paper")}
    if ctx.datasheet_gpu is not None:
        out["ours_uncalibrated"] = predict(item, ctx, "ours", ctx.datasheet_gpu)
    return out


# ---- running on the GPU -----------------------------------------------------------------------------


def _storage(dtype: str) -> str:
    return {"fp32": "float32", "fp16": "float16"}[dtype]


def make_case(item: Item, ctx: Context, seed: int):
    """Host input, per-op (weight, bias) params and residual tensor for the item's ops (NumPy float32).

    Values are rounded to the storage dtype first, so the float64 reference sees exactly the numbers
    the kernel reads.
    """
    from fuseplanner.validation import reference

    rng = np.random.default_rng(seed)
    st = _storage(ctx.dtype)
    x = reference.random_input(item.ops[0], ctx.batch, rng).astype(st).astype(np.float32)
    params = [(w.astype(st).astype(np.float32), b) for w, b in reference.random_params(item.ops, rng)]
    res = None
    if item.residual:
        last = item.ops[-1].with_batch(ctx.batch)
        shape = last.kernel_shape(last.out_shape)
        res = x if item.residual_from_input else rng.standard_normal(shape).astype(st).astype(np.float32)
    return x, params, res


def _device_params(cp, params, dtype: str):
    out = []
    for w, b in params:
        out.append((cp.asarray(np.asarray(w, dtype=np.float32)).astype(_storage(dtype)),
                    None if b is None else cp.asarray(np.asarray(b, dtype=np.float32))))
    return out


class Prepared:
    """An item's launches bound to device arrays: call `run()` to launch every step once."""

    def __init__(self, cp, item: Item, ctx: Context, case):
        from fuseplanner import kernels

        x, params, res = case
        st = _storage(ctx.dtype)
        self.cp = cp
        self.x = cp.asarray(np.asarray(x)).astype(st)
        dparams = _device_params(cp, params, ctx.dtype)
        dres = None if res is None else (self.x if item.residual_from_input else cp.asarray(np.asarray(res)).astype(st))
        self.buffers = []
        self.launches: list[Callable] = []
        cur, k = self.x, 0
        for s in item.steps:
            last = s.ops[-1]
            out = cp.full(last.kernel_shape(last.out_shape), np.nan, dtype=st)
            p = dparams[k:k + len(s.ops)]
            k += len(s.ops)
            self.launches.append(kernels.prepare(s.kind, s.ops, s.tile, cur, p, dtype=ctx.dtype,
                                                 precision=ctx.precision, residual=dres if s.residual else None,
                                                 out=out, gpu=ctx.gpu))
            self.buffers.append(out)
            cur = out
        self.out = cur
        self.keep = (dparams, dres)

    def poison(self) -> None:
        for b in self.buffers:
            b.fill(np.nan)

    def run(self) -> None:
        for launch in self.launches:
            launch()


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    """||out - ref|| / ||ref|| in float64; inf when the output holds NaN or Inf."""
    o = np.asarray(out, dtype=np.float64)
    if not np.all(np.isfinite(o)):
        return float("inf")
    den = float(np.linalg.norm(ref))
    return float(np.linalg.norm(o - ref) / (den if den > 0 else 1.0))


def check(cp, prepared: Prepared, item: Item, case, ctx: Context) -> dict[str, Any]:
    """Run once on NaN-poisoned outputs and compare with the float64 reference."""
    from fuseplanner.validation import reference

    x, params, res = case
    prepared.poison()
    prepared.run()
    cp.cuda.get_current_stream().synchronize()
    ref = reference.reference(item.kind, item.ops, np.asarray(x, dtype=np.float64), params,
                              None if res is None else np.asarray(res, dtype=np.float64))
    err = relative_error(cp.asnumpy(prepared.out), np.asarray(ref, dtype=np.float64))
    tol = TOLERANCE.get((ctx.dtype, ctx.precision), 1e-2)
    return {"rel_err": err, "tol": tol, "ok": bool(err <= tol)}


def _timing_dict(t: Any, prefix: str) -> dict[str, float]:
    """Median (and spread, when the Timing has it) of a `measure.Timing` under `prefix`."""
    d = t.as_dict() if hasattr(t, "as_dict") else dict(vars(t))
    out = {}
    for key, name in (("median_s", ""), ("p10_s", "_p10"), ("p90_s", "_p90"), ("min_s", "_min")):
        if d.get(key) is not None:
            out[f"{prefix}{name}_s"] = float(d[key])
    return out


def time_item(prepared: Prepared, ctx: Context) -> dict[str, float]:
    """Cold (L2 flushed) and warm CUDA-event medians of the item's launches."""
    from fuseplanner.validation.timing import time_kernel

    out = {}
    for flush, prefix in ((True, "time_cold"), (False, "time_warm")):
        out.update(_timing_dict(time_kernel(prepared.run, warmup=ctx.warmup, repeat=ctx.repeat, flush_l2=flush), prefix))
    return out


def compiled_kernels(prepared: Prepared, item: Item, ctx: Context,
                     modelled: Sequence[KernelResources]) -> list[dict[str, Any]]:  # fmt: skip
    """Per launch of the item: its blocks, threads and shared memory, what the compiler gave its kernel
    (registers, local memory: spills) and the blocks per SM these allow on `ctx.gpu`, beside the
    registers and blocks per SM the cost model assumed (`model_regs`, `model_blocks_per_sm`, from
    `modelled`: the per-launch resources of the item's cost)."""
    from fuseplanner.cost.time import blocks_per_sm

    out = []
    for i, launch in enumerate(prepared.launches):
        if not hasattr(launch, "resources"):
            return []
        d = {"kind": item.steps[i].kind, **launch.resources()}
        smem = d["smem_bytes"] + d.get("static_smem_bytes", 0)
        d["blocks_per_sm"], d["limiter"] = blocks_per_sm(smem, d["threads"], d["regs"], ctx.gpu.hw)
        if i < len(modelled):
            d["model_regs"], d["model_blocks_per_sm"] = modelled[i].regs_per_thread, modelled[i].blocks_per_sm
        out.append(d)
    return out


def _error_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def measure_item(cp, item: Item, ctx: Context, index: int,
                 modelled: Sequence[KernelResources] = ()) -> tuple[dict, dict | None, str | None]:  # fmt: skip
    """(measured, check, error) for one item; kernel errors are recorded, not raised. `modelled`: the
    cost model's per-launch resources, recorded beside the compiled ones."""
    try:
        case = make_case(item, ctx, ctx.seed + index)
        prepared = Prepared(cp, item, ctx, case)
        chk = check(cp, prepared, item, case, ctx)
        measured = time_item(prepared, ctx)
        try:  # a diagnostic: a driver that cannot report kernel attributes does not void the measurement
            measured["kernels"] = compiled_kernels(prepared, item, ctx, modelled)
        except (AttributeError, RuntimeError) as exc:
            measured["kernels_error"] = _error_line(exc)
        del prepared
        return measured, chk, None
    except (FusePlannerError, ValueError, RuntimeError, TypeError) as exc:
        return {}, None, _error_line(exc)


# ---- ncu -------------------------------------------------------------------------------------------


def _ncu_job(items: Sequence[Item], ctx: Context, path: Path) -> None:
    job = {"items": list(items), "dtype": ctx.dtype, "precision": ctx.precision, "seed": ctx.seed,
           "batch": ctx.batch, "gpu": ctx.gpu}
    path.write_bytes(pickle.dumps(job))


def ncu_worker(job_path: str, warm: bool) -> None:
    """Entry of the profiled subprocess: each item between the begin/end marker kernels, after one
    unmarked run when `warm` (so L2 holds what the item last touched). Items that fail to run leave an
    empty marked region."""
    from fuseplanner.kernels import require_device

    cp = require_device()
    job = pickle.loads(Path(job_path).read_bytes())
    ctx = Context(gpu=job["gpu"], dtype=job["dtype"], batch=job["batch"], precision=job["precision"],
                  objective="time", seed=job["seed"])
    markers = ncu_mod.Markers(cp)
    for i, item in enumerate(job["items"]):
        prepared = None
        try:
            prepared = Prepared(cp, item, ctx, make_case(item, ctx, ctx.seed + i))
            if warm:
                prepared.run()
        except (FusePlannerError, ValueError, RuntimeError, TypeError):
            prepared = None
        markers.region(prepared.run if prepared is not None else None)


def profile_items(items: Sequence[Item], ctx: Context, work_dir: Path, timeout_s: float = 600.0
                  ) -> dict[str, list[ncu_mod.Traffic]]:
    """Counters per item: {"cold": [Traffic per item], "warm": [...]}; raises CountersUnavailable."""
    job = work_dir / "ncu_job.pkl"
    _ncu_job(items, ctx, job)
    import fuseplanner

    root = str(Path(fuseplanner.__file__).resolve().parent.parent)  # the checkout, wherever this module sits
    out: dict[str, list[ncu_mod.Traffic]] = {}
    for mode, cache in (("cold", "all"), ("warm", "none")):
        argv = ncu_mod.python_argv("fuseplanner.validation.validate", "--ncu-worker", str(job), mode)
        recs = ncu_mod.profile(argv, cache=cache, kernel_regex=KERNEL_REGEX, timeout_s=timeout_s, cwd=root)
        regions = ncu_mod.split_by_markers(recs)
        if len(regions) != len(items):
            raise DeviceError(f"ncu saw {len(regions)} marked regions for {len(items)} items; "
                              "rerun with --no-ncu and report this")
        out[mode] = [ncu_mod.total(r) for r in regions]
    return out


def _apply_traffic(rec: Record, cold: ncu_mod.Traffic, warm: ncu_mod.Traffic) -> Record:
    """`rec` with the counters of its cold and warm profiles (unchanged when ncu saw no kernel)."""
    if not cold.kernels:
        return rec
    m = {
        "gma_bytes": cold.gma_bytes, "gma_read_bytes": cold.gma_read_bytes, "gma_write_bytes": cold.gma_write_bytes,
        "dram_bytes": cold.dram_bytes, "dram_read_bytes": cold.dram_read_bytes,
        "dram_write_bytes": cold.dram_write_bytes, "ncu_time_s": cold.time_s, "ncu_kernels": cold.kernels,
        "gma_warm_bytes": warm.gma_bytes, "dram_warm_bytes": warm.dram_bytes, "traffic": "ncu",
    }
    if cold.kernels != rec.launches:
        m["ncu_note"] = f"ncu profiled {cold.kernels} kernels for {rec.launches} planned launches"
    return rec.model_copy(update={"measured": rec.measured.model_copy(update=m)})


# ---- records and the run ----------------------------------------------------------------------------


def _record(item: Item, pred: dict[str, Prediction | None], measured: dict, chk: dict | None,
            error: str | None) -> Record:  # fmt: skip
    ours = pred.get("ours") or Prediction()
    t = measured.get("time_cold_s")
    if t:
        measured.setdefault("traffic", "counter-free")
        if ours.dram_bytes:
            measured["eff_dram_Bps"] = ours.dram_bytes / t
        if ours.gma_bytes:
            measured["eff_gma_Bps"] = ours.gma_bytes / t
    return Record(
        id=item.id, role=item.role, group=item.group, kind=item.kind, nodes=tuple(item.nodes),
        tiles=tuple(s.tile for s in item.steps), step_kinds=tuple(s.kind for s in item.steps),
        planned=item.planned, launches=len(item.steps), residual=item.residual, flops=ours.flops,
        predicted=pred, measured=Measurement.model_validate(measured) if measured else None,
        check=Check.model_validate(chk) if chk else None, error=error,
    )  # fmt: skip


def _spec_number(spec: Any, *names: str) -> float | None:
    for n in names:
        measured = getattr(spec, "measured", None)
        v = getattr(measured, n, None) if measured is not None and not isinstance(measured, dict) else (
            measured.get(n) if isinstance(measured, dict) else None)
        if v is None:
            v = getattr(spec, n, None)
        if v is not None:
            return float(v)
    return None


def peaks(gpu: Any, dtype: str) -> dict[str, float | None]:
    """Roofline ceilings of the GPU spec (measured values preferred where the spec has them)."""
    flops = _spec_number(gpu, "fp16_flops", "peak_fp16_flops") if dtype == "fp16" else _spec_number(
        gpu, "fp32_flops", "peak_fp32_flops")
    return {"dram_Bps": _spec_number(gpu, "dram_bw_bytes_per_s", "dram_bandwidth_bytes_per_s"),
            "l2_Bps": _spec_number(gpu, "l2_bw_bytes_per_s", "l2_bandwidth_bytes_per_s"), "flops": flops}


def _versions(cp) -> dict[str, str]:
    from fuseplanner import __version__

    v = {"fuseplanner": __version__, "python": platform.python_version(), "numpy": np.__version__}
    try:
        v["cupy"] = cp.__version__
        v["cuda_runtime"] = str(cp.cuda.runtime.runtimeGetVersion())
        v["driver"] = str(cp.cuda.runtime.driverGetVersion())
    except Exception:  # version queries are informative only
        pass
    return v


def _device_name(cp) -> str:
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def _progress(enabled: bool):
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True), disable=not enabled, transient=False)


def _ncu_mode(ncu: bool | str) -> str:
    if ncu in (True, "on", "yes", "always"):
        return "on"
    if ncu in (False, "off", "no", "never", None):
        return "off"
    if ncu == "auto":
        return "auto"
    raise FusePlannerError(f"ncu must be True, False or 'auto', got {ncu!r}")


def validate(graph: ModelGraph, gpu: Any, plan, *, tiles: str = "planned", dtype: str | None = None,
             batch: int | None = None, out_dir: str | Path | None = None, ncu: bool | str = "auto",
             progress: bool = True, repeat: int = REPEAT, warmup: int = WARMUP, seed: int = 0,
             datasheet_gpu: Any = None, command: str = "", ncu_timeout_s: float = 600.0) -> Validation:
    """Measure every planned layer and group of `plan` on the current GPU beside its predictions.

    tiles: "planned" (the plan's tiles and each group's unfused alternative), "sweep" (also
    alternative tiles per group and the candidates the planner did not fuse) or "layers" (also
    alternative tiles of every tiled layer alone, standalone or a group member); ncu: True (counters
    required), False (counter-free) or "auto" (counters when Nsight Compute can read them);
    datasheet_gpu: the same GPU without measured overrides, to report accuracy before calibration;
    ncu_timeout_s: limit of each ncu pass (cold, warm); past it the run falls back to counter-free.
    Writes records.jsonl, report.md and PNG plots to `out_dir` when given; returns the typed run
    and its summary. Raises DeviceError without a usable CUDA device.
    """
    from fuseplanner.kernels import require_device

    if tiles not in TILE_MODES:
        raise FusePlannerError(f"tiles must be one of {', '.join(TILE_MODES)}, got {tiles!r}")
    if repeat < 1 or warmup < 0:
        raise FusePlannerError("repeat must be >= 1 and warmup >= 0")
    mode = _ncu_mode(ncu)
    cp = require_device()
    ctx = Context(gpu=gpu, dtype=dtype or plan.dtype, batch=batch or plan.batch, precision=plan.precision,
                  objective=plan.objective, warmup=warmup, repeat=repeat, seed=seed, datasheet_gpu=datasheet_gpu)
    items, groups, skipped = build_items(graph, plan, ctx, sweep=tiles == "sweep", layers=tiles == "layers")
    records = []
    with _progress(progress) as bar:
        task = bar.add_task("measuring", total=len(items))
        for i, item in enumerate(items):
            bar.update(task, description=f"{item.id:>8} {item.kind:<8}")
            ours = steps_cost(item.steps, ctx.dtype, ctx.batch, ctx.gpu, ctx.precision)
            measured, chk, err = measure_item(cp, item, ctx, i, ours.kernels if ours is not None else ())
            records.append(_record(item, predictions(item, ctx, ours), measured, chk, err))
            bar.advance(task)
    records, traffic_source, note = _traffic(items, records, ctx, mode, ncu_timeout_s)
    results = as_run({
        "meta": {
            "model": graph.name, "gpu": getattr(gpu, "name", str(gpu)), "device_name": _device_name(cp),
            "dtype": ctx.dtype, "precision": ctx.precision, "batch": ctx.batch, "tiles": tiles,
            "objective": plan.objective, "traffic_source": traffic_source, "traffic_note": note,
            "timing": {"warmup": warmup, "repeat": repeat, "statistic": "median", "clock": "CUDA events"},
            "peaks": peaks(gpu, ctx.dtype), "calibrated": datasheet_gpu is not None,
            "models": ["ours", "paper", *(["ours_uncalibrated"] if datasheet_gpu is not None else [])],
            "skipped": skipped, "versions": _versions(cp),
            "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "command": command,
        },
        "groups": groups,
        "records": records,
    })
    summary = report_mod.summarize(results) if out_dir is None else report_mod.write_report(results, out_dir)
    return Validation(results, summary)


def _traffic(items: Sequence[Item], records: list[Record], ctx: Context, mode: str, timeout_s: float
             ) -> tuple[list[Record], str, str]:
    """The records with ncu counters when possible, the traffic source and its note."""
    free = ("Counter-free: GMA and DRAM are not measured; eff_*_Bps = modelled bytes / measured cold time.")
    if mode == "off":
        return records, "counter-free", free + " (ncu disabled)"
    import tempfile

    runnable = [(i, it) for i, (it, r) in enumerate(zip(items, records, strict=True)) if not r.error]
    try:
        with tempfile.TemporaryDirectory(prefix="fuseplanner-validate-") as tmp:
            traffic = profile_items([it for _, it in runnable], ctx, Path(tmp), timeout_s)
    except ncu_mod.CountersUnavailable as exc:
        if mode == "on":
            raise
        return records, "counter-free", f"{free} ({exc})"
    except DeviceError as exc:
        if mode == "on":
            raise
        return records, "counter-free", f"{free} (ncu run failed: {exc})"
    records = list(records)
    for (i, _), cold, warm in zip(runnable, traffic["cold"], traffic["warm"], strict=True):
        records[i] = _apply_traffic(records[i], cold, warm)
    return records, "ncu", ("Nsight Compute counters: GMA = (lts__t_sectors_srcunit_tex_op_read + _write) x 32 B, "
                   "DRAM = dram__bytes_read + dram__bytes_write, --cache-control all (cold); "
                   "warm values with --cache-control none.")


def _main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "--ncu-worker" and argv[2] in ("cold", "warm"):
        ncu_worker(argv[1], warm=argv[2] == "warm")
        return 0
    sys.stderr.write("usage: python -m fuseplanner.validation.validate --ncu-worker JOB cold|warm (internal)\n")
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
