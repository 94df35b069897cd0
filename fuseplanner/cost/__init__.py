"""Cost models: predicted L2-level and DRAM traffic, FLOPs, resources and time of DW, PW, linear and
fused (FCM) kernels for a tile, dtype, batch and GPU. Pure functions; see docs/cost_model.md.

    estimate(kind, ops, tile, dtype, batch, gpu, *, model="ours", residual=False, precision="fp32")
    estimate_op(op, dtype, batch, gpu)           # ops without a planned tile
    compulsory(kind, ops, dtype, batch)          # the bytes no kernel can avoid
    best_tile(kind, ops, feasible, ...)          # the planner's search: index of the best tile by an objective
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from fuseplanner.core.errors import PlanError
from fuseplanner.core.ir import Cost, KernelResources, Op, Tile
from fuseplanner.core.kinds import COST_MODELS, KERNEL_KINDS, LAYER_KINDS, OBJECTIVES, PRECISIONS
from fuseplanner.cost.layers import VIEW_OPS, stream_cost
from fuseplanner.cost.model import (
    context,
    dram_traffic,
    estimate_ours,
    launch_gma,
    launch_time,
    launched,
    scheduled,
)
from fuseplanner.cost.time import blocks_per_sm, mma_rate, warp_rates
from fuseplanner.costbase.traffic import span_union
from fuseplanner.costbase.work import PARAM_BYTES, KernelModel, Work
from fuseplanner.hw.spec import GpuSpec
from fuseplanner.hw.spec import gpu as _gpu
from fuseplanner.kernels import tiles

KINDS = KERNEL_KINDS
MODELS = COST_MODELS

__all__ = ["KINDS", "MODELS", "best_tile", "compulsory", "estimate", "estimate_op", "launch_batch"]


def launch_batch(ops: Sequence[Op], batch: int) -> int:
    """Sequences one launch runs: `batch`, except for a 2-D Gemm/MatMul (linear over a (rows, C)
    matrix), whose rows already are the batch (its tokens), so that it runs once whatever `batch`."""
    return 1 if ops and ops[0].kind == "linear" and len(ops[0].in_shape) < 3 else batch


def estimate(
    kind: str,
    ops: Sequence[Op],
    tile: Tile,
    dtype: str,
    batch: int,
    gpu: GpuSpec | str,
    *,
    model: str = "ours",
    residual: bool = False,
    precision: str = "fp32",
) -> Cost:
    """Predicted cost of one launch of kernel `kind` over `ops` (member ops in execution order).

    `batch` images (sequences for linear) per launch; `dtype` "fp32"/"fp16" is the storage type;
    `precision` "tf32" runs fp32 PW/linear products on TF32 tensor cores (time only); `residual` adds
    a residual add of a tensor shaped like the output to the epilogue. An infeasible tile gives
    ``Cost(feasible=False, reason=...)`` with the `tiles.check` reason.
    """
    spec = gpu if isinstance(gpu, GpuSpec) else _gpu(gpu)
    if batch < 1:
        raise PlanError(f"batch must be at least 1, got {batch}")
    batch = launch_batch(ops, batch)
    if model == "ours":
        return estimate_ours(kind, ops, tile, dtype, batch, spec, residual, precision)
    if model == "paper":
        return _estimate_paper(kind, tuple(ops), tile, dtype, batch, spec, residual, precision)
    raise PlanError(f"unknown cost model {model!r}: use ours or paper")



def best_tile(
    kind: str,
    ops: Sequence[Op],
    feasible: Sequence[tuple[Tile, int, int]],
    dtype: str,
    batch: int,
    gpu: GpuSpec,
    objective: str,
    *,
    residual: bool = False,
    precision: str = "fp32",
) -> tuple[int | None, tuple[float, float, float, float] | None, int | None]:
    """The planner's tile search under the ``ours`` model, without building a `Cost` per tile.

    `feasible` is `tiles.feasible_candidates` (tiles that pass `tiles.check`, with their shared
    memory and registers). Every tile is ranked by ``(metric, time_s, gma_bytes, dram_bytes)`` of
    the `Cost` that `estimate` would return for it, the first in order winning ties; tiles for
    which `estimate` reports no block fitting on an SM are skipped. Returns (index of the best tile,
    its rank, index of the first skipped tile), None where there is none.

    The numbers come from the functions `model.estimate_ours` uses (`launched`, `dram_traffic`,
    `launch_time`, `launch_gma`) with the same arguments (tests/test_tile_search.py compares this
    search with a brute-force one over `estimate`, and the planner checks the winner's rank against
    its `estimate`). Tiles that differ
    only in their thread count share one `Work` unless the threads change how the kernel stores its
    output (`tiles.store_key`; a launch's traffic and FLOPs depend on th, tw, tf and tc
    otherwise; `feasible` lists them consecutively) and, at equal occupancy, its L2-level bytes
    (co-resident blocks share reads, `model.coresident`) and DRAM traffic.
    The search is exact; it only skips work that cannot change the result. For a kernel model with a
    lower bound (`KernelModel.bounded`: every kind's, the request counts that take per-instruction
    simulations at their bytes / 32) it ranks every tile by the bound first, then works out the exact
    rank in bound order and stops at the first tile whose (bound, index) exceeds the best exact
    (rank, index) so far: no later tile can beat it, since its rank is at least its bound. Without
    a bound, for the "gma" objective a tile whose L2-level bytes exceed the best so far is not timed,
    for "dram" one whose DRAM bytes exceed the best so far (its rank is larger whatever its time).
    For the time objective a bounded model's tiles are first ranked by the time of their byte-free
    `KernelModel.floor` (`_best_by_floor`), and only those that may still win get the bound.
    """
    if objective not in OBJECTIVES:
        raise PlanError(f"unknown objective {objective!r}: use one of {', '.join(OBJECTIVES)}")
    if precision not in PRECISIONS:
        raise PlanError(f"unknown precision {precision!r}: use fp32 or tf32")
    if batch < 1:
        raise PlanError(f"batch must be at least 1, got {batch}")
    batch = launch_batch(ops, batch)
    ops = tuple(ops)
    km = context(kind, ops, dtype)
    lazy = km.BOUNDED
    hw = gpu.hw
    sms = hw.sm_count
    timing = (kind, ops, dtype, precision, hw, mma_rate(dtype, precision, hw), warp_rates(kind, dtype, precision, hw, ops))
    if lazy and objective == "time":
        return _best_by_floor(feasible, batch, gpu, km, residual, timing)
    by_time, by_gma = objective == "time", objective == "gma"
    occupancy: dict[tuple[int, int, int], int] = {}
    best: tuple[float, float, float, float] | None = None
    best_i = skipped = None
    shape = None  # (th, tw, tf, tc) of the tiles whose Work is `w`
    w = depth = ks = None
    gma_by_bps: dict[int, float] = {}  # the L2 bytes of `w` by blocks per SM (co-resident blocks share reads)
    dram_by_bps: dict[int, tuple[float, float]] = {}
    bounds: list[tuple[tuple[float, float, float, float], int, Work, int, int, int]] = []
    for i, (tile, smem, regs) in enumerate(feasible):
        threads = tile.threads
        key = (smem, threads, regs)
        bps = occupancy.get(key)
        if bps is None:
            bps = occupancy[key] = blocks_per_sm(smem, threads, regs, hw)[0]
        if bps < 1:
            if skipped is None:
                skipped = i
            continue
        # tiles that differ only in threads share one Work unless the threads change how they store
        # (a bound leaves out the counts that depend on it)
        key = (tile.th, tile.tw, tile.tf, tile.tc, 0 if lazy else tiles.store_key(kind, tile))
        if key != shape:
            shape = key
            w, depth, ks = launched(kind, ops, tile, dtype, batch, gpu, km, residual, precision, exact=not lazy)
            gma_by_bps.clear()
            dram_by_bps.clear()
        gma = 0.0 if lazy and not by_gma else gma_by_bps.get(bps)  # 0: a bound of bytes that only break ties
        if gma is None:
            gma = gma_by_bps[bps] = _gma(w, bps, ks, hw, kind)
        if not lazy and by_gma and best is not None and gma > best[0]:
            continue
        dram_rw = dram_by_bps.get(bps)
        if dram_rw is None:
            dram_rw = dram_by_bps[bps] = dram_traffic(w, sms * bps, hw)
        if not lazy and not by_time and not by_gma and best is not None and dram_rw[0] + dram_rw[1] > best[0]:
            continue
        r = _rank(objective, tile, w, ks, depth, bps, gma, dram_rw, timing)
        if lazy:
            bounds.append((r, i, w, bps, depth, ks))
        elif best is None or r < best:
            best, best_i = r, i
    # lazy: every rank above is a lower bound (`KernelModel.bounded`: the time, L2 bytes and DRAM
    # bytes only grow with the counts it floors; unless they are the objective, the L2 bytes, which
    # only break ties, are bounded by 0). In bound order, a tile whose bound already loses to
    # the best exact rank so far, and every tile after it, cannot win.
    bounds.sort()  # by (bound, index): the indices differ, so the rest is never compared
    for bound, i, w, bps, depth, ks in bounds:
        if best is not None and (bound, i) > (best, best_i):
            break
        tile = feasible[i][0]
        w, depth, ks = launched(kind, ops, tile, dtype, batch, gpu, km, residual, precision)
        r = _rank(objective, tile, w, ks, depth, bps, _gma(w, bps, ks, hw, kind), dram_traffic(w, sms * bps, hw), timing)
        if best is None or (r, i) < (best, best_i):
            best, best_i = r, i
    return best_i, best, skipped


def _best_by_floor(feasible: Sequence[tuple[Tile, int, int]], batch: int, gpu: GpuSpec, km: KernelModel,
                   residual: bool, timing: tuple) -> tuple[int | None, tuple[float, float, float, float] | None, int | None]:  # fmt: skip
    """`best_tile` for the time objective of a bounded kernel model, best first over three ranks of
    each tile, each a lower bound of the next: the time of its `KernelModel.floor` (no bytes at all,
    `_floor_ranks`), the rank of its `KernelModel.bounded` work (floored request counts, no L2
    bytes), its exact rank. The tile of smallest (rank, index) is taken from a heap of
    (rank, index) entries; a lower rank is replaced by the next one, an exact rank competes for the
    best. Once the smallest entry exceeds the best exact (rank, index), no other tile can beat it
    (its rank is at least its entry's): the same result as ranking every tile exactly, without the
    traffic of the many tiles whose time, even free of bytes, already loses."""
    kind, ops, dtype, precision, hw = timing[:5]
    sms = hw.sm_count
    heap, skipped = _floor_ranks(feasible, batch, gpu, km, timing)
    heap = list(heap)  # the entries stay as they are for the next search of the same tiles
    heapq.heapify(heap)
    bounded: dict[tuple[int, int, int, int], tuple[Work, int, int, dict]] = {}  # by (th, tw, tf, tc)
    best: tuple[float, float, float, float] | None = None
    best_i = None
    while heap:
        rank, i, exact, bps = heapq.heappop(heap)
        if best is not None and (rank, i) > (best, best_i):
            break
        tile = feasible[i][0]
        if exact:
            w, depth, ks = launched(kind, ops, tile, dtype, batch, gpu, km, residual, precision)
            r = _rank("time", tile, w, ks, depth, bps, _gma(w, bps, ks, hw, kind), dram_traffic(w, sms * bps, hw), timing)
            if best is None or (r, i) < (best, best_i):
                best, best_i = r, i
            continue
        key = (tile.th, tile.tw, tile.tf, tile.tc)
        hit = bounded.get(key)
        if hit is None:
            hit = bounded[key] = (*launched(kind, ops, tile, dtype, batch, gpu, km, residual, precision, exact=False), {})
        w, depth, ks, dram_by_bps = hit
        dram_rw = dram_by_bps.get(bps)
        if dram_rw is None:
            dram_rw = dram_by_bps[bps] = dram_traffic(w, sms * bps, hw)
        heapq.heappush(heap, (_rank("time", tile, w, ks, depth, bps, 0.0, dram_rw, timing), i, True, bps))
    return best_i, best, skipped


def _floor_ranks(feasible: Sequence[tuple[Tile, int, int]], batch: int, gpu: GpuSpec, km: KernelModel,
                 timing: tuple) -> tuple[list[tuple], int | None]:  # fmt: skip
    """(heap entries (rank, index, False, blocks per SM) of the tiles at least one block of which fits
    on an SM, ranked by the time of their `KernelModel.floor` as the launch schedules it; the index
    of the first tile with none). The floor has the tile's blocks, chunk iterations and FLOPs and no
    bytes: `model.launch_time` only grows with the bytes (and DRAM bytes), so this is at most the
    time of any work of the tile. The L2 bytes, which only break ties, are bounded by 0."""
    kind, ops, dtype, precision, hw, mma, rates = timing
    args = (km, feasible, gpu)
    last = _LAST_FLOORS[0]
    if last is not None and all(a is b for a, b in zip(last[0], args, strict=True)) and last[1] == (batch, precision):
        return last[2]
    occupancy: dict[tuple[int, int, int], int] = {}
    floors: dict[tuple[int, int, int, int], tuple[Work, int, int]] = {}  # by (th, tw, tf, tc)
    out: list[tuple] = []
    skipped = None
    for i, (tile, smem, regs) in enumerate(feasible):
        key = (smem, tile.threads, regs)
        bps = occupancy.get(key)
        if bps is None:
            bps = occupancy[key] = blocks_per_sm(smem, tile.threads, regs, hw)[0]
        if bps < 1:
            if skipped is None:
                skipped = i
            continue
        key = (tile.th, tile.tw, tile.tf, tile.tc)
        fl = floors.get(key)
        if fl is None:
            ks = tiles.cluster_split(kind, ops, tile, batch, gpu, dtype)
            fl = floors[key] = (*scheduled(kind, ops, tile, dtype, km.floor(tile, batch), ks), ks)
        w, depth, ks = fl
        t = launch_time(kind, ops, tile, dtype, precision, w, ks, depth, bps, 0.0, hw, mma, rates)
        out.append(((t, t, 0.0, 0.0), i, False, bps))
    _LAST_FLOORS[0] = (args, (batch, precision), (out, skipped))
    return out, skipped


#: The last `_floor_ranks` (its kernel model, tile list and GPU by identity, batch and precision, its
#: result): the residual and plain searches of a group rank the same tiles (one list, `TileSearch`'s)
#: by the same floors (a floor does not depend on the residual), one after the other.
_LAST_FLOORS: list = [None]


def _gma(w: Work, bps: int, ks: int, hw, kind: str) -> float:
    """L2-level bytes of a launch of `w` with `bps` blocks per SM (`estimate_ours`' gma)."""
    r, wr = launch_gma(w, bps, ks, hw, kind)
    return r + wr


def _rank(objective: str, tile: Tile, w: Work, ks: int, depth: int, bps: int, gma: float,
          dram_rw: tuple[float, float], timing: tuple) -> tuple[float, float, float, float]:  # fmt: skip
    """(metric, time_s, gma_bytes, dram_bytes) of a tile, as `estimate` gives them (`model.launch_time`)."""
    kind, ops, dtype, precision, hw, mma, rates = timing
    dram = dram_rw[0] + dram_rw[1]
    t = launch_time(kind, ops, tile, dtype, precision, w, ks, depth, bps, dram, hw, mma, rates)
    return (t if objective == "time" else gma if objective == "gma" else dram, t, gma, dram)


def _estimate_paper(
    kind: str, ops: tuple[Op, ...], tile: Tile, dtype: str, batch: int, spec: GpuSpec, residual: bool, precision: str
) -> Cost:
    from fuseplanner.cost import paper

    km = context(kind, ops, dtype)
    gs, e = km.gs, km.e
    reason = tiles.check(kind, ops, tile, dtype, spec, precision)
    if reason:
        return Cost(feasible=False, reason=f"{kind} {tile}: {reason}")
    r, w = paper.gma_elements(kind, gs, tile.th, tile.tw, tile.tf, batch, residual)
    r, w = r * e, w * e
    hw = spec.hw
    smem = tiles.smem_bytes(kind, ops, tile, dtype)
    regs = tiles.regs_per_thread(kind, ops, tile, dtype, precision)
    bps, _ = blocks_per_sm(smem, tile.threads, regs, hw)
    last = gs[-1]
    nsp = -(-last.ho // tile.th) * (1 if last.tokens_major else -(-last.wo // tile.tw))
    blocks = nsp * -(-last.co // tile.tf) * batch
    conc = max(1, bps) * hw.sm_count
    res = KernelResources(
        kind=kind, smem_bytes=smem, threads=tile.threads, regs_per_thread=regs, blocks=blocks,
        blocks_per_sm=bps, waves=blocks / conc, occupancy=bps * tile.threads / hw.max_threads_per_sm,
        launch_class=km.launch_class(ops),
    )  # fmt: skip
    flops = 2.0 * batch * sum(g.macs for g in gs)
    return Cost(
        gma_read_bytes=r, gma_write_bytes=w, dram_read_bytes=r, dram_write_bytes=w, flops=flops,
        time_s=(r + w) / hw.dram_bw, launches=1, kernels=(res,),
    )  # fmt: skip


def estimate_op(op: Op, dtype: str, batch: int, gpu: GpuSpec | str, *, precision: str = "fp32") -> Cost:
    """Cost of an op outside any planned group.

    Views (Reshape, Flatten, ...) cost nothing; dense convs and opaque nodes stream their operands
    once (see `layers`); a dw/pw/linear op costs its fastest feasible candidate tile (`PlanError`
    naming it when it has none: a layer with a kernel is never free).
    """
    spec = gpu if isinstance(gpu, GpuSpec) else _gpu(gpu)
    if op.op_type in VIEW_OPS:
        return Cost()
    if op.kind in LAYER_KINDS:
        batch = launch_batch((op,), batch)
        best: Cost | None = None
        for t in tiles.candidates(op.kind, (op,), dtype, spec, precision):
            c = estimate_ours(op.kind, (op,), t, dtype, batch, spec, "add" in op.epilogue, precision)
            if c.feasible and (best is None or c.time_s < best.time_s):
                best = c
        if best is None:
            raise PlanError(f"layer {op.name} ({op.kind}) has no feasible tile on {spec.name} ({dtype}): it cannot be costed")
        return best
    return stream_cost(op, dtype, batch, spec, precision)


def _weight_bytes(g, e: int) -> int:
    """Bytes per weight element a kernel reads: the storage dtype's for PW/linear weights (the
    pw/linear kernel's matrix, the fused kernels' packed PW members), fp32 (`work.PARAM_BYTES`) for
    DW filters."""
    return PARAM_BYTES if g.depthwise else e


def compulsory(kind: str, ops: Sequence[Op], dtype: str, batch: int, residual: bool = False) -> dict[str, float]:
    """Bytes every kernel of this kind must move at least, whatever its tile (exact element bytes, no
    sector rounding): the input elements some output needs, the weights and biases (fp32 biases and
    DW filters, PW/linear weights in the storage dtype: `_weight_bytes`), the residual (0
    when it is the block's own input, as in a pw_dw_pw inverted residual) and the output. The
    intermediate tensors of a fused kind are not included."""
    km = context(kind, tuple(ops), dtype)
    gs, e = km.gs, km.e
    batch = launch_batch(ops, batch)
    first, last = gs[0], gs[-1]
    if first.tokens_major:
        need = first.h * first.c
    elif first.depthwise:
        rows = span_union(first.h, first.pt, (first.kh - 1) * first.dil_h + 1, first.sh, first.ho)
        cols = span_union(first.w, first.pl, (first.kw - 1) * first.dil_w + 1, first.sw, first.wo)
        need = first.c * rows * cols
    else:
        need = first.c * first.ho * first.wo
    weights = sum(g.weight_elems * _weight_bytes(g, e) + (g.co * PARAM_BYTES if g.bias else 0) for g in gs)
    out = last.out_elems * batch * e
    res_is_input = getattr(km, "res_is_input", False)  # a pw_dw_pw block adding its own input
    return {
        "input": float(need * batch * e),
        "weights": float(weights),
        "residual": float(out) if residual and not res_is_input else 0.0,
        "output": float(out),
    }
