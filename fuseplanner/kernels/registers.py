"""Registers per thread that fuseplanner's kernels compile to, the input of the occupancy model.

The CUDA compiler, not the tile, decides a kernel's registers: it keeps the fp32 accumulators of a
thread's outputs, but also unrolled stencil taps, staged operands, tensor-core fragments and the
cluster reduction's addresses, up to the 255-register ceiling. An estimate of accumulators plus a
fixed base (`accumulators`) missed by 19 registers in median and overstated the blocks per SM of 824
of 1,970 launches on the H100 (a 256-thread exact-fp32 DW->PW block compiles to about 114 registers,
two blocks per SM, not five). `COMPILED` holds what the compiler allocates, per kernel kind and
storage dtype: a base per block size plus a slope per accumulated output, fitted by
`fuseplanner analyze registers` to the registers CuPy's NVRTC allocated to every launch of
a set of H100 sweeps (sm_90; `fuseplanner validate` records them in
`measured.kernels`). With it the implied blocks per SM match 1,628 of the 1,970 launches. The fused
rows were refitted once the fused kernels were rewritten to issue fewer instructions, on the 1,136
fused launches recorded with them (H100 sweeps of MobileNetV2, MnasNet, EfficientNet-B0, MobileViT-XXS):
blocks per SM now match 1,013 of them (808 with the earlier rows); the layer-by-layer rows (unchanged
kernels) stay as they were.

The table describes these kernels and this compiler generation: refit it after a kernel change.
Kinds and dtypes it lacks fall back to `accumulators`. TF32 shares the exact-fp32 row (the
validation runs measured exact fp32 only).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from fuseplanner.core.ir import Tile

#: Registers a thread needs beyond its accumulators in the fallback estimate.
BASE_REGS = 40
#: Hardware ceiling on registers per thread (all CUDA GPUs since Kepler).
MAX_REGS_PER_THREAD = 255

#: (kind, storage dtype) -> (registers per output a thread accumulates, {threads per block: base}).
COMPILED: dict[tuple[str, str], tuple[float, dict[int, int]]] = {
    ("dw", "fp16"): (0.21, {64: 32, 128: 32, 256: 34}),
    ("dw", "fp32"): (0.0, {64: 32, 128: 32, 256: 34}),
    ("dw_pw", "fp16"): (1.07, {64: 63, 128: 60, 256: 61}),
    ("dw_pw", "fp32"): (1.31, {64: 59, 128: 54, 256: 61}),
    ("linear", "fp16"): (2.0, {64: 46, 128: 46, 256: 46}),
    ("linear", "fp32"): (2.0, {64: 62, 128: 62, 256: 62}),
    ("pw", "fp16"): (1.52, {64: 70, 128: 70, 256: 52}),
    ("pw", "fp32"): (1.32, {64: 39, 128: 39, 256: 60}),
    ("pw_dw", "fp16"): (0.0, {64: 72, 128: 120, 256: 64}),
    ("pw_dw", "fp32"): (0.14, {64: 55, 128: 50, 256: 50}),
    ("pw_dw_pw", "fp16"): (1.24, {64: 58, 128: 55, 256: 63}),
    ("pw_dw_pw", "fp32"): (1.28, {64: 59, 128: 54, 256: 46}),
    ("pw_pw", "fp16"): (1.62, {64: 42, 128: 42, 256: 42}),
    ("pw_pw", "fp32"): (1.02, {64: 85, 128: 54, 256: 47}),
}


def outputs_per_thread(tile: Tile) -> float:
    """Final outputs each thread accumulates in registers."""
    return tile.tf * tile.th * tile.tw / tile.threads


def accumulators(tile: Tile) -> int:
    """The least a thread can run with: one register per accumulated output plus BASE_REGS. A tile
    over MAX_REGS_PER_THREAD by this count cannot run at all (`tiles.check`)."""
    return BASE_REGS + math.ceil(outputs_per_thread(tile))


def wanted(kind: str, tile: Tile, dtype: str, table: Mapping = COMPILED) -> int:
    """Registers per thread the `kind` kernel of `tile` in `dtype` storage would compile to without
    the hardware ceiling (`table` row; `accumulators` where it has none). Past MAX_REGS_PER_THREAD the
    compiler spills to local memory: on the H100, launches whose row says so ran 1.24x their predicted
    time in median (1.88x at the 90th percentile, against 1.05x and 1.32x for the others; 58 of 107
    had a stack frame, one 2,144 B deep at 32 registers that ran 6.4x), and the measured best tile of
    only one of 668 groups was one of them (data/records/h100/fit), so
    `tiles.check` refuses them."""
    row = table.get((kind, dtype))
    if row is None:
        return accumulators(tile)
    slope, base = row
    b = base.get(tile.threads)
    if b is None:
        b = sorted(base.values())[len(base) // 2]
    return math.ceil(b + slope * outputs_per_thread(tile))


def allocated(kind: str, tile: Tile, dtype: str, table: Mapping = COMPILED) -> int:
    """Registers per thread the compiler allocates to the `kind` kernel of `tile` in `dtype` storage
    (`wanted`), at most MAX_REGS_PER_THREAD."""
    return min(MAX_REGS_PER_THREAD, wanted(kind, tile, dtype, table))
