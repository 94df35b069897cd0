"""Registers per thread that fuseplanner's kernels compile to, the input of the occupancy model.

The CUDA compiler, not the tile, decides a kernel's registers: it keeps the fp32 accumulators a thread
holds, but also unrolled stencil taps, staged operands, tensor-core fragments and the cluster
reduction's addresses, up to the 255-register ceiling. `COMPILED` holds what the compiler allocates,
per kernel kind and math mode (exact fp32, TF32, fp16 storage): a base per block size plus a slope per
accumulator a thread holds, the family's `accumulators` (`kernels.family`). For the layer kernels that
is the outputs a thread accumulates; for the fused kernels the accumulators of their block GEMMs as
the launcher splits them over threads or warps (`FusedFamily.accumulators`): one streamed group of a
PW->DW expansion, every resident group of the DW->PW and PW->PW products. Counted in outputs per
thread instead, a fp16 PW->DW tile that compiles to 211 registers (12 x 24 pixels x 64 channels, 112
accumulators a thread) was put at 64.

The fused rows are fitted by `scripts/compiled_registers.py fit` to 2,051 fused kernels of the six
bundled models compiled on an H100 as the runs compile them (CuPy's NVRTC and the driver, CUDA 13;
`data/records/h100/registers`): median error 6 registers over the kernels under the ceiling (12 with
the earlier per-output rows), and 149 of the 179 kernels that the compiler stopped at the ceiling want
more than 255 (96 before). Out of sample, on 2,347 kernels of the held-out models compiled the same
way (`compiled_registers.py score`): median error 6 (12 before), 115 of 164 at the ceiling (62). The
layer rows (`fuseplanner analyze registers` on the validation runs' `measured.kernels`) have no TF32
row of their own: TF32 shares the exact-fp32 row there.

The table describes these kernels and this compiler generation: refit it after a kernel change.
Kinds and modes it lacks fall back to `least`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from fuseplanner.core.ir import Tile, math_mode

#: Registers a thread needs beyond its accumulators in the fallback estimate.
BASE_REGS = 40
#: Hardware ceiling on registers per thread (all CUDA GPUs since Kepler).
MAX_REGS_PER_THREAD = 255
#: The math modes of the table's rows, by `core.ir.math_mode`: exact fp32, TF32, fp16 storage.
MODES = ("fp32", "tf32", "fp16")

#: (kind, math mode) -> (registers per accumulator a thread holds, {threads per block: base}).
COMPILED: dict[tuple[str, str], tuple[float, dict[int, int]]] = {
    ("dw", "fp16"): (0.21, {64: 32, 128: 32, 256: 34}),
    ("dw", "fp32"): (0.0, {64: 32, 128: 32, 256: 34}),
    ("linear", "fp16"): (2.0, {64: 46, 128: 46, 256: 46}),
    ("linear", "fp32"): (2.0, {64: 62, 128: 62, 256: 62}),
    ("pw", "fp16"): (1.52, {64: 70, 128: 70, 256: 52}),
    ("pw", "fp32"): (1.32, {64: 39, 128: 39, 256: 60}),
    ("dw_pw", "fp16"): (1.12, {64: 60, 128: 61, 256: 55}),
    ("dw_pw", "fp32"): (1.17, {64: 59, 128: 57, 256: 55}),
    ("dw_pw", "tf32"): (1.02, {64: 61, 128: 56, 256: 60}),
    ("pw_dw", "fp16"): (1.47, {64: 34, 128: 33, 256: 46}),
    ("pw_dw", "fp32"): (1.29, {64: 37, 128: 34, 256: 39}),
    ("pw_dw", "tf32"): (1.4, {64: 38, 128: 39, 256: 42}),
    ("pw_dw_pw", "fp16"): (1.27, {64: 42, 128: 48, 256: 44}),
    ("pw_dw_pw", "fp32"): (1.23, {64: 42, 128: 40, 256: 56}),
    ("pw_dw_pw", "tf32"): (1.14, {64: 51, 128: 48, 256: 46}),
    ("pw_pw", "fp16"): (1.12, {64: 47, 128: 56, 256: 44}),
    ("pw_pw", "fp32"): (1.1, {64: 51, 128: 54, 256: 54}),
    ("pw_pw", "tf32"): (1.02, {64: 54, 128: 52, 256: 47}),
}


def mode(dtype: str, precision: str) -> str:
    """The table's math mode of `dtype` storage at `precision` ("fp32" | "tf32" | "fp16")."""
    return MODES[math_mode(dtype, precision)]


def outputs_per_thread(tile: Tile) -> float:
    """Final outputs each thread accumulates in registers (the layer kernels' accumulators)."""
    return tile.tf * tile.th * tile.tw / tile.threads


def least(acc: float) -> int:
    """The fallback estimate: one register per accumulator plus BASE_REGS."""
    return BASE_REGS + math.ceil(acc)


def row(kind: str, mode_: str, table: Mapping = COMPILED) -> tuple[float, Mapping[int, int]] | None:
    """The table's (slope, bases) of `kind` in math mode `mode_`; TF32 without a row of its own
    shares the exact-fp32 row (the layer kernels' rows); None when the table has neither."""
    hit = table.get((kind, mode_))
    if hit is None and mode_ == "tf32":
        hit = table.get((kind, "fp32"))
    return hit


def wanted(kind: str, mode_: str, threads: int, acc: float, table: Mapping = COMPILED) -> int:
    """Registers per thread a `kind` kernel of `threads` threads whose threads hold `acc` accumulators
    (its family's `accumulators`) would compile to in math mode `mode_` without the hardware ceiling:
    the table row (`least` where it has none). Past MAX_REGS_PER_THREAD the
    compiler spills to local memory: on the H100, launches whose row says so ran 1.24x their predicted
    time in median (1.88x at the 90th percentile, against 1.05x and 1.32x for the others; 58 of 107
    had a stack frame, one 2,144 B deep at 32 registers that ran 6.4x), and the measured best tile of
    only one of 668 groups was one of them (data/records/h100/fit), so
    `tiles.check` refuses them."""
    hit = row(kind, mode_, table)
    if hit is None:
        return least(acc)
    slope, base = hit
    b = base.get(threads)
    if b is None:
        b = sorted(base.values())[len(base) // 2]
    return math.ceil(b + slope * acc)


def allocated(kind: str, mode_: str, threads: int, acc: float, table: Mapping = COMPILED) -> int:
    """Registers per thread the compiler allocates (`wanted`), at most MAX_REGS_PER_THREAD."""
    return min(MAX_REGS_PER_THREAD, wanted(kind, mode_, threads, acc, table))
