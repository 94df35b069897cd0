"""The compiled-register table (fuseplanner.kernels.registers), its use in feasibility and occupancy, the
cluster placement limit of the time model (spec cluster_sms)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from opfactory import dw, pw

from fuseplanner.core.ir import Tile
from fuseplanner.cost import estimate
from fuseplanner.cost import model as cost_model
from fuseplanner.cost.time import blocks_per_sm, kernel_time, warp_rates
from fuseplanner.costbase.work import Work
from fuseplanner.hw.spec import GpuSpec, gpu
from fuseplanner.kernels import registers, tiles

H100 = gpu("h100")

#: DW->PW and DW rows of the compiled-register table pinned at the values the hand arithmetic below
#: uses (an earlier fit of the table), so that a refit of the bundled table after a
#: kernel change does not move these cases.
PINNED = {("dw_pw", "fp32"): (1.14, {64: 88, 128: 78, 256: 111}), ("dw_pw", "fp16"): (1.04, {64: 76, 128: 68, 256: 73}),
          ("dw", "fp32"): (0.0, {64: 32, 128: 32, 256: 34})}


@pytest.fixture
def pinned(monkeypatch):
    for key, row in PINNED.items():
        monkeypatch.setitem(registers.COMPILED, key, row)


def test_allocated_from_the_table_by_hand():
    # dw_pw fp32, 256 threads: base 111 + 1.14 x (128 x 1 x 4 / 256 = 2 outputs) = 113.28 -> 114
    assert registers.allocated("dw_pw", Tile(1, 4, 128, 32, 256), "fp32", PINNED) == 114
    # the same tile in fp16: 73 + 1.04 x 2 = 75.08 -> 76
    assert registers.allocated("dw_pw", Tile(1, 4, 128, 32, 256), "fp16", PINNED) == 76
    # dw fp32 at 128 threads: 32 + 0 x outputs
    assert registers.allocated("dw", Tile(8, 8, 8, 8, 128), "fp32", PINNED) == 32
    # 64-thread dw_pw fp32 of 196 outputs a thread: 88 + 1.14 x 196 = 311 -> the 255 ceiling
    assert registers.allocated("dw_pw", Tile(7, 7, 256, 8, 64), "fp32", PINNED) == 255
    # the bundled table (refitted for the current fused kernels): 61 + 1.31 x 2 = 63.62 -> 64
    assert registers.allocated("dw_pw", Tile(1, 4, 128, 32, 256), "fp32") == 64


def test_allocated_falls_back_to_the_accumulators():
    t = Tile(4, 8, 32, 8, 128)  # 8 outputs a thread
    assert registers.allocated("dw_pw", t, "fp32", table={}) == 40 + 8 == registers.accumulators(t)
    # a thread count the row lacks takes the middle base of the row
    row = {("pw", "fp32"): (1.0, {64: 30, 128: 50, 256: 70})}
    assert registers.allocated("pw", Tile(4, 8, 32, 8, 512), "fp32", table=row) == 50 + 2


def test_occupancy_uses_the_compiled_registers(pinned):
    # a 256-thread exact-fp32 DW->PW block: 114 registers -> 114 x 32 = 3,648 -> 3,840 a warp (units of
    # 256) x 8 warps = 30,720 a block: 2 blocks per SM (the accumulator estimate, 42, allowed 3, where
    # shared memory limits it)
    ops = (dw(960, 7, 7), pw(960, 160, 7, 7))
    t = Tile(1, 4, 128, 32, 256)
    c = estimate("dw_pw", ops, t, "fp32", 1, H100)
    k = c.kernels[0]
    assert (k.regs_per_thread, k.blocks_per_sm) == (114, 2)
    assert blocks_per_sm(k.smem_bytes, 256, registers.accumulators(t), H100.hw) == (3, "shared memory")


def test_feasibility_rejects_by_registers_with_reason():
    ops = (dw(64, 112, 112), pw(64, 256, 112, 112))
    t = Tile(32, 32, 32, 8, 64)  # 32 x 32 x 32 / 64 = 512 outputs a thread
    # the fp32 dw_pw row: base 59 at 64 threads + 1.31 x 512 = 729.7 -> 730 registers
    why = tiles.check("dw_pw", ops, t, "fp32", H100)
    assert why is not None and "730 registers" in why and "limit 255" in why and "spill" in why
    assert not estimate("dw_pw", ops, t, "fp32", 1, H100).feasible


def test_tiles_the_compiler_would_spill_are_refused():
    # MobileNetV1's fp16 DW->PW at batch 8 (data/records/h100/fit/mobilenet_v1-fp16-b8-sweep): 28 x 14
    # pixels x 128 filters over 256 threads = 196 outputs a thread; the fp16 dw_pw row gives
    # 61 + 1.07 x 196 = 270.7 -> 271 > 255 registers (it compiled to 32 registers and a 2,144-B stack
    # frame and ran 6.4x its predicted time); 4 x 56 x 128 (112 outputs) wants 61 + 119.8 -> 181
    ops = (dw(128, 56, 56), pw(128, 128, 56, 56))
    assert registers.wanted("dw_pw", Tile(28, 14, 128, 32, 256), "fp16") == 271
    why = tiles.check("dw_pw", ops, Tile(28, 14, 128, 32, 256), "fp16", H100)
    assert why is not None and "271 registers" in why
    assert tiles.check("dw_pw", ops, Tile(4, 56, 128, 64, 256), "fp16", H100) is None
    feasible = {t for t, _, _ in tiles.feasible_candidates("dw_pw", ops, "fp16", H100)}
    assert Tile(28, 14, 128, 32, 256) not in feasible and Tile(4, 56, 128, 64, 256) in feasible


def _work(blocks: int) -> Work:
    return Work(gma_read=1e6, gma_write=1e5, in_unique=1e6, w_unique=1e4, res_unique=0.0, out_unique=1e5,
                in_img=1e6, out_img=1e5, useful_flops=1e8, cuda_flops=1e7, mma_flops=1e8, iters=4,
                blocks=blocks, nf=1, nsp=blocks)  # fmt: skip


def test_cluster_launch_waves_on_the_cluster_sms():
    hw = H100.hw
    rates = (1e10, 2e10, 0.8, 1e10, 0.0, 0.0)
    args = (2, 256, hw, 1e14, rates, 2)
    # 256 blocks at 2 per SM: one wave on 132 SMs (264 slots), two on the 120 SMs clusters reach (240)
    one = kernel_time(_work(256), 1e6, *args)
    two = kernel_time(_work(256), 1e6, *args, sms=hw.cluster_sms)
    assert hw.cluster_sms == 120
    assert two > 1.5 * (one - hw.launch_overhead_s) + hw.launch_overhead_s
    # 224 blocks fit one wave either way: only the memory share of fewer SMs differs
    assert kernel_time(_work(224), 1e6, *args, sms=120) == pytest.approx(kernel_time(_work(224), 1e6, *args), rel=0.1)


def test_split_reduction_adds_one_latency_and_large_clusters_use_cluster_sms(monkeypatch, pinned):
    ops = (dw(960, 7, 7), pw(960, 160, 7, 7))
    t = Tile(1, 4, 128, 32, 256)  # 14 spatial x 2 filter tiles = 28 blocks, 30 chunks -> KS 8 (224 blocks)
    ks = tiles.cluster_split("dw_pw", ops, t, 1, H100)
    assert ks == 8
    km = cost_model.context("dw_pw", ops, "fp32")
    w0 = km.work(t, 1, False)
    w, depth = cost_model.scheduled("dw_pw", ops, t, "fp32", w0, ks)
    assert depth == tiles.fused_stages("dw_pw", ops, t, "fp32") - 1
    # ceil(30 / 8) = 4 chunks each, then the reduction: `depth` steps, i.e. one whole latency
    assert (ks, w.blocks, w.iters) == (8, 224, 4 + depth)
    # layer by layer: pw 960 -> 160 on 7x7 in 2x4 x 64-filter tiles: 4 x 2 x 3 = 24 blocks, 30 chunks of
    # 32 -> KS 8 (2 x 8 x 24 = 384 > 2 x 132 stops there); each block 4 chunks + 5 (ring depth) steps
    (p,) = ops[1:]
    t = Tile(2, 4, 64, 32, 256)
    ks = tiles.cluster_split("pw", (p,), t, 1, H100, "fp32")
    assert ks == 8
    w, depth = cost_model.scheduled("pw", (p,), t, "fp32", cost_model.context("pw", (p,), "fp32").work(t, 1, False), ks)
    assert (ks, depth, w.blocks, w.iters) == (8, 5, 24 * 8, 4 + 5)
    # a reduction under LBL_SPLIT_MIN_CHANNELS (192 < 256) or a tile whose partial outgrows its ring: none
    assert tiles.cluster_split("pw", (pw(192, 160, 7, 7),), Tile(2, 4, 64, 16, 256), 1, H100, "fp32") == 1
    # 8x8 pixels x 256 filters, chunks of 8: ring stage 256*(8+4)*4 + 8*(64+8)*4 = 14592 B, 4 stages in
    # 64 KiB = 58368 B; the partial tile 256*(64+4)*4 = 69632 B does not fit
    wide, big = pw(960, 320, 8, 8), Tile(8, 8, 256, 8, 256)
    assert (tiles.smem_bytes("pw", (wide,), big, "fp32"), tiles.split_partial_bytes(big)) == (58368, 69632)
    assert tiles.cluster_split("pw", (wide,), big, 1, H100, "fp32") == 1
    # 16 x 4 spatial tiles x 1 filter tile = 64 blocks, 8 chunks -> KS 4: 256 blocks at 2 per SM, one
    # wave on 132 SMs, two on the 120 that clusters of 4 reach
    ops = (dw(64, 16, 16), pw(64, 64, 16, 16))
    t = Tile(1, 4, 64, 8, 256)
    c = estimate("dw_pw", ops, t, "fp32", 1, H100)
    assert (c.kernels[0].blocks, c.kernels[0].blocks_per_sm) == (256, 2)
    all_sms = GpuSpec.model_validate({**H100.model_dump(), "cluster_sms": None})
    assert all_sms.hw.cluster_sms == 132
    floor = H100.hw.launch_overhead_s + H100.hw.fused_kernel_fixed_s  # the launch's fixed part, the same either way
    assert c.time_s - floor > 1.3 * (estimate("dw_pw", ops, t, "fp32", 1, all_sms).time_s - floor)


def test_sm_issue_cap_floors_a_wave_of_fused_blocks():
    hw = replace(H100.hw, coresident_exponent=0.0)  # the chain alone, not slowed by co-residency
    w = _work(396)  # 132 SMs x 3 blocks: one full wave
    # own compute of a block: (1e7 DW FLOPs / 1e10 + 1e8 PW FLOPs / 2e10) / (396 blocks x 8 warps ** 1.0)
    #   = 6e-3 / 3168 = 1.894 us; chain = 4 iterations x latency / depth 2 + the wave's bytes at the
    #   larger of L2 and DRAM bandwidth + own compute
    t_own = 6e-3 / 3168
    chain = 4 * hw.mem_latency_s / 2 + max(1.1e6 / hw.l2_bw, 1e6 / hw.dram_bw) + t_own
    uncapped = kernel_time(w, 1e6, 3, 256, hw, 1e14, (1e10, 2e10, 1.0, 1e12, 0.0, 0.0), 2)
    assert uncapped == pytest.approx(hw.launch_overhead_s + chain + hw.mem_latency_s, rel=1e-9)
    # a cap of 4 warps: the SM runs its 3 blocks' work (8 warps' worth each at one warp's rate) at 4
    #   warps' rate: 3 x 1.894 us x 8 / 4 = 11.36 us, above the 3.4 us chain
    capped = kernel_time(w, 1e6, 3, 256, hw, 1e14, (1e10, 2e10, 1.0, 1e12, 4.0, 0.0), 2)
    assert capped == pytest.approx(hw.launch_overhead_s + 3 * t_own * 8 / 4 + hw.mem_latency_s, rel=1e-9)
    # a cap of 16 warps (3 x 1.894 x 8 / 16 = 2.84 us) stays under the chain: no change
    assert kernel_time(w, 1e6, 3, 256, hw, 1e14, (1e10, 2e10, 1.0, 1e12, 16.0, 0.0), 2) == uncapped


def test_sm_issue_cap_is_for_fused_kinds_only():
    hw = H100.hw
    assert hw.fused_sm_issue_warps > 0
    assert warp_rates("pw", "fp32", "fp32", hw)[4] == 0.0 and warp_rates("dw", "fp16", "fp32", hw)[4] == 0.0
    assert warp_rates("pw_dw_pw", "fp32", "fp32", hw)[4] == hw.fused_sm_issue_warps


def test_fixed_launch_time_adds_once_per_launch_by_kind():
    hw = replace(H100.hw, kernel_fixed_s=0.5e-6, fused_kernel_fixed_s=3e-6)
    w = _work(396)
    rates = (1e10, 2e10, 1.0, 1e12, 0.0, 0.0)
    base = kernel_time(w, 1e6, 3, 256, hw, 1e14, rates, 2)
    # 2 us of fixed time: added once to the launch, whatever its waves (396 blocks at 3 per SM: one wave;
    #   at 1 per SM: three waves, still one fixed 2 us)
    assert kernel_time(w, 1e6, 3, 256, hw, 1e14, (*rates[:5], 2e-6), 2) == pytest.approx(base + 2e-6, rel=1e-12)
    three = kernel_time(w, 1e6, 1, 256, hw, 1e14, rates, 2)
    assert kernel_time(w, 1e6, 1, 256, hw, 1e14, (*rates[:5], 2e-6), 2) == pytest.approx(three + 2e-6, rel=1e-12)
    # the spec's field by kind: layer-by-layer kernels kernel_fixed_s, fused ones fused_kernel_fixed_s
    assert warp_rates("dw", "fp32", "fp32", hw)[5] == 0.5e-6 and warp_rates("pw", "fp16", "fp32", hw)[5] == 0.5e-6
    assert warp_rates("dw_pw", "fp32", "fp32", hw)[5] == 3e-6 and warp_rates("pw_pw", "fp16", "fp32", hw)[5] == 3e-6
