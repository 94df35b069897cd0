"""Costs of ops that run without a planned tile: dense convs (e.g. the stem), opaque nodes, views.

- Shape-only ops (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout at inference, Shape,
  Constant) are views or metadata in an inference runtime: zero traffic, zero launches.
- A dense `conv` is assumed to run as a library implicit-GEMM kernel that reads its input and
  weights once and writes its output once (L2-level = sector-rounded tensor sizes); its FLOPs go to
  the tensor-core rate of the dtype (fp32 uses TF32 only with precision="tf32").
- An opaque node (Add, Concat, Pool, Softmax, LayerNorm, ...) streams its inputs and outputs once on
  CUDA cores.
- A dw/pw/linear op gets the cost of its fastest feasible candidate tile.

Times use `time.stream_time`: launch + max(L2 bytes / l2_bw, DRAM bytes / dram_bw, flops / rate) + one
memory latency.
"""

from __future__ import annotations

import math

from fuseplanner.core.ir import DTYPE_BYTES, ONNX_TO_DTYPE, Cost, Op
from fuseplanner.cost.time import mma_rate, stream_time
from fuseplanner.costbase.geometry import geom
from fuseplanner.costbase.traffic import dram_write_bytes, sectors
from fuseplanner.hw.spec import GpuSpec

VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", "Shape", "Constant"})


def _per_image(shapes: tuple[tuple[int, ...], ...], op: Op) -> float:
    """Elements per image of the given activation shapes (leading dim = op's batch)."""
    nb = max(1, op.batch)
    return sum(math.prod(s) for s in shapes) / nb


def stream_cost(op: Op, dtype: str, batch: int, gpu: GpuSpec, precision: str = "fp32") -> Cost:
    """Cost of a conv or opaque op that streams its operands once."""
    if op.op_type in VIEW_OPS:
        return Cost()
    hw = gpu.hw
    e = DTYPE_BYTES[dtype]
    src_e = DTYPE_BYTES.get(ONNX_TO_DTYPE.get(op.dtype, "fp32"), 4)
    in_b = 32 * sectors(_per_image(op.input_shapes, op) * batch * e)
    out_b = 32 * sectors(_per_image(op.output_shapes, op) * batch * e)
    w_b = 32 * sectors(op.weight_bytes / src_e * e)
    if op.kind == "conv":
        flops = 2.0 * batch * geom(op).macs
        rate = mma_rate(dtype, precision, hw)
    else:
        flops = op.flops / max(1, op.batch) * batch
        rate = hw.fp32_flops
    cap = hw.l2_bytes * hw.l2_usable_fraction
    dram_w = dram_write_bytes(out_b, in_b + w_b + out_b, cap)
    return Cost(
        gma_read_bytes=in_b + w_b,
        gma_write_bytes=out_b,
        dram_read_bytes=in_b + w_b,
        dram_write_bytes=dram_w,
        flops=flops,
        time_s=stream_time(in_b + w_b + out_b, in_b + w_b + dram_w, flops, hw, rate),
        launches=1,
    )
