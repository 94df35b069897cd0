"""The published FusePlanner element-count model (BACKGROUND section 2), with its defects fixed.

Kept as a baseline (``model="paper"``) so reports can show the paper's prediction beside ours and the
measurement. Per layer with input I, output O, weights W (elements), n_h x n_w spatial tiles and
nf = ceil(N / f) filter tiles, and the per-channel halo overlap of a DW with kernel k and stride s
over an H x W map:  ov = (n_h - 1) max(0, k - s) W + (n_w - 1) max(0, k - s) H.

    dw        |I| + C ov + |O| + |W| n_h n_w
    pw/linear nf |I| + |O| + |W| n_h n_w
    pw_dw     nf (|I| + C_in ov) + |O| + (|W_pw| + |W_dw|) n_h n_w
    dw_pw     nf (|I| + C ov) + |O| + (nf |W_dw| + |W_pw|) n_h n_w
    pw_pw     nf |I| + |O| + (nf |W_1| + |W_2|) n_h n_w
    pw_dw_pw  nf (|I| + C_in ov) + |O| + (nf (|W_1| + |W_dw|) + |W_3|) n_h n_w
    residual  + |O|

Fixes relative to the release: element counts are converted to bytes with the dtype and scaled by
the batch (activations x batch, per-tile weight reads x batch); tile counts use ceil (no off-by-one);
f = N is allowed; the DW halo is multiplied by the channels (C ov, not ov) and counted once (a tile
boundary re-reads k - s rows, which ov already counts; the release's 2 ov counts it twice); PW->DW
uses the DW's own kernel and stride for the halo, and charges it to the PW input, re-read once per
filter tile; DW->PW reads its input (with halo) and DW weights once per filter tile (the release
counted the wrong tensors and no halo); PW->DW->PW, which the paper lacks, follows the same rules.
Feasibility is ours (`tiles.check`: bytes against the real shared-memory limit, threads, registers),
not the release's element-versus-KB test. The paper has no caches: every access is DRAM traffic
(dram = gma), and no time: `time_s` is the bandwidth floor gma / dram_bw, with no launch term.
"""

from __future__ import annotations

from fuseplanner.costbase.geometry import Geom
from fuseplanner.costbase.work import cdiv


def _ov(g: Geom, nh: int, nw: int) -> int:
    """Per-channel halo overlap (elements) of a DW-like op tiled n_h x n_w."""
    ext_h = max(0, (g.kh - 1) * g.dil_h + 1 - g.sh)
    ext_w = max(0, (g.kw - 1) * g.dil_w + 1 - g.sw)
    return (nh - 1) * ext_h * g.w + (nw - 1) * ext_w * g.h


def gma_elements(kind: str, gs: tuple[Geom, ...], th: int, tw: int, tf: int, batch: int, residual: bool) -> tuple[float, float]:
    """(read, write) elements of one launch under the fixed paper model."""
    last = gs[-1]
    nh = cdiv(last.ho, th)
    nw = 1 if last.tokens_major else cdiv(last.wo, tw)
    nsp = nh * nw
    nf = cdiv(last.co, tf)
    first = gs[0]
    i, o = first.in_elems * batch, last.out_elems * batch
    b_nsp = nsp * batch
    if kind == "dw":
        g = gs[0]
        reads = i + g.c * _ov(g, nh, nw) * batch + g.weight_elems * b_nsp
    elif kind in ("pw", "linear"):
        reads = nf * i + first.weight_elems * b_nsp
    elif kind == "pw_dw":
        gp, gd = gs
        reads = nf * (i + gp.c * _ov(gd, nh, nw) * batch) + (gp.weight_elems + gd.weight_elems) * b_nsp
    elif kind == "dw_pw":
        gd, gp = gs
        reads = nf * (i + gd.c * _ov(gd, nh, nw) * batch) + (nf * gd.weight_elems + gp.weight_elems) * b_nsp
    elif kind == "pw_pw":
        g1, g2 = gs
        reads = nf * i + (nf * g1.weight_elems + g2.weight_elems) * b_nsp
    elif kind == "pw_dw_pw":
        g1, gd, g2 = gs
        reads = nf * (i + g1.c * _ov(gd, nh, nw) * batch) + (nf * (g1.weight_elems + gd.weight_elems) + g2.weight_elems) * b_nsp
    else:  # pragma: no cover - kinds are validated by the caller
        raise ValueError(kind)
    if residual:
        reads += o
    return float(reads), float(o)
