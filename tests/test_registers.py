"""The compiled-register table (fuseplanner.kernels.registers), its use in feasibility and occupancy, the
cluster placement limit of the time model (spec cluster_sms)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from opfactory import dw, linear, pw

from fuseplanner.core.errors import PlanError
from fuseplanner.core.ir import Tile
from fuseplanner.cost import estimate
from fuseplanner.cost import model as cost_model
from fuseplanner.cost.time import blocks_per_sm, kernel_time, warp_rates
from fuseplanner.costbase.work import Work
from fuseplanner.hw.spec import GpuSpec, gpu
from fuseplanner.kernels import registers, tiles
from fuseplanner.kernels.family import family

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
    # dw_pw exact fp32, 256 threads, 2 accumulators a thread: base 111 + 1.14 x 2 = 113.28 -> 114
    assert registers.allocated("dw_pw", "fp32", 256, 2.0, PINNED) == 114
    # fp16 with 4 accumulators: 73 + 1.04 x 4 = 77.16 -> 78; TF32 has no row here: it shares fp32's
    assert registers.allocated("dw_pw", "fp16", 256, 4.0, PINNED) == 78
    assert registers.allocated("dw_pw", "tf32", 256, 2.0, PINNED) == 114
    # dw fp32 at 128 threads: 32 + 0 x accumulators
    assert registers.allocated("dw", "fp32", 128, 4.0, PINNED) == 32
    # 64-thread dw_pw fp32 of 196 accumulators a thread: 88 + 1.14 x 196 = 311 -> the 255 ceiling
    assert registers.wanted("dw_pw", "fp32", 64, 196.0, PINNED) == 312
    assert registers.allocated("dw_pw", "fp32", 64, 196.0, PINNED) == 255
    # the bundled table (fitted to the H100 compiles of data/records/h100/registers): 55 + 1.17 x 2 = 57.34 -> 58
    assert registers.allocated("dw_pw", "fp32", 256, 2.0) == 58
    assert registers.mode("fp32", "tf32") == "tf32" and registers.mode("fp16", "tf32") == "fp16"


def test_allocated_falls_back_to_the_accumulators():
    assert registers.allocated("dw_pw", "fp32", 128, 8.0, table={}) == 40 + 8 == registers.least(8.0)
    # a thread count the row lacks takes the middle base of the row
    row = {("pw", "fp32"): (1.0, {64: 30, 128: 50, 256: 70})}
    assert registers.allocated("pw", "fp32", 512, 2.0, table=row) == 50 + 2


def test_fused_accumulators_follow_the_launchers_gemm_split():
    # PW->DW 160 -> 960 channels on 24 x 24, tile 12 x 24 pixels x 64 channels, chunks of 16, 256 threads.
    # The expansion runs over the 3x3 DW's halo window: (12 - 1) + 3 = 14 rows of 24 + 2 = 26 columns.
    ops = (pw(160, 960, 24, 24), dw(960, 24, 24))
    t = Tile(12, 24, 64, 16, 256)
    # fp16 stages rows from an even column: 26 + 1 -> 28 wide, n = 14 x 28 = 392; the 64 x 392 GEMM in
    #   warp groups of 64 x 56 (4 x 7 mma tiles of 16 x 8, 4 fp32 accumulators a thread each) = 112
    assert tiles.block_gemms("pw_dw", ops, t, 2)["1"].np_ == 392
    assert tiles.mma_group(64, 392, 8, False)[:2] == (64, 56)
    assert family("pw_dw").accumulators("pw_dw", ops, t, "fp16", "fp32") == 112
    # TF32: 26 wide, n = 364 -> 368; groups of 64 x 16 (4 x 2 tiles) = 32; exact fp32: a 4 x 8 micro-tile
    #   per thread = 32 (streamed: one group at a time)
    assert tiles.mma_group(64, 368, 8, False)[:2] == (64, 16)
    assert family("pw_dw").accumulators("pw_dw", ops, t, "fp32", "tf32") == 32
    assert tiles.fma_group(64, 364, 256, False)[:2] == (4, 8)
    assert family("pw_dw").accumulators("pw_dw", ops, t, "fp32", "fp32") == 32
    # registers: fp16 row at 256 threads 46 + 1.47 x 112 = 210.64 -> 211 (the 64-register row the
    #   table had before it counted accumulators put every tile of this kind at 64); TF32 42 + 1.4 x 32
    #   = 86.8 -> 87; exact fp32 39 + 1.29 x 32 = 80.28 -> 81
    assert tiles.regs_per_thread("pw_dw", ops, t, "fp16") == 211
    assert tiles.regs_per_thread("pw_dw", ops, t, "fp32", "tf32") == 87
    assert tiles.regs_per_thread("pw_dw", ops, t, "fp32") == 81
    # DW->PW keeps its PW outputs resident: 960 -> 160 on 7 x 7, 1 x 4 pixels x 128 filters, 256 threads:
    #   exact fp32 1 x 2 micro-tiles, 128 x 4 / 2 = 256 of them over 256 threads -> 2 accumulators;
    #   fp16 the 128 x 8 (4 pixels padded to 8) GEMM in 16 x 8 tiles, 8 over 8 warps -> 4 accumulators
    ops = (dw(960, 7, 7), pw(960, 160, 7, 7))
    t = Tile(1, 4, 128, 32, 256)
    assert family("dw_pw").accumulators("dw_pw", ops, t, "fp32", "fp32") == 2
    assert family("dw_pw").accumulators("dw_pw", ops, t, "fp16", "fp32") == 4
    # layer kernels count their outputs a thread: 128 x 4 / 256 = 2
    assert family("pw").accumulators("pw", ops[1:], t, "fp32", "fp32") == 2


def test_occupancy_uses_the_compiled_registers(pinned):
    # a 256-thread exact-fp32 DW->PW block: 114 registers -> 114 x 32 = 3,648 -> 3,840 a warp (units of
    # 256) x 8 warps = 30,720 a block: 2 blocks per SM (the accumulator estimate, 42, allowed 3, where
    # shared memory limits it)
    ops = (dw(960, 7, 7), pw(960, 160, 7, 7))
    t = Tile(1, 4, 128, 32, 256)
    c = estimate("dw_pw", ops, t, "fp32", 1, H100)
    k = c.kernels[0]
    assert (k.regs_per_thread, k.blocks_per_sm) == (114, 2)
    assert blocks_per_sm(k.smem_bytes, 256, registers.least(2.0), H100.hw) == (3, "shared memory")


def test_feasibility_rejects_by_registers_with_reason():
    ops = (dw(64, 112, 112), pw(64, 256, 112, 112))
    t = Tile(32, 32, 32, 8, 64)
    # exact fp32: the resident 32 x 1024 PW GEMM in 4 x 8 micro-tiles, 1,024 of them over 64 threads = 16
    #   a thread x 32 = 512 accumulators; the fp32 dw_pw row: base 59 at 64 threads + 1.17 x 512 = 658.04
    #   -> 659 registers
    why = tiles.check("dw_pw", ops, t, "fp32", H100)
    assert why is not None and "659 registers" in why and "limit 255" in why and "spill" in why
    assert not estimate("dw_pw", ops, t, "fp32", 1, H100).feasible


def test_tiles_the_compiler_would_spill_are_refused():
    # MobileNetV1's fp16 DW->PW at batch 8 (data/records/h100/fit/mobilenet_v1-fp16-b8-sweep): 28 x 14
    # pixels x 128 filters over 256 threads: the resident 128 x 392 GEMM in 64 x 56 warp groups, (128 / 64)
    # x (392 / 56) = 14 over 8 warps -> 2 a warp x 112 = 224 accumulators; the fp16 dw_pw row gives
    # 55 + 1.12 x 224 = 305.9 -> 306 > 255 registers (it compiled to 32 registers and a 2,144-B stack
    # frame and ran 6.4x its predicted time); 4 x 56 x 128 (n = 224: 2 x 4 = 8 groups, one a warp, 112
    # accumulators) wants 55 + 125.4 -> 181
    ops = (dw(128, 56, 56), pw(128, 128, 56, 56))
    assert tiles.regs_wanted("dw_pw", ops, Tile(28, 14, 128, 32, 256), "fp16") == 306
    why = tiles.check("dw_pw", ops, Tile(28, 14, 128, 32, 256), "fp16", H100)
    assert why is not None and "306 registers" in why
    assert tiles.regs_wanted("dw_pw", ops, Tile(4, 56, 128, 64, 256), "fp16") == 181
    assert tiles.check("dw_pw", ops, Tile(4, 56, 128, 64, 256), "fp16", H100) is None
    feasible = {t for t, _, _ in tiles.feasible_candidates("dw_pw", ops, "fp16", H100)}
    assert Tile(28, 14, 128, 32, 256) not in feasible and Tile(4, 56, 128, 64, 256) in feasible


def test_precision_picks_the_row_and_the_split():
    # the same PW->DW tile wants 211 registers in fp16 but 87 in TF32 (above): feasibility and the
    # candidate set follow the precision they are asked for
    ops = (pw(160, 960, 24, 24), dw(960, 24, 24))
    tf32 = {t: r for t, _, r in tiles.feasible_candidates("pw_dw", ops, "fp32", H100, "tf32")}
    exact = {t: r for t, _, r in tiles.feasible_candidates("pw_dw", ops, "fp32", H100)}
    shared = tf32.keys() & exact.keys()
    assert len(shared) > 100 and sum(tf32[t] != exact[t] for t in shared) > len(shared) // 2
    t = Tile(12, 24, 64, 16, 256)
    assert (tf32[t], exact[t]) == (87, 81)


def _work(blocks: int) -> Work:
    return Work(gma_read=1e6, gma_write=1e5, in_unique=1e6, w_unique=1e4, res_unique=0.0, out_unique=1e5,
                in_img=1e6, out_img=1e5, useful_flops=1e8, cuda_flops=1e7, mma_flops=1e8, iters=4,
                blocks=blocks, nf=1, nsp=blocks)  # fmt: skip


def test_cluster_launch_waves_on_the_cluster_sms():
    hw = H100.hw
    rates = (1e10, 2e10, 0.8, 1e10, 0.0, 0.0, 0.0)
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
    uncapped = kernel_time(w, 1e6, 3, 256, hw, 1e14, (1e10, 2e10, 1.0, 1e12, 0.0, 0.0, 0.0), 2)
    assert uncapped == pytest.approx(hw.launch_overhead_s + chain + hw.mem_latency_s, rel=1e-9)
    # a cap of 4 warps: the SM runs its 3 blocks' work (8 warps' worth each at one warp's rate) at 4
    #   warps' rate: 3 x 1.894 us x 8 / 4 = 11.36 us, above the 3.4 us chain
    capped = kernel_time(w, 1e6, 3, 256, hw, 1e14, (1e10, 2e10, 1.0, 1e12, 4.0, 0.0, 0.0), 2)
    assert capped == pytest.approx(hw.launch_overhead_s + 3 * t_own * 8 / 4 + hw.mem_latency_s, rel=1e-9)
    # a cap of 16 warps (3 x 1.894 x 8 / 16 = 2.84 us) stays under the chain: no change
    assert kernel_time(w, 1e6, 3, 256, hw, 1e14, (1e10, 2e10, 1.0, 1e12, 16.0, 0.0, 0.0), 2) == uncapped


def test_chunk_step_adds_to_each_iteration_of_the_chain():
    hw = replace(H100.hw, coresident_exponent=0.0)
    w = _work(396)  # as above: one full wave of 3 blocks per SM, 4 chunk iterations
    uncapped = kernel_time(w, 1e6, 3, 256, hw, 1e14, (1e10, 2e10, 1.0, 1e12, 0.0, 0.0, 0.0), 2)
    # 0.1 us per chunk iteration: 4 iterations x 0.1 us = 0.4 us more chain, in the one wave
    stepped = kernel_time(w, 1e6, 3, 256, hw, 1e14, (1e10, 2e10, 1.0, 1e12, 0.0, 0.0, 1e-7), 2)
    assert stepped - uncapped == pytest.approx(4e-7, rel=1e-9)
    # with co-residency the step is part of the chain that 3 resident blocks slow: x 3 ** 0.5
    shared = replace(hw, coresident_exponent=0.5)
    a, b = (kernel_time(w, 1e6, 3, 256, shared, 1e14, (1e10, 2e10, 1.0, 1e12, 0.0, 0.0, c), 2) for c in (0.0, 1e-7))
    assert b - a == pytest.approx(4e-7 * 3**0.5, rel=1e-9)


def test_sm_issue_cap_is_for_fused_kinds_only():
    hw = H100.hw
    assert hw.fused_sm_issue_warps > 0
    assert warp_rates("pw", "fp32", "fp32", hw, ())[4] == 0.0 and warp_rates("dw", "fp16", "fp32", hw, ())[4] == 0.0
    assert warp_rates("pw_dw_pw", "fp32", "fp32", hw, ())[4] == hw.fused_sm_issue_warps


def test_fixed_launch_time_adds_once_per_launch_by_kind():
    hw = replace(H100.hw, kernel_fixed_s=0.5e-6, fused_kernel_fixed_s=3e-6)
    w = _work(396)
    rates = (1e10, 2e10, 1.0, 1e12, 0.0, 0.0, 0.0)
    base = kernel_time(w, 1e6, 3, 256, hw, 1e14, rates, 2)
    # 2 us of fixed time: added once to the launch, whatever its waves (396 blocks at 3 per SM: one wave;
    #   at 1 per SM: three waves, still one fixed 2 us)
    assert kernel_time(w, 1e6, 3, 256, hw, 1e14, (*rates[:5], 2e-6, 0.0), 2) == pytest.approx(base + 2e-6, rel=1e-12)
    three = kernel_time(w, 1e6, 1, 256, hw, 1e14, rates, 2)
    assert kernel_time(w, 1e6, 1, 256, hw, 1e14, (*rates[:5], 2e-6, 0.0), 2) == pytest.approx(three + 2e-6, rel=1e-12)
    # the spec's field by kind: layer-by-layer kernels and PW->PW over NCHW maps kernel_fixed_s; the fused
    # kinds with a DW stage and PW->PW over channel-last tokens (linear -> linear) fused_kernel_fixed_s
    assert warp_rates("dw", "fp32", "fp32", hw, ())[5] == 0.5e-6 and warp_rates("pw", "fp16", "fp32", hw, ())[5] == 0.5e-6
    se = (pw(96, 4, 1, 1), pw(4, 96, 1, 1))
    mlp = (linear(256, 64, 128), linear(256, 128, 64))
    assert warp_rates("pw_pw", "fp16", "fp32", hw, se)[5] == 0.5e-6 == warp_rates("pw_pw", "fp32", "tf32", hw, se)[5]
    assert warp_rates("pw_pw", "fp16", "fp32", hw, mlp)[5] == 3e-6 == warp_rates("pw_pw", "fp32", "fp32", hw, mlp)[5]
    assert all(warp_rates(k, "fp32", "fp32", hw, ())[5] == 3e-6 for k in ("dw_pw", "pw_dw", "pw_dw_pw"))
    with pytest.raises(PlanError, match="depends on its ops"):  # PW->PW cannot tell NCHW from tokens without them
        warp_rates("pw_pw", "fp32", "fp32", hw, ())
    # ... and a whole estimate charges them: the SE pair's predicted time moves by kernel_fixed_s, the
    # MLP pair's by fused_kernel_fixed_s, when that field alone changes
    def est(ops, **fit):
        g = GpuSpec.model_validate({**H100.model_dump(), **fit})
        return estimate("pw_pw", ops, Tile(1, 1, 64, 8, 64) if ops is se else Tile(16, 1, 64, 32, 256), "fp32", 1,
                        g).time_s  # fmt: skip
    base = est(se)
    assert est(se, kernel_fixed_s=H100.hw.kernel_fixed_s + 1e-6) == pytest.approx(base + 1e-6, rel=1e-9)
    assert est(se, fused_kernel_fixed_s=H100.hw.fused_kernel_fixed_s + 1e-6) == pytest.approx(base, rel=1e-12)
    base = est(mlp)
    assert est(mlp, fused_kernel_fixed_s=H100.hw.fused_kernel_fixed_s + 1e-6) == pytest.approx(base + 1e-6, rel=1e-9)
