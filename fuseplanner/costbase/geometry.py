"""Per-image geometry of an op as plain integers, the form the cost formulas use.

Batch is not taken from the op's shapes: every cost function gets it explicitly. For `linear` the
"map" is tokens x 1 (H = tokens per image, `Op.hw_in`, W = 1: a ViT hybrid's patch-pixel
sequences of one image count together) and the tensor layout is token-major (..., C); convolutions
are NCHW.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from fuseplanner.core.ir import Op

#: Epilogue names that make the kernel read a per-channel bias (folded BatchNorm becomes a bias).
BIAS_EPILOGUES = ("bias", "bn")


class Geom(NamedTuple):
    """Shape of one op for one image: input C x H x W, output CO x HO x WO, window and padding."""

    c: int
    h: int
    w: int
    co: int
    ho: int
    wo: int
    kh: int
    kw: int
    sh: int
    sw: int
    pt: int
    pl: int
    dil_h: int
    dil_w: int
    bias: bool
    tokens_major: bool
    depthwise: bool
    groups: int = 1

    @property
    def in_elems(self) -> int:
        return self.c * self.h * self.w

    @property
    def out_elems(self) -> int:
        return self.co * self.ho * self.wo

    @property
    def weight_elems(self) -> int:
        """Weights: DW co x kh x kw; PW/linear co x c; dense conv co x (c / groups) x kh x kw."""
        return self.co * self.kh * self.kw * (1 if self.depthwise else self.c // self.groups)

    @property
    def macs(self) -> int:
        """Multiply-accumulates of the op for one image."""
        return self.out_elems * self.kh * self.kw * (1 if self.depthwise else self.c // self.groups)


@lru_cache(maxsize=4096)
def geom(op: Op) -> Geom:
    """Geometry of a dw, pw, conv or linear op (per image)."""
    bias = op.has_bias or any(x in op.epilogue for x in BIAS_EPILOGUES)
    if op.kind == "linear":
        t = op.hw_in[0]
        return Geom(op.c_in, t, 1, op.c_out, op.hw_out[0], 1, 1, 1, 1, 1, 0, 0, 1, 1, bias, True, False)
    (h, w), (ho, wo) = op.hw_in, op.hw_out
    kh, kw = op.kernel
    sh, sw = op.stride
    dh, dw = op.dilation
    groups = max(1, op.groups)
    return Geom(
        op.c_in, h, w, op.c_out, ho, wo, kh, kw, sh, sw, op.pads[0], op.pads[1], dh, dw, bias, False,
        op.kind == "dw", groups,
    )  # fmt: skip
