"""Layer-by-layer pointwise kernels (`pw`: 1x1 conv in NCHW, `linear`: token-major matmul).

out[f, p] = sum_c W[f, c] x[c, p]. A block computes tf filters x (th x tw) pixels (linear: th tokens)
of one image, looping over the input channels in chunks of tc: per chunk it stages tc input rows of
its pixels and the tf x tc weight chunk (a multi-stage cp.async ring). So the input is read once per
filter tile (the paper's (N/f)|I| term) and the weights once per spatial tile (|W| n_h n_w), each
sector-rounded per row segment. Products run on tensor cores for fp16 (and fp32 with TF32).
"""

from __future__ import annotations

from fuseplanner.core.ir import Op, Tile
from fuseplanner.costbase.geometry import Geom, geom
from fuseplanner.costbase.requests import pw_write_sectors
from fuseplanner.costbase.traffic import row_sectors, sectors
from fuseplanner.costbase.work import (
    PARAM_BYTES,
    KernelModel,
    Work,
    block_split_sectors,
    cdiv,
    matrix_chunk_sectors,
    mma_tiles_issue,
    out_plane_sectors,
    out_tokens_sectors,
    pw_in_sectors,
    pw_in_unique,
    tensor_bytes,
    whole_bytes,
    whole_map_out_sectors,
)
from fuseplanner.hw.spec import Hw
from fuseplanner.kernels import tiles


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

    CHUNK_STEPPED = True

    #: Co-resident window sharing limited to the launch's first wave: Nsight Compute on the H100 shows
    #: layer-by-layer PW launches of 1.5-7 waves reading 0.9-1.1 of their windows per filter tile from
    #: L2, where the whole-launch share gave 0.2-0.55. The fused kinds' multi-wave launches keep the
    #: whole-launch share: limited to the first wave it moved their records both ways (MobileNetV1
    #: fp16 batch 4 DW->PW launches of 1,024-14,336 blocks, predicted / measured GMA 0.89 -> 1.45 for
    #: some, 0.36 -> 0.96 for others; data/records/h100/holdout).
    FIRST_WAVE_SHARING = True

    def setup(self) -> None:
        g, e = self.gs[0], self.e
        self.w_unique = pw_weight_unique(g, e)
        self.flops = 2.0 * g.macs

    def issued(self, kind: str, ops: tuple, tile: Tile, dtype: str, precision: str, w: Work, ks: int, hw: Hw) -> Work:
        """`w` with its blocks' issued work (`issued_per_block`) when the spec's load weight of its math
        path is set (`pw_shared_load_weight` for exact fp32 on the CUDA cores, `pw_mma_load_weight` for
        tensor cores) or its tile's outputs do not split evenly over its threads (the slots past the
        tile count); else unchanged."""
        load_w = ((hw.pw_mma_load_weight if uses_mma(ops[0], tile, dtype, precision) else hw.pw_shared_load_weight)
                  if hw.pw_shared_load_weight or hw.pw_mma_load_weight else 0.0)
        if load_w <= 0.0 and tile.tf * tile.th * tile.tw % tile.threads == 0:
            return w  # both off (the bundled specs): no variant lookup on the planner's search path
        # an uneven tile (tiles.UNEVEN_KINDS) always charges its issued work: its idle thread slots
        # take issue time that its useful FLOPs over all its warps do not show
        return w._replace(mma_issue=w.blocks * issued_per_block(ops[0], tile, dtype, precision, ks, load_w))

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
        return cdiv(g.co, tf), pw_weight_sectors(g, tf, tc, e), in_r, out, cdiv(g.c, tc)

    def counts(self, sp: tuple, ch: tuple) -> tuple[int, int, int, float, float]:
        return sp[0], ch[0], ch[4], 0.0, self.flops

    def combine(self, sp: tuple, ch: tuple, tile: Tile, b: int, residual: bool) -> Work:
        g, e = self.gs[0], self.e
        nsp, in_s, out_s = sp
        nf, w_sec, in_c, out_c, _ = ch
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
            iters=ch[4],
            blocks=nsp * nf * b,
            nf=nf,
            nsp=nsp,
            w_read=32.0 * b * nsp * w_sec,
            in_read=32.0 * b * in_r,
        )

    BOUNDED = True

    def bounded(self, sp: tuple, ch: tuple, tile: Tile, b: int, residual: bool) -> Work:
        """`combine` with the writes at the output's bytes: no store pattern writes fewer (a sector
        request carries at most 32 of them), whatever `stores` counts."""
        return self.combine(sp, ch, tile, b, residual)._replace(gma_write=float(b * self.gs[0].out_elems * self.e))

    def stores(self, w: Work, tile: Tile, b: int, precision: str, ks: int) -> Work:
        """The writes as pw.cu's store instructions request them (`requests.pw_write_sectors`):
        per warp instruction of its epilogue (the mma fragments' pixel pairs, the FMA register block's
        pixel runs, or, split over a cluster, item by item). The residual reads keep the distinct
        sector count: they load through L1, which serves a sector's second instruction."""
        g = self.gs[0]
        dtype, kind = ("fp16" if self.e == 2 else "fp32"), ("linear" if g.tokens_major else "pw")
        variant = tuple(sorted((k, v) for k, v in tiles.pw_variant(tile, dtype, precision, kind, g.wo, g.c).items()
                               if k != "KVEC"))  # how it reads weights does not change its stores
        per_image = pw_write_sectors(g.co, g.ho, g.wo, self.e, g.tokens_major, tile.tf, tile.th, tile.tw,
                                     tile.threads, ks, variant)  # fmt: skip
        return w._replace(gma_write=32.0 * b * per_image)

    def l1_reuse(self, w: Work, tile: Tile, ks: int, cache: int, line: int) -> Work:
        """A block reads its filter tile's weight rows chunk by chunk (`pw_weight_sectors`), and a sector
        that two neighbouring chunks of a row share is fetched again by the later chunk unless L1 still
        holds its line. It does when the lines one chunk of the tile touches (a line per row, or the
        tile's bytes where rows are narrower than a line) fit in the L1 data cache: then L2 sees the
        rows' distinct sectors once (`pw_weight_sectors` with one chunk). Not in a cluster split (`ks`
        > 1: neighbouring chunks go to different blocks). The loads still request every chunk
        (`l1_hits`). Nsight Compute on the H100 (layer sweeps in data/records/h100/holdout): squeeze-
        excite PW layers whose tf x C weight tile spans at most 28 KB of lines read their weights once,
        those with 32 KB or more chunk by chunk; 28 KB is the H100's L1 at its largest carveout."""
        g, e = self.gs[0], self.e
        if ks > 1 or tile.tc >= g.c or not w.w_read:
            return w
        lines = min(tile.tf * line, cdiv(tile.tf * g.c * e, line) * line)
        if lines > cache:
            return w
        saved = w.w_read * (1.0 - pw_weight_sectors(g, tile.tf, g.c, e) / pw_weight_sectors(g, tile.tf, tile.tc, e))
        if saved <= 0.0:
            return w
        return w._replace(gma_read=w.gma_read - saved, w_read=w.w_read - saved, l1_hits=w.l1_hits + saved)


def _variant(op: Op, tile: Tile, dtype: str, precision: str) -> dict:
    g = geom(op)
    return tiles.pw_variant(tile, dtype, precision, "linear" if g.tokens_major else "pw", g.wo, g.c)


def uses_mma(op: Op, tile: Tile, dtype: str, precision: str) -> bool:
    """Whether pw.cu runs this tile on tensor cores (else exact fp32 FMAs on the CUDA cores)."""
    return bool(_variant(op, tile, dtype, precision)["USE_TC"])


def issued_per_block(op: Op, tile: Tile, dtype: str, precision: str, ks: int, load_w: float) -> float:
    """FLOP-equivalents one block of pw.cu issues on its busiest thread (exact fp32) or warp
    (tensor cores) over its channel chunks (every ks-th of them in a cluster split), times the threads or
    warps: per channel an RF x RP register block's FMAs plus `load_w` per operand load (RF / KVEC weight
    and RP / PVEC pixel loads; FLAT: one of each per output), or per k step a warp's WM_T x WN_T mma tiles
    of 16 x 8 plus `load_w` per fragment load (an A tile per filter row of tiles, half a one per pixel
    column), as `tiles.pw_variant` maps the tile. Slots past the tile count; with no loads and a tile the
    threads divide this is the block's useful 2 x tf x p x k."""
    p = tile.th * tile.tw
    v = _variant(op, tile, dtype, precision)
    k = cdiv(cdiv(geom(op).c, tile.tc), ks) * tile.tc  # the busiest rank's channels
    if v["USE_TC"]:
        return mma_tiles_issue(k, tile.threads // 32, 1, v["WM_T"], v["WN_T"], load_w)
    if v.get("FLAT"):
        r = cdiv(tile.tf * p, tile.threads)
        return 2.0 * k * tile.threads * r * (1.0 + 2.0 * load_w)
    a = v["A_THR"]
    rf, rp = tile.tf // a, cdiv(p, tile.threads // a)
    kv, pv = v.get("KVEC", 1), v.get("PVEC", 1)
    return 2.0 * k * tile.threads * (rf * rp + load_w * (rf / kv + rp / pv))
