"""Issued work of the layer-by-layer pw kernel (kernels.families.pw.cost.issued_per_block) by hand, and the two spec
fields that switch it on (`pw_shared_load_weight` for exact fp32, `pw_mma_load_weight` for tensor cores)
and cap an SM (`sm_issue_warps`), both off by default."""

from __future__ import annotations

import pytest
from opfactory import dw, pw

from fuseplanner.core.ir import Tile
from fuseplanner.cost import estimate, time
from fuseplanner.hw.spec import gpu
from fuseplanner.kernels import tiles
from fuseplanner.kernels.families.pw import cost as pw_cost
from fuseplanner.validation.microbench import apply_measured

PW = pw(32, 16, 7, 7)  # 32 -> 16 channels on a 7 x 7 map


def test_exact_fp32_register_block_pays_its_operand_loads():
    t = Tile(1, 4, 16, 16, 64)
    assert tiles.pw_variant(t, "fp32", "fp32", "pw", 7, 32) == {"USE_TC": 0, "A_THR": 16, "KVEC": 4, "PVEC": 1}
    # A_THR 16 -> RF = 16 / 16 = 1 filter, B = 64 / 16 = 4 threads along the 4 pixels, RP = 1; per channel
    # 1 FMA + 1.0 x (1 / KVEC 4 weight loads + 1 / PVEC 1 pixel loads) = 2.25; k = 2 chunks x 16 = 32:
    # 2 x 32 x 64 threads x 2.25 = 9,216 (useful 2 x 16 x 4 x 32 = 4,096)
    assert pw_cost.issued_per_block(PW, t, "fp32", "fp32", 1, 1.0) == 9216.0
    # a cluster split of 2: the busiest rank runs 1 of the 2 chunks -> k = 16, half of it
    assert pw_cost.issued_per_block(PW, t, "fp32", "fp32", 2, 1.0) == 4608.0
    # no loads charged: the register block's FMAs only, 2 x 32 x 64 x 1 = 4,096 = useful
    assert pw_cost.issued_per_block(PW, t, "fp32", "fp32", 1, 0.0) == 4096.0


def test_idle_pixel_slots_count():
    t = Tile(2, 7, 16, 8, 64)  # 14 pixels
    assert tiles.pw_variant(t, "fp32", "fp32", "pw", 7, 32)["A_THR"] == 4
    # RF = 4, B = 16 threads along 14 pixels -> RP = 1 (2 threads idle); per channel 4 FMAs + 1 + 1 loads
    # = 6; k = 4 chunks x 8 = 32: 2 x 32 x 64 x 6 = 24,576 (useful 2 x 16 x 14 x 32 = 14,336)
    assert pw_cost.issued_per_block(PW, t, "fp32", "fp32", 1, 1.0) == 24576.0


def test_tensor_core_warps_pay_fragment_loads_and_padding():
    t = Tile(1, 4, 16, 16, 64)
    v = tiles.pw_variant(t, "fp16", "fp32", "pw", 7, 32)
    assert (v["USE_TC"], v["WM_T"], v["WN_T"]) == (2, 1, 1)
    # 4 pixels pad to one 8-column mma tile; each of the 2 warps runs WM_T x WN_T = 1 tile per k step
    # plus 1.0 x (1 A + 0.5 x 1 B fragment loads): 2.5; 2 x 16 x 8 x k 32 x 2 warps x 2.5 = 40,960
    assert pw_cost.issued_per_block(PW, t, "fp16", "fp32", 1, 1.0) == 40960.0


def test_both_fields_are_off_by_default_and_reach_pw_estimates_when_set():
    base = gpu("h100")
    assert (base.hw.pw_shared_load_weight, base.hw.pw_mma_load_weight) == (0.0, 0.0) and base.hw.sm_issue_warps == 0.0
    loads = apply_measured(base, {"pw_shared_load_weight": 2.0})
    small = Tile(1, 4, 16, 16, 64)  # 1 x 1 register blocks: the loads more than double the issued work
    times = [estimate("pw", (PW,), small, "fp32", 1, s).time_s for s in (base, loads)]
    assert times[1] > times[0]
    # the depthwise kernel is not touched by either field
    d = dw(32, 7, 7, 3)
    capped = apply_measured(base, {"pw_shared_load_weight": 2.0, "sm_issue_warps": 1.0})
    same = [estimate("dw", (d,), Tile(7, 7, 32, 32, 64), "fp32", 1, s).time_s for s in (base, capped)]
    assert same[0] == same[1]


def test_sm_issue_cap_applies_to_pw_and_linear_not_dw():
    hw = apply_measured(gpu("h100"), {"sm_issue_warps": 6.0}).hw
    assert time.warp_rates("pw", "fp32", "fp32", hw, ())[4] == 6.0
    assert time.warp_rates("linear", "fp16", "fp32", hw, ())[4] == 6.0
    assert time.warp_rates("dw", "fp32", "fp32", hw, ())[4] == 0.0
    assert time.warp_rates("pw_dw", "fp32", "fp32", hw, ())[4] == hw.fused_sm_issue_warps  # the fused kinds keep their own


def test_chunk_step_reaches_pw_and_linear_only():
    # 400 cycles at the H100's clock per chunk iteration of a layer-by-layer pw/linear block
    hw = apply_measured(gpu("h100"), {"pw_chunk_cycles": 400.0}).hw
    assert time.warp_rates("pw", "fp32", "fp32", hw, ())[6] == pytest.approx(400.0 / hw.clock_hz)
    assert time.warp_rates("linear", "fp16", "fp32", hw, ())[6] == pytest.approx(400.0 / hw.clock_hz)
    assert time.warp_rates("dw", "fp32", "fp32", hw, ())[6] == 0.0
    assert time.warp_rates("pw_dw", "fp32", "fp32", hw, ())[6] == 0.0
    # PW's 32 input channels in chunks of 8: 4 iterations per block; 1 x 4 tiles of the 7 x 7 map are
    #   7 x 2 = 14 blocks, one per SM in one wave (no co-residency): 4 x 400 cycles more
    t = Tile(1, 4, 16, 8, 64)
    base = gpu("h100")
    slow = apply_measured(base, {"pw_chunk_cycles": base.fit.pw_chunk_cycles + 400.0})
    times = [estimate("pw", (PW,), t, "fp32", 1, s).time_s for s in (base, slow)]
    assert times[1] - times[0] == pytest.approx(4 * 400.0 / hw.clock_hz, rel=1e-6)


def test_each_load_weight_reaches_its_math_path_only():
    base = gpu("h100")
    small = Tile(1, 4, 16, 16, 64)
    assert not pw_cost.uses_mma(PW, small, "fp32", "fp32") and pw_cost.uses_mma(PW, small, "fp16", "fp32")
    fma = apply_measured(base, {"pw_shared_load_weight": 2.0})
    mma = apply_measured(base, {"pw_mma_load_weight": 2.0})

    def t(dtype, spec):
        return estimate("pw", (PW,), small, dtype, 1, spec).time_s

    # the exact-fp32 weight moves the fp32 (CUDA core) launch and not the fp16 (tensor core) one ...
    assert t("fp32", fma) > t("fp32", base) and t("fp16", fma) == t("fp16", base)
    # ... and the mma weight the other way round
    assert t("fp16", mma) > t("fp16", base) and t("fp32", mma) == t("fp32", base)
