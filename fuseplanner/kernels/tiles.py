"""The tunable parameters of every kernel kind: which tiles are feasible, what they cost in shared
memory and registers, and the candidate set the planner searches.

This module is the contract between the cost models and the CUDA kernels: every tile that `check`
accepts is exactly what `fuseplanner.kernels` runs, and every tile it rejects is refused before launch
with the same reason. All functions are pure. What a tile means for each kernel family (its layout,
shared memory, chunking, feasibility rules) sits with the family (`fuseplanner.kernels.families`,
registered in `fuseplanner.kernels.family`); the functions here dispatch through `family(kind)`.
This module also re-exports the families' public tile functions, where callers have always found them.
"""

from __future__ import annotations

from collections.abc import Sequence

from fuseplanner.core.ir import Op, Tile, dtype_bytes
from fuseplanner.core.kinds import GROUP_KINDS as FUSED_KINDS  # noqa: F401
from fuseplanner.core.kinds import LAYER_KINDS as LBL_KINDS  # noqa: F401
from fuseplanner.kernels import registers
from fuseplanner.kernels.families.dw import (  # noqa: F401
    DW_VECTOR_BYTES,
    dw_lbl_rows_per_item,
    dw_row_stride,
    dw_vector_elems,
)
from fuseplanner.kernels.families.fused import (  # noqa: F401
    FUSED_MAX_STAGES,
    FUSED_MIN_STAGES,
    FUSED_RING_BYTES,
    MAX_ACC,
    BlockGemm,
    block_gemms,
    dw_rows_per_item,
    fma_group,
    fused_shape_reason,
    fused_smem_layout,
    fused_smem_total,
    fused_stages,
    mma_group,
    ring_stages,
    staged_window_width,
)
from fuseplanner.kernels.families.pw import (  # noqa: F401
    FMA_MAX_IDLE,
    LBL_SPLIT_MIN_CHANNELS,
    MAX_MMA_ACC,
    PVEC_SCATTER_MIN_CIN,
    PW_KPAD_BYTES,
    PW_MAX_STAGES,
    PW_MIN_STAGES,
    PW_PPAD,
    PW_RING_BYTES,
    PW_STAGES,
    PW_XPAD,
    FmaSplit,
    fma_cycles,
    fma_map,
    fma_split,
    mma_grid,
    pixel_vector,
    pw_stage_bytes,
    pw_stages,
    pw_variant,
    split_partial_bytes,
)
from fuseplanner.kernels.family import family, kinds_where
from fuseplanner.kernels.tile_common import (  # noqa: F401
    ACC_BYTES,
    SMEM_ALIGN,
    STAGES,
    THREADS,
    _last,
    halo_window,
    out_channels,
)

#: dw_pw split reduction over a thread-block cluster (Hopper and later): at most this many blocks per
#: cluster (8 is the portable cluster size), only while the grid stays within CLUSTER_FILL blocks per
#: SM, and only while every block of a cluster keeps at least MIN_SPLIT_CHUNKS channel chunks: the
#: reduction after the loop (cluster barriers, partial tiles summed over distributed shared memory)
#: costs about as much as a chunk, so splitting below two chunks a block adds more than it removes
#: (measured on the H100, benchmarks/probe_records.py: a 12-chunk MobileNetV3 group 14.0 us at KS=8,
#: 11.2 us at KS=4; a 6-chunk MobileViT group 13.2 us at KS=4, 10.0 us at KS=2; BENCHMARKS.md).
MAX_CLUSTER_SPLIT = 8


CLUSTER_FILL = 2


MIN_SPLIT_CHUNKS = 2


#: Kernel kinds with a cluster split of their reduction: the fused DW->PW and the layer-by-layer
#: pw/linear kernel (a deep reduction over few output tiles, e.g. 960 -> 160 channels on a 7x7 map).
SPLIT_KINDS = kinds_where(lambda f, k: f.splits(k))


#: Kinds whose kernel runs tiles whose outputs do not split evenly over the threads (kernels/families/pw/pw.cu:
#: the FLAT path leaves the threads past the tile's outputs idle; the register blocks and mma warps
#: cover a tile's edges as they do for any tile). The planner
#: searches such "uneven" tiles only for a layer with no even one (`feasible_candidates`): a
#: squeeze-excite 1x1 conv over a 1x1 map has fewer outputs (e.g. 8 or 32) than a 64-thread block.
UNEVEN_KINDS = kinds_where(lambda f, k: f.uneven)


def smem_bytes(kind: str, ops: Sequence[Op], tile: Tile, dtype: str) -> int:
    """Shared memory one block of this kind needs for `tile` (bytes)."""
    return _smem_bytes(kind, ops, tile.th, tile.tw, tile.tf, tile.tc, dtype_bytes(dtype))


def _smem_bytes(kind: str, ops: Sequence[Op], th: int, tw: int, tf: int, tc: int, e: int) -> int:
    """`smem_bytes` of the tile (th, tw, tf, tc) (any thread count) for element size `e`."""
    return family(kind).smem(kind, ops, th, tw, tf, tc, e)


def cluster_split(kind: str, ops: Sequence[Op], tile: Tile, batch: int, gpu, dtype: str = "fp32") -> int:
    """Blocks of a thread-block cluster that share one output tile, each reducing every KS-th channel
    chunk (KS of kernels/families/fused/fused_dw_pw.cu and kernels/families/pw/pw.cu): the largest power of two up to
    MAX_CLUSTER_SPLIT that leaves every block MIN_SPLIT_CHUNKS chunks and keeps the grid within
    CLUSTER_FILL blocks per SM of `gpu` (a GpuSpec). pw/linear split only reductions of
    LBL_SPLIT_MIN_CHANNELS or more, and only while the fp32 partial tile fits in the `dtype` ring it
    aliases (`split_partial_bytes`). 1 for the other kinds and before compute capability 9.0 (no
    clusters)."""
    fam = family(kind)
    if not fam.splits(kind) or int(gpu.compute_capability.split(".")[0]) < 9:
        return 1
    if not fam.split_fits(kind, ops, tile, dtype):
        return 1
    sm_count = gpu.sm_count
    last = _last(ops)
    ho, wo = last.hw_out
    blocks = -(-ho // tile.th) * -(-wo // tile.tw) * -(-last.c_out // tile.tf) * batch
    chunks = -(-ops[0].c_in // tile.tc)
    ks = 1
    while 2 * ks <= min(MAX_CLUSTER_SPLIT, chunks // MIN_SPLIT_CHUNKS) and 2 * ks * blocks <= CLUSTER_FILL * sm_count:
        ks *= 2
    return ks


def regs_wanted(kind: str, ops: Sequence[Op], tile: Tile, dtype: str, precision: str = "fp32") -> int:
    """Registers per thread the `kind` kernel of `tile` would compile to without the hardware ceiling
    (`registers.wanted` over the family's `accumulators`)."""
    acc = family(kind).accumulators(kind, ops, tile, dtype, precision)
    return registers.wanted(kind, registers.mode(dtype, precision), tile.threads, acc)


def regs_per_thread(kind: str, ops: Sequence[Op], tile: Tile, dtype: str, precision: str = "fp32") -> int:
    """Registers per thread the `kind` kernel of `tile` compiles to: `regs_wanted`, at most the ceiling."""
    return min(registers.MAX_REGS_PER_THREAD, regs_wanted(kind, ops, tile, dtype, precision))


def check(kind: str, ops: Sequence[Op], tile: Tile, dtype: str, gpu, precision: str = "fp32") -> str | None:
    """Why `tile` cannot run for this kernel on `gpu` in `dtype` storage at `precision`, or None when it can.

    `gpu` is a GpuSpec (fields smem_per_block_bytes, max_threads_per_block, regs_per_sm).
    """
    if min(tile.th, tile.tw, tile.tf, tile.tc, tile.threads) < 1:
        return f"tile {tile} has a non-positive size"
    ho, wo = _last(ops).hw_out
    if tile.th > ho or tile.tw > wo:
        return f"spatial tile {tile.th}x{tile.tw} exceeds the output map {ho}x{wo}"
    cout = out_channels(kind, ops)
    if tile.tf > cout:
        return f"filter tile {tile.tf} exceeds the {cout} output channels"
    fam = family(kind)
    if why := fam.tile_reason(kind, tile):
        return why
    if tile.threads > gpu.max_threads_per_block:
        return f"{tile.threads} threads exceed the {gpu.max_threads_per_block} per block of {gpu.name}"
    if tile.threads % 32:
        return f"{tile.threads} threads is not a whole number of warps"
    work = tile.tf * tile.th * tile.tw
    if work % tile.threads and not fam.uneven:
        return f"{work} outputs per block do not split evenly over {tile.threads} threads"
    if why := fam.shape_reason(kind, ops):
        return why
    smem = smem_bytes(kind, ops, tile, dtype)
    if smem > gpu.smem_per_block_bytes:
        return f"needs {smem} B of shared memory per block, {gpu.name} allows {gpu.smem_per_block_bytes} B"
    regs = regs_wanted(kind, ops, tile, dtype, precision)  # within the ceiling, what the compiler allocates
    if regs > registers.MAX_REGS_PER_THREAD:
        return (f"needs about {regs} registers per thread (limit {registers.MAX_REGS_PER_THREAD}; the compiler "
                "would spill to local memory)")
    if regs * tile.threads > gpu.regs_per_sm:
        return f"needs {regs * tile.threads} registers per block, {gpu.name} has {gpu.regs_per_sm} per SM"
    return None


def _sizes(extent: int, options: Sequence[int]) -> list[int]:
    """Tile sizes for one dimension: powers of two, small divisors of the extent, and the extent."""
    out = {o for o in options if o <= extent}
    out.update(d for d in range(1, min(extent, 64) + 1) if extent % d == 0 and d >= 4)
    if extent <= 64:
        out.add(extent)
    return sorted(out or {extent})


def _grid_sizes(kind: str, ops: Sequence[Op]) -> tuple[list[int], list[int], list[int], list[int]]:
    """The sizes of each tile dimension that the candidate set combines (th, tw, tf, tc)."""
    last = _last(ops)
    ho, wo = last.hw_out
    cout = out_channels(kind, ops)
    spatial = family(kind).spatial_sizes(kind, ho, wo)
    if spatial is not None:  # token tiles: rows of tokens
        ths, tws = _sizes(ho, spatial[0]), list(spatial[1])
    else:
        ths, tws = _sizes(ho, (1, 2, 4, 8, 16, 32)), _sizes(wo, (4, 8, 16, 32))
    tfs = sorted({f for f in (8, 16, 32, 64, 128, 256) if f <= cout} | {cout} if cout <= 512 else {8, 16, 32, 64, 128, 256})
    tcs = [c for c in (8, 16, 32, 64)]
    return ths, tws, tfs, tcs


def candidate_grid(kind: str, ops: Sequence[Op]) -> list[Tile]:
    """The candidate set before feasibility, in search order: every (th, tw, tf, tc, threads) of
    `_grid_sizes` x THREADS with th x tw <= 1024 pixels (tc == tf for dw)."""
    ths, tws, tfs, tcs = _grid_sizes(kind, ops)
    chunks = family(kind).chunk_sizes
    return [
        Tile(th, tw, tf, tc, threads)
        for th in ths
        for tw in tws
        if th * tw <= 1024
        for tf in tfs
        for tc in chunks(tf, tcs)
        for threads in THREADS
    ]


def candidates(kind: str, ops: Sequence[Op], dtype: str, gpu, precision: str = "fp32") -> list[Tile]:
    """The candidate tiles the planner searches for a kernel of `kind` over `ops`, feasible ones only.

    Spatial sizes are powers of two plus divisors of the output map (e.g. 7, 14, 28) and the whole
    map when small; filter tiles include all filters; channel chunks 8..64. The tiles of
    `candidate_grid` that `check` accepts and whose threads split their outputs evenly, in the same
    order; where there is none, for a kind in UNEVEN_KINDS, the uneven tiles `check` accepts (threads
    past the outputs idle) instead.
    """
    return [t for t, _, _ in feasible_candidates(kind, ops, dtype, gpu, precision)]


def feasible_candidates(kind: str, ops: Sequence[Op], dtype: str, gpu,
                        precision: str = "fp32") -> list[tuple[Tile, int, int]]:
    """`candidates` with each tile's shared memory (`smem_bytes`) and registers per thread
    (`regs_per_thread`), which the cost model needs again.

    The same tests as `check`, in a loop that evaluates each once where it can: the group-level
    ones (output map and channels, fused shape rules) once per group, shared memory (which does not
    depend on the thread count) once per (th, tw, tf, tc), the rest per tile.
    """
    fam = family(kind)
    if fam.shape_reason(kind, ops):
        return []
    out = _feasible(kind, ops, dtype, gpu, precision, even=True)
    if not out and fam.uneven:
        out = _feasible(kind, ops, dtype, gpu, precision, even=False)
    return out


def _feasible(kind: str, ops: Sequence[Op], dtype: str, gpu, precision: str,
              even: bool) -> list[tuple[Tile, int, int]]:
    """`feasible_candidates` of the even tiles (the threads divide the outputs) or the uneven ones."""
    ths, tws, tfs, tcs = _grid_sizes(kind, ops)
    ho, wo = _last(ops).hw_out
    cout = out_channels(kind, ops)
    max_threads, smem_limit, regs_sm = gpu.max_threads_per_block, gpu.smem_per_block_bytes, gpu.regs_per_sm
    threads_ok = [n for n in THREADS if n >= 1 and n <= max_threads and n % 32 == 0]
    fam = family(kind)
    smem_of, chunks, acc_of = fam.smem, fam.chunk_sizes, fam.accumulators
    mode, e = registers.mode(dtype, precision), dtype_bytes(dtype)
    out: list[tuple[Tile, int, int]] = []
    append = out.append
    for th in ths:
        if th < 1 or th > ho:
            continue
        for tw in tws:
            if th * tw > 1024 or tw < 1 or tw > wo:
                continue
            for tf in tfs:
                if tf < 1 or tf > cout:
                    continue
                work = tf * th * tw
                fits = [n for n in threads_ok if (work % n == 0) == even]
                if not fits:
                    continue
                for tc in chunks(tf, tcs):
                    if tc < 1:
                        continue
                    smem = smem_of(kind, ops, th, tw, tf, tc, e)
                    if smem > smem_limit:
                        continue
                    for threads in fits:
                        tile = Tile(th, tw, tf, tc, threads)
                        regs = registers.wanted(kind, mode, threads, acc_of(kind, ops, tile, dtype, precision))
                        if regs > registers.MAX_REGS_PER_THREAD:
                            continue
                        if regs * threads <= regs_sm:
                            append((tile, smem, regs))
    return out


def output_rows_per_item(kind: str, tile: Tile) -> int:
    """Output rows a thread item stores one after another (`costbase.requests.tile_write_sectors`): the
    DW stencil's V of the dw and pw_dw kernels, 1 for the kinds that store a staged tile."""
    return family(kind).output_rows(kind, tile)


def store_key(kind: str, tile: Tile) -> int:
    """What besides th, tw, tf and tc sets a tile's output stores (`cost.best_tile` shares one `Work`
    between tiles of equal key): the rows a thread item stores (`output_rows_per_item`), or for the
    pw/linear kernel, whose warp grid or register block follows its threads, the threads."""
    return family(kind).store_key(kind, tile)
