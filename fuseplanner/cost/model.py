"""Assembles a `Cost` for one kernel launch: feasibility, resources, traffic, DRAM, time."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from fuseplanner.core.errors import PlanError
from fuseplanner.core.ir import Cost, KernelResources, Op, Tile
from fuseplanner.core.kinds import DTYPE_BYTES, PRECISIONS
from fuseplanner.core.kinds import KERNEL_MEMBERS as MEMBERS
from fuseplanner.cost.time import blocks_per_sm, kernel_time, mma_rate, warp_rates
from fuseplanner.costbase.geometry import geom
from fuseplanner.costbase.traffic import coresident_share, dram_write_bytes, miss_fraction
from fuseplanner.costbase.work import KernelModel, Work, cdiv, whole_bytes
from fuseplanner.hw.spec import GpuSpec, Hw
from fuseplanner.kernels import tiles
from fuseplanner.kernels.family import cost_model, family

#: Cluster size from which a launch can use only the spec's `cluster_sms` SMs (measured on a GH100 with
#: benchmarks/probe_placement.py: clusters of 2 used all 132 SMs, clusters of 4 and 8 at most 120-124).
CLUSTER_PLACED_MIN = 4


def launch_sms(ks: int, hw: Hw) -> int:
    """SMs a launch of clusters of `ks` blocks can use (`hw.cluster_sms` from CLUSTER_PLACED_MIN on)."""
    return hw.cluster_sms if ks >= CLUSTER_PLACED_MIN else hw.sm_count


@lru_cache(maxsize=4096)
def context(kind: str, ops: tuple[Op, ...], dtype: str) -> KernelModel:
    """The validated kernel model of a group (cached per group: it memoises its tile sub-results)."""
    if kind not in MEMBERS:
        raise PlanError(f"unknown kernel kind {kind!r}: use one of {', '.join(MEMBERS)}")
    got = tuple(op.kind for op in ops)
    if got not in MEMBERS[kind]:
        want = " or ".join("+".join(m) for m in MEMBERS[kind])
        raise PlanError(f"kernel kind {kind} needs ops {want}, got {'+'.join(got) or 'none'}")
    if dtype not in DTYPE_BYTES:
        raise PlanError(f"unknown dtype {dtype!r}: use one of {', '.join(DTYPE_BYTES)}")
    gs = tuple(geom(op) for op in ops)
    for a, b in zip(gs, gs[1:], strict=False):
        if a.co != b.c:
            raise PlanError(f"ops of a {kind} group do not chain: {a.co} output channels feed {b.c} inputs")
    return cost_model(kind)(gs, DTYPE_BYTES[dtype])


_LAST: list = [None, None]  # one-entry identity cache in front of `context` (same group, many tiles)


def _model(kind: str, ops: tuple[Op, ...], dtype: str) -> KernelModel:
    key = _LAST[0]
    if key is not None and key[1] is ops and key[0] == kind and key[2] == dtype:
        return _LAST[1]
    km = context(kind, ops, dtype)
    _LAST[0], _LAST[1] = (kind, ops, dtype), km
    return km


def dram_traffic(w: Work, conc: int, hw: Hw) -> tuple[float, float]:
    """(read, write) DRAM bytes for a cold L2 (rules in `traffic`)."""
    cap = hw.l2_bytes * hw.l2_usable_fraction
    waves = cdiv(w.blocks, conc)
    # weights are re-streamed once per wave when one spatial tile's working set does not fit in L2
    w_foot = w.w_unique + (w.in_img + w.out_img) / w.nsp
    extra = miss_fraction(w_foot, cap) * (waves - 1) * w.w_unique
    # the filter tiles of a spatial tile run together unless there are more of them than fit at once
    rounds = cdiv(w.nf, conc)
    if rounds > 1:
        extra += miss_fraction(w.in_img + w.w_unique, cap) * (rounds - 1) * w.in_unique
    reads = w.in_unique + w.w_unique + w.res_unique
    return reads + extra, dram_write_bytes(w.out_unique, reads + w.out_unique, cap)


def coalesced(readers: int, spacing: float, launch: int, cluster: int, hw: Hw) -> float:
    """Share of `readers` blocks' reads of the same sectors that reach L2, the readers `spacing`
    blocks apart in a grid of `launch` blocks (in thread-block clusters of `cluster`). L2 sees one read
    per `coalesce` readers that run in step on SMs of one GPC and never one read for two GPCs
    (benchmarks/probe_copy.py on the H100 and the kernels' counters in data/records/h100):

    - the block scheduler places `gpc_chunk` consecutive blocks on one GPC, and the readers among them
      run in step (4 consecutive readers read once; readers `coalesce` or more apart each);
    - a launch of fewer than `gpc_chunk` x (`gpcs` + 1) blocks places its first `gpc_chunk` blocks so
      and spreads the rest evenly over the GPCs, in smaller runs (16 readers of a 16-block launch read
      10 times: 8 merged on 2 GPCs, then one per GPC);
    - clusters placed on one GPC start together: their readers read once per GPC (28 cluster ranks of
      a 224-block launch, 8 blocks apart, read 8 times).

    Never below one read."""
    if readers <= 1 or hw.l2_coalesce_blocks <= 1.0:
        return 1.0
    w, chunk = hw.l2_coalesce_blocks, hw.gpc_dispatch_blocks
    if cluster > 1:
        reads = max(readers / w, min(readers, hw.gpc_count))
    elif launch < chunk * (hw.gpc_count + 1):
        first = min(readers, max(1, chunk // spacing))
        run = max(1, -(-(launch - chunk) // hw.gpc_count) // spacing)  # readers in each later GPC's run
        reads = max(1.0, first / w) + (readers - first) / run * max(1.0, run / w)
    else:
        reads = readers * min(1.0, spacing / w)
    return max(1.0, reads) / readers


def weight_readers(w: Work, ks: int, hw: Hw) -> tuple[int, float]:
    """(readers, blocks between them) of one filter tile's weights as `coalesced` merges them. The grid
    runs spatial tiles fastest (`ks` cluster ranks each), then filter tiles, then images, so the tile's
    readers in one image are its `nsp` spatial tiles, `ks` apart, and the next image's follow
    `nsp x nf x ks` blocks later. Those of every image are readers together where they run in step:
    clusters (which merge once per GPC across the launch), and images whose groups fall within one GPC's
    run of `gpc_chunk` blocks (on average `nf x ks` blocks per reader). Otherwise each image's reads
    merge on their own (the same share for all). Nsight Compute on the H100 (data/records/h100):
    squeeze-excite PW layers and DW->PW clusters at batch 4 read their weights
    1.5-4x fewer times than counted per image."""
    images = w.blocks // max(1, w.nsp * w.nf)
    period = w.nsp * w.nf * ks
    if images > 1 and (ks > 1 or period < hw.gpc_dispatch_blocks):
        return w.nsp * images, period / w.nsp if ks == 1 else ks
    return w.nsp, ks


def l1_filtered(w: Work, hw: Hw, half: bool, fused: bool, ks: int = 1) -> Work:
    """`w` with its per-block weight reads scaled to what the L2 read counter sees, never below one
    read of every weight. Every spatial tile of a filter tile reads that tile's weights, the blocks
    `ks` apart in the grid (`ks` > 1: a cluster split's ranks between them), so L2 sees a
    `coalesced` share of them (the layer-by-layer PW/linear kernel's weight rows count at that
    share); a fused kernel's weights that every block reads whatever its filter tile (`w_all`, the
    first PW's of pw_pw and pw_dw_pw) have all the launch's blocks as readers, one block apart; the
    readers of a filter tile's own weights are `weight_readers`. Of it, a fused kernel's packed PW
    weight copies count at `fused_weight_l2_fraction` (`_fp16` for fp16 storage; fitted to Nsight
    Compute counters on the H100) and its DW filters and biases (read by every block of an SM) not
    again after their first read. Every copy goes through L1 (kernels/common.cuh). And with the bytes
    the time model charges the blocks' loads (`req_read`: window rows that share sectors at their
    requested size and, for the fused kinds, `fused_weight_load_fraction` of all weight reads, L1 hits
    included, never below one read of every weight; `ld_read`, the same without the floor: the floor
    is a total, not a per-block cost); the layer-by-layer kernels' loads are charged every weight read."""
    act = w.gma_read - w.w_read + w.l1_hits
    if not w.w_read:
        return w._replace(req_read=act, ld_read=act)
    floor = min(w.w_unique, w.w_read)
    launch = w.blocks * ks
    co = coalesced(*weight_readers(w, ks, hw), launch, ks, hw)
    if not fused:
        keep = max(co * w.w_read, floor)
        return w._replace(gma_read=w.gma_read - w.w_read + keep, w_read=keep, req_read=act + w.w_read,
                          ld_read=act + w.w_read)
    share = hw.fused_weight_load_fraction * w.w_read
    every = coalesced(w.blocks, 1, launch, ks, hw) * w.w_all
    l2 = co * (w.w_read - w.w_l1 - w.w_all) + every
    l2_fraction = hw.fused_weight_l2_fraction_fp16 if half else hw.fused_weight_l2_fraction
    keep = max(l2_fraction * l2, floor)
    return w._replace(gma_read=w.gma_read - w.w_read + keep, w_read=keep, req_read=act + max(share, floor),
                      ld_read=act + share, w_all_l2=l2_fraction * every)


def launched(kind: str, ops: tuple[Op, ...], tile: Tile, dtype: str, batch: int, gpu: GpuSpec, km: KernelModel,
             residual: bool, precision: str, exact: bool = True) -> tuple[Work, int, int]:  # fmt: skip
    """(the `Work` of `km` for `tile` as the launch reads and schedules it, chunk loads a block keeps in
    flight, cluster split): the cluster split (`tiles.cluster_split`) worked out once, the work with
    it (it changes how the pw kernel stores), then `l1_filtered` and `scheduled`. `exact=False`: from
    the model's lower bound (`KernelModel.bounded`) where it has one; every step here is monotone in
    the bytes it floors."""
    ks = tiles.cluster_split(kind, ops, tile, batch, gpu, dtype)
    w = km.l1_reuse(km.work(tile, batch, residual, precision=precision, ks=ks, exact=exact), tile, ks,
                    gpu.hw.l1_cache_bytes, gpu.hw.l1_line_bytes)
    w = l1_filtered(w, gpu.hw, dtype == "fp16", family(kind).fused, ks)
    return (*scheduled(kind, ops, tile, dtype, w, ks), ks)


def scheduled(kind: str, ops: tuple[Op, ...], tile: Tile, dtype: str, w: Work, ks: int) -> tuple[Work, int]:
    """(`w` as the launch schedules it, chunk loads a block keeps in flight). A dw_pw or pw/linear
    cluster split of `ks` blocks (`tiles.cluster_split`) multiplies the blocks and divides each
    block's chain of chunks, plus one whole latency for the reduction after the loop (cluster
    barriers and the partial tiles read over distributed shared memory, which nothing overlaps); the
    bytes and FLOPs stay. Depth: the cp.async ring's stages - 1 (pw/linear and the fused kinds; 1 for
    a one-stage ring, whose one chunk in flight does not overlap the math), else 1."""
    depth = family(kind).pipeline_depth(kind, ops, tile, dtype)
    if ks > 1:  # the reduction after the loop is not pipelined: a whole latency, `depth` chained steps
        w = w._replace(blocks=w.blocks * ks, iters=cdiv(w.iters, ks) + depth)
    return w, depth


def issued(kind: str, ops: tuple[Op, ...], tile: Tile, dtype: str, precision: str, w: Work, ks: int, hw: Hw) -> Work:
    """`w` with the FLOPs the blocks of a launch of `kind` issue on their critical path, which the time
    model charges at the kind's warp rates (the family's `KernelModel.issued`: the fused kernels'
    GEMM work split per thread or warp with its padding and epilogues, the pw/linear kernel's
    register blocks or mma tiles when the spec weighs their loads or the tile is uneven); `ks`
    blocks of a cluster split share one block's chunks. Other kinds return `w` unchanged."""
    return _model(kind, ops, dtype).issued(kind, ops, tile, dtype, precision, w, ks, hw)


def _shared_weights(w: Work, bps: int, hw: Hw) -> Work:
    """`w` with the weights every block reads (`w_all_l2`) fetched once per SM for the blocks that
    run on it together: min(`bps`, blocks / SMs) blocks of an SM start together and copy the same
    chunks through its L1."""
    together = min(bps, w.blocks / hw.sm_count)
    if together <= 1.0 or not w.w_all_l2:
        return w
    saved = min(w.w_all_l2 * (1.0 - 1.0 / together), w.w_read - min(w.w_unique, w.w_read))
    if saved <= 0.0:
        return w
    return w._replace(gma_read=w.gma_read - saved, w_read=w.w_read - saved, l1_hits=w.l1_hits + saved,
                      w_all_l2=w.w_all_l2 - saved)


def coresident(w: Work, bps: int, ks: int, hw: Hw, kind: str) -> Work:
    """`w` with the input re-reads that never reach L2 moved from `gma_read` to `l1_hits` (L2 sees
    them once, the loads still request them: the time model's `req_read`/`ld_read` are unchanged): of
    the windows each filter tile reads again (`in_read`, every kind but dw), those that co-resident
    blocks of one SM share through L1 (`traffic.coresident_share`) or whose reads L2 merges
    (`coalesced`: the filter tiles of a spatial tile are `nsp` blocks apart). Every copy goes through
    L1 (kernels/common.cuh). Not for cluster launches (`ks` > 1), which the scheduler places per GPU
    processing cluster. L2 merges none of the re-reads of a kind whose model says so
    (`KernelModel.MERGED_INPUT_REREADS`), and a model may limit the sharing to the launch's first wave
    (`KernelModel.FIRST_WAVE_SHARING`)."""
    if ks > 1:
        return w
    w = _shared_weights(w, bps, hw)
    if not w.in_read:
        return w
    model = cost_model(kind)
    share = coresident_share(w.nsp, w.nf, hw.sm_count, bps, w.blocks if model.FIRST_WAVE_SHARING else 0)
    if model.MERGED_INPUT_REREADS:
        share *= coalesced(w.nf, w.nsp, w.blocks, 1, hw)
    saved = w.in_read * (1.0 - max(share, 1.0 / max(w.nf, 1)))
    if saved <= 0.0:
        return w
    return w._replace(gma_read=w.gma_read - saved, l1_hits=w.l1_hits + saved, in_read=w.in_read - saved)


def launch_time(kind: str, ops: tuple[Op, ...], tile: Tile, dtype: str, precision: str, w: Work, ks: int, depth: int,
                bps: int, dram: float, hw: Hw, mma: float | None = None, rates: tuple | None = None) -> float:  # fmt: skip
    """Seconds of one launch of `tile` whose `launched` work is `w` with `bps` blocks per SM and
    `dram` DRAM bytes: the issued work (`issued`) at `time.kernel_time` (`mma`, `rates`: the
    `time.mma_rate` and `time.warp_rates` of the kind, worked out here when not given). The one
    timing path of `estimate_ours` and the planner's search (`cost.best_tile`)."""
    if mma is None:
        mma = mma_rate(dtype, precision, hw)
    if rates is None:
        rates = warp_rates(kind, dtype, precision, hw, ops)
    return kernel_time(issued(kind, ops, tile, dtype, precision, w, ks, hw), dram, bps, tile.threads, hw, mma, rates,
                       depth, launch_sms(ks, hw))  # fmt: skip


def launch_gma(w: Work, bps: int, ks: int, hw: Hw, kind: str) -> tuple[float, float]:
    """(read, write) L2-level bytes of a launch of `w` with `bps` blocks per SM: `coresident`, in whole
    sectors (row-phase averages rounded up)."""
    wb = coresident(w, bps, ks, hw, kind)
    return whole_bytes(wb.gma_read / 32.0), whole_bytes(wb.gma_write / 32.0)


def estimate_ours(
    kind: str, ops: Sequence[Op], tile: Tile, dtype: str, batch: int, gpu: GpuSpec, residual: bool, precision: str
) -> Cost:
    """Our model (see docs/cost_model.md)."""
    if type(ops) is not tuple:
        ops = tuple(ops)
    if precision not in PRECISIONS:
        raise PlanError(f"unknown precision {precision!r}: use fp32 or tf32")
    km = _model(kind, ops, dtype)
    reason = tiles.check(kind, ops, tile, dtype, gpu, precision)
    if reason:
        return Cost(feasible=False, reason=f"{kind} {tile}: {reason}")
    hw = gpu.hw
    smem = tiles.smem_bytes(kind, ops, tile, dtype)
    regs = tiles.regs_per_thread(kind, ops, tile, dtype, precision)
    bps, limiter = blocks_per_sm(smem, tile.threads, regs, hw)
    if bps < 1:
        return Cost(feasible=False, reason=f"{kind} {tile}: no block fits on an SM ({limiter})")
    w, depth, ks = launched(kind, ops, tile, dtype, batch, gpu, km, residual, precision)
    conc = hw.sm_count * bps
    dram_r, dram_w = dram_traffic(w, conc, hw)
    t = launch_time(kind, ops, tile, dtype, precision, w, ks, depth, bps, dram_r + dram_w, hw)
    gma_r, gma_w = launch_gma(w, bps, ks, hw, kind)
    res = KernelResources(
        kind=kind, smem_bytes=smem, threads=tile.threads, regs_per_thread=regs, blocks=w.blocks,
        blocks_per_sm=bps, waves=w.blocks / conc, occupancy=bps * tile.threads / hw.max_threads_per_sm,
        launch_class=km.launch_class(ops),
    )  # fmt: skip
    return Cost(
        gma_read_bytes=gma_r,
        gma_write_bytes=gma_w,
        dram_read_bytes=dram_r,
        dram_write_bytes=dram_w,
        flops=w.useful_flops,
        redundant_flops=max(0.0, w.cuda_flops + w.mma_flops - w.useful_flops),
        time_s=t,
        launches=1,
        kernels=(res,),
    )
