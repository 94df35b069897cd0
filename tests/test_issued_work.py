"""Issued GEMM work of the fused kernels (kernels/families/fused/cost.py `issued_per_block`): what the busiest thread or warp
of a block executes, with idle units, tensor-core padding and shared operand loads, by hand."""

from __future__ import annotations

from dataclasses import replace

from opfactory import dw, pw

from fuseplanner.core.ir import Tile
from fuseplanner.cost import model, time
from fuseplanner.hw.spec import gpu
from fuseplanner.kernels import tiles
from fuseplanner.kernels.families.fused import cost as fused

DW = dw(32, 7, 7, 3)  # 32 channels, 7 x 7 map, 3 x 3 kernel
PW = pw(32, 16, 7, 7)
TILE = Tile(1, 4, 16, 16, 64)  # 4 pixels, 16 filters, chunks of 16 channels, 2 warps


def test_dw_pw_fp16_pays_padding_idle_warp_and_fragment_loads():
    # GEMM of a chunk: 16 filters x 4 pixels x k 16. mma tiles are 16 x 8: the 4 pixels pad to one
    # 8-column tile; 1 tile over 2 warps -> the busiest warp runs 1, the other idles.
    # per chunk: 2 x 16 x 8 x 16 (one m16n8 tile over k = 16) = 4096 FLOPs x 2 warps x 1 tile
    #            x (1 mma + 0.5 x (1 A + 0.5 x 1 B fragment loads) = 1.75) = 14,336
    # 2 chunks (32 channels / 16) -> 28,672 (useful: 2 x 16 x 4 x 32 = 4,096, so 7x)
    # DW (dw_window): one output row a tile, so items of V = 1 row: 16 channels x 1 x 4 = 64 items on 64
    # threads -> 1 each; an item: 1 x 3 x 3 = 9 FMAs + 0.5 x (3 window rows x 3 + 9 taps = 18 shared
    # loads) = 18 FMA-equivalents = 36 FLOP-equivalents: 1 x 64 x 36 = 2,304 per chunk, 4,608 for 2 chunks
    assert fused.issued_per_block("dw_pw", (DW, PW), TILE, 2, 2, 0.5) == (4608.0, 28672.0)


def test_dw_pw_exact_fp32_splits_outputs_over_threads():
    # fma_group(16, 4, 64 threads): 1 x 1 micro-tiles, 64 groups -> one per thread, cost 1 FMA + 0.5 x
    # (1 + 1) loads = 2 per k step; k = TC = 16 (no padding for FMA): 2 x 16 x 64 x 1 x 2 = 4,096 per
    # chunk, 8,192 for 2 chunks (useful 4,096: the shared loads double it); the DW is as for fp16
    assert fused.issued_per_block("dw_pw", (DW, PW), TILE, 4, 0, 0.5) == (4608.0, 8192.0)


def test_shared_load_weight_scales_the_operand_loads_only():
    # the same exact-fp32 block with 2 FMA-equivalents per shared load (spec fused_shared_load_weight):
    # GEMM per k step 1 FMA + 2 x (1 + 1) loads = 5 -> 2 x 16 x 64 x 1 x 5 = 10,240 per chunk, 20,480 for 2;
    # DW item 9 FMAs + 2 x 18 loads = 45 FMA-equivalents = 90 FLOPs x 64 threads = 5,760 per chunk, 11,520
    assert fused.issued_per_block("dw_pw", (DW, PW), TILE, 4, 0, 2.0) == (11520.0, 20480.0)
    # weight 0: FMAs alone, the useful 2 x 16 x 4 x 32 = 4,096 (the split leaves no thread idle) and
    # 2 chunks x 64 items x 2 x 9 = 2,304
    assert fused.issued_per_block("dw_pw", (DW, PW), TILE, 4, 0, 0.0) == (2304.0, 4096.0)


def test_shared_load_weight_reaches_fused_estimates_only():
    from fuseplanner.cost import estimate
    from fuseplanner.validation.microbench import apply_measured

    base = gpu("h100")
    heavy = apply_measured(base, {"fused_shared_load_weight": 4 * base.fit.fused_shared_load_weight})
    assert heavy.hw.fused_shared_load_weight == 4 * base.hw.fused_shared_load_weight
    fused_t = [estimate("dw_pw", (DW, PW), TILE, "fp32", 1, s).time_s for s in (base, heavy)]
    assert fused_t[1] > fused_t[0]  # more issued work per block on the same rates
    lbl = [estimate("dw", (DW,), Tile(7, 7, 16, 16, 64), "fp32", 1, s).time_s for s in (base, heavy)]
    assert lbl[0] == lbl[1]  # the layer-by-layer kernels do not read it


def test_issued_work_reaches_the_launch_time():
    # the same group and tile: the Work the time model sees carries the issued work of every block
    h100 = gpu("h100")
    km = model.context("dw_pw", (DW, PW), "fp16")
    w = km.work(TILE, 1, False)
    no_epilogue = replace(h100.hw, fused_shared_load_weight=0.5, fused_epilogue_weight=0.0)
    got = model.issued("dw_pw", (DW, PW), TILE, "fp16", "fp32", w, 1, no_epilogue)
    assert got.mma_issue == 28672.0 * w.blocks and got.cuda_issue == 4608.0 * w.blocks
    assert got.mma_issue > w.mma_flops  # padding and idle warps cost more than the useful FLOPs
    # own compute at the issued work: the block's chain is longer than at its useful FLOPs
    hw = h100.hw
    rates = time.warp_rates("dw_pw", "fp16", "fp32", hw, ())
    args = (0.0, 1, TILE.threads, hw, time.mma_rate("fp16", "fp32", hw), rates)
    assert time.kernel_time(got, *args) > time.kernel_time(w, *args)


def test_dw_issue_follows_the_kernels_row_items():
    # pw_dw, 8 x 8 outputs, 32 channels, 256 threads: V = 4 rows an item (8 % 4 == 0 and 32 x 2 x 8 = 512
    # items >= 256 threads). An item: 4 x 9 = 36 FMAs + 0.5 x ((4 - 1) + 3 = 6 window rows x 3 + 9 taps =
    # 27 shared loads) = 49.5 FMA-equivalents = 99 FLOP-equivalents -> 2 items a thread x 256 x 99 = 50,688
    # (no idle thread; the 4 rows share 6 of the 12 window rows 4 single-row items would load)
    e, d = pw(16, 32, 16, 16), dw(32, 16, 16, 3)
    assert tiles.dw_rows_per_item(32, 8, 8, 256) == 4
    assert fused.issued_per_block("pw_dw", (e, d), Tile(8, 8, 32, 16, 256), 4, 0, 0.5)[0] == 50_688.0
    # 2 x 4 outputs of 16 channels on 256 threads: 2 rows do not give every thread an item (16 x 1 x 4 = 64
    # < 256), so V = 1: 16 x 2 x 4 = 128 items, 1 a thread x 256 threads (half idle) x 2 x (9 FMAs + 0.5 x
    # (9 window + 9 taps)) = 256 x 36 = 9,216
    assert tiles.dw_rows_per_item(16, 2, 4, 256) == 1
    assert fused.issued_per_block("pw_dw", (e, d), Tile(2, 4, 16, 16, 256), 4, 0, 0.5)[0] == 9_216.0


def test_fused_kinds_run_the_stencil_at_their_own_rate():
    # the fused kernels' DW stencil (V-row items sharing window loads, fp32 operands in shared memory for
    # either storage dtype) has its own field; the layer-by-layer DW kernel keeps its per-dtype rate
    spec = gpu("h100")
    hw = spec.hw
    fused_rate = spec.fit.fused_dw_warp_flops_per_cycle * spec.clock_hz
    for kind in ("pw_dw", "dw_pw", "pw_dw_pw"):
        for dtype in ("fp32", "fp16"):
            assert time.warp_rates(kind, dtype, "fp32", hw, ())[0] == fused_rate
    assert time.warp_rates("dw", "fp16", "fp32", hw, ())[0] == spec.fit.dw_warp_flops_per_cycle_fp16 * spec.clock_hz
    assert time.warp_rates("dw", "fp32", "fp32", hw, ())[0] != fused_rate
    # a faster fused stencil shortens a DW-heavy fused launch: same work, rate doubled -> less time
    km = model.context("dw_pw", (DW, PW), "fp16")
    w = model.issued("dw_pw", (DW, PW), TILE, "fp16", "fp32", km.work(TILE, 1, False), 1, hw)
    args = (0.0, 1, TILE.threads, hw, time.mma_rate("fp16", "fp32", hw))
    rates = time.warp_rates("dw_pw", "fp16", "fp32", hw, ())
    assert time.kernel_time(w, *args, (2 * rates[0], *rates[1:])) < time.kernel_time(w, *args, rates)


def test_staged_epilogue_counts_each_threads_elements():
    # dw_pw, 4 x 56 pixels x 128 filters on 256 threads (kernels/families/fused/fused_dw_pw.cu: the accumulator tile goes
    # through shared memory, then each thread stores every 256th element): 128 x 224 = 28,672 elements,
    # 112 a thread; at 4 FMA-equivalents an element: 112 x 4 x 256 threads x 2 = 229,376 FLOP-equivalents
    d, p = dw(64, 112, 112, 3, 2), pw(64, 128, 56, 56)
    tile = Tile(4, 56, 128, 64, 256)
    assert fused.epilogue_issue("dw_pw", (d, p), tile, 1, 4.0, 3.0) == 229_376.0
    # a cluster split of 2: each block stores 28,672 / 512 = 56 elements a thread, each reading the other
    # block's partial over DSMEM (one load at 3): 56 x (4 + 3) x 256 x 2 blocks x 2 = 401,408
    assert fused.epilogue_issue("dw_pw", (d, p), tile, 2, 4.0, 3.0) == 401_408.0
    # 100 filters do not divide over 256 threads: ceil(100 x 224 / 256) = 88 a thread (87.5 useful)
    assert fused.epilogue_issue("dw_pw", (d, p), Tile(4, 56, 100, 64, 256), 1, 1.0, 3.0) == 88 * 256 * 2.0
    # pw_dw stores its DW outputs from registers: no staged epilogue; a zero weight charges nothing
    e = pw(16, 64, 56, 56)
    assert fused.epilogue_issue("pw_dw", (e, d), tile, 1, 4.0, 3.0) == 0.0
    assert fused.epilogue_issue("dw_pw", (d, p), tile, 1, 0.0, 3.0) == 0.0


def test_pw_pw_also_stages_its_first_pw_every_chunk():
    # pw_pw 32 -> 64 -> 32 over 4 x 8 = 32 pixels, 32 filters, chunks of 16 mid channels, 128 threads:
    # epilogue 32 x 32 / 128 = 8 elements a thread; each of the 64 / 16 = 4 chunks stages 16 (tc, rounded
    # to 16) x 32 (pixels, rounded to 8) = 512 elements, 4 a thread. At weight 4:
    # (8 x 128 + 4 x 4 x 128) x 4 x 2 = (1,024 + 2,048) x 8 = 24,576
    a, b = pw(32, 64, 8, 8), pw(64, 32, 8, 8)
    assert fused.epilogue_issue("pw_pw", (a, b), Tile(4, 8, 32, 16, 128), 1, 4.0, 3.0) == 24_576.0


def test_epilogue_weight_lengthens_large_output_tiles_most():
    # the spec's weight reaches the launch time through the issued CUDA-core work; a tile storing 112
    # elements a thread gains more time from it than one storing 2
    from fuseplanner.cost import estimate
    from fuseplanner.validation.microbench import apply_measured

    base = gpu("h100")
    heavy = apply_measured(base, {"fused_epilogue_weight": base.fit.fused_epilogue_weight + 8.0})
    d, p = dw(64, 112, 112, 3, 2), pw(64, 128, 56, 56)
    big, small = Tile(4, 56, 128, 64, 256), Tile(2, 8, 32, 64, 256)
    gain = {}
    for t in (big, small):
        times = [estimate("dw_pw", (d, p), t, "fp16", 8, s).time_s for s in (base, heavy)]
        assert times[1] > times[0]
        gain[t] = times[1] / times[0]
    assert gain[big] > gain[small]


def test_window_epilogue_counts_each_threads_share_of_the_expansion():
    # pw_dw_pw 16 -> 64 -> 32 on an 8 x 8 map, 3 x 3 DW, 2 x 4 outputs: the halo window is 4 x 6, staged
    # fp16 rows hold whole pairs from an even column, so 4 x 8 = 32 window positions (tiles.block_gemms "1":
    # 16 chunk channels x 32 positions). mma_group(16, 32, 2 warps) picks 16 x 16 warp tiles (1 x 2 mma
    # tiles: cost 1 x (2 + 0.5 x (1 + 1)) = 3 against 3.5 for 1 x 1 and 5.5 for 1 x 4): 2 groups over 2
    # warps, 16 x 16 / 32 = 8 elements a thread. 64 / 16 = 4 chunks, weight 5:
    # 2 x 4 x 8 x 64 threads x 5 = 20,480 FLOP-equivalents
    e, d, p = pw(16, 64, 8, 8), dw(64, 8, 8, 3), pw(64, 32, 8, 8)
    t64 = Tile(2, 4, 32, 16, 64)
    g = tiles.block_gemms("pw_dw_pw", (e, d, p), t64, 2)["1"]
    assert (g.m, g.n) == (16, 32)
    assert fused.stream_elements(g, 64, 2) == 8
    assert fused.window_epilogue_issue("pw_dw_pw", (e, d, p), t64, 2, 2, 5.0) == 20_480.0
    # 128 threads: 16 x 8 warp tiles (1.75 per group, 1 group a warp), 4 elements a thread: the same
    # 20,480 over the block, half of it per thread (what the time model's per-block chain sees)
    t128 = Tile(2, 4, 32, 16, 128)
    assert fused.stream_elements(g, 128, 2) == 4
    assert fused.window_epilogue_issue("pw_dw_pw", (e, d, p), t128, 2, 2, 5.0) == 20_480.0
    # pw_dw applies it on its last chunk only: 32 filters x 32 positions, mma_group(32, 32, 2 warps)
    # picks 16 x 32 (1 x 4 tiles, cost 4 + 0.5 x (1 + 2) = 5.5, first of the ties) -> 512 / 32 = 16 a
    # thread: 2 x 1 x 16 x 64 x 5 = 10,240
    assert fused.window_epilogue_issue("pw_dw", (e, d), t64, 2, 2, 5.0) == 10_240.0
    # kinds without an expansion window, and a zero weight, charge nothing
    assert fused.window_epilogue_issue("dw_pw", (d, p), t64, 2, 2, 5.0) == 0.0
    assert fused.window_epilogue_issue("pw_dw_pw", (e, d, p), t64, 2, 2, 0.0) == 0.0


def test_window_epilogue_weight_reaches_pw_dw_pw_estimates():
    from fuseplanner.cost import estimate
    from fuseplanner.validation.microbench import apply_measured

    base = gpu("h100")
    heavy = apply_measured(base, {"fused_window_epilogue_weight": base.fit.fused_window_epilogue_weight + 8.0})
    assert heavy.hw.fused_window_epilogue_weight == base.hw.fused_window_epilogue_weight + 8.0
    e, d, p = pw(16, 64, 8, 8), dw(64, 8, 8, 3), pw(64, 32, 8, 8)
    times = [estimate("pw_dw_pw", (e, d, p), Tile(2, 4, 32, 16, 64), "fp16", 1, s).time_s for s in (base, heavy)]
    assert times[1] > times[0]
    same = [estimate("dw_pw", (d, p), Tile(2, 4, 32, 16, 64), "fp16", 1, s).time_s for s in (base, heavy)]
    assert same[0] == same[1]
