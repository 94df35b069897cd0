"""The tunable parameters of each kernel kind: what a tile means, what it costs in shared memory and
registers, which tiles are feasible, and the candidate set the planner searches.

This module is the contract between the cost models and the CUDA kernels: every tile that `check`
accepts is exactly what `fuseplanner.kernels` runs, and every tile it rejects is refused before launch
with the same reason. All functions are pure.

Kernel layouts (NCHW, one image per block in grid z; see kernels/*.cu):

- ``dw``: a block computes tf channels x (th x tw) output pixels; it stages the tf input planes of its
  halo window ((th-1)s+(k-1)d+1) x ((tw-1)s+(k-1)d+1) and the tf k x k filters. tc == tf.
- ``pw`` / ``linear``: out[f, p] = sum_c W[f, c] x[c, p]. A block computes tf filters x (th x tw) pixels,
  looping over input channels in chunks of tc, STAGES-deep buffered: input chunk tc x th*tw and weight
  chunk tf x tc.
- ``pw_dw``: a block computes tf expanded (DW) channels x (th x tw) DW outputs. For each chunk of tc
  PW input channels it stages tc x halo window of the PW input and tf x tc PW weights, accumulating the
  expanded halo window tf x hh x ww (fp32, the communication buffer); then the DW reads it.
- ``dw_pw``: a block computes tf PW filters x (th x tw) pixels. For each chunk of tc DW channels it
  stages tc x halo window of the input, runs the DW into a tc x th*tw fp32 buffer (the communication
  buffer) and accumulates the PW with a tf x tc weight chunk. The DW is recomputed once per filter tile.
- ``pw_pw``: a block computes tf filters of the second PW x (th x tw) pixels. It stages the whole input
  pixel tile C1 x th*tw once; for each chunk of tc mid channels it streams the first PW's C1 x tc and
  the second's tc x tf weight chunks through its ring, computes the first PW into a tc x th*tw fp32
  buffer and accumulates the second PW.
- ``pw_dw_pw``: a block computes tf projection filters x (th x tw) pixels. It stages the input halo
  window C_in x hh x ww once; for each chunk of tc expanded channels it streams the expansion's
  C_in x tc weights, the chunk's DW weights and biases and the projection's tc x tf weights through its
  ring, computes the expansion PW over the window (tc x hh x ww fp32), the DW (tc x th*tw) and
  accumulates the projection.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple

from fuseplanner.core.ir import Op, Tile, dtype_bytes, math_mode
from fuseplanner.core.kinds import GROUP_KINDS as FUSED_KINDS
from fuseplanner.kernels import registers

#: Buffering depth of streamed chunks (input/weight chunks of PW-like loops).
STAGES = 2
#: fp32 accumulator/communication-buffer element size in bytes.
ACC_BYTES = 4
#: Threads-per-block choices.
THREADS = (64, 128, 256)
#: Row padding of the pw/linear kernel's shared-memory chunks (kernels/pw.cu XPAD, WPAD).
PW_XPAD = 8
PW_KPAD_BYTES = 16
#: Shared-memory ring depth of the pw/linear kernel (cp.async runs stages - 1 chunks ahead): as many
#: stages as fit in PW_RING_BYTES, between PW_MIN_STAGES and PW_MAX_STAGES (deep rings hide the DRAM
#: latency of small tiles with long reductions).
PW_MIN_STAGES = 2
PW_MAX_STAGES = 6
PW_RING_BYTES = 64 * 1024
#: Deepest pw/linear ring (the depth of a given tile is `pw_stages(kind, tile, dtype)`).
PW_STAGES = PW_MAX_STAGES
#: The fused kernels' cp.async ring: as many stages as fit in FUSED_RING_BYTES, 2..4 (1 for a stage
#: larger than FUSED_RING_BYTES).
FUSED_MIN_STAGES = 2
FUSED_MAX_STAGES = 4
FUSED_RING_BYTES = 64 * 1024
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
SPLIT_KINDS = ("dw_pw", "pw", "linear")
#: Row pad of the split pw/linear kernel's fp32 partial tile (kernels/pw.cu PPAD).
PW_PPAD = 4
#: The pw/linear kernel splits only reductions at least this deep. Measured on the H100
#: (`scripts/gpu_run.py OUT kernels`, BENCHMARKS.md "Deep PW layers split"): MobileNetV2's 384-960-channel PW layers on 14x14 and
#: 7x7 maps ran 1.5-3x faster split (e.g. 960->160 at batch 8, TF32 40.2 -> 19.1 us), while MobileViT's
#: 64-192-channel linear layers ran about 1 us slower split than unsplit (few short chunks: the
#: cluster barriers and the reduction cost more than the chain they shorten).
LBL_SPLIT_MIN_CHANNELS = 256

#: Kinds whose kernel runs tiles whose outputs do not split evenly over the threads (kernels/pw.cu:
#: the FLAT path leaves the threads past the tile's outputs idle; the register blocks and mma warps
#: cover a tile's edges as they do for any tile). The planner
#: searches such "uneven" tiles only for a layer with no even one (`feasible_candidates`): a
#: squeeze-excite 1x1 conv over a 1x1 map has fewer outputs (e.g. 8 or 32) than a 64-thread block.
UNEVEN_KINDS = ("pw", "linear")


def _last(ops: Sequence[Op]) -> Op:
    return ops[-1]


def _dw_of(kind: str, ops: Sequence[Op]) -> Op | None:
    """The depthwise member of a `kind` kernel over `ops`, or None."""
    i = _dw_index(kind)
    return ops[i] if i is not None and i < len(ops) else None


@lru_cache(maxsize=64)
def _dw_index(kind: str) -> int | None:
    parts = kind.split("_")
    return parts.index("dw") if "dw" in parts else None


def halo_window(kind: str, ops: Sequence[Op], tile: Tile) -> tuple[int, int]:
    """(rows, cols) of the input window a block reads for a th x tw output tile.

    For kinds with a DW member the window is the DW's receptive field (in the DW input, i.e. in the PW
    output for pw_dw / pw_dw_pw); for PW-only kinds it is the output tile itself (times the stride).
    """
    return _halo(kind, ops, tile.th, tile.tw)


def _halo(kind: str, ops: Sequence[Op], th: int, tw: int) -> tuple[int, int]:
    dw = _dw_of(kind, ops)
    if dw is None:
        sh, sw = ops[0].stride if ops[0].kind != "linear" else (1, 1)
        return ((th - 1) * sh + 1, (tw - 1) * sw + 1)
    (kh, kw), (sh, sw), (dh, dwl) = dw.kernel, dw.stride, dw.dilation
    return ((th - 1) * sh + (kh - 1) * dh + 1, (tw - 1) * sw + (kw - 1) * dwl + 1)


def pw_stage_bytes(kind: str, tile: Tile, dtype: str) -> int:
    """Bytes of one pw/linear ring stage: weights tf x (tc + pad) and inputs tc x (p + PW_XPAD)
    (NCHW) or p x (tc + pad) (linear); rows padded against bank conflicts in the mma reads."""
    return _pw_stage_bytes(kind, tile.th * tile.tw, tile.tf, tile.tc, dtype_bytes(dtype))


def _pw_stage_bytes(kind: str, p: int, tf: int, tc: int, e: int) -> int:
    kpad = PW_KPAD_BYTES // e
    x_elems = p * (tc + kpad) if kind == "linear" else tc * (p + PW_XPAD)
    return (x_elems + tf * (tc + kpad)) * e


def pw_stages(kind: str, tile: Tile, dtype: str) -> int:
    """Ring depth of the pw/linear kernel for `tile` (kernels/pw.cu STAGES)."""
    return _pw_stages(pw_stage_bytes(kind, tile, dtype))


def _pw_stages(stage: int) -> int:
    return max(PW_MIN_STAGES, min(PW_MAX_STAGES, PW_RING_BYTES // stage))


#: Widest copy (bytes) of kernels/dw.cu's window staging: 8, not 16, since a staged row starts at a
#: column rounded down to the vector width and so holds up to 2 x (width - 1) columns it does not use.
DW_VECTOR_BYTES = 8


def dw_vector_elems(w: int, e: int) -> int:
    """Elements per copy of kernels/dw.cu's window staging when the input is aligned: the widest
    vector of at most DW_VECTOR_BYTES that divides a row of W elements of `e` bytes (1 when none does)."""
    return next((n // e for n in (8, 4) if n <= DW_VECTOR_BYTES and n >= 2 * e and w % (n // e) == 0), 1)


def dw_row_stride(ops: Sequence[Op], tw: int, e: int) -> int:
    """Elements between staged window rows in kernels/dw.cu (`LDX`) for a DW op's tiles `tw` outputs
    wide: the halo row staged as aligned vectors from a column rounded down to the vector width (at
    most VEC - 1 columns more on each side), so any vector width the launch uses fits."""
    vec = dw_vector_elems(ops[0].hw_in[1], e)
    return _rup(_halo("dw", ops, 1, tw)[1] + vec - 1, vec)


def smem_bytes(kind: str, ops: Sequence[Op], tile: Tile, dtype: str) -> int:
    """Shared memory one block of this kind needs for `tile` (bytes)."""
    return _smem_bytes(kind, ops, tile.th, tile.tw, tile.tf, tile.tc, dtype_bytes(dtype))


def _smem_bytes(kind: str, ops: Sequence[Op], th: int, tw: int, tf: int, tc: int, e: int) -> int:
    """`smem_bytes` of the tile (th, tw, tf, tc) (any thread count) for element size `e`."""
    if kind == "dw":
        hh = _halo(kind, ops, th, tw)[0]
        kh, kw = ops[0].kernel
        filters = _rup(tf * kh * kw * ACC_BYTES, 16)  # the window starts 16-byte aligned
        return tf * hh * dw_row_stride(ops, tw, e) * e + filters
    if kind in ("pw", "linear"):
        # kernels/pw.cu: a pw_stages()-deep ring of pw_stage_bytes() stages
        # weights Ws[tf][tc + PW_KPAD_BYTES/e], inputs Xs[tc][p + PW_XPAD] (NCHW) or Xs[p][tc + pad] (linear)
        stage = _pw_stage_bytes(kind, th * tw, tf, tc, e)
        return _pw_stages(stage) * stage
    if kind in FUSED_KINDS:
        return fused_smem_total(_fused_smem_layout(kind, ops, th, tw, tf, tc, e))
    raise ValueError(f"no tile layout for kernel kind {kind!r}")


#: Shared-memory buffers of the fused kernels start on 128-byte boundaries.
SMEM_ALIGN = 128


def _rup(a: int, b: int) -> int:
    return -(-a // b) * b


def _aligned(nbytes: int) -> int:
    """`nbytes` rounded up to a whole SMEM_ALIGN (where each shared-memory buffer starts)."""
    return _rup(nbytes, SMEM_ALIGN)


def fused_smem_layout(kind: str, ops: Sequence[Op], tile: Tile, dtype: str) -> dict[str, int]:
    """Bytes of each shared-memory buffer of a fused kernel (kernels/fused_<kind>.cu), in order.

    Exactly the kernels' layout: GEMM operands are At[K][M+8] (weights, transposed) and B[K][N+8]
    (activations) with K padded to 16, M (filters) to 16 and N (pixels) to 8, buffers 128-byte
    aligned; the fp32 communication buffers are [rows][N+8]. Every kind streams its chunks through a
    `fused_stages`-deep "ring" (pw_dw, dw_pw: halo window and PW weights, dw_pw also DW weights and
    biases; pw_pw, pw_dw_pw: the weights of both PWs, pw_dw_pw also DW weights and biases); pw_pw
    and pw_dw_pw stage their input "xs" once, after the ring. "staging" (the fp32 final-output tile)
    aliases the others from offset 0, so the block needs max(sum of the rest, staging).
    """
    return _fused_smem_layout(kind, ops, tile.th, tile.tw, tile.tf, tile.tc, dtype_bytes(dtype))


def _fused_smem_layout(kind: str, ops: Sequence[Op], th: int, tw: int, tf: int, tc: int, e: int) -> dict[str, int]:
    a = _aligned
    kp, mp, np_ = -(-tc // 16) * 16, -(-tf // 16) * 16, -(-(th * tw) // 8) * 8
    if kind == "pw_dw":
        hh, ww = _halo(kind, ops, th, tw)
        kh, kw = ops[1].kernel
        n1p = _rup(hh * staged_window_width(ww, e), 8)
        return {"ring": _ring_bytes(kind, ops, th, tw, tf, tc, e), "cs": a(mp * (n1p + 8) * ACC_BYTES),
                "wd": a(tf * (kh * kw + 1) * ACC_BYTES)}
    if kind == "dw_pw":
        return {"ring": _ring_bytes(kind, ops, th, tw, tf, tc, e), "ds": a(kp * (np_ + 8) * e),
                "staging": a(mp * (np_ + 8) * ACC_BYTES)}
    c1p = _rup(ops[0].c_in, 16)
    if kind == "pw_pw":
        # ms: the fp16 copy of the mid channels (fp32 storage stages them in mf itself)
        return {"ring": _ring_bytes(kind, ops, th, tw, tf, tc, e), "xs": a(c1p * (np_ + 8) * e),
                "mf": a(kp * (np_ + 8) * ACC_BYTES), "ms": a(kp * (np_ + 8) * e) if e == 2 else 0,
                "staging": a(mp * (np_ + 8) * ACC_BYTES)}
    if kind == "pw_dw_pw":
        hh, ww = _halo(kind, ops, th, tw)
        n1p = _rup(hh * staged_window_width(ww, e), 8)
        return {"ring": _ring_bytes(kind, ops, th, tw, tf, tc, e), "xs": a(c1p * (n1p + 8) * e),
                "e": a(kp * (n1p + 8) * ACC_BYTES), "ds": a(kp * (np_ + 8) * e),
                "staging": a(mp * (np_ + 8) * ACC_BYTES)}
    raise ValueError(f"{kind!r} is not a fused kernel kind: use one of {', '.join(FUSED_KINDS)}")


def staged_window_width(ww: int, e: int) -> int:
    """Columns of a halo row as the pw_dw, dw_pw and pw_dw_pw kernels stage it: fp16 rows start at an
    even map column and hold whole 4-byte pairs (kernels/fused_*.cu WWA)."""
    return ww if e == 4 else _rup(ww + 1, 2)


def _dw_pw_stage_bytes(ops: Sequence[Op], th: int, tw: int, tf: int, tc: int, e: int) -> int:
    """One stage of the dw_pw ring: halo window tc x hh x WWA (dtype), DW weights and biases
    tc x (kh kw + 1) (fp32), PW weights At[kp][mp + 8] (dtype), each 128-byte aligned."""
    a = _aligned
    hh, ww = _halo("dw_pw", ops, th, tw)
    kh, kw = ops[0].kernel
    kp, mp = _rup(tc, 16), _rup(tf, 16)
    return a(tc * hh * staged_window_width(ww, e) * e) + a(tc * (kh * kw + 1) * ACC_BYTES) + a(kp * (mp + 8) * e)


def _pw_dw_stage_bytes(ops: Sequence[Op], th: int, tw: int, tf: int, tc: int, e: int) -> int:
    """One stage of the pw_dw ring: halo window Xs[kp][n1p + 8] with rows of the staged width, and PW
    weights At[kp][mp + 8], both in the dtype and 128-byte aligned."""
    hh, ww = _halo("pw_dw", ops, th, tw)
    kp, mp = _rup(tc, 16), _rup(tf, 16)
    n1p = _rup(hh * staged_window_width(ww, e), 8)
    return _aligned(kp * (n1p + 8) * e) + _aligned(kp * (mp + 8) * e)


def _pw_pw_stage_bytes(ops: Sequence[Op], th: int, tw: int, tf: int, tc: int, e: int) -> int:
    """One stage of the pw_pw ring: the first PW's weight chunk At[c1p][kp + 8] and the second's
    At[kp][mp + 8], both in the dtype and 128-byte aligned (c1p = C1 rounded up to 16)."""
    c1p, kp, mp = _rup(ops[0].c_in, 16), _rup(tc, 16), _rup(tf, 16)
    return _aligned(c1p * (kp + 8) * e) + _aligned(kp * (mp + 8) * e)


def _pw_dw_pw_stage_bytes(ops: Sequence[Op], th: int, tw: int, tf: int, tc: int, e: int) -> int:
    """One stage of the pw_dw_pw ring: the expansion's weight chunk At[c1p][kp + 8] (dtype), the DW
    weights and biases of the chunk tc x (kh kw + 1) (fp32) and the projection's At[kp][mp + 8]
    (dtype), each 128-byte aligned."""
    kh, kw = ops[1].kernel
    c1p, kp, mp = _rup(ops[0].c_in, 16), _rup(tc, 16), _rup(tf, 16)
    return _aligned(c1p * (kp + 8) * e) + _aligned(tc * (kh * kw + 1) * ACC_BYTES) + _aligned(kp * (mp + 8) * e)


#: One ring stage's bytes of each fused kind, (ops, th, tw, tf, tc, element bytes) -> bytes.
_STAGE_BYTES = {"pw_dw": _pw_dw_stage_bytes, "dw_pw": _dw_pw_stage_bytes, "pw_pw": _pw_pw_stage_bytes,
                "pw_dw_pw": _pw_dw_pw_stage_bytes}


def _ring_bytes(kind: str, ops: Sequence[Op], th: int, tw: int, tf: int, tc: int, e: int) -> int:
    """Shared memory of a fused kind's whole ring: its depth (`_ring_depth`) times one stage."""
    stage = _STAGE_BYTES[kind](ops, th, tw, tf, tc, e)
    return _ring_depth(kind, ops, tc, stage) * stage


def _ring_depth(kind: str, ops: Sequence[Op], tc: int, stage: int) -> int:
    """`ring_stages` of a stage, and for pw_dw and dw_pw (whose chunks run over the first op's input
    channels) no more stages than chunks: a 24-channel input in chunks of 32 is one chunk, and a
    second stage would only take shared memory (and resident blocks) from the SM."""
    depth = ring_stages(stage)
    if kind in ("pw_dw", "dw_pw"):
        depth = min(depth, max(1, -(-ops[0].c_in // tc)))
    return depth


def ring_stages(stage: int) -> int:
    """Ring depth of the fused kernels for a stage of `stage` bytes (kernels/fused_*.cu STAGES): as
    many as fit in FUSED_RING_BYTES, between FUSED_MIN_STAGES and FUSED_MAX_STAGES; a stage larger
    than FUSED_RING_BYTES alone runs single-buffered (1: its copies do not overlap the math), so that
    wide layers (a 960- or 1152-channel PW input chunk) still have a feasible tile."""
    if stage > FUSED_RING_BYTES:
        return 1
    return max(FUSED_MIN_STAGES, min(FUSED_MAX_STAGES, FUSED_RING_BYTES // stage))


def fused_stages(kind: str, ops: Sequence[Op], tile: Tile, dtype: str) -> int:
    """Ring depth of a fused kernel (kernels/fused_<kind>.cu STAGES): its block keeps stages - 1
    chunks in flight (pw_dw, dw_pw: at most one stage per chunk)."""
    if kind not in _STAGE_BYTES:
        raise ValueError(f"{kind!r} is not a fused kernel kind: use one of {', '.join(FUSED_KINDS)}")
    return _ring_depth(kind, ops, tile.tc, _STAGE_BYTES[kind](ops, tile.th, tile.tw, tile.tf, tile.tc, dtype_bytes(dtype)))


def cluster_split(kind: str, ops: Sequence[Op], tile: Tile, batch: int, gpu, dtype: str = "fp32") -> int:
    """Blocks of a thread-block cluster that share one output tile, each reducing every KS-th channel
    chunk (KS of kernels/fused_dw_pw.cu and kernels/pw.cu): the largest power of two up to
    MAX_CLUSTER_SPLIT that leaves every block MIN_SPLIT_CHUNKS chunks and keeps the grid within
    CLUSTER_FILL blocks per SM of `gpu` (a GpuSpec). pw/linear split only reductions of
    LBL_SPLIT_MIN_CHANNELS or more, and only while the fp32 partial tile fits in the `dtype` ring it
    aliases (`split_partial_bytes`). 1 for the other kinds and before compute capability 9.0 (no
    clusters)."""
    if kind not in SPLIT_KINDS or int(gpu.compute_capability.split(".")[0]) < 9:
        return 1
    if kind in ("pw", "linear") and (ops[0].c_in < LBL_SPLIT_MIN_CHANNELS
                                     or split_partial_bytes(tile) > smem_bytes(kind, ops, tile, dtype)):
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


def split_partial_bytes(tile: Tile) -> int:
    """Bytes of a split pw/linear block's fp32 partial tile, Ps[tf][th*tw + PW_PPAD] (kernels/pw.cu)."""
    return tile.tf * (tile.th * tile.tw + PW_PPAD) * ACC_BYTES


def fused_smem_total(layout: dict[str, int]) -> int:
    """Bytes a fused kernel's block needs: its buffers back to back, or the aliased staging tile."""
    staging = layout.get("staging", 0)
    return max(sum(layout.values()) - staging, staging)


def fused_shape_reason(kind: str, ops: Sequence[Op]) -> str | None:
    """Why the fused kernels cannot run this group at all (any tile), or None."""
    for op, k in zip(ops, kind.split("_"), strict=False):
        if k == "pw" and op.kind == "pw" and (tuple(op.stride) != (1, 1) or any(op.pads)):
            return f"fused kernels need stride-1 unpadded pointwise members ({op.name} has stride {op.stride}); run it unfused"
        if k == "dw" and op.multiplier != 1:
            return f"fused kernels need a depthwise channel multiplier of 1 ({op.name} has {op.multiplier}); run it unfused"
    return None


def regs_per_thread(kind: str, tile: Tile, dtype: str) -> int:
    """Registers per thread the `kind` kernel of `tile` compiles to (`registers.allocated`)."""
    return registers.allocated(kind, tile, dtype)


def out_channels(kind: str, ops: Sequence[Op]) -> int:
    return _last(ops).c_out


def check(kind: str, ops: Sequence[Op], tile: Tile, dtype: str, gpu) -> str | None:
    """Why `tile` cannot run for this kernel on `gpu`, or None when it can.

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
    if kind == "dw" and tile.tc != tile.tf:
        return f"dw tile needs tc == tf (got tc={tile.tc}, tf={tile.tf})"
    if tile.threads > gpu.max_threads_per_block:
        return f"{tile.threads} threads exceed the {gpu.max_threads_per_block} per block of {gpu.name}"
    if tile.threads % 32:
        return f"{tile.threads} threads is not a whole number of warps"
    work = tile.tf * tile.th * tile.tw
    if work % tile.threads and kind not in UNEVEN_KINDS:
        return f"{work} outputs per block do not split evenly over {tile.threads} threads"
    if kind in FUSED_KINDS and (why := fused_shape_reason(kind, ops)):
        return why
    smem = smem_bytes(kind, ops, tile, dtype)
    if smem > gpu.smem_per_block_bytes:
        return f"needs {smem} B of shared memory per block, {gpu.name} allows {gpu.smem_per_block_bytes} B"
    regs = registers.wanted(kind, tile, dtype)  # within the ceiling, what the compiler allocates
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
    if kind == "linear":
        ths, tws = _sizes(ho, (8, 16, 32, 64, 128)), [1]
    else:
        ths, tws = _sizes(ho, (1, 2, 4, 8, 16, 32)), _sizes(wo, (4, 8, 16, 32))
    tfs = sorted({f for f in (8, 16, 32, 64, 128, 256) if f <= cout} | {cout} if cout <= 512 else {8, 16, 32, 64, 128, 256})
    tcs = [c for c in (8, 16, 32, 64)]
    return ths, tws, tfs, tcs


def candidate_grid(kind: str, ops: Sequence[Op]) -> list[Tile]:
    """The candidate set before feasibility, in search order: every (th, tw, tf, tc, threads) of
    `_grid_sizes` x THREADS with th x tw <= 1024 pixels (tc == tf for dw)."""
    ths, tws, tfs, tcs = _grid_sizes(kind, ops)
    return [
        Tile(th, tw, tf, tc, threads)
        for th in ths
        for tw in tws
        if th * tw <= 1024
        for tf in tfs
        for tc in ([tf] if kind == "dw" else tcs)
        for threads in THREADS
    ]


def candidates(kind: str, ops: Sequence[Op], dtype: str, gpu) -> list[Tile]:
    """The candidate tiles the planner searches for a kernel of `kind` over `ops`, feasible ones only.

    Spatial sizes are powers of two plus divisors of the output map (e.g. 7, 14, 28) and the whole
    map when small; filter tiles include all filters; channel chunks 8..64. The tiles of
    `candidate_grid` that `check` accepts and whose threads split their outputs evenly, in the same
    order; where there is none, for a kind in UNEVEN_KINDS, the uneven tiles `check` accepts (threads
    past the outputs idle) instead.
    """
    return [t for t, _, _ in feasible_candidates(kind, ops, dtype, gpu)]


def feasible_candidates(kind: str, ops: Sequence[Op], dtype: str, gpu) -> list[tuple[Tile, int, int]]:
    """`candidates` with each tile's shared memory (`smem_bytes`) and registers per thread
    (`regs_per_thread`), which the cost model needs again.

    The same tests as `check`, in a loop that evaluates each once where it can: the group-level
    ones (output map and channels, fused shape rules) once per group, shared memory (which does not
    depend on the thread count) once per (th, tw, tf, tc), the rest per tile.
    """
    if kind in FUSED_KINDS and fused_shape_reason(kind, ops):
        return []
    out = _feasible(kind, ops, dtype, gpu, even=True)
    if not out and kind in UNEVEN_KINDS:
        out = _feasible(kind, ops, dtype, gpu, even=False)
    return out


def _feasible(kind: str, ops: Sequence[Op], dtype: str, gpu, even: bool) -> list[tuple[Tile, int, int]]:
    """`feasible_candidates` of the even tiles (the threads divide the outputs) or the uneven ones."""
    ths, tws, tfs, tcs = _grid_sizes(kind, ops)
    ho, wo = _last(ops).hw_out
    cout = out_channels(kind, ops)
    max_threads, smem_limit, regs_sm = gpu.max_threads_per_block, gpu.smem_per_block_bytes, gpu.regs_per_sm
    threads_ok = [n for n in THREADS if n >= 1 and n <= max_threads and n % 32 == 0]
    dw = kind == "dw"
    e = dtype_bytes(dtype)
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
                for tc in ([tf] if dw else tcs):
                    if tc < 1:
                        continue
                    smem = _smem_bytes(kind, ops, th, tw, tf, tc, e)
                    if smem > smem_limit:
                        continue
                    for threads in fits:
                        tile = Tile(th, tw, tf, tc, threads)
                        regs = registers.wanted(kind, tile, dtype)
                        if regs > registers.MAX_REGS_PER_THREAD:
                            continue
                        if regs * threads <= regs_sm:
                            append((tile, smem, regs))
    return out


# ---- block GEMMs and their work split (kernels/fused_common.cuh: G*M, G*N, ME*, NE*) --------------


class BlockGemm(NamedTuple):
    """One block GEMM of a fused kernel's chunk, C[m][n] (+)= sum_k At[k][m] B[k][n]: real extents m x n,
    shared buffers padded to mp (multiple of 16) x np_ (multiple of 8); k the reduction of the exact
    fp32 path, kp the tensor cores' (padded to 16); `resident`: accumulators stay in registers over
    the chunks (the last PW), else the product is streamed to shared memory."""

    m: int
    n: int
    mp: int
    np_: int
    k: int
    kp: int
    resident: bool


def block_gemms(kind: str, ops: Sequence[Op], tile: Tile, e: int) -> dict[str, BlockGemm]:
    """The block GEMMs of one channel chunk of a fused kind, by define prefix ("1": the first PW over
    the tile or staged window, "2": the last PW into the output tile), for element size `e`: what the
    launcher compiles (kernels.fused.kernel_defines) and what the cost model charges
    (cost.fused.issued_per_block)."""
    p, kp, mp = tile.th * tile.tw, _rup(tile.tc, 16), _rup(tile.tf, 16)
    out = {}
    if kind in ("pw_dw", "pw_dw_pw"):
        hh, ww = halo_window(kind, ops, tile)
        n1 = hh * staged_window_width(ww, e)
    if kind == "pw_dw":
        out["1"] = BlockGemm(tile.tf, n1, mp, _rup(n1, 8), tile.tc, kp, False)
    elif kind in ("pw_pw", "pw_dw_pw"):
        n = p if kind == "pw_pw" else n1
        c1 = ops[0].c_in
        out["1"] = BlockGemm(tile.tc, n, kp, _rup(n, 8), c1, _rup(c1, 16), False)
    if kind != "pw_dw":
        out["2"] = BlockGemm(tile.tf, p, mp, _rup(p, 8), tile.tc, kp, True)
    return out


def dw_rows_per_item(nch: int, th: int, tw: int, threads: int) -> int:
    """Output rows one thread item of a fused kernel's DW stencil covers (the DWV define of
    kernels/fused_*.cu, dw_window): 4, 2 or 1, the most that divides th and still gives every thread of
    the block an item. The launcher (kernels.fused.kernel_defines) and the cost model
    (cost.fused._dw_issue) both read it here."""
    for v in (4, 2):
        if th % v == 0 and nch * (th // v) * tw >= threads:
            return v
    return 1


def dw_lbl_rows_per_item(tf: int, th: int, tw: int, threads: int) -> int:
    """Output rows one thread item of the layer-by-layer DW kernel covers (the V define of
    kernels/dw.cu): 4, 2 or 1, the most that divides th and splits the tile's items evenly over the
    block's threads. The launcher (kernels.lbl) and the cost model (cost.dw) both read it here."""
    return next((v for v in (4, 2) if th % v == 0 and (tf * (th // v) * tw) % threads == 0), 1)


def output_rows_per_item(kind: str, tile: Tile) -> int:
    """Output rows a thread item stores one after another (`cost.requests.tile_write_sectors`): the
    DW stencil's V of the dw and pw_dw kernels, 1 for the kinds that store a staged tile."""
    if kind == "dw":
        return dw_lbl_rows_per_item(tile.tf, tile.th, tile.tw, tile.threads)
    if kind == "pw_dw":
        return dw_rows_per_item(tile.tf, tile.th, tile.tw, tile.threads)
    return 1


def store_key(kind: str, tile: Tile) -> int:
    """What besides th, tw, tf and tc sets a tile's output stores (`cost.best_tile` shares one `Work`
    between tiles of equal key): the rows a thread item stores (`output_rows_per_item`), or for the
    pw/linear kernel, whose warp grid or register block follows its threads, the threads."""
    return tile.threads if kind in ("pw", "linear") else output_rows_per_item(kind, tile)


#: Accumulator registers per thread above which a work split is penalised (spills follow).
MAX_ACC = 128


@lru_cache(maxsize=8192)
def fma_group(m: int, n: int, threads: int, resident: bool) -> tuple[int, int, int, int]:
    """(GM, GN, ME, NE): each thread's register micro-tile GM x GN for an m x n exact-fp32 GEMM and
    the covered extents (m, n rounded up to GM, GN). Minimises per-thread FMAs plus shared loads."""
    best = None
    for gm in (1, 2, 4, 8):
        for gn in (1, 2, 4, 8):
            if gm * gn > 32:
                continue
            me, ne = _rup(m, gm), _rup(n, gn)
            mt = math.ceil((me // gm) * (ne // gn) / threads)
            cost = mt * (gm * gn + 0.5 * (math.ceil(gm / 4) + math.ceil(gn / 4)))
            if resident and mt * gm * gn > MAX_ACC:
                cost *= 4
            if best is None or cost < best[0]:
                best = (cost, (gm, gn, me, ne))
    return best[1]


@lru_cache(maxsize=8192)
def mma_group(m: int, n: int, warps: int, resident: bool) -> tuple[int, int, int, int]:
    """(GM, GN, ME, NE): each warp's tile of 16 x 8 mma tiles over an m x n GEMM (m a multiple of 16,
    n of 8). Minimises mma instructions per warp plus fragment loads."""
    tm, tn = m // 16, n // 8
    best = None
    for mi in (d for d in (1, 2, 4) if tm % d == 0):
        for ni in (d for d in range(1, 9) if tn % d == 0):
            mt = math.ceil((tm // mi) * (tn // ni) / warps)
            cost = mt * (mi * ni + 0.5 * (mi + 0.5 * ni))
            if resident and mt * mi * ni * 4 > MAX_ACC:
                cost *= 4
            if best is None or cost < best[0]:
                best = (cost, (16 * mi, 8 * ni, m, n))
    return best[1]


# ---- exact-fp32 register block of the pw/linear kernel (kernels/pw.cu USE_TC 0) ----------------------
#: Share of a block's pixel slots the exact-fp32 register blocks may leave past the tile (kernels/pw.cu
#: USE_TC 0, when the threads along pixels do not divide the tile's pixels).
FMA_MAX_IDLE = 0.25

#: Input channels from which an exact-fp32 tile reads pixels in runs (kernels/pw.cu PVEC) even where
#: its output rows cannot take the runs as vector stores: those outputs are then stored element by
#: element, 2-4 words apart across a warp (2-4x the L2 write sectors of coalesced stores), which
#: only a deep reduction's saved shared-memory reads outweigh.
PVEC_SCATTER_MIN_CIN = 128


class FmaSplit(NamedTuple):
    """How the pw kernel's exact-fp32 path spreads a tile over its threads: A_THR threads along the
    filters (each RF = tf / A_THR of them), B = threads / A_THR along the pixels (each RP = ceil(p / B)
    slots), weights read KVEC channels at a time, pixels in runs of PVEC; `cycles`: its issue cycles per
    useful output and channel (`fma_cycles`)."""

    a_thr: int
    kvec: int
    pvec: int
    cycles: float


def pixel_vector(rp: int, b: int, xld: int, widths: Sequence[int] = (4, 2)) -> int:
    """Pixels a thread of the exact-fp32 register block reads at a time (kernels/pw.cu PVEC): the first
    of `widths` that divides its RP pixel slots and the row of `xld` words (so the reads stay aligned)
    with the block's b * rp pixel slots inside that padded row; otherwise 1 (single pixels)."""
    for pv in widths:
        if rp % pv == 0 and xld % pv == 0 and b * rp <= xld:
            return pv
    return 1


def fma_cycles(rf: int, rp: int, b: int, p: int, kv: int = 1, pv: int = 1) -> float:
    """Cycles per useful output and channel of an RF x RP register block with `b` threads along the
    tile's `p` pixels, the larger of its shared-memory wavefronts and its issue slots per warp and
    channel. A warp holds `rows` = 32 / b filter rows (padded 4 words apart: 8 per wavefront) and
    min(32, b) pixel threads: the weights take rf * ceil(rows / 8) wavefronts per kv channels (kv = 4:
    one float4 per filter), the pixels rp / pv loads of min(32, b) * pv words (a wavefront moves 32);
    the SM issues 4 warp instructions (loads and FMAs alike) per cycle. A thread's useful outputs are
    rf * p / b (slots past the tile are not). A perfect block (no loads, no idle slots) takes 1/4."""
    rows = max(1, 32 // b)
    wavefronts = rf * math.ceil(rows / 8) / kv + rp / pv * math.ceil(min(32, b) * pv / 32)
    issue = (rf / kv + rp / pv + rf * rp) / 4
    return max(wavefronts, issue) * b / (rf * p)


@lru_cache(maxsize=8192)
def fma_map(tf: int, p: int, threads: int, vector: bool = False, xld: int = 0,
            widths: tuple[int, ...] = (4, 2)) -> FmaSplit | None:  # fmt: skip
    """The exact-fp32 register block of tf filters x p pixels over `threads`: of the splits with
    A_THR | tf and at most FMA_MAX_IDLE of the pixel slots past the tile, the fewest cycles per useful
    output (`fma_cycles`; with `vector`, weights read 4 channels at a time and pixels in runs of
    `pixel_vector(..., widths)` in rows of `xld` words); ties go to fewer idle slots, then more
    threads along pixels. None when no split qualifies (the kernel then runs FLAT)."""
    best = None
    kv = 4 if vector else 1
    for a in (d for d in range(1, threads + 1) if threads % d == 0 and tf % d == 0):
        b = threads // a
        rp = math.ceil(p / b)
        idle = b * rp - p
        if idle > FMA_MAX_IDLE * b * rp:
            continue
        pv = pixel_vector(rp, b, xld, widths) if vector else 1
        cyc = fma_cycles(tf // a, rp, b, p, kv, pv)
        score = (round(cyc, 9), idle, -b)
        if best is None or score < best[0]:
            best = (score, FmaSplit(a, kv, pv, cyc))
    return None if best is None else best[1]


@lru_cache(maxsize=8192)
def fma_split(kind: str, tile: Tile, dtype: str, wo: int = 0, c_in: int = 0) -> FmaSplit | None:
    """The register block the pw/linear kernel's FMA path (exact fp32, or no tensor-core grid) runs
    `tile` with, for NCHW maps `wo` pixels wide and `c_in` input channels: in fp32 (tc a multiple of
    4) weights read 4 channels at a time and pixels in runs whose outputs store as vectors (tile and
    map rows divisible by the run) or, from PVEC_SCATTER_MIN_CIN input channels on, element by
    element. None: no split qualifies (FLAT). The launcher reads it through `pw_variant`."""
    vector = dtype == "fp32" and tile.tc % 4 == 0
    deep = c_in >= PVEC_SCATTER_MIN_CIN
    widths = tuple(v for v in (4, 2) if kind == "pw" and (deep or (tile.tw % v == 0 and wo % v == 0)))
    return fma_map(tile.tf, tile.th * tile.tw, tile.threads, vector, tile.th * tile.tw + PW_XPAD, widths)


#: Most fp32 accumulator registers per thread the tensor-core path may use before it falls back.
MAX_MMA_ACC = 128


def mma_grid(tf: int, p: int, warps: int) -> tuple[int, int, int, int] | None:
    """(WARPS_M, WARPS_N, WM_T, WN_T) covering tf x p with 16 x 8 mma tiles, fewest tiles per warp."""
    mt_m, mt_n = math.ceil(tf / 16), math.ceil(p / 8)
    best = None
    for wm in (d for d in range(1, warps + 1) if warps % d == 0):
        wn = warps // wm
        a, b = math.ceil(mt_m / wm), math.ceil(mt_n / wn)
        score = (a * b, a + b)
        if best is None or score < best[0]:
            best = (score, (wm, wn, a, b))
    if best is None or best[1][2] * best[1][3] * 4 > MAX_MMA_ACC:
        return None
    return best[1]


def pw_variant(tile: Tile, dtype: str, precision: str, kind: str = "pw", wo: int = 0,
               c_in: int = 0) -> dict[str, int]:  # fmt: skip
    """Math-path defines of kernels/pw.cu for `tile`: USE_TC and its warp grid, or the FMA mapping
    (`fma_split`: in fp32 weights read 4 channels at a time, KVEC, and pixels in runs, PVEC)."""
    p, tf, tc, threads = tile.th * tile.tw, tile.tf, tile.tc, tile.threads
    use_tc = math_mode(dtype, precision)
    if use_tc and tc % 8 == 0 and threads % 32 == 0:
        g = mma_grid(tf, p, threads // 32)
        if g is not None:
            return {"USE_TC": use_tc, "WARPS_M": g[0], "WARPS_N": g[1], "WM_T": g[2], "WN_T": g[3]}
    s = fma_split(kind, tile, dtype, wo, c_in)
    if s is None:
        return {"USE_TC": 0, "FLAT": 1}
    return {"USE_TC": 0, "A_THR": s.a_thr, **({"KVEC": s.kvec, "PVEC": s.pvec} if s.kvec > 1 else {})}
