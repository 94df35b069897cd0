"""Costs of ops that run without a planned tile: dense convs (e.g. the stem), opaque nodes, views.

- Shape-only ops (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout at inference, Shape,
  Constant) are views or metadata in an inference runtime: zero traffic, zero launches.
- A dense `conv` is costed as the executor runs it (`fuseplanner.run.ops.conv`), on CUDA cores with
  float32 accumulation: a 2-D conv whose output element sums at most `DIRECT_MAX_TERMS` products
  (input channels per group x taps: stems, narrow groups) is one direct kernel that reads its input
  and weights once and writes its output once; a deeper one is im2col + GEMM: a padded copy (when
  padded: two launches), a gather that writes the column matrix (input channels x taps x output
  positions), a GEMM that reads it back, and a bias add (when biased), each a launch.
- An opaque node (Add, Concat, Pool, Softmax, LayerNorm, ...) streams its inputs and outputs once on
  CUDA cores.
- A dw/pw/linear op gets the cost of its fastest feasible candidate tile.

Times use `time.stream_time`: launch + max(L2 bytes / l2_bw, DRAM bytes / dram_bw, flops / rate) + one
memory latency.
"""

from __future__ import annotations

import math

from fuseplanner.core.ir import DTYPE_BYTES, ONNX_TO_DTYPE, Cost, Op
from fuseplanner.cost.time import stream_time
from fuseplanner.costbase.geometry import geom
from fuseplanner.costbase.traffic import dram_write_bytes, sectors
from fuseplanner.hw.spec import GpuSpec

#: The executor's direct 2-D conv kernel (`run.ops._cuda.conv2d`; `run.ops.conv` reads this) runs convs whose output element sums
#: at most this many products (input channels per group x taps); deeper ones take im2col + GEMM. Chosen
#: from the kernel's shape (a 32-channel 3x3 window per thread), not tuned on any model.
DIRECT_MAX_TERMS = 288

VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", "Shape", "Constant"})


def _per_image(shapes: tuple[tuple[int, ...], ...], op: Op) -> float:
    """Elements per image of the given activation shapes (leading dim = op's batch)."""
    nb = max(1, op.batch)
    return sum(math.prod(s) for s in shapes) / nb


def stream_cost(op: Op, dtype: str, batch: int, gpu: GpuSpec, precision: str = "fp32") -> Cost:
    """Cost of a conv or opaque op that streams its operands once."""
    if op.op_type in VIEW_OPS:
        return Cost()
    e = DTYPE_BYTES[dtype]
    src_e = DTYPE_BYTES.get(ONNX_TO_DTYPE.get(op.dtype, "fp32"), 4)
    in_b = 32 * sectors(_per_image(op.input_shapes, op) * batch * e)
    out_b = 32 * sectors(_per_image(op.output_shapes, op) * batch * e)
    w_b = 32 * sectors(op.weight_bytes / src_e * e)
    if op.kind == "conv":
        return _conv_cost(op, e, batch, gpu, in_b, out_b, w_b)
    flops = op.flops / max(1, op.batch) * batch
    return _streamed(in_b + w_b, out_b, 0.0, flops, gpu, 1)


def conv_terms(op: Op) -> int:
    """Products summed per output element of a dense conv: input channels per group x taps."""
    g = geom(op)
    return g.c // max(1, g.groups) * g.kh * g.kw


def runs_direct(op: Op) -> bool:
    """Whether the executor runs dense conv `op` on its direct kernel (2-D, at most `DIRECT_MAX_TERMS`
    products per output) rather than im2col + GEMM."""
    return len(op.kernel) == 2 and conv_terms(op) <= DIRECT_MAX_TERMS


def _conv_cost(op: Op, e: int, batch: int, gpu: GpuSpec, in_b: float, out_b: float, w_b: float) -> Cost:
    """A dense conv as the executor runs it (module docstring): direct, or im2col + GEMM."""
    g = geom(op)
    flops = 2.0 * batch * g.macs
    direct = runs_direct(op)
    pointwise = g.kh * g.kw == 1 and set(op.stride) == {1} and not any(op.pads)
    if direct or pointwise:
        return _streamed(in_b + w_b, out_b, 0.0, flops, gpu, 1)
    positions = math.prod(op.output_shapes[0][2:]) / max(1, op.batch) * batch
    col_b = 32 * sectors(g.c * g.kh * g.kw * positions * e)
    padded = any(op.pads)
    launches = 2 + (2 if padded else 0) + (1 if g.bias else 0)
    extra = col_b + (2 * in_b if padded else 0.0) + (2 * out_b if g.bias else 0.0)
    return _streamed(in_b + w_b, out_b, extra, flops, gpu, launches)


def _streamed(read_b: float, write_b: float, extra_b: float, flops: float, gpu: GpuSpec, launches: int) -> Cost:
    """`launches` kernels that read `read_b` and write `write_b` (plus `extra_b` both written and read
    back, e.g. an im2col matrix) once, `flops` on CUDA cores at the fp32 FMA rate; each launch pays the
    launch floor (`time.stream_time`)."""
    hw = gpu.hw
    cap = hw.l2_bytes * hw.l2_usable_fraction
    out = write_b + extra_b
    dram_w = dram_write_bytes(out, read_b + extra_b + out, cap)
    gma_r, gma_w = read_b + extra_b, out
    body = stream_time(gma_r + gma_w, gma_r + dram_w, flops, hw, hw.fp32_flops)
    return Cost(
        gma_read_bytes=gma_r,
        gma_write_bytes=gma_w,
        dram_read_bytes=read_b + (extra_b if extra_b > cap else 0.0),
        dram_write_bytes=dram_w,
        flops=flops,
        time_s=body + (launches - 1) * hw.launch_overhead_s,
        launches=launches,
    )
