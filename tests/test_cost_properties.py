"""Property tests of the cost models (hypothesis).

Fusion inequality (proved here for every generated case). For a fused kernel F over a chain of
layer-by-layer kernels L_1 .. L_n (n = 2 or 3) with intermediates I_1 .. I_{n-1}, any tiles:

    GMA(F) <= sum_i GMA(L_i) - 2 sum_j |I_j| + ovh(F)

where |X| are exact tensor bytes and ovh(F) = GMA(F) - C(F) is the fused kind's overhead: what it
moves beyond its compulsory bytes C(F) = |needed input of L_1| + sum_i |W_i| + |out of L_n|
(+ |residual|): the input re-reads per filter tile, halo re-reads, weight re-reads per spatial tile
and partial-sector waste. Proof: every layer-by-layer kernel moves at least its own compulsory bytes
(checked below): GMA(L_1) >= |in_1| + |W_1| + |I_1|, GMA(L_i) >= |I_{i-1}| + |W_i| + |I_i| and
GMA(L_n) >= |I_{n-1}| + |W_n| + |out_n|. Summing, sum_i GMA(L_i) >= C(F) + 2 sum_j |I_j|, and
GMA(F) = C(F) + ovh(F). The overhead itself is >= 0 (checked), and is 0 for a single tile per image
over sector-aligned rows (checked), so fusion saves exactly the intermediates' round trips plus the
unfused kernels' own overheads minus the fused kind's overhead.
"""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from opfactory import dw, linear, pw

from fuseplanner import tiles
from fuseplanner.cost import compulsory, estimate
from fuseplanner.ir import Tile
from fuseplanner.specs import gpu

H100 = gpu("h100")
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
    need_read = comp["input"] + comp["weights"] + comp["residual"]
    assert c.gma_read_bytes >= need_read
    assert c.gma_write_bytes >= comp["output"]
    assert c.dram_read_bytes >= need_read
    assert 0 <= c.dram_write_bytes <= c.gma_write_bytes
    assert c.gma_read_bytes % 32 == 0 and c.gma_write_bytes % 32 == 0
    assert c.flops > 0 and c.redundant_flops >= 0
    r = c.kernels[0]
    assert r.blocks_per_sm >= 1 and 0 < r.occupancy <= 1
    assert c.time_s > spec.eff("launch_overhead_s")


def _lbl_kind(op) -> str:
    return op.kind


@SETTINGS
@given(st.data(), groups(("pw_dw", "dw_pw", "pw_pw", "pw_dw_pw")), dtypes, st.integers(1, 3))
def test_fusion_inequality(data, group, dtype, batch):
    kind, ops = group
    tf_ = pick_tile(data.draw, kind, ops, dtype, H100)
    fused = estimate(kind, ops, tf_, dtype, batch, H100)
    comp_f = compulsory(kind, ops, dtype, batch)
    c_f = comp_f["input"] + comp_f["weights"] + comp_f["output"]
    ovh = fused.gma_bytes - c_f
    assert ovh >= 0
    lbl_sum = 0.0
    inter = 0.0
    for i, op in enumerate(ops):
        k = _lbl_kind(op)
        c = estimate(k, (op,), pick_tile(data.draw, k, (op,), dtype, H100), dtype, batch, H100)
        comp = compulsory(k, (op,), dtype, batch)
        # the lemma: an LBL kernel moves at least its input, weights and output
        assert c.gma_bytes >= comp["input"] + comp["weights"] + comp["output"]
        lbl_sum += c.gma_bytes
        if i < len(ops) - 1:
            inter += comp["output"]
    assert fused.gma_bytes <= lbl_sum - 2 * inter + ovh


@SETTINGS
@given(st.sampled_from([16, 32]), st.sampled_from([16, 32, 64]), st.sampled_from([8, 16]), dtypes)
def test_single_tile_fused_overhead_is_zero_when_aligned(c, m, h, dtype):
    # one tile per image covering the map and all filters; rows, channel chunks (16) and bias chunks
    # a whole number of sectors
    ops = (pw(c, m, h, h), pw(m, c, h, h))
    t = Tile(h, h, c, 16, 64)
    assume(tiles.check("pw_pw", ops, t, dtype, H100) is None)
    fused = estimate("pw_pw", ops, t, dtype, 1, H100)
    comp = compulsory("pw_pw", ops, dtype, 1)
    if h * (4 if dtype == "fp32" else 2) % 32 == 0:
        assert fused.gma_bytes == comp["input"] + comp["weights"] + comp["output"]


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


@SETTINGS
@given(st.data(), st.sampled_from(["pw", "linear", "pw_pw"]), st.sampled_from([16, 32, 64, 96]),
       st.sampled_from([16, 32, 48, 64]), st.sampled_from([16, 32]), st.integers(1, 3))  # fmt: skip
def test_fp16_traffic_is_half_when_aligned(data, kind, c, m, h, batch):
    # aligned: every row segment (map width and tile width, channel chunks, filter tiles) is a
    # multiple of 16 elements, i.e. whole 32 B sectors in fp16 and in fp32
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
    if kind == "pw_pw" and ops[0].kind == "linear":
        assume(t.th * c % 16 == 0)
    f32 = estimate(kind, ops, t, "fp32", batch, H100)
    f16 = estimate(kind, ops, t, "fp16", batch, H100)
    assert f16.gma_read_bytes * 2 == f32.gma_read_bytes
    assert f16.gma_write_bytes * 2 == f32.gma_write_bytes
    assert f16.dram_read_bytes * 2 == f32.dram_read_bytes


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
