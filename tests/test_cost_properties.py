"""Property tests of the cost models (hypothesis).

Parameter bytes. P_K(ops) = the exact bytes of the parameters as a kernel of kind K reads them:
biases and DW filters fp32 in every kernel, PW and linear weight matrices in the storage dtype (the
layer-by-layer pw/linear kernel's, and the packed copies of every fused kernel; `param_bytes` below,
written from that rule, not from the model). P_K is `compulsory(...)["weights"]` for every kind.

Fusion inequality (proved here for every generated case). For a fused kernel F over a chain of
layer-by-layer kernels L_1 .. L_n (n = 2 or 3) with intermediates I_1 .. I_{n-1}, any tiles:

    GMA(F) <= sum_i GMA(L_i) - 2 sum_j |I_j| + D + ovh(F)

where |X| are exact tensor bytes, C(F) = |needed input of L_1| + P_F + |out of L_n| is what F must
move at least, ovh(F) = GMA(F) - C(F) the fused kind's overhead (input re-reads per filter tile,
halo re-reads, the weight re-reads that L1 does not filter out, partial-sector waste), and
D = P_F - sum_i P_{L_i} the extra parameter bytes of F over its layer-by-layer kernels (0 for every
kind: all read each parameter in the same dtype; checked).
Proof: every layer-by-layer kernel moves at least its own compulsory bytes with its own parameter
bytes (checked below): GMA(L_1) >= |in_1| + P_{L_1} + |I_1|, GMA(L_i) >= |I_{i-1}| + P_{L_i} + |I_i|
and GMA(L_n) >= |I_{n-1}| + P_{L_n} + |out_n| (every element of I_j is needed by L_{j+1}: checked).
Summing, sum_i GMA(L_i) >= C(F) - D + 2 sum_j |I_j|, and GMA(F) = C(F) + ovh(F). The overhead is
>= 0 (checked: F reads every weight at least once, since L1 filtering keeps max(f Wc, min(Wu, Wr))
of the per-block weight reads Wr >= Wu, Wc the packed PW rows among them), and is 0 for a single tile
per image over sector-aligned rows (checked), so fusion saves the intermediates' round trips plus the
unfused kernels' own overheads, minus the fused kind's overhead. L1 filtering can only lower GMA(F)
(checked against the same GPU with fused_weight_l2_fraction = 1, where every packed-weight re-read
reaches L2), and the inequality holds with and without it.
"""

from __future__ import annotations

import math
from fractions import Fraction

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from opfactory import dw, linear, pw

from fuseplanner.core.ir import Tile
from fuseplanner.cost import compulsory, estimate
from fuseplanner.costbase.geometry import geom
from fuseplanner.hw.spec import GpuSpec, gpu
from fuseplanner.kernels import tiles

#: the H100 with one weight-read factor for both storage dtypes (the bundled ones are above 1: its
#: kernels' weight copies cost more L2 sectors than their bytes; the properties below are about the
#: traffic model's structure, which holds for any factor <= 1 shared by both dtypes), without the L2's
#: merging of neighbouring blocks' reads (l2_coalesce_blocks 1)
H100 = GpuSpec.model_validate({**gpu("h100").model_dump(), "fused_weight_l2_fraction": 0.8,
                               "fused_weight_l2_fraction_fp16": 0.8, "l2_coalesce_blocks": 1.0})
#: the H100 without L1 filtering of fused kernels' weight re-reads (all of them reach L2)
H100_NO_L1 = GpuSpec.model_validate({**H100.model_dump(), "fused_weight_l2_fraction": 1.0,
                                     "fused_weight_l2_fraction_fp16": 1.0})
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

chans = st.sampled_from([8, 16, 24, 32, 48, 64, 96])
maps = st.sampled_from([7, 8, 12, 14, 16, 28])
dtypes = st.sampled_from(["fp32", "fp16"])
specs = st.sampled_from(["h100", "rtx_a4000", "gtx1660", "orin", "t4"])


@st.composite
def groups(draw, kinds=("dw", "pw", "linear", "pw_dw", "dw_pw", "pw_pw", "pw_dw_pw")):
    """(kind, ops) of a random group with consistent shapes."""
    kind = draw(st.sampled_from(kinds))
    c, m, h = draw(chans), draw(chans), draw(maps)
    s = draw(st.sampled_from([1, 1, 2]))
    k = draw(st.sampled_from([3, 3, 5]))
    if kind == "dw":
        return kind, (dw(c, h, h, k=k, s=s),)
    if kind == "pw":
        return kind, (pw(c, m, h, h, s=s),)
    if kind == "linear":
        return kind, (linear(draw(st.sampled_from([16, 49, 64, 197])), c, m),)
    if kind == "pw_dw":
        return kind, (pw(c, m, h, h), dw(m, h, h, k=k, s=s))
    if kind == "dw_pw":
        ho = (h + 2 * (k // 2) - k) // s + 1
        return kind, (dw(c, h, h, k=k, s=s), pw(c, m, ho, ho))
    if kind == "pw_pw":
        if draw(st.booleans()):
            t = draw(st.sampled_from([16, 49, 64]))
            return kind, (linear(t, c, m), linear(t, m, c))
        return kind, (pw(c, m, h, h), pw(m, c, h, h))
    ho = (h + 2 * (k // 2) - k) // s + 1
    return kind, (pw(c, m, h, h), dw(m, h, h, k=k, s=s), pw(m, c, ho, ho))


def param_bytes(kind: str, ops, dtype: str) -> float:
    """Exact parameter bytes a kernel of `kind` reads at least once: fp32 biases and DW filters, PW and
    linear weight matrices in the storage dtype (the pw/linear kernel's, and the fused kernels' packed
    copies)."""
    e = 2 if dtype == "fp16" else 4
    total = 0
    for op in ops:
        g = geom(op)
        total += g.weight_elems * (4 if g.depthwise else e) + (4 * g.co if g.bias else 0)
    return float(total)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def pick_tile(draw, kind, ops, dtype, spec) -> Tile:
    cands = tiles.candidates(kind, ops, dtype, spec)
    assume(cands)
    return cands[draw(st.integers(0, len(cands) - 1))]


@SETTINGS
@given(st.data(), groups(), dtypes, specs, st.integers(1, 4), st.booleans())
def test_traffic_at_least_compulsory(data, group, dtype, spec_name, batch, residual):
    kind, ops = group
    spec = gpu(spec_name)
    t = pick_tile(data.draw, kind, ops, dtype, spec)
    c = estimate(kind, ops, t, dtype, batch, spec, residual=residual)
    assert c.feasible, c.reason
    comp = compulsory(kind, ops, dtype, batch, residual)
    assert param_bytes(kind, ops, dtype) == comp["weights"]
    # every kernel reads each parameter at least once, at its kind's parameter bytes
    need_read = comp["input"] + param_bytes(kind, ops, dtype) + comp["residual"]
    assert c.gma_read_bytes >= need_read
    assert c.gma_write_bytes >= comp["output"]
    assert c.dram_read_bytes >= need_read
    assert 0 <= c.dram_write_bytes <= c.gma_write_bytes
    assert c.gma_read_bytes % 32 == 0 and c.gma_write_bytes % 32 == 0
    assert c.flops > 0 and c.redundant_flops >= 0
    r = c.kernels[0]
    assert r.blocks_per_sm >= 1 and 0 < r.occupancy <= 1
    assert c.time_s > spec.eff("launch_overhead_s")


@SETTINGS
@given(st.data(), groups(("pw_dw", "dw_pw", "pw_pw", "pw_dw_pw")), dtypes, st.integers(1, 3))
def test_fusion_inequality(data, group, dtype, batch):
    kind, ops = group
    tf_ = pick_tile(data.draw, kind, ops, dtype, H100)
    fused = estimate(kind, ops, tf_, dtype, batch, H100)
    raw = estimate(kind, ops, tf_, dtype, batch, H100_NO_L1)
    comp_f = compulsory(kind, ops, dtype, batch)
    p_f = param_bytes(kind, ops, dtype)
    c_f = comp_f["input"] + p_f + comp_f["output"]
    ovh = fused.gma_bytes - c_f
    assert ovh >= 0
    # L1 filtering only removes weight re-reads: never more L2 traffic, the same writes and DRAM
    assert fused.gma_read_bytes <= raw.gma_read_bytes and fused.gma_write_bytes == raw.gma_write_bytes
    assert fused.dram_bytes == raw.dram_bytes
    lbl_sum = 0.0
    inter = 0.0
    p_lbl = 0.0
    prev_out = 0.0  # |I_{i-1}|
    for i, op in enumerate(ops):
        k = op.kind
        c = estimate(k, (op,), pick_tile(data.draw, k, (op,), dtype, H100), dtype, batch, H100)
        comp = compulsory(k, (op,), dtype, batch)
        p = param_bytes(k, (op,), dtype)
        # the lemma: an LBL kernel moves at least its input, parameters and output
        assert c.gma_bytes >= comp["input"] + p + comp["output"]
        if i > 0:
            assert comp["input"] == prev_out  # all of the intermediate is needed by the next layer
        lbl_sum += c.gma_bytes
        p_lbl += p
        prev_out = comp["output"]
        if i < len(ops) - 1:
            inter += comp["output"]
    d = p_f - p_lbl
    assert d == 0  # every kernel reads PW weights in the storage dtype and DW filters in fp32
    assert fused.gma_bytes <= lbl_sum - 2 * inter + d + ovh
    assert raw.gma_bytes <= lbl_sum - 2 * inter + d + (raw.gma_bytes - c_f)


@SETTINGS
@given(st.sampled_from([16, 32]), st.sampled_from([16, 32, 64]), st.sampled_from([8, 16]), dtypes)
def test_single_tile_fused_overhead_is_zero_when_aligned(c, m, h, dtype):
    """One tile per image covering the map and all filters, rows of whole sectors (h x e a multiple
    of 32 B; channel chunks of 16 and the fp32 weight and bias parts are whole sectors): the pw_pw
    kernel moves exactly C(F) = its needed input + its parameters e (c m + m c) + 4 (m + c) (weights
    in the storage dtype, fp32 biases) + its output, in fp32 and in fp16 (one block reads each
    weight once: nothing for L1 to filter)."""
    ops = (pw(c, m, h, h), pw(m, c, h, h))
    t = Tile(h, h, c, 16, 64)
    assume(tiles.check("pw_pw", ops, t, dtype, H100) is None)
    fused = estimate("pw_pw", ops, t, dtype, 1, H100)
    comp = compulsory("pw_pw", ops, dtype, 1)
    e = 4 if dtype == "fp32" else 2
    params = e * (c * m + m * c) + 4 * (m + c)
    assert param_bytes("pw_pw", ops, dtype) == params
    if h * e % 32 == 0:
        assert fused.gma_read_bytes == comp["input"] + params
        assert fused.gma_write_bytes == comp["output"] == c * h * h * e
        assert fused.gma_bytes == comp["input"] + params + comp["output"]


@SETTINGS
@given(st.data(), groups(), dtypes, st.integers(1, 3), st.integers(1, 5))
def test_monotone_in_batch(data, group, dtype, b1, extra):
    kind, ops = group
    t = pick_tile(data.draw, kind, ops, dtype, H100)
    a = estimate(kind, ops, t, dtype, b1, H100)
    b = estimate(kind, ops, t, dtype, b1 + extra, H100)
    for f in ("gma_read_bytes", "gma_write_bytes", "dram_read_bytes", "dram_write_bytes", "flops", "time_s"):
        assert getattr(b, f) >= getattr(a, f) * (1 - 1e-12), f  # equal up to float rounding


@SETTINGS
@given(groups(), dtypes, specs, st.integers(1, 64), st.integers(1, 64), st.sampled_from([8, 16, 64, 256, 960]),
       st.sampled_from([8, 16, 32, 64]), st.sampled_from([32, 64, 96, 128, 256, 1024, 2048]))  # fmt: skip
def test_infeasible_tiles_have_the_check_reason(group, dtype, spec_name, th, tw, tf, tc, threads):
    kind, ops = group
    spec = gpu(spec_name)
    if kind == "dw":
        tc = tf
    if ops[-1].kind == "linear":
        tw = 1
    t = Tile(th, tw, tf, tc, threads)
    why = tiles.check(kind, ops, t, dtype, spec)
    c = estimate(kind, ops, t, dtype, 1, spec)
    if why:
        assert not c.feasible and why in c.reason and str(t) in c.reason
        assert c.gma_bytes == 0 and c.launches == 0
    else:
        assert c.feasible or "no block fits" in c.reason


def rup(a: int, b: int) -> int:
    return -(-a // b) * b


@SETTINGS
@given(st.data(), st.sampled_from(["pw", "linear", "pw_pw"]), st.sampled_from([16, 32, 64, 96]),
       st.sampled_from([16, 32, 48, 64]), st.sampled_from([16, 32]), st.integers(1, 3))  # fmt: skip
def test_fp16_traffic_is_half_when_aligned(data, kind, c, m, h, batch):
    """Where every row segment is whole sectors in fp16 and in fp32 (map width, tile width, channel
    chunks and filter tiles multiples of 16 elements), fp16 halves the activation traffic and the pw
    kernel's weights, but not the fp32 parameters. With P(e) the parameter bytes read through L2 with
    e-byte storage (pw/linear: the fp32 biases 4 m, re-read by each of the nsp spatial tiles of each
    image: P = batch nsp 4 m in both dtypes; pw_pw: the fused kernel's weights (storage dtype) and
    biases (fp32), packed in rows of whole 16-byte copies: W1 = cdiv(m, tc) c rup(tc e, 16) + 4 m
    (read by every block), W2 = cdiv(c, tf) m rup(tf e, 16) + 4 c (each filter tile once per spatial
    tile), Wr(e) = batch nsp (nf W1 + W2) re-read bytes of which P(e) = keep = max(f Wc, min(Wu, Wr))
    rounded up to whole sectors, Wc(e) = Wr(e) without the biases (they go through L1), Wu(e) = W1 +
    W2, f the spec's fused_weight_l2_fraction) and U(e) the
    distinct parameter bytes (4 m; Wu(e)):

        GMA_read(fp32) - P(4) == 2 (GMA_read(fp16) - P(2)),  GMA_write(fp32) == 2 GMA_write(fp16),
        DRAM_read(fp32) - U(4) == 2 (DRAM_read(fp16) - U(2))   (everything fits in the H100's L2)

    except that the pw/linear kernel's writes count its store instructions, which follow its math path
    (tests/test_pw_stores.py): there each dtype writes every output byte at least once.
    """
    if kind == "pw":
        ops = (pw(c, m, h, h),)
    elif kind == "linear":
        ops = (linear(h * 2, c, m),)
    else:
        ops = (pw(c, m, h, h), pw(m, c, h, h))
    cands = [t for t in tiles.candidates(kind, ops, "fp32", H100)
             if t.tw % 16 in (0, t.tw % 16 if kind == "linear" else 0) and t.tf % 16 == 0 and t.tc % 16 == 0
             and (ops[-1].kind == "linear" or t.tw % 16 == 0)
             and tiles.check(kind, ops, t, "fp16", H100) is None]  # fmt: skip
    assume(cands)
    t = cands[data.draw(st.integers(0, len(cands) - 1))]
    f32 = estimate(kind, ops, t, "fp32", batch, H100)
    f16 = estimate(kind, ops, t, "fp16", batch, H100)
    # pw_pw blocks that share an SM fetch the W1 every block reads once (model.coresident), and how
    # many do depends on the dtype's occupancy: compare launches of at most one block per SM
    assume(kind != "pw_pw" or f32.kernels[0].blocks <= H100.sm_count)
    if kind == "linear":
        nsp = cdiv(h * 2, t.th)
    else:
        nsp = cdiv(h, t.th) * cdiv(h, t.tw)
    def params(e: int) -> tuple[int, int]:  # (P(e), U(e))
        if kind != "pw_pw":
            return batch * nsp * 4 * m, 4 * m
        # packed rows: W1 by tc (cdiv(m, tc) chunks of c rows), W2 by tf, each row rup(t e, 16) bytes
        w1 = cdiv(m, t.tc) * c * rup(t.tc * e, 16) + 4 * m
        w2 = cdiv(c, t.tf) * m * rup(t.tf * e, 16) + 4 * c
        wr = batch * nsp * (cdiv(c, t.tf) * w1 + w2)
        wc = wr - batch * nsp * (cdiv(c, t.tf) * 4 * m + 4 * c)  # the packed rows (the biases go through L1)
        wu = w1 + w2
        keep = max(Fraction(str(H100.fit.fused_weight_l2_fraction)) * wc, min(wu, wr))
        return 32 * math.ceil(keep / 32), wu

    (p32, u32), (p16, u16) = params(4), params(2)
    assert f32.gma_read_bytes - p32 == 2 * (f16.gma_read_bytes - p16)
    if kind == "pw_pw":
        assert f32.gma_write_bytes == 2 * f16.gma_write_bytes
    else:  # pw.cu's stores follow its math path (fp16 mma fragments, fp32 FMA register block): at least once
        out = batch * math.prod(ops[-1].output_shapes[0][1:])
        assert f32.gma_write_bytes >= 4 * out and f16.gma_write_bytes >= 2 * out
    assert f32.dram_read_bytes - u32 == 2 * (f16.dram_read_bytes - u16)


@SETTINGS
@given(st.data(), groups(("dw", "dw_pw", "pw_dw")), st.integers(1, 2))
def test_fp16_traffic_at_least_half_otherwise(data, group, batch):
    # with halos and unaligned rows fp16 wastes relatively more of each sector: half <= fp16 <= fp32
    kind, ops = group
    cands = [t for t in tiles.candidates(kind, ops, "fp32", H100) if tiles.check(kind, ops, t, "fp16", H100) is None]
    assume(cands)
    t = cands[data.draw(st.integers(0, len(cands) - 1))]
    f32 = estimate(kind, ops, t, "fp32", batch, H100)
    f16 = estimate(kind, ops, t, "fp16", batch, H100)
    assert f32.gma_bytes / 2 <= f16.gma_bytes <= f32.gma_bytes
