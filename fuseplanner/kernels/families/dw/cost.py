"""Layer-by-layer depthwise conv kernel (`dw`): traffic and work for any tile.

A block computes tf channels x (th x tw) outputs of one image. It stages the halo window
((th-1)s + (k-1)d + 1) x ((tw-1)s + (k-1)d + 1) of each of its input planes in shared memory, reading
it once (sector-rounded per row segment: halo rows/columns shared with neighbouring tiles are read
again by them, and unaligned segments waste part of a sector), and its tf k x k filters. Math runs
on CUDA cores in fp32 (fp16 storage is widened).
"""

from __future__ import annotations

from fuseplanner.core.ir import Tile
from fuseplanner.costbase.geometry import Geom
from fuseplanner.costbase.requests import tile_write_sectors, window_load_sectors
from fuseplanner.costbase.traffic import sectors, span_union
from fuseplanner.costbase.work import (
    PARAM_BYTES,
    KernelModel,
    Work,
    block_split_sectors,
    cdiv,
    out_plane_sectors,
    tensor_bytes,
    whole_bytes,
    window_sectors,
    window_unique,
)
from fuseplanner.kernels import tiles


def halo(g: Geom, th: int, tw: int) -> tuple[int, int]:
    """Input window (rows, cols) of a th x tw output tile of a DW-like op."""
    return (th - 1) * g.sh + (g.kh - 1) * g.dil_h + 1, (tw - 1) * g.sw + (g.kw - 1) * g.dil_w + 1


def dw_weight_sectors(g: Geom, part: int) -> float:
    """Sectors of reading all DW filters (and biases), fp32, in parts of `part` channels."""
    k2 = g.kh * g.kw
    s = block_split_sectors(g.co * k2, part * k2, PARAM_BYTES)
    return s + block_split_sectors(g.co, part, PARAM_BYTES) if g.bias else s


def dw_weight_unique(g: Geom) -> float:
    """Bytes of the DW filters and bias (fp32), whole sectors."""
    k2 = g.kh * g.kw
    return 32.0 * (sectors(g.co * k2 * PARAM_BYTES) + (sectors(g.co * PARAM_BYTES) if g.bias else 0))


def input_planes(g: Geom, tf: int) -> int:
    """Input planes all channel tiles read together (C when tf is a multiple of the multiplier)."""
    m = max(1, g.co // g.c)
    if tf % m == 0:
        return g.c
    return min(g.co, cdiv(g.co, tf) * (cdiv(tf, m) + 1))


class DwModel(KernelModel):
    ISSUE_CAPPED = False  # the spec's SM issue cap is the pw/linear kernel's and the fused kernels'

    def setup(self) -> None:
        g = self.gs[0]
        self.w_unique = dw_weight_unique(g)
        self.flops = 2.0 * g.macs

    def spatial(self, th: int, tw: int) -> tuple:
        g, e = self.gs[0], self.e
        hh, ww = halo(g, th, tw)
        nsp = cdiv(g.ho, th) * cdiv(g.wo, tw)
        return nsp, *window_sectors(g, hh, ww, th, tw, e), window_unique(g, hh, ww, th, tw, e), out_plane_sectors(g, tw, e, th)

    def channel(self, tf: int, tc: int) -> tuple:
        g = self.gs[0]
        return cdiv(g.co, tf), input_planes(g, tf), dw_weight_sectors(g, tf)

    BOUNDED = True

    def counts(self, sp: tuple, ch: tuple) -> tuple[int, int, int, float, float]:
        return sp[0], ch[0], 1, self.flops, 0.0

    def combine(self, sp: tuple, ch: tuple, tile: Tile, b: int, residual: bool) -> Work:
        return self._combine(sp, ch, tile, b, residual, False)

    def bounded(self, sp: tuple, ch: tuple, tile: Tile, b: int, residual: bool) -> Work:
        """`combine` with the window copies' read sectors (multiplier 1) at the bytes of the input the
        windows cover and the write sectors at the output's bytes: a sector request carries at most
        32 of them, and every such byte is read or written at least once."""
        return self._combine(sp, ch, tile, b, residual, True)

    def _combine(self, sp: tuple, ch: tuple, tile: Tile, b: int, residual: bool, floor: bool) -> Work:
        g, e = self.gs[0], self.e
        nsp, in_plane, in_req, in_uniq, out_plane = sp
        nf, planes, w_sec = ch
        out = g.co * out_plane
        out_u = tensor_bytes(b * g.out_elems, e)
        read, hits = planes * in_plane, planes * (in_req - in_plane)
        if g.co == g.c:  # the kernel's mapping (channel multiplier 1): its window copies, instruction by instruction
            read, hits = (self.covered(tile) if floor else self.window_reads(tile)), 0.0
        if floor:
            written = g.out_elems * e / 32.0
        else:
            v = tiles.output_rows_per_item("dw", tile)
            written = tile_write_sectors(g.co, g.ho, g.wo, e, tile.tf, tile.th, tile.tw, v)
        return Work(
            gma_read=32.0 * b * (read + nsp * w_sec + (out if residual else 0.0)),
            gma_write=32.0 * b * written,
            in_unique=whole_bytes(b * g.c * in_uniq),
            w_unique=self.w_unique,
            res_unique=out_u if residual else 0.0,
            out_unique=out_u,
            in_img=g.in_elems * e,
            out_img=g.out_elems * e,
            useful_flops=b * self.flops,
            cuda_flops=b * self.flops,
            mma_flops=0.0,
            iters=1,
            blocks=nsp * nf * b,
            nf=nf,
            nsp=nsp,
            l1_hits=32.0 * b * hits,
            w_read=32.0 * b * nsp * w_sec,
        )

    def covered(self, tile: Tile) -> float:
        """One image's input bytes that the tile's halo windows cover, in sectors (32 bytes each)."""
        g, e = self.gs[0], self.e
        hh, ww = halo(g, tile.th, tile.tw)
        rows = span_union(g.h, g.pt, hh, tile.th * g.sh, cdiv(g.ho, tile.th))
        cols = span_union(g.w, g.pl, ww, tile.tw * g.sw, cdiv(g.wo, tile.tw))
        return g.c * rows * cols * e / 32.0

    def window_reads(self, tile: Tile) -> float:
        """Read sectors of one image's input as dw.cu stages the halo windows
        (`requests.window_load_sectors`, in the vectors of `tiles.dw_vector_elems`)."""
        g, e = self.gs[0], self.e
        hh, ww = halo(g, tile.th, tile.tw)
        return window_load_sectors(g.c, g.h, g.w, e, tile.tf, hh, ww, cdiv(g.ho, tile.th), cdiv(g.wo, tile.tw),
                                   tile.th * g.sh, tile.tw * g.sw, g.pt, g.pl, tiles.dw_vector_elems(g.w, e), True)
