"""TF32 rounding, one definition for the host reference (NumPy) and the kernels' launchers (CuPy)."""

from __future__ import annotations


def tf32_rounded(xp, a):
    """float32 array `a` rounded to TF32 (10 mantissa bits; to nearest, ties away from zero, as
    cvt.rna.tf32.f32 does), as float32, with array module `xp` (numpy or cupy): what the tensor cores
    read from such values. Sign and exponent pass through; the carry of a mantissa that rounds up
    moves into the exponent (the next power of two), as the hardware does."""
    bits = xp.ascontiguousarray(a, dtype=xp.float32).view(xp.uint32)
    return ((bits + xp.uint32(0x1000)) & xp.uint32(0xFFFFE000)).view(xp.float32)
