"""Fused kernels (FCMs): `pw_dw`, `dw_pw`, `pw_pw` and the whole inverted-residual `pw_dw_pw`.

The intermediate tensors live in shared memory (the communication buffer) and never reach L2: what a
fused kernel saves is their write and read, what it pays is recomputation and re-reads:

- ``pw_dw``: a block computes tf expanded channels x (th x tw) DW outputs. It recomputes the PW
  outputs of its halo window (redundant PW FLOPs at tile borders) from tc-channel chunks of the PW
  input window, and reads its tf PW weight rows (packed per filter tile in the storage dtype, like
  dw_pw's) and DW filters. Input read once per filter tile.
- ``dw_pw``: a block computes tf PW filters x (th x tw) pixels; for each tc-channel chunk it stages the
  DW input window, runs the DW and accumulates the PW. The DW (and its input window, and its filters)
  is recomputed/re-read once per filter tile. Its PW weights are packed by the launcher per filter
  tile in the storage dtype (`packed_pw_weight_sectors`); on Hopper a cluster of blocks may split the
  channel chunks of one output tile (`tiles.cluster_split`), which changes the schedule, not the bytes.
- ``pw_pw``: a block stages its C1 x (th x tw) input pixels once, computes tc mid channels of the
  first PW at a time and accumulates tf filters of the second; the first PW (and all of W1) is
  recomputed/re-read once per filter tile. Both weight matrices are packed by the launcher in the
  storage dtype, W1 per chunk of tc mid channels and W2 per filter tile (`packed_pw_weight_sectors`).
- ``pw_dw_pw``: a block stages the C_in x halo window once; per tc expanded channels it runs the
  expansion over the window (halo recomputation), the DW, and accumulates tf projection filters.
  Expansion and DW are recomputed once per filter tile; the expansion weights are packed per chunk
  of tc channels and the projection's per filter tile, in the storage dtype. A residual of this kind
  is the block's own input (same shape): it is read through L2 again (GMA) but never from DRAM a
  second time.
"""

from __future__ import annotations

from functools import lru_cache

from fuseplanner.core.errors import PlanError
from fuseplanner.core.ir import Tile, math_mode
from fuseplanner.costbase.geometry import Geom
from fuseplanner.costbase.requests import tile_write_sectors
from fuseplanner.costbase.traffic import plane_windows_sectors, row_sectors, sectors, span_total
from fuseplanner.costbase.work import (
    PARAM_BYTES,
    KernelModel,
    Work,
    block_split_sectors,
    cdiv,
    mma_tiles_issue,
    out_plane_sectors,
    out_tokens_sectors,
    pw_in_sectors,
    tensor_bytes,
    whole_bytes,
    whole_map_out_sectors,
    window_sectors,
    window_unique,
)
from fuseplanner.hw.spec import Hw
from fuseplanner.kernels import tiles
from fuseplanner.kernels.families.dw.cost import dw_weight_sectors, dw_weight_unique, halo
from fuseplanner.kernels.families.pw.cost import input_unique, pw_weight_unique


def expansion_window(gp: Geom, gd: Geom, th: int, tw: int, e: int) -> tuple[float, float, int, int]:
    """For a PW feeding a DW: (distinct and requested sectors of one PW-input plane read by all
    spatial tiles, PW output rows computed, PW output columns computed), halo windows clipped to the
    map (`traffic.plane_windows_sectors`; a strided PW input is counted per row segment)."""
    nh, nw = cdiv(gd.ho, th), cdiv(gd.wo, tw)
    hh, ww = halo(gd, th, tw)
    rows = span_total(gd.h, gd.pt, hh, th * gd.sh, nh)
    cols = span_total(gd.w, gd.pl, ww, tw * gd.sw, nw)
    s = gp.sw
    if s == 1:
        return *plane_windows_sectors(gp.h, gp.w, gd.pt, gd.pl, hh, ww, th * gd.sh, tw * gd.sw, nh, nw, e,
                                      gp.h * gp.w * e), rows, cols  # fmt: skip
    req = rows * row_sectors(gp.w, gd.pl * s, (ww - 1) * s + 1, tw * gd.sw * s, nw, e, gp.w * e)
    return req, req, rows, cols


class FusedModel(KernelModel):
    """Shared assembly of a fused kernel's `Work`."""

    res_is_input = False
    BOUNDED = True
    FUSED_FIXED = True

    def setup(self) -> None:
        self.first, self.last = self.gs[0], self.gs[-1]
        self.w_unique = sum(dw_weight_unique(g) if g.depthwise else pw_weight_unique(g, PARAM_BYTES) for g in self.gs)
        self.useful = 2.0 * sum(g.macs for g in self.gs)
        self._floored = False
        self._issue: dict[tuple, tuple[float, float]] = {}  # `issued` per block (the search asks per tile)
        self._gemms: dict[tuple[int, int, int, int], dict] = {}  # `tiles.block_gemms` by (th, tw, tf, tc)

    def issued(self, kind: str, ops: tuple, tile: Tile, dtype: str, precision: str, w: Work, ks: int, hw: Hw) -> Work:
        """`w` with the FLOPs its blocks issue on their critical path (`issued_per_block`: the GEMM work
        split per thread or warp, tensor-core padding and idle units included, and the padded DW
        stencil chunk; `epilogue_issue`: the element-wise epilogue at the spec's
        `fused_epilogue_weight`; `window_epilogue_issue`: the expansion's window epilogue at the spec's
        `fused_window_epilogue_weight`), which the time model charges at the fused warp rates (the
        epilogues, on the CUDA cores, at the DW stencil's)."""
        load_w, epi_w, win_w = hw.fused_shared_load_weight, hw.fused_epilogue_weight, hw.fused_window_epilogue_weight
        # per block, by tile, split, math and weights (kind, ops and dtype are this model's own)
        key = (tile.th, tile.tw, tile.tf, tile.tc, tile.threads, ks, precision, load_w, epi_w, win_w)
        per_block = self._issue.get(key)
        if per_block is None:
            shape = key[:4]
            gemms = self._gemms.get(shape)  # the block GEMMs do not depend on the threads
            if gemms is None:
                gemms = self._gemms[shape] = tiles.block_gemms(kind, ops, tile, self.e)
            prec = math_mode(dtype, precision)
            dw, pw = issued_per_block(kind, ops, tile, self.e, prec, load_w, gemms)
            dw += window_epilogue_issue(kind, ops, tile, self.e, prec, win_w, gemms)
            per_block = self._issue[key] = (dw + epilogue_issue(kind, ops, tile, ks, epi_w, load_w), pw)
        n = w.blocks / ks
        return w._replace(cuda_issue=per_block[0] * n, mma_issue=per_block[1] * n)

    def bounded(self, sp: tuple, ch: tuple, tile: Tile, b: int, residual: bool) -> Work:
        """`combine` with the output's write sectors at its bytes / 32 (`written`): a sector request
        carries at most 32 of them, and every output byte is written."""
        self._floored = True
        try:
            return self.combine(sp, ch, tile, b, residual)
        finally:
            self._floored = False

    def written(self, tile: Tile, v: int = 1) -> float:
        """Write sectors of one image's output as the kernel stores it item by item from its tile, `v`
        rows per item (`requests.tile_write_sectors`; a token-major output is one plane of tokens x
        channels); inside `bounded`, the floor."""
        g = self.last
        if self._floored:
            return g.out_elems * self.e / 32.0
        if g.tokens_major:
            return tile_write_sectors(1, g.ho, g.co, self.e, 1, tile.th, tile.tf, 1)
        return tile_write_sectors(g.co, g.ho, g.wo, self.e, tile.tf, tile.th, tile.tw, v)

    def assemble(self, b: int, residual: bool, read: float, wread: float, out: float, nf: int, nsp: int,
                 iters: int, cuda: float, mma: float, in_unique: float, hits: float = 0.0,
                 wl1: float = 0.0, wall: float = 0.0, written: float | None = None) -> Work:  # fmt: skip
        """Work from per-image sector counts (activation reads, weight reads, output as the residual
        reads it; `hits`: activation sectors the loads request beyond `read`, served by L1; `wl1`: the
        part of `wread` copied through L1, DW filters and biases; `wall`: the rest of `wread` that every
        block reads whatever its filter tile, the first PW's packed weights; `written`: the output's
        write sectors where the stores count otherwise than `out`) and FLOPs."""
        e, first, last = self.e, self.first, self.last
        out_u = tensor_bytes(b * last.out_elems, e)
        return Work(
            gma_read=32.0 * b * (read + wread + (out if residual else 0.0)),
            gma_write=32.0 * b * (out if written is None else written),
            in_unique=in_unique,
            w_unique=self.w_unique,
            res_unique=out_u if residual and not self.res_is_input else 0.0,
            out_unique=out_u,
            in_img=first.in_elems * e,
            out_img=last.out_elems * e,
            useful_flops=b * self.useful,
            cuda_flops=b * cuda,
            mma_flops=b * mma,
            iters=iters,
            blocks=nsp * nf * b,
            nf=nf,
            nsp=nsp,
            w_read=32.0 * b * wread,
            l1_hits=32.0 * b * hits,
            in_read=32.0 * b * read,
            w_l1=32.0 * b * wl1,
            w_all=32.0 * b * wall,
        )


class PwDwModel(FusedModel):
    #: L2 does not merge the filter tiles' re-reads of an input window: Nsight Compute on the H100
    #: shows PW->DW and DW->PW launches of 8-64 blocks (2 spatial tiles, 4-8 filter tiles) reading
    #: their windows once per filter tile, where `coalesced` merges 4 readers 2 blocks apart into one;
    #: the layer-by-layer PW, pw_pw and pw_dw_pw inputs merge as it says (records in
    #: data/records/h100). Why these two kinds differ is not known: their windows are halo windows
    #: copied per channel chunk with 4-byte copies, the others' 16-byte tiles or one staged window.
    MERGED_INPUT_REREADS = False

    def spatial(self, th: int, tw: int) -> tuple:
        gp, gd = self.gs
        in_plane, in_req, rows, cols = expansion_window(gp, gd, th, tw, self.e)
        nsp = cdiv(gd.ho, th) * cdiv(gd.wo, tw)
        pw_done = max(2.0 * gp.c * gp.co * rows * cols, 2.0 * gp.macs)
        return nsp, gp.c * in_plane, gd.co * out_plane_sectors(gd, tw, self.e, th), pw_done, gp.c * (in_req - in_plane)

    def channel(self, tf: int, tc: int) -> tuple:
        gp, gd = self.gs
        w_u = dw_weight_unique(gd) + packed_pw_weight_unique(gp, tf, self.e)
        dw_w = dw_weight_sectors(gd, tf)
        return (cdiv(gd.co, tf), packed_pw_weight_sectors(gp, tf, self.e) + dw_w, cdiv(gp.c, tc) + 1, w_u,
                bias_sectors(gp, tf) + dw_w)  # fmt: skip

    def counts(self, sp: tuple, ch: tuple) -> tuple[int, int, int, float, float]:
        return sp[0], ch[0], ch[2], 2.0 * self.gs[1].macs, sp[3]

    def combine(self, sp: tuple, ch: tuple, tile: Tile, b: int, residual: bool) -> Work:
        gp = self.gs[0]
        _, in_s, out, _, hit = sp
        _, w_sec, _, w_u, l1 = ch
        nsp, nf, iters, cuda, mma = self.counts(sp, ch)
        v = tiles.output_rows_per_item("pw_dw", tile)
        w = self.assemble(b, residual, nf * in_s, nsp * w_sec, out, nf, nsp, iters, cuda, mma,
                          input_unique(gp, self.e, b), nf * hit, nsp * l1, written=self.written(tile, v))  # fmt: skip
        return w._replace(w_unique=w_u)


def packed_pw_weight_sectors(g: Geom, tf: int, e: int) -> float:
    """Sectors of reading a whole packed PW weight wp[co / tf tiles][C][TFP] tile by tile (storage
    dtype, rows of TFP = tf rounded up to 16 bytes, 16-byte aligned: a row of L bytes costs L/32
    sectors when L is a multiple of 32, else (L + 16)/32 on average), plus the fp32 bias in parts of
    tf. The filter tiles of pw_dw, dw_pw and of the last PW of pw_pw and pw_dw_pw together; every
    block of pw_pw and pw_dw_pw for its first PW, packed by the channel chunk (tf = tc)."""
    row = _rup(tf * e, 16)
    s = cdiv(g.co, tf) * g.c * (row / 32 if row % 32 == 0 else (row + 16) / 32)
    return s + bias_sectors(g, tf)


def bias_sectors(g: Geom, tf: int) -> float:
    """Sectors of reading a PW member's fp32 bias in parts of tf (0 without a bias): the part of
    `packed_pw_weight_sectors` that the kernels read through L1 (`__ldg` in the epilogue)."""
    return block_split_sectors(g.co, tf, PARAM_BYTES) if g.bias else 0.0


def packed_pw_weight_unique(g: Geom, tf: int, e: int) -> float:
    """Bytes of a packed PW weight (`packed_pw_weight_sectors`; zero padding included) and its fp32
    bias, whole sectors."""
    return 32.0 * (sectors(cdiv(g.co, tf) * g.c * _rup(tf * e, 16)) + (sectors(g.co * PARAM_BYTES) if g.bias else 0))


def _rup(a: int, b: int) -> int:
    return -(-a // b) * b


class DwPwModel(FusedModel):
    MERGED_INPUT_REREADS = False  # as PwDwModel's halo windows

    def spatial(self, th: int, tw: int) -> tuple:
        gd, gp = self.gs
        e = self.e
        hh, ww = halo(gd, th, tw)
        nsp = cdiv(gp.ho, th) * cdiv(gp.wo, tw)
        in_d, in_r = window_sectors(gd, hh, ww, th, tw, e)
        return (nsp, gd.c * in_d, gd.c * window_unique(gd, hh, ww, th, tw, e), gp.co * out_plane_sectors(gp, tw, e, th),
                gd.c * (in_r - in_d))  # fmt: skip

    def channel(self, tf: int, tc: int) -> tuple:
        gd, gp = self.gs
        w_u = dw_weight_unique(gd) + packed_pw_weight_unique(gp, tf, self.e)
        return (cdiv(gp.co, tf), dw_weight_sectors(gd, tc), packed_pw_weight_sectors(gp, tf, self.e), cdiv(gd.c, tc),
                w_u, bias_sectors(gp, tf))  # fmt: skip

    def counts(self, sp: tuple, ch: tuple) -> tuple[int, int, int, float, float]:
        gd, gp = self.gs
        return sp[0], ch[0], ch[3], ch[0] * 2.0 * gd.macs, 2.0 * gp.macs

    def combine(self, sp: tuple, ch: tuple, tile: Tile, b: int, residual: bool) -> Work:
        _, in_s, in_u, out, hit = sp
        _, w_dw, w_pw, _, w_u, b_pw = ch
        nsp, nf, iters, cuda, mma = self.counts(sp, ch)
        w = self.assemble(b, residual, nf * in_s, nsp * (nf * w_dw + w_pw), out, nf, nsp, iters, cuda, mma,
                          whole_bytes(b * in_u), nf * hit, nsp * (nf * w_dw + b_pw), written=self.written(tile))  # fmt: skip
        return w._replace(w_unique=w_u)


class PwPwModel(FusedModel):
    @classmethod
    def fused_fixed(cls, ops: tuple) -> bool:
        """Channel-last token pairs (linear -> linear) take `fused_kernel_fixed_s`; PW->PW over NCHW maps
        the layer-by-layer kernels' `kernel_fixed_s`. With the fused value (2.9 us on the H100, fitted on
        launches mostly over 20 us) squeeze-excitation pairs (1x1 maps, 2-24 blocks) were predicted
        1.34x their cold time isolated on the H200, while MobileViT-XXS's MLP pairs need it as the fused
        kinds with a DW stage do: 0.76x their time without it (docs/cost_model.md, Limits)."""
        if not ops:
            raise PlanError("pw_pw's fixed launch time depends on its ops (NCHW maps or channel-last tokens): none given")
        return ops[0].channel_last

    def spatial(self, th: int, tw: int) -> tuple:
        g1, g2 = self.gs
        e = self.e
        if g1.tokens_major:
            return cdiv(g2.ho, th), block_split_sectors(g1.h * g1.c, th * g1.c, e), 0.0
        nsp = cdiv(g2.ho, th) * cdiv(g2.wo, tw)
        return nsp, g1.c * pw_in_sectors(g1, th, tw, e), g2.co * out_plane_sectors(g2, tw, e, th)

    def channel(self, tf: int, tc: int) -> tuple:
        # every block reads all of W1 (packed by tc) and its filter tile of W2 (packed by tf); the
        # input tile arrives with the first chunk, so a block's chain is one load per chunk
        g1, g2 = self.gs
        e = self.e
        out = out_tokens_sectors(g2, tf, e) if g2.tokens_major else 0.0
        w_u = packed_pw_weight_unique(g1, tc, e) + packed_pw_weight_unique(g2, tf, e)
        return (cdiv(g2.co, tf), packed_pw_weight_sectors(g1, tc, e), packed_pw_weight_sectors(g2, tf, e), out,
                cdiv(g1.co, tc), w_u, bias_sectors(g1, tc), bias_sectors(g2, tf))  # fmt: skip

    def counts(self, sp: tuple, ch: tuple) -> tuple[int, int, int, float, float]:
        g1, g2 = self.gs
        return sp[0], ch[0], ch[4], 0.0, ch[0] * 2.0 * g1.macs + 2.0 * g2.macs

    def combine(self, sp: tuple, ch: tuple, tile: Tile, b: int, residual: bool) -> Work:
        g1, g2 = self.gs
        _, in_s, out_s = sp
        _, w1, w2, out_c, _, w_u, b1, b2 = ch
        nsp, nf, iters, cuda, mma = self.counts(sp, ch)
        if nsp == 1 and not g2.tokens_major:
            out_s = whole_map_out_sectors(g2, tile.tf, self.e)  # one tile covers the map, as `pw.PwModel`
        w = self.assemble(b, residual, nf * in_s, nsp * (nf * w1 + w2), out_s + out_c, nf, nsp, iters,
                          cuda, mma, input_unique(g1, self.e, b), 0.0,
                          nsp * (nf * b1 + b2), nsp * nf * (w1 - b1), self.written(tile))  # fmt: skip
        return w._replace(w_unique=w_u)


class PwDwPwModel(FusedModel):
    def setup(self) -> None:
        super().setup()
        g1, _, g2 = self.gs
        self.res_is_input = (g1.c, g1.h, g1.w) == (g2.co, g2.ho, g2.wo)

    def spatial(self, th: int, tw: int) -> tuple:
        g1, gd, g2 = self.gs
        in_plane, in_req, rows, cols = expansion_window(g1, gd, th, tw, self.e)
        nsp = cdiv(g2.ho, th) * cdiv(g2.wo, tw)
        pw1_done = max(2.0 * g1.c * g1.co * rows * cols, 2.0 * g1.macs)
        return nsp, g1.c * in_plane, g2.co * out_plane_sectors(g2, tw, self.e, th), pw1_done, g1.c * (in_req - in_plane)

    def channel(self, tf: int, tc: int) -> tuple:
        # every block reads all of W1 (packed by tc) and all DW filters and its filter tile of W3
        # (packed by tf); the input window arrives with the first chunk: one load per chunk
        g1, gd, g2 = self.gs
        e = self.e
        dw_w = dw_weight_sectors(gd, tc)
        per_tile = packed_pw_weight_sectors(g1, tc, e) + dw_w
        l1_tile = bias_sectors(g1, tc) + dw_w
        w_u = packed_pw_weight_unique(g1, tc, e) + dw_weight_unique(gd) + packed_pw_weight_unique(g2, tf, e)
        return (cdiv(g2.co, tf), per_tile, packed_pw_weight_sectors(g2, tf, e), cdiv(g1.co, tc), w_u, l1_tile,
                bias_sectors(g2, tf))  # fmt: skip

    def counts(self, sp: tuple, ch: tuple) -> tuple[int, int, int, float, float]:
        _, gd, g2 = self.gs
        nf = ch[0]
        return sp[0], nf, ch[3], nf * 2.0 * gd.macs, nf * sp[3] + 2.0 * g2.macs

    def combine(self, sp: tuple, ch: tuple, tile: Tile, b: int, residual: bool) -> Work:
        g1 = self.gs[0]
        _, in_s, out, _, hit = sp
        _, w_rep, w3, _, w_u, l1_rep, b3 = ch
        nsp, nf, iters, cuda, mma = self.counts(sp, ch)
        w = self.assemble(b, residual, nf * in_s, nsp * (nf * w_rep + w3), out, nf, nsp, iters, cuda, mma,
                          input_unique(g1, self.e, b), nf * hit, nsp * (nf * l1_rep + b3), nsp * nf * (w_rep - l1_rep),
                          self.written(tile))  # fmt: skip
        return w._replace(w_unique=w_u)


@lru_cache(maxsize=16384)
def _gemm_issue(g: tiles.BlockGemm, threads: int, prec: int, load_w: float) -> float:
    """FLOP-equivalents a block of `threads` spends on one block GEMM `g` (fused_common.cuh) as
    its busiest unit executes it, times the units: a unit (a thread for exact fp32, a warp for tensor
    cores) runs ceil(groups / units) micro-tiles of the work split the launcher picks, each k step
    costing its FMAs (or mma instructions) plus `load_w` (the spec's `fused_shared_load_weight`) per
    shared operand load (a float4 of one operand, or an ldmatrix of a 16 x 16 A / 16 x 8 B tile). Zero
    padding (tensor-core tiles of 16 x 8, k rounded to 16) and idle units count; with a perfect split
    and no padding this is 2 m n k."""
    gm, gn, mt = _unit_split(g, threads, prec)
    if prec == 0:
        return 2.0 * g.k * threads * mt * (gm * gn + load_w * (-(-gm // 4) + -(-gn // 4)))
    return mma_tiles_issue(g.kp, threads // 32, mt, gm // 16, gn // 8, load_w)


def _unit_split(g: tiles.BlockGemm, threads: int, prec: int) -> tuple[int, int, int]:
    """(GM, GN, groups of the busiest unit) of block GEMM `g` as the launcher splits it: threads x GM x GN
    register micro-tiles for exact fp32 (`tiles.fma_group`), warps x GM x GN tiles of 16 x 8 mma tiles
    for tensor cores (`tiles.mma_group`), ceil(groups / units) groups a unit."""
    if prec == 0:
        gm, gn, me, ne = tiles.fma_group(g.m, g.n, threads, g.resident)
        return gm, gn, -(-((me // gm) * (ne // gn)) // threads)
    gm, gn, me, ne = tiles.mma_group(g.mp, g.np_, threads // 32, g.resident)
    return gm, gn, -(-((me // gm) * (ne // gn)) // (threads // 32))


def issued_per_block(kind: str, ops: tuple, tile: Tile, e: int, prec: int, load_w: float,
                     gemms: dict | None = None) -> tuple[float, float]:  # fmt: skip
    """(DW FLOPs, PW FLOP-equivalents) one block of a fused kernel (no cluster split) issues on its
    critical path over all its channel chunks (fused_*.cu): each chunk's block GEMMs
    (`tiles.block_gemms`) by `_gemm_issue`, the DW stencil by `_dw_issue` over the chunk's tc channels
    (dw_pw, pw_dw_pw; tf channels once for pw_dw).
    `prec`: 0 exact fp32, 1 TF32, 2 fp16; `load_w`: FMA-equivalents of one shared operand load;
    `gemms`: the tile's `tiles.block_gemms` where the caller has them."""
    t = tile.threads
    nk = -(-(ops[0].c_out if kind in ("pw_pw", "pw_dw_pw") else ops[0].c_in) // tile.tc)
    if gemms is None:
        gemms = tiles.block_gemms(kind, ops, tile, e)
    pw = nk * sum(_gemm_issue(g, t, prec, load_w) for g in gemms.values())
    if kind == "pw_pw":
        return 0.0, pw
    dw = ops[0] if kind == "dw_pw" else ops[1]
    if kind == "pw_dw":  # once, after the chunk loop
        return _dw_issue(tile.tf, tile, dw, load_w), pw
    return nk * _dw_issue(tile.tc, tile, dw, load_w), pw


#: Fused kinds whose blocks end in a staged epilogue: the accumulator tile goes to shared memory and the
#: threads then store it element by element with bias, activation and residual (fused_dw_pw.cu,
#: fused_pw_dw_pw.cu, fused_pw_pw.cu). pw_dw stores each DW output from registers as it computes it.
STAGED_EPILOGUE_KINDS = frozenset({"dw_pw", "pw_dw_pw", "pw_pw"})


def epilogue_issue(kind: str, ops: tuple, tile: Tile, ks: int, epi_w: float, load_w: float) -> float:
    """FLOP-equivalents the `ks` blocks of one output tile of a fused kernel issue on its element-wise
    passes, as the busiest thread of each runs them, times the threads (0 for kinds without a staged
    epilogue). The epilogue: ceil(tf x th x tw / (ks x threads)) elements per thread, each `epi_w`
    FMA-equivalents (the spec's `fused_epilogue_weight`: the accumulator's round trip through shared
    memory, index arithmetic, bias, activation, residual, a global store) plus, in a cluster split,
    `load_w` for each of the other ks - 1 blocks' partial sums it reads over distributed shared
    memory. pw_pw also stages its first PW element by element in every chunk (bias, ACT1: tc x th x tw
    rounded up to the GEMM's 16 x 8 tiles, fused_pw_pw.cu), at the same weight."""
    if kind not in STAGED_EPILOGUE_KINDS or not epi_w:
        return 0.0
    t = tile.threads
    p = tile.th * tile.tw
    per_thread = -(-(tile.tf * p) // (ks * t)) * (epi_w + (ks - 1) * load_w)
    total = per_thread * t * ks
    if kind == "pw_pw":
        nk = -(-ops[0].c_out // tile.tc)
        total += nk * -(-(_rup(tile.tc, 16) * _rup(p, 8)) // t) * t * epi_w
    return 2.0 * total


#: Fused kinds whose first block GEMM stores the expansion's staged window through `window_epilogue`
#: (fused_common.cuh: bias + ACT1, 0 outside the map or past the channels, a shared store per
#: element): pw_dw_pw in every chunk, pw_dw in its last (its other chunks add their products to the
#: sums in shared memory; charging those too fitted the records of data/records/h100 worse).
WINDOW_EPILOGUE_KINDS = frozenset({"pw_dw", "pw_dw_pw"})


def stream_elements(g: tiles.BlockGemm, threads: int, prec: int) -> int:
    """Elements of a streamed block GEMM `g` (gemm_stream, fused_common.cuh) the busiest thread of
    a block writes to shared memory: its unit's ceil(groups / units) micro-tiles (`_unit_split`, as
    `_gemm_issue` charges them), each GM x GN elements per thread for exact fp32, GM x GN / 32 per lane of a warp's mma
    tiles (padding included)."""
    gm, gn, mt = _unit_split(g, threads, prec)
    return mt * gm * gn if prec == 0 else mt * gm * gn // 32


def window_epilogue_issue(kind: str, ops: tuple, tile: Tile, e: int, prec: int, win_w: float,
                          gemms: dict | None = None) -> float:  # fmt: skip
    """FLOP-equivalents one block of a pw_dw / pw_dw_pw kernel issues on its expansion GEMM's window
    epilogue, as its busiest thread runs it, times the threads (0 for other kinds): `stream_elements`
    of the first block GEMM in each chunk that applies it (all ceil(C / tc) of pw_dw_pw, the last of
    pw_dw), each `win_w` FMA-equivalents (the spec's `fused_window_epilogue_weight`: the element's
    window row and column from its index, the map and channel tests, bias, activation, the shared
    store). Per thread it grows as the block's threads shrink, the tc x window elements staying.
    `gemms`: the tile's `tiles.block_gemms` where the caller has them."""
    if kind not in WINDOW_EPILOGUE_KINDS or not win_w:
        return 0.0
    g = (tiles.block_gemms(kind, ops, tile, e) if gemms is None else gemms)["1"]
    calls = -(-ops[0].c_out // tile.tc) if kind == "pw_dw_pw" else 1
    return 2.0 * calls * stream_elements(g, tile.threads, prec) * tile.threads * win_w


def _dw_issue(nch: int, tile: Tile, dw, load_w: float) -> float:
    """FLOP-equivalents a block's busiest thread issues on the DW stencil of `nch` channels (kernels/
    common.cuh dw_rows via fused_common.cuh dw_window), times the threads: items of V output rows
    (`tiles.dw_rows_per_item`), ceil(items / threads) per thread; an item runs V x kh x kw FMAs and
    loads from shared memory the ((V - 1) s + (kh - 1) d + 1) x kw window values its V outputs share
    and its kh x kw filter taps, each load at `load_w` FMAs (as `_gemm_issue` counts a GEMM's operand
    loads)."""
    kh, kw = dw.kernel
    v = tiles.dw_rows_per_item(nch, tile.th, tile.tw, tile.threads)
    items = nch * (tile.th // v) * tile.tw
    rows = (v - 1) * dw.stride[0] + (kh - 1) * dw.dilation[0] + 1
    per_item = v * kh * kw + load_w * (rows * kw + kh * kw)
    return float(-(-items // tile.threads) * tile.threads * 2 * per_item)
