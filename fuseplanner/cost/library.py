"""Graph-context cost of the steps the executor runs in its operator library (`fuseplanner.run.ops`):
every step that is not one of fuseplanner's dw/pw/linear/fused kernels, as the kernels the library
launches for it.

`launches(op, dtype, hw)` lists those kernels (`Launch`: bytes read and written, FLOPs, the serial
chain of its busiest SM); `graph_seconds` charges each one in a CUDA graph:

    reduction:  reduce_op_floor_s + bytes / stream_bw
    any other:  max(opaque_op_floor_s, graph_kernel_tail_s + mem_latency_s + max(bytes / stream_bw,
                                                                                flops / fp32_flops, chain))

with stream_bw = `library_stream_bw_fraction` x dram_bw: the rate CuPy's generic elementwise, copy and
gather kernels move bytes in a graph replay with their operands in L2 (per-element index arithmetic
and strided access, not DRAM, bound them). What each op type launches (CuPy path, float storage):

- elementwise ops, Transpose, Slice, Gather, Expand, Tile, Cast, a merged elementwise chain: 1 kernel;
  Clip (constant bounds, a one-member elementwise chain): 1; Pow, Where, BatchNormalization: 2; Min/Max/Sum: one per input
  (Mean one more); Concat: a copy per input; Split: a copy per output.
- LayerNormalization, Softmax, LogSoftmax (last axis): one row kernel, a warp per row, 8 rows per
  256-thread block; each block makes 3 passes over its rows of `ceil(cols / 32)` dependent
  iterations: chain = waves x 3 x ceil(cols / 32) x `library_row_iter_cycles` / clock.
- reductions (`core.kinds.REDUCE_OP_TYPES`): the reduction and its copy into the output, one
  `reduce_op_floor_s` (measured on that pair) plus the input's bytes.
- MatMul (and the GEMM of a Conv): the executor's CUDA-core GEMM (`run.ops._gemm`): 64 x 64 output
  tiles per 256-thread block, K split so that tiles x splits approaches two blocks per SM (`k_split`,
  then a second kernel adds the partial sums), each block a serial loop of 16-deep K slices:
  chain = ceil(blocks / sm_count) x slices x `library_gemm_slice_cycles` / clock. One output row
  or column (m or n = 1): one warp per output (GEMV), bytes only.
- MaxPool: a padded copy (fill + copy, when padded), a copy of the first tap and a max per other tap;
  AveragePool: the padded copy, a zero fill, an add per tap, a scale and a store.
- a dense Conv the executor runs as im2col + GEMM (more than `layers.DIRECT_MAX_TERMS` products per
  output): a padded copy (when padded), the gather of the column matrix (its int64 index read), the
  GEMM (+ split sum), the folded bias add, and one elementwise kernel for its activation epilogue
  (a library step of its own, merged into one chain). A 1x1 stride-1 unpadded conv skips the pad
  and the gather.
- a dense 2-D Conv with at most `layers.DIRECT_MAX_TERMS` products per output: the direct kernel
  (`run.ops._cuda.conv2d`, one thread per output, bias folded in) reading its input and float32
  weights and writing its output, its products (a load and an FMA each) at
  `library_direct_terms_per_cycle` per SM per clock, then the activation epilogue's kernel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fuseplanner.core.ir import DTYPE_BYTES, Op
from fuseplanner.core.kinds import REDUCE_OP_TYPES
from fuseplanner.cost.layers import VIEW_OPS, runs_direct
from fuseplanner.costbase.geometry import geom
from fuseplanner.hw.spec import Hw

if TYPE_CHECKING:
    from fuseplanner.cost.execution import LaunchTerms

#: The executor GEMM's output tile (rows = columns), K slice depth, threads per block, and the blocks per
#: SM its K split aims at (`run.ops._gemm`: `_BUSY_BLOCKS` = 2 x 132 on the GPU it was written for).
GEMM_TILE, GEMM_SLICE, GEMM_BUSY_BLOCKS, GEMM_MAX_SPLITS, GEMM_MIN_SPLIT_K = 64, 16, 264, 16, 64
#: Rows per block and passes over a row of the executor's row kernels (`run.ops._rows`).
ROW_BLOCK_ROWS, ROW_PASSES, ROW_THREADS = 8, 3, 256
#: Bytes of one im2col gather index (int64).
INDEX_BYTES = 8
ROW_OPS = frozenset({"LayerNormalization", "Softmax", "LogSoftmax"})
_TWO_LAUNCH_OPS = frozenset({"Pow", "Where", "BatchNormalization"})


@dataclass(frozen=True)
class Launch:
    """One kernel the operator library launches: bytes it reads and writes, FLOPs, the serial chain of
    its busiest SM in GEMM K slices (`gemm_slices`) and row-kernel iterations (`row_iters`), and
    whether it is a reduction; `direct_terms`: the products (one load and one FMA each) of a direct conv."""

    what: str
    bytes: float
    flops: float = 0.0
    gemm_slices: int = 0
    row_iters: int = 0
    reduction: bool = False
    direct_terms: float = 0.0

    def chain_s(self, hw: Hw) -> float:
        """Seconds of the serial chain of the launch's busiest SM, or of the direct conv's products over
        all SMs."""
        chain = (self.gemm_slices * hw.library_gemm_slice_cycles + self.row_iters * hw.library_row_iter_cycles) / hw.clock_hz
        rate = hw.library_direct_terms_per_cycle * hw.sm_count * hw.clock_hz
        return max(chain, self.direct_terms / rate) if rate else chain


def stream_bw(hw: Hw) -> float:
    """Bytes/s the library's streaming kernels reach in a graph replay (module docstring)."""
    return hw.library_stream_bw_fraction * hw.dram_bw


def graph_seconds(kernels: tuple[Launch, ...], floors: LaunchTerms, hw: Hw) -> float:
    """Seconds of `kernels` back to back in a CUDA graph (module docstring); `floors`: the spec's
    graph launch terms (`execution.launch_terms`)."""
    bw, t = stream_bw(hw), 0.0
    for k in kernels:
        if k.reduction:
            t += floors.reduce_floor_s + k.bytes / bw
        else:
            body = max(k.bytes / bw, k.flops / hw.fp32_flops, k.chain_s(hw))
            t += max(floors.opaque_floor_s, floors.tail_s + hw.mem_latency_s + body)
    return t


def k_split(tiles: int, k: int) -> tuple[int, int]:
    """(splits, K per split) of the executor's GEMM (`run.ops._gemm.k_split`): tiles x splits toward
    `GEMM_BUSY_BLOCKS`, at most `GEMM_MAX_SPLITS`, no split shorter than `GEMM_MIN_SPLIT_K`, each a
    whole number of K slices."""
    want = min(max(GEMM_BUSY_BLOCKS // max(tiles, 1), 1), max(k // GEMM_MIN_SPLIT_K, 1), GEMM_MAX_SPLITS)
    slices = math.ceil(k / GEMM_SLICE)
    if want <= 1:
        return 1, slices * GEMM_SLICE
    chunk = math.ceil(math.ceil(k / want) / GEMM_SLICE) * GEMM_SLICE
    return math.ceil(k / chunk), chunk


def gemm(nb: int, m: int, n: int, k: int, e: int, hw: Hw) -> tuple[Launch, ...]:
    """The executor's `nb` products (m x k) @ (k x n) in storage of `e` bytes (module docstring)."""
    flops = 2.0 * nb * m * n * k
    operands = nb * (m * k + k * n) * e
    out = nb * m * n * e
    if m == 1 or n == 1:
        return (Launch("gemv", operands + out, flops),)
    tiles = math.ceil(n / GEMM_TILE) * math.ceil(m / GEMM_TILE) * nb
    splits, chunk = k_split(tiles, k)
    blocks = tiles * splits
    chain = math.ceil(blocks / hw.sm_count) * (chunk // GEMM_SLICE)
    if splits == 1:
        return (Launch("gemm", operands + out, flops, chain),)
    work = splits * nb * m * n * 4  # float32 partial sums
    return Launch("gemm", operands + work, flops, chain), Launch("split_sum", work + out)


def _bytes(shapes, e: int) -> float:
    return float(sum(math.prod(s) for s in shapes) * e)


def _matmul(op: Op, e: int, hw: Hw) -> tuple[Launch, ...]:
    if len(op.input_shapes) < 2:  # a constant operand the graph folded: stream it
        return (Launch("matmul", _bytes(op.input_shapes, e) + _bytes(op.output_shapes, e), float(op.flops)),)
    a, b = op.input_shapes[0], op.input_shapes[1]
    a2 = (1, *a) if len(a) == 1 else tuple(a)
    b2 = (*b, 1) if len(b) == 1 else tuple(b)
    rank = max(len(a2), len(b2)) - 2
    lead_a, lead_b = (1,) * (rank + 2 - len(a2)) + a2[:-2], (1,) * (rank + 2 - len(b2)) + b2[:-2]
    nb = math.prod(max(x, y) for x, y in zip(lead_a, lead_b, strict=True))
    return gemm(nb, a2[-2], b2[-1], a2[-1], e, hw)


def row_kernel(rows: int, cols: int, e: int, hw: Hw) -> Launch:
    """One launch of the executor's LayerNorm / Softmax row kernel (module docstring)."""
    blocks = math.ceil(rows / ROW_BLOCK_ROWS)
    waves = math.ceil(blocks / (hw.sm_count * (hw.max_threads_per_sm // ROW_THREADS)))
    return Launch("rows", 2.0 * rows * cols * e, row_iters=waves * ROW_PASSES * math.ceil(cols / hw.warp_size))


def _pool(op: Op, e: int) -> tuple[Launch, ...]:
    out = math.prod(op.out_shape)
    taps = max(1, round(op.flops / max(out, 1)))
    inner, outer = op.in_shape[2:], op.out_shape[2:]
    k = round(taps ** (1 / max(len(inner), 1)))
    strides = [max(1, round(i / o)) for i, o in zip(inner, outer, strict=True)]
    padded = any((o - 1) * s + k > i for i, o, s in zip(inner, outer, strides, strict=True))
    in_b, out_b = math.prod(op.in_shape) * e, out * e
    pad = (Launch("fill", in_b), Launch("copy", 2.0 * in_b)) if padded else ()
    if op.op_type == "MaxPool":
        return (*pad, Launch("copy", 2.0 * out_b), *(Launch("max", 3.0 * out_b) for _ in range(taps - 1)))
    f32 = out * 4
    return (*pad, Launch("fill", f32), *(Launch("add", 3.0 * f32) for _ in range(taps)), Launch("scale", 2.0 * f32),
            Launch("store", f32 + out_b))  # fmt: skip


def opaque(op: Op, e: int, hw: Hw) -> tuple[Launch, ...]:
    """The kernels the library launches for an opaque op (module docstring)."""
    t = op.op_type
    ins, outs = _bytes(op.input_shapes, e), _bytes(op.output_shapes, e)
    out0 = _bytes(op.output_shapes[:1], e)
    if t in REDUCE_OP_TYPES:
        return (Launch("reduce", ins + outs, reduction=True),)
    if t == "MatMul":
        return _matmul(op, e, hw)
    if t == "Gemm":
        return (*_matmul(op, e, hw), Launch("bias", 2.0 * out0))
    if t in ROW_OPS:
        return (row_kernel(math.prod(op.in_shape[:-1]), op.in_shape[-1], e, hw),)
    if t in ("MaxPool", "AveragePool"):
        return _pool(op, e)
    if t == "Concat":
        return tuple(Launch("copy", 2.0 * math.prod(s) * e) for s in op.input_shapes)
    if t == "Split":
        return tuple(Launch("copy", 2.0 * math.prod(s) * e) for s in op.output_shapes)
    if t == "Slice":
        return (Launch("copy", 2.0 * out0),)
    if t in _TWO_LAUNCH_OPS:
        return (Launch(t, ins + out0), Launch("store", 2.0 * out0))
    if t in ("Min", "Max", "Sum", "Mean"):
        n = len(op.input_shapes) + (1 if t == "Mean" else 0)
        return tuple(Launch(t, 3.0 * out0) for _ in range(max(n, 1)))
    return (Launch(t, ins + outs),)


def conv(op: Op, e: int, hw: Hw) -> tuple[Launch, ...]:
    """The kernels of a dense conv as the executor runs it: its direct kernel, or im2col + GEMM (module
    docstring), then its activation epilogue."""
    g = geom(op)
    cg = g.c // max(1, g.groups)
    taps = g.kh * g.kw
    n = op.batch
    npos = math.prod(op.out_shape[2:])
    mg = g.co // max(1, g.groups)
    out_b = n * g.co * npos * e
    act = [x for x in op.epilogue if x not in ("bias", "bn", "add")]
    activation = (Launch("activation", 2.0 * out_b),) if act else ()
    if runs_direct(op):
        read_b = math.prod(op.in_shape) * e + g.co * cg * taps * 4  # float32 weights
        return Launch("direct", read_b + out_b, 2.0 * n * g.co * npos * cg * taps,
                      direct_terms=float(n * g.co * npos * cg * taps)), *activation  # fmt: skip
    pointwise = taps == 1 and set(op.stride) == {1} and not any(op.pads)
    front: tuple[Launch, ...] = ()
    if not pointwise:
        h, w = op.in_shape[2:]
        padded_b = n * g.c * (h + op.pads[0] + op.pads[2]) * (w + op.pads[1] + op.pads[3]) * e
        cols_b = n * g.c * taps * npos * e
        pad = (Launch("fill", padded_b), Launch("copy", 2.0 * math.prod(op.in_shape) * e)) if any(op.pads) else ()
        front = (*pad, Launch("gather", taps * npos * INDEX_BYTES + 2.0 * cols_b))
    return (*front, *gemm(n * max(1, g.groups), mg, npos, cg * taps, e, hw), Launch("bias", 2.0 * out_b), *activation)


def launches(op: Op, dtype: str, hw: Hw) -> tuple[Launch, ...]:
    """The kernels the executor's operator library launches for `op` (batch as in its shapes); () for
    views and fuseplanner's own kernel kinds."""
    e = DTYPE_BYTES[dtype]
    if op.op_type in VIEW_OPS:
        return ()
    if op.kind == "conv":
        return conv(op, e, hw)
    if op.kind == "opaque":
        return opaque(op, e, hw)
    return ()
