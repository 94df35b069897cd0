"""Layer-by-layer pointwise kernels (`pw`: 1x1 conv in NCHW, `linear`: token-major matmul).

out[f, p] = sum_c W[f, c] x[c, p]. A block computes tf filters x (th x tw) pixels (linear: th tokens)
of one image, looping over the input channels in chunks of tc: per chunk it stages tc input rows of
its pixels and the tf x tc weight chunk (a multi-stage cp.async ring). So the input is read once per
filter tile (the paper's (N/f)|I| term) and the weights once per spatial tile (|W| n_h n_w), each
sector-rounded per row segment. Products run on tensor cores for fp16 (and fp32 with TF32).
"""

from __future__ import annotations

from ..ir import Tile
from .shapes import Geom
from .traffic import row_sectors, sectors
from .work import (
    PARAM_BYTES,
    KernelModel,
    Work,
    block_split_sectors,
    cdiv,
    matrix_chunk_sectors,
    out_plane_sectors,
    out_tokens_sectors,
    pw_in_sectors,
    pw_in_unique,
    tensor_bytes,
    whole_bytes,
    whole_map_out_sectors,
)


def pw_weight_sectors(g: Geom, tf: int, tc: int, we: int) -> float:
    """Sectors of all filter tiles reading their weight rows (`we` bytes each) in tc chunks, plus
    their fp32 biases. A chunk of whole rows (tc >= C) makes a filter tile's rows one contiguous run."""
    s = block_split_sectors(g.co * g.c, tf * g.c, we) if tc >= g.c else matrix_chunk_sectors(g.co, g.c, tc, we)
    return s + block_split_sectors(g.co, tf, PARAM_BYTES) if g.bias else s


def pw_weight_unique(g: Geom, we: int) -> float:
    """Bytes of the PW/linear weight matrix (`we` bytes per element) and fp32 bias, whole sectors."""
    return 32.0 * (sectors(g.co * g.c * we) + (sectors(g.co * PARAM_BYTES) if g.bias else 0))


def input_unique(g: Geom, e: int, b: int) -> float:
    """Distinct input bytes of a PW/linear op over the batch."""
    if g.tokens_major:
        return tensor_bytes(b * g.h * g.c, e)
    return whole_bytes(b * g.c * pw_in_unique(g, e))


class PwModel(KernelModel):
    """`pw` and `linear` (token-major when the op is linear)."""

    def setup(self) -> None:
        g, e = self.gs[0], self.e
        self.w_unique = pw_weight_unique(g, e)
        self.flops = 2.0 * g.macs

    def spatial(self, th: int, tw: int) -> tuple:
        g, e = self.gs[0], self.e
        if g.tokens_major:
            return cdiv(g.ho, th), 0.0, 0.0
        return cdiv(g.ho, th) * cdiv(g.wo, tw), g.c * pw_in_sectors(g, th, tw, e), g.co * out_plane_sectors(g, tw, e, th)

    def channel(self, tf: int, tc: int) -> tuple:
        g, e = self.gs[0], self.e
        if g.tokens_major:
            in_r = g.h * row_sectors(g.c, 0, tc, tc, cdiv(g.c, tc), e, g.c * e)
            out = out_tokens_sectors(g, tf, e)
        else:
            in_r = out = 0.0
        return cdiv(g.co, tf), pw_weight_sectors(g, tf, tc, e), in_r, out

    def combine(self, sp: tuple, ch: tuple, tile: Tile, b: int, residual: bool) -> Work:
        g, e = self.gs[0], self.e
        nsp, in_s, out_s = sp
        nf, w_sec, in_c, out_c = ch
        if nsp == 1 and not g.tokens_major and g.sh == g.sw == 1:
            # one tile covers the map (`whole_map_out_sectors`). Its reads keep the per-plane count,
            # which fitted the batch-1 counters better (docs/validation.md)
            out_s = whole_map_out_sectors(g, tile.tf, e)
        in_r = nf * (in_s + in_c)
        out = out_s + out_c
        out_u = tensor_bytes(b * g.out_elems, e)
        return Work(
            gma_read=32.0 * b * (in_r + nsp * w_sec + (out if residual else 0.0)),
            gma_write=32.0 * b * out,
            in_unique=input_unique(g, e, b),
            w_unique=self.w_unique,
            res_unique=out_u if residual else 0.0,
            out_unique=out_u,
            in_img=g.in_elems * e,
            out_img=g.out_elems * e,
            useful_flops=b * self.flops,
            cuda_flops=0.0,
            mma_flops=b * self.flops,
            iters=cdiv(g.c, tile.tc),
            blocks=nsp * nf * b,
            nf=nf,
            nsp=nsp,
            w_read=32.0 * b * nsp * w_sec,
            in_read=32.0 * b * in_r,
        )
