"""Hand-computed golden cases of the cost models, at least three per kernel kind.

Notation in the comments: S(seg) = sectors of a row segment; a segment of L bytes at byte phase p
(mod 32) touches floor((p + L - e) / 32) + 1 sectors; when the row pitch W*e is not a multiple of
32, p takes the values (x0*e mod g) + k*g (g = gcd(W*e, 32)) evenly over the rows and the count is
averaged. "bn" epilogues (the factory default for convs) add a per-channel bias read; linear ops
carry a bias. All sizes in sectors (32 B) unless marked B. GPU: h100 unless said otherwise.

Parameter bytes: biases are fp32 (4 B) in every kernel, and so are the weights of the dw kernel and
of the fused kernels, whatever the storage dtype; the layer-by-layer pw/linear kernel reads its
weight matrix in the storage dtype (2 B in fp16), and so does dw_pw its PW weights, packed per
filter tile as wp[tile][C][TFP] (rows of tf elements rounded up to 16 B, 16-byte aligned).
Blocks: dw_pw on the H100 splits each output tile's channel chunks over a cluster of KS blocks
(tiles.cluster_split: the largest power of two <= min(8, chunks // 2) keeping blocks x KS <= 2 x 132).
L1 filtering of fused kernels: of a fused kernel's per-block weight reads Wr only keep =
max(0.3 Wc, min(Wu, Wr)) reach L2 (Wc = the packed PW weight rows among them, copied around L1;
the DW filters and biases go through L1 and count only within the floor; Wu = its distinct weight +
bias sectors, 0.3 = the H100's fused_weight_l2_fraction and _fp16), and read = activation reads +
keep, rounded up to whole sectors.
Co-resident blocks (fused kinds): with nsp spatial tiles, nf filter tiles and b blocks per SM, only
the first p x 132 blocks of an image (p = nsp / gcd(nsp, 132), when p < b) read their input windows
from L2 (traffic.coresident_share); none of the cases below but test_pw_dw_coresident_... has such
blocks.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from opfactory import dw, linear, pw

from fuseplanner.core.errors import PlanError
from fuseplanner.core.ir import Cost, Tile
from fuseplanner.core.kinds import KERNEL_KINDS
from fuseplanner.cost import compulsory, estimate, estimate_op
from fuseplanner.cost import model as cost_model
from fuseplanner.costbase.traffic import coresident_share, plane_windows_sectors
from fuseplanner.costbase.work import Work
from fuseplanner.hw.spec import GpuSpec, gpu
from fuseplanner.kernels.family import cost_model as family_cost_model

#: The H100 with its fused-kernel weight-read factors (fp32 and fp16) pinned at 0.3 (the value of the hand arithmetic below), so
#: that a refit of the bundled kernel fields does not move the traffic cases, and without the L2's
#: merging of neighbouring blocks' reads (l2_coalesce_blocks 1: every block's copy counts; the merging
#: has its own tests below, with the H100's measured value).
H100 = GpuSpec.model_validate({**gpu("h100").model_dump(), "fused_weight_l2_fraction": 0.3,
                               "fused_weight_l2_fraction_fp16": 0.3, "l2_coalesce_blocks": 1.0})
#: The H100 with pinned timing numbers, so that the hand-computed times below do not move when the
#: bundled spec is recalibrated: datasheet L2 bandwidth (10 TB/s), launch overhead (2.1 us) and FP32
#: peak (66.9 TFLOP/s), DRAM at BACKGROUND section 4's 2.94 TB/s, and fixed kernel rates.
H100_T = GpuSpec.model_validate({
    **H100.model_dump(), "measured": {"dram_bw_bytes_per_s": 2.94e12},
    "dw_warp_flops_per_cycle_fp32": 1.32, "pw_warp_flops_per_cycle_fp32": 2.25,
    "pw_warp_flops_per_cycle_tf32": 2.25, "pw_warp_flops_per_cycle_fp16": 3.61,
    "block_warp_exponent": 0.872, "warp_load_bytes_per_cycle": 6.01, "coresident_exponent": 0.0,
    "kernel_fixed_s": 0.0,
})  # fmt: skip


def check(cost: Cost, read: float, write: float, dram_read: float, flops: float, redundant: float, blocks: int):
    assert cost.feasible, cost.reason
    assert cost.gma_read_bytes == read
    assert cost.gma_write_bytes == write
    assert cost.dram_read_bytes == dram_read
    assert cost.dram_write_bytes == 0.0  # everything fits in the H100's L2
    assert cost.flops == flops
    assert cost.redundant_flops == redundant
    assert cost.kernels[0].blocks == blocks
    assert cost.launches == 1


# ---------------------------------------------------------------- dw


def test_dw_background_h100_case():
    # BACKGROUND section 4: 144 x 56 x 56 fp32 3x3 DW, 16 x 16 tiles; ncu saw 118,897 read sectors,
    # 56,448 write sectors, 1.82 MB DRAM read, 0 DRAM write.
    c = estimate("dw", (dw(144, 56, 56),), Tile(16, 16, 8, 8, 256), "fp32", 1, H100)
    # rows per 18-row window (pad 1, step 16, 4 tiles): [0,17)=17, [15,33)=18, [31,49)=18, [47,56)=9 -> 62
    # cols (pitch 224 B, aligned): x 0..16 = 68 B -> 3; 15..32 at phase 28, 72 B -> 4; 31..48 -> 4;
    #   47..55 at phase 28, 36 B -> 2  => 13 per row;  input 62 * 13 * 144 = 116,064
    # weights per spatial tile: 18 parts of 8 x 9 x 4 = 288 B = 9 -> 162, bias 18 parts of 32 B -> 18;
    #   16 spatial tiles -> 2,880.   read = 118,944 sectors = 3,806,208 B (ncu: 118,897, -0.04%)
    # write: 144 planes x 56 rows x (64 B, 64 B, 64 B, 32 B aligned = 2+2+2+1 = 7) = 56,448 = ncu exactly
    # DRAM read: input 1,806,336 + weights 5,184 + bias 576 = 1,812,096 B (ncu 1.82 MB)
    check(c, 3_806_208, 1_806_336, 1_812_096, 2 * 9 * 144 * 56 * 56, 0, 16 * 18)
    assert abs(c.gma_read_bytes / 32 - 118_897) / 118_897 < 0.005


def test_dw_fp16_stride2():
    c = estimate("dw", (dw(32, 16, 16, s=2),), Tile(4, 8, 16, 16, 128), "fp16", 1, H100)
    # out 8x8, nh = 2, nw = 1; window 9 x 17 (pad 1), staged in 8-byte vectors (VEC 4) from column
    # -4: vectors at -4 (outside, not loaded), 0, 4, 8, 12 -> each window row is the whole 32-B map row
    # rows: [-1,8)->8, [7,16)->9 per plane; a block's 16 planes of 512 B share no sector (its rows
    # 0-7 or 7-15 of each), so its distinct sectors are 16 x 8 = 128 or 16 x 9 = 144: 2 channel tiles
    # x 272 = 544; weights fp32: 2 parts of 16*9*4 = 576 B (18 + 18) + fp32 bias 2 x 64 B (2 + 2) =
    # 40 per spatial tile x 2 = 80 (the L2 merging of the 2 spatial tiles' weight reads is off here)
    # read = 624 sectors = 19,968 B
    # write: V = 4 rows per item (16 x 1 x 8 = 128 items for 128 threads); a warp's 32 items are 4
    # planes x 8 columns and each of its 4 store instructions writes one 16-B row of each plane (128
    # B apart): 4 sectors; 4 warps x 4 x 4 = 64 per block x 4 blocks = 256 sectors = 8,192 B (rows 2j
    # and 2j + 1 share a sector but are written by different instructions)
    # DRAM: input 32*16*16*2 = 16,384 + weights 32*9*4 = 1,152 + bias 32*4 = 128 -> 17,664 B
    check(c, 19_968, 8_192, 17_664, 2 * 9 * 32 * 64, 0, 4)


def test_dw_unaligned_batch2_residual():
    c = estimate("dw", (dw(16, 12, 12),), Tile(4, 4, 16, 16, 256), "fp32", 2, H100, residual=True)
    # 3 x 3 tiles; windows rows/cols [0,5), [3,9), [7,12); rows of 48 B are narrower than a segment
    # gap + sector ((12 - 6) x 4 = 24 B < 32), so a window's rows share sectors and count once each.
    # The plane (576 B) starts at phase 0; row y starts at byte 48y. Window rows 0-4, cols 3..8
    # (bytes 12..35 of a row): [12,36) [60,84) [108,132) [156,180) [204,228) -> sectors {0,1} {1,2}
    # {3,4} {4,5} {6,7} = 8 distinct (10 per row segment). All nine windows, distinct sectors:
    #   rows [0,5): 7, 8, 8;  rows [3,9): 9, 10, 9;  rows [7,12): 8, 8, 7  -> 74 per plane; 16 planes = 1,184
    # weights 576 B = 18 + bias 64 B = 2 -> 20 x 9 tiles = 180
    # output rows: 3 segments of 16 B at x 0, 4, 8 (phases 0/16) -> 1 each -> 3; 16 * 12 * 3 = 576
    # read per image = 1,184 + 180 + 576 (residual) = 1,940; x2 = 3,880 sectors = 124,160 B
    # write = 2 * 576 = 1,152 sectors = 36,864 B
    # DRAM: input 2*16*144*4 = 18,432 + 640 weights + residual 18,432 = 37,504 B
    check(c, 124_160, 36_864, 37_504, 2 * 2 * 9 * 16 * 144, 0, 18)


def test_plane_windows_share_sectors_of_narrow_rows():
    # 8 x 8 fp16 plane (rows of 16 B, plane 128 B: phase 0), 3x3 windows of 4 x 8 outputs: rows [0,5)
    # and [3,8), all 8 columns (window [-1,9) clipped). Distinct: rows 0-4 are bytes 0..79 -> sectors
    # 0-2 = 3; rows 3-7 bytes 48..127 -> 1-3 = 3; 6 in all. Requested: 10 row segments of 16 B at
    # pitch 16 (phases 0/16) -> 1 sector each = 10.
    assert plane_windows_sectors(8, 8, 1, 1, 6, 10, 4, 8, 2, 1, 2, 128) == (6.0, 10.0)
    # rows of 256 B (64 fp32) with 6-column windows: 232 B between segments, nothing shared ->
    # distinct = requested = 4 rows x 1 window x (24 B at phase 0 -> 1 sector) = 4
    assert plane_windows_sectors(4, 64, 0, 0, 4, 6, 4, 64, 1, 1, 4, 1024) == (4.0, 4.0)


# ---------------------------------------------------------------- pw / linear


def test_pw_fp32():
    c = estimate("pw", (pw(32, 64, 16, 16),), Tile(4, 16, 32, 16, 128), "fp32", 1, H100)
    # nh = 4, nw = 1, nf = 2; input plane: 16 rows x 64 B aligned = 2 -> 32; x 32 planes x nf 2 = 2,048
    # weights: 64 rows x 2 chunks of 64 B = 256; bias 2 x 128 B = 8; x 4 spatial tiles = 1,056
    # read = 3,104 sectors = 99,328 B;  write 64 x 16 x 2 = 2,048 sectors = 65,536 B
    # DRAM: 32*256*4 = 32,768 + 8,192 + 256 = 41,216 B
    check(c, 99_328, 65_536, 41_216, 2 * 32 * 64 * 256, 0, 8)


def test_pw_fp16_stride2():
    c = estimate("pw", (pw(16, 32, 8, 8, s=2),), Tile(4, 4, 32, 16, 64), "fp16", 1, H100)
    # out 4x4, one tile; each plane: 4 strided rows x span of 7 elements = 14 B (pitch 16, p 0/16) -> 1
    #   -> 4; x 16 planes = 64;  weights (fp16) 32 rows x 32 B = 32, fp32 bias 32 x 4 = 128 B = 4 -> 36
    #   read = 100 = 3,200 B
    # write: rows of 8 B are narrower than a sector, so the tile's 4 rows (the whole 32 B plane, phase
    #   0) are written together: 1 sector per plane x 32 = 32 = 1,024 B (per row segment: 128)
    # DRAM: the strided rows 0,2,4,6 touch all 4 sectors of each 128 B plane: 2,048 + 1,024 + 128 = 3,200
    check(c, 3_200, 1_024, 3_200, 2 * 16 * 32 * 16, 0, 1)


def test_pw_whole_map_writes_channel_runs():
    # a squeeze-excite-like PW on a 1x1 map, fp16, batch 2, tile 1x1/f64/c32: one tile covers the map,
    # so a filter tile's output planes are one contiguous run, not a sector each
    c = estimate("pw", (pw(24, 128, 1, 1),), Tile(1, 1, 64, 32, 64), "fp16", 2, H100)
    # input: 24 planes of one 2 B pixel, a sector each (per-plane count) x nf 2 = 48
    # weights: tc 32 >= C 24, so each filter tile's 64 rows are one run of 64 x 24 x 2 = 3,072 B = 96
    #   -> 192; bias (bn) 2 x 64 x 4 B = 2 x 8 = 16 -> 208 per image (one spatial tile)
    # output: a filter tile's 64 planes are one 128-B run (4 sectors), stored by the mma epilogue
    #   (2 warps along filters, WM_T 2): instruction (i, h) of warp wm writes the 8 filters
    #   (wm x 2 + i) x 16 + 8 h .. + 7 (16 B; pixel 1 of the pair is past the tile, so element by
    #   element and only element 0 stores). Both warps issue it together (one request per sector):
    #   (0, 0) filters 0-7 and 32-39 -> sectors 0 and 2, (0, 1) 8-15 and 40-47 -> 0 and 2, (1, 0)
    #   -> 1 and 3, (1, 1) -> 1 and 3: 8 requests per tile, 16 per image (it was 128, one per plane)
    # read (48 + 208) x 2 = 512 sectors = 16,384 B; write 16 x 2 = 32 sectors = 1,024 B
    assert (c.gma_read_bytes, c.gma_write_bytes) == (16_384, 1_024)


def test_pw_weight_chunks_share_l1_lines():
    # a squeeze-excite expansion on a 1x1 map, 20 -> 480, fp16, batch 1, tile 1x1/f64/c8: 8 filter
    # tiles, each reading its 64 weight rows of 20 x 2 = 40 B in chunks of 8 channels (16 B)
    # per chunk: rows start at 40 r, byte phases {0, 8, 16, 24} (gcd(40, 32) = 8), averaged:
    #   chunk [0, 16): 1, 1, 1, 2 sectors -> 1.25; [16, 32): phases 16, 24, 0, 8 -> 1.25; [32, 40): 1
    #   -> 3.5 a row x 480 = 1,680 + bias 480 x 4 B in 8 runs of 256 B (the last 128 B) = 60 -> 1,740
    # L1 lines of one chunk: rows of 40 B are narrower than a 128-B line, so the tile's 64 x 40 =
    #   2,560 B = 20 lines = 2,560 B <= the H100's L1 at its largest carveout, 262,144 - 233,472 =
    #   28,672 B: the later chunks find their sectors in L1, L2 sees each filter tile's rows once:
    #   64 x 40 = 2,560 B = 80 sectors x 7 + the last 32 rows' 1,280 B = 40 -> 600 + bias 60 = 660
    # input: 20 planes of one 2-B pixel, a sector each, x nf 8 = 160 (no merging in this spec)
    # read 660 + 160 = 820 sectors = 26,240 B (chunk by chunk: 1,740 + 160 = 1,900)
    assert (H100.hw.l1_cache_bytes, H100.hw.l1_line_bytes) == (28_672, 128)
    op = pw(20, 480, 1, 1)
    assert estimate("pw", (op,), Tile(1, 1, 64, 8, 64), "fp16", 1, H100).gma_read_bytes == 26_240
    km = cost_model.context("pw", (op,), "fp16")
    w = km.work(Tile(1, 1, 64, 8, 64), 1, False)
    got = km.l1_reuse(w, Tile(1, 1, 64, 8, 64), 1, 28_672, 128)
    # the loads still ask for every chunk: what L2 no longer sees is an L1 hit
    assert (w.w_read, got.w_read, got.l1_hits - w.l1_hits) == (1_740 * 32, 660 * 32, 1_080 * 32)
    # in a cluster split neighbouring chunks go to different blocks; one chunk has nothing to share
    assert km.l1_reuse(w, Tile(1, 1, 64, 8, 64), 2, 28_672, 128) == w
    w32 = km.work(Tile(1, 1, 64, 32, 64), 1, False)
    assert km.l1_reuse(w32, Tile(1, 1, 64, 32, 64), 1, 28_672, 128) == w32
    # 120 -> 480 with 256 filters a tile: rows of 240 B take a line each, 256 x 128 = 32,768 B > 28,672:
    # the lines are gone before the next chunk, which fetches its sectors again
    big = cost_model.context("pw", (pw(120, 480, 1, 1),), "fp16")
    w2 = big.work(Tile(1, 1, 256, 8, 64), 1, False)
    assert big.l1_reuse(w2, Tile(1, 1, 256, 8, 64), 1, 28_672, 128) == w2
    # with 128 filters a tile (16,384 B of lines) they stay
    w3 = big.work(Tile(1, 1, 128, 8, 64), 1, False)
    assert big.l1_reuse(w3, Tile(1, 1, 128, 8, 64), 1, 28_672, 128).w_read < w3.w_read


def test_2d_gemm_runs_once_whatever_the_batch():
    # a Gemm over a (rows, C) matrix: its rows already are the batch (the kernel runs one sequence of
    # 8 tokens), so batch 8 must not multiply it again
    g = replace(linear(8, 64, 32), input_shapes=((8, 64),), output_shapes=((8, 32),))
    t = Tile(4, 1, 16, 16, 64)
    one, eight = estimate("linear", (g,), t, "fp32", 1, H100), estimate("linear", (g,), t, "fp32", 8, H100)
    assert one.feasible and (eight.gma_bytes, eight.time_s, eight.flops) == (one.gma_bytes, one.time_s, one.flops)
    assert compulsory("linear", (g,), "fp32", 8) == compulsory("linear", (g,), "fp32", 1)


def test_pw_fp16_batch2():
    c = estimate("pw", (pw(32, 64, 16, 16),), Tile(4, 16, 32, 16, 128), "fp16", 2, H100)
    # per image: input 16 rows x 32 B = 16 per plane x 32 x nf 2 = 1,024; weights (fp16) 64 x (32 B +
    #   32 B) = 128 + fp32 bias 2 x 32 x 4 = 128 B = 4 each -> 136 x 4 tiles = 544;
    #   (1,024 + 544) x 2 = 3,136 = 100,352 B
    # write: 64 planes x 16 rows of 32 B (one sector each) = 1,024 per image; the mma epilogue (4 warps
    #   along pixels, WN_T 2) stores a 16-pixel row as fragment columns j = 0 and 1 of one warp, two
    #   instructions of 16 B: 2 requests per sector -> 2,048 x 2 images = 4,096 = 131,072 B
    # DRAM 2*32*256*2 = 32,768 + 4,096 + bias 256 = 37,120
    check(c, 100_352, 131_072, 37_120, 2 * 2 * 32 * 64 * 256, 0, 16)


def test_linear_fp32():
    c = estimate("linear", (linear(64, 32, 48),), Tile(16, 1, 16, 16, 64), "fp32", 1, H100)
    # token-major; 4 token tiles, nf = 3; input 64 rows x 2 chunks of 64 B = 4 -> 256 x 3 = 768
    # weights 48 rows x 4 = 192 + bias 3 x 64 B = 6 -> 198 x 4 = 792;  read = 1,560 = 49,920 B
    # write: 64 rows x 3 segments of 64 B (pitch 192 aligned) = 2 sectors each, 384 distinct; the FMA
    #   register block (A_THR 4: threads tid / 16 along filters, tid % 16 along tokens) stores filters
    #   ta + 4 i as instruction i: filters 4i .. 4i + 3 (16 B) of 16 tokens, so instructions 0 and 1
    #   write sector 0 of each token's segment, 2 and 3 sector 1: 2 requests per sector ->
    #   768 = 24,576 B;  DRAM 8,192 + 6,144 + 192 = 14,528
    check(c, 49_920, 24_576, 14_528, 2 * 64 * 32 * 48, 0, 12)


def test_linear_fp16():
    c = estimate("linear", (linear(64, 32, 48),), Tile(16, 1, 16, 16, 64), "fp16", 1, H100)
    # input 64 x (32 B + 32 B) = 128 x 3 = 384; weights (fp16) 48 x 2 = 96 + fp32 bias 3 x 16 x 4 = 64 B
    #   = 2 each -> 102 x 4 = 408;  read 792 = 25,344 B
    # write: 64 tokens x 3 segments of 32 B = 192 sectors; the mma epilogue stores token-major output
    #   element by element, fragment rows gq + 8 h: filters 0-7 (h = 0) and 8-15 (h = 1) of a token are
    #   the two halves of its sector, 2 requests each -> 384 = 12,288 B
    # DRAM 4,096 + 3,072 + bias 192 = 7,360
    check(c, 25_344, 12_288, 7_360, 2 * 64 * 32 * 48, 0, 12)


def test_linear_batch3_partial_tiles():
    c = estimate("linear", (linear(10, 24, 40),), Tile(8, 1, 8, 8, 64), "fp32", 3, H100)
    # token tiles 8 + 2 -> 2, nf = 5; input 10 rows x 3 chunks of 32 B (pitch 96) = 3 -> 30 x 5 = 150
    # weights 40 x 3 = 120 + bias 5 x 32 B = 5 -> 125 x 2 = 250; per sequence 400, x3 = 1,200 = 38,400 B
    # write 10 rows x 5 x 32 B = 50 x 3 = 150 = 4,800 B; DRAM 2,880 + 3,840 + 160 = 6,880
    check(c, 38_400, 4_800, 6_880, 2 * 3 * 10 * 24 * 40, 0, 30)


# ---------------------------------------------------------------- pw_dw


PW_DW = (pw(8, 16, 8, 8), dw(16, 8, 8))


def test_pw_dw_fp32():
    c = estimate("pw_dw", PW_DW, Tile(4, 8, 16, 8, 128), "fp32", 1, H100)
    # 2 x 1 tiles of 4 x 8, window 6 x 10: PW-output rows computed [0,5) + [3,8) = 10, cols [0,8) = 8
    # PW input plane: 10 rows x 32 B aligned = 10; x 8 channels x nf 1 = 80
    # weights per tile: PW 16 rows x 32 B = 16 + bias 2, DW 576 B = 18 + bias 2 -> 38 x 2 = Wr 76;
    #   Wu = 38 (each weight once); Wc = PW 16 x 2 = 32 -> keep = max(0.3 x 32 = 9.6, min(38, 76)) = 38
    # read 80 + 38 = 118 = 3,776 B; write 16 x 8 rows x 1 = 128 = 4,096 B
    # DRAM 2,048 + 512 + 64 + 576 + 64 = 3,264
    # FLOPs: PW 2*8*16*64 = 16,384 + DW 2*9*16*64 = 18,432; PW done on 10 x 8 pixels:
    #   2*8*16*80 = 20,480 -> redundant 4,096
    check(c, 3_776, 4_096, 3_264, 34_816, 4_096, 2)


def test_pw_dw_fp16():
    c = estimate("pw_dw", PW_DW, Tile(4, 8, 16, 8, 128), "fp16", 1, H100)
    # input: 8-column fp16 rows are 16 B, so a window's rows are contiguous and share sectors (planes of
    #   128 B start at phase 0): rows [0,5) are bytes 0..79 -> sectors 0-2 = 3, rows [3,8) bytes 48..127
    #   -> 1-3 = 3; 6 per plane x 8 planes = 48 (fp32: 10 rows x 1 sector of 32 B = 10 per plane)
    # weights per tile: PW packed fp16, rows of 16 x 2 = 32 B aligned -> 8 rows = 8 + bias 2, DW fp32
    #   18 + bias 2 -> 30 x 2 = Wr 60; Wu = 30, Wc = 8 x 2 = 16 -> keep = max(4.8, min(30, 60)) = 30
    # read 48 + 30 = 78 = 2,496 B; write: DWV 4 (16 x 1 x 8 = 128 items for 128 threads), a warp's
    #   32 items are 4 planes x 8 columns and each of its 4 store instructions writes one 16-B row of
    #   each plane (128 B apart): 4 sectors; 4 warps x 4 x 4 = 64 per block x 2 blocks = 128 = 4,096 B
    #   (the 16-B rows 2j and 2j + 1 share a sector but are stored by different instructions)
    # DRAM input 1,024 + PW fp16 256 + bias 64 + DW 576 + 64 = 1,984
    check(c, 2_496, 4_096, 1_984, 34_816, 4_096, 2)


def test_pw_dw_batch2():
    c = estimate("pw_dw", PW_DW, Tile(4, 8, 16, 8, 128), "fp32", 2, H100)
    # input 2 x 80 = 160; Wr 2 x 76 = 152, Wu 38, Wc 2 x 32 = 64 -> keep = max(0.3 x 64 = 19.2, 38) = 38
    # read 198 = 6,336 B; write 8,192 B; DRAM 4,096 + 1,216 = 5,312 (weights once)
    check(c, 6_336, 8_192, 5_312, 69_632, 8_192, 4)


def test_coresident_share_by_hand():
    # blocks k = x + nsp * y go to SM k mod 132; p = nsp / gcd(nsp, 132) rounds apart on one SM
    # nsp 4: gcd 4, p = 1 < 3 blocks per SM: the first 132 of 4 x 84 = 336 blocks miss -> 132 / 336
    assert coresident_share(4, 84, 132, 3) == pytest.approx(132 / 336)
    # nsp 8: gcd 4, p = 2 < 5: 2 x 132 = 264 of 8 x 60 = 480 miss
    assert coresident_share(8, 60, 132, 5) == pytest.approx(264 / 480)
    # nsp 14: gcd 2, p = 7 >= 5 blocks per SM: the block with the same window left before -> all miss
    assert coresident_share(14, 42, 132, 5) == 1.0
    # nsp 16: p = 4 < 5, but 4 x 132 = 528 >= 16 x 30 = 480 blocks: no block has an earlier twin
    assert coresident_share(16, 30, 132, 5) == 1.0
    assert coresident_share(4, 84, 132, 1) == 1.0  # one block per SM shares nothing
    # the placement holds for the first wave only: 2 images of 336 blocks at 3 per SM, 396 in the
    #   first wave: 396 / 672 of the blocks read 132 / 336 of their windows, the rest all of them:
    #   396 / 672 x 132 / 336 + 276 / 672 = (155.57 + 276) / 672 = 0.6422
    assert coresident_share(4, 84, 132, 3, 672) == pytest.approx(396 / 672 * 132 / 336 + 276 / 672)
    assert coresident_share(4, 84, 132, 3, 336) == pytest.approx(132 / 336)  # one wave: as before
    assert coresident_share(4, 1, 132, 8) == 1.0  # one filter tile reads each window once


def test_pw_dw_coresident_blocks_share_windows():
    ops = (pw(8, 512, 8, 8), dw(512, 8, 8))
    c = estimate("pw_dw", ops, Tile(4, 4, 8, 8, 64), "fp32", 1, H100)
    # 2 x 2 spatial tiles (nsp 4) x 64 filter tiles = 256 blocks; 8 input channels are one chunk, so a
    # one-stage ring (8,064 B of shared memory): 25 per SM. Registers: the 8 x 36 expansion GEMM (a 6 x 6
    # window) in 1 x 2 micro-tiles, 144 over 64 threads, streamed one at a time: 2 accumulators; 37 +
    # 1.29 x 2 = 39.58 -> 40 (registers.COMPILED, pw_dw fp32 at 64 threads) x 32 = 1,280 a warp x 2 warps
    # = 2,560 a block, 65,536 / 2,560 = 25; shared memory 233,472 / (8,064 + 1,024 reserved) = 25
    # window rows [0,5) and [3,8), cols [0,5) and [3,8): 20 B of a 32 B row, one sector each ->
    #   4 windows x 5 rows = 20 per plane x 8 channels = 160 per filter tile; x 64 = 10,240
    # co-resident: p = 4 / gcd(4, 132) = 1 < 25 -> 132 of the 256 blocks read from L2:
    #   10,240 x 132 / 256 = 5,280
    # weights per block: PW 8 rows x 32 B = 8 + bias 1, DW 8 x 36 B = 9 + bias 1 = 19 x 256 = Wr 4,864
    #   Wu = 512 + 64 + 576 + 64 = 1,216, Wc = PW 8 x 256 = 2,048 -> keep = max(614.4, 1,216) = 1,216
    # read 5,280 + 1,216 = 6,496 = 207,872 B; write 512 planes x 8 rows x 1 = 4,096 x 2 tiles = 262,144 B
    assert c.kernels[0].blocks == 256 and c.kernels[0].blocks_per_sm == 25
    assert c.kernels[0].regs_per_thread == 40
    assert c.gma_read_bytes == 207_872
    assert c.gma_write_bytes == 262_144


def test_coresident_reads_do_not_change_time(monkeypatch):
    ops = (pw(8, 512, 8, 8), dw(512, 8, 8))
    tile = Tile(4, 4, 8, 8, 64)
    shared = estimate("pw_dw", ops, tile, "fp32", 1, H100)
    monkeypatch.setattr(cost_model, "coresident_share", lambda *_: 1.0)  # every block reads its window
    alone = estimate("pw_dw", ops, tile, "fp32", 1, H100)
    # the loads still request every window: L2 sees 5,280 of the 10,240 window sectors, time is the same
    assert alone.gma_read_bytes - shared.gma_read_bytes == (10_240 - 5_280) * 32
    assert alone.time_s == shared.time_s


# ---------------------------------------------------------------- dw_pw


DW_PW = (dw(16, 8, 8), pw(16, 32, 8, 8))


def test_dw_pw_two_filter_tiles():
    c = estimate("dw_pw", DW_PW, Tile(4, 8, 16, 8, 128), "fp32", 1, H100)
    # nf = 2, nsp = 2; DW window 6 x 10 -> 10 rows x 1 sector per plane; 16 planes x nf 2 = 320
    # per spatial tile: nf x DW weights in 2 chunks of 8 ch (288 B = 9 + 9, bias 1 + 1) = 2 x 20
    #   + PW 32 rows x 2 chunks of 32 B = 64 + bias 2 x 64 B = 4 -> 108 x 2 = Wr 216
    # Wu = DW 18 + 2 + PW 64 + 4 = 88, Wc = PW 64 x 2 = 128 -> keep = max(38.4, min(88, 216)) = 88
    # read 320 + 88 = 408 = 13,056 B; write 32 x 8 x 1 = 256 = 8,192 B
    # DRAM 4,096 + 640 + 2,048 + 128 = 6,912
    # FLOPs DW 18,432 + PW 2*16*32*64 = 65,536; the DW runs once per filter tile: redundant 18,432
    # blocks: nf 2 x nsp 2 = 4; 2 chunks of 8 channels: a split would leave one chunk a block -> 4
    check(c, 13_056, 8_192, 6_912, 83_968, 18_432, 4)


def test_dw_pw_fp16_packed_weights():
    c = estimate("dw_pw", DW_PW, Tile(4, 8, 16, 8, 128), "fp16", 1, H100)
    # input: 8-column fp16 rows are 16 B, so the rows of a window (clipped to rows [0,5) and [3,8), all
    #   columns) are contiguous: bytes 0..79 and 48..127 of a 128 B plane (phase 0) -> 3 + 3 sectors
    #   = 6 per plane (not 10 half-full ones); 16 planes x nf 2 = 192
    # DW weights (fp32) per spatial tile as in fp32: nf 2 x (9 + 9 + bias 1 + 1) = 40 -> x nsp 2 = 80
    # PW packed fp16: TFP 16 -> 32 B rows, aligned: 1 sector; nf 2 x C 16 = 32 + bias 2 x 64 B = 4
    #   -> 36 per spatial tile -> 72;  Wr = 80 + 72 = 152
    # Wu = DW 576 B = 18 + bias 2, packed PW 2 x 16 x 32 B = 32 + bias 4 -> 56
    #   Wc = 32 x 2 = 64 -> keep = max(0.3 x 64 = 19.2, min(56, 152)) = 56; read 192 + 56 = 248 = 7,936 B
    # write: 16 B rows share sectors, a tile's 4 rows = 64 contiguous bytes = 2 sectors: 32 planes x
    #   2 tiles x 2 = 128 = 4,096 B (per row segment: 256)
    # DRAM: input 16 x 64 x 2 = 2,048 + DW 640 + PW 1,024 + bias 128 = 3,840
    check(c, 7_936, 4_096, 3_840, 83_968, 18_432, 4)
    # compulsory: PW weights in fp16 (16 x 32 x 2 = 1,024), DW weights and both biases fp32 (576 + 64 + 128)
    assert compulsory("dw_pw", DW_PW, "fp16", 1)["weights"] == 1_024 + 576 + 64 + 128


def test_dw_pw_all_filters():
    c = estimate("dw_pw", DW_PW, Tile(4, 8, 32, 8, 256), "fp32", 1, H100)
    # nf = 1: input 160; per tile 20 + 64 + bias 128 B = 4 -> 88 x 2 = Wr 176, Wu 88
    #   Wc 64 x 2 = 128 -> keep = max(38.4, 88) = 88; read 160 + 88 = 248 = 7,936 B
    # blocks: nsp 2, no cluster split (2 chunks) -> 2
    check(c, 7_936, 8_192, 6_912, 83_968, 0, 2)


def test_dw_pw_batch2_residual():
    c = estimate("dw_pw", DW_PW, Tile(4, 8, 16, 8, 128), "fp32", 2, H100, residual=True)
    # activations per image 320 + residual 256 = 576, x2 = 1,152; Wr 2 x 216 = 432, Wu 88, Wc 2 x 128 = 256
    #   -> keep = max(0.3 x 256 = 76.8, 88) = 88; read 1,240 = 39,680 B; write 16,384 B
    # DRAM 8,192 + 2,816 weights + residual 2*32*64*4 = 16,384 -> 27,392 (a different tensor than the input)
    # blocks: 2 images x 4, no cluster split (2 chunks) -> 8
    check(c, 39_680, 16_384, 27_392, 167_936, 36_864, 8)


# ---------------------------------------------------------------- pw_pw


def test_pw_pw_single_tile():
    ops = (pw(16, 32, 8, 8), pw(32, 16, 8, 8))
    c = estimate("pw_pw", ops, Tile(8, 8, 16, 16, 256), "fp32", 1, H100)
    # one tile: input 16 planes x 8 rows x 1 = 128; W1 whole (512 el in 2 chunks of 1,024 B = 64) +
    #   bias 4 = 68; W2 16 rows x 2 x 64 B = 64 + bias 2 = 66 -> Wr 134 = Wu 134 -> keep 134
    #   (Wc 64 + 64 = 128: max(38.4, 134)); read 262 = 8,384 B; write 128 = 4,096 B
    # DRAM 4,096 + 2,048 + 128 + 2,048 + 64 = 8,384
    check(c, 8_384, 4_096, 8_384, 131_072, 0, 1)


def test_pw_pw_two_filter_tiles():
    ops = (pw(16, 32, 8, 8), pw(32, 16, 8, 8))
    c = estimate("pw_pw", ops, Tile(8, 8, 8, 16, 256), "fp32", 1, H100)
    # nf = 2: input 256; W1 68 x 2 = 136; W2 64 + bias 2 x 32 B = 2 -> 66; Wr 202, Wu 68 + 66 = 134
    #   Wc = 64 x 2 + 64 = 192 -> keep = max(57.6, min(134, 202)) = 134; read 256 + 134 = 390 = 12,480 B
    # the first PW (65,536 FLOPs) is recomputed by the second filter tile
    check(c, 12_480, 4_096, 8_384, 131_072, 65_536, 2)


def test_pw_pw_linear_mlp():
    ops = (linear(16, 32, 64), linear(16, 64, 32))
    c = estimate("pw_pw", ops, Tile(8, 1, 32, 16, 256), "fp32", 1, H100)
    # 2 token tiles: input 2 contiguous blocks of 8 x 32 x 4 = 1,024 B -> 64
    # per tile: W1 (2,048 el in 4 parts of 2,048 B) 256 + bias 4 x 64 B = 8; W2 32 rows x 4 x 64 B = 256
    #   + bias 128 B = 4 -> 524 x 2 = Wr 1,048; Wu 256 + 8 + 256 + 4 = 524
    #   Wc = (256 + 256) x 2 = 1,024 -> keep = max(307.2, 524) = 524; read 64 + 524 = 588 = 18,816 B
    # write 16 rows x 128 B = 64 = 2,048 B
    # DRAM 2,048 + 8,192 + 256 + 8,192 + 128 = 18,816
    check(c, 18_816, 2_048, 18_816, 131_072, 0, 2)


# ---------------------------------------------------------------- pw_dw_pw


IR = (pw(8, 16, 8, 8), dw(16, 8, 8), pw(16, 8, 8, 8))


def test_pw_dw_pw_residual():
    c = estimate("pw_dw_pw", IR, Tile(4, 8, 8, 8, 64), "fp32", 1, H100, residual=True)
    # input 8 planes x 10 rows = 80; per tile: W1 (128 el, 2 x 256 B) 16 + bias 2, DW 18 + 2, W3 8 rows
    #   x 2 x 32 B = 16 + bias 1 -> 55 x 2 = Wr 110; Wu 18 + 20 + 17 = 55, Wc (16 + 16) x 2 = 64
    #   -> keep = max(19.2, 55) = 55
    # residual 8 x 8 x 1 = 64; read 80 + 55 + 64 = 199 = 6,368 B
    # write 64 = 2,048 B; DRAM 2,048 + 576 + 640 + 544 = 3,808 (the residual is the block input: no extra)
    # FLOPs 16,384 + 18,432 + 16,384 = 51,200; expansion over 10 x 8 pixels: redundant 4,096
    check(c, 6_368, 2_048, 3_808, 51_200, 4_096, 2)


def test_pw_dw_pw_fp16():
    c = estimate("pw_dw_pw", IR, Tile(4, 8, 8, 8, 64), "fp16", 1, H100)
    # input 8 planes x (3 + 3) sectors (16 B rows share sectors, as in test_pw_dw_fp16) = 48; PW
    #   weights packed in fp16, DW weights and all
    #   biases fp32: per tile W1 128 el x 2 B = 256 B = 8 + bias 2, DW 18 + 2, W3 16 rows x 8 x 2 B
    #   = 256 B = 8 + bias 1 -> 39 x 2 = Wr 78; Wu 39, Wc (8 + 8) x 2 = 32 -> keep = max(9.6, 39) = 39
    #   read 48 + 39 = 87 = 2,784 B; write: 8 planes x 2 tiles x 2 sectors (a tile's 4 rows of 16 B
    #   are 64 contiguous bytes) = 32 = 1,024 B (per row segment: 64)
    # DRAM 1,024 + (256 + 64) + (576 + 64) + (256 + 32) = 2,272
    check(c, 2_784, 1_024, 2_272, 51_200, 4_096, 2)


def test_pw_dw_pw_batch2():
    c = estimate("pw_dw_pw", IR, Tile(4, 8, 8, 8, 64), "fp32", 2, H100, residual=True)
    # activations (80 + residual 64) x 2 = 288; Wr 2 x 110 = 220, Wu 55, Wc 2 x 64 = 128
    #   -> keep = max(38.4, 55) = 55; read 343 = 10,976 B; DRAM input 4,096 + weights 1,760 (once)
    check(c, 10_976, 4_096, 4_096 + 1_760, 102_400, 8_192, 4)


# ---------------------------------------------------------------- DRAM, resources, time


def test_dram_writes_when_output_exceeds_l2():
    g = gpu("gtx1660")  # 1.5 MiB L2, usable 3/4 = 1,179,648 B
    c = estimate("dw", (dw(32, 112, 112),), Tile(8, 16, 8, 8, 128), "fp32", 1, g)
    io = 32 * 112 * 112 * 4  # 1,605,632 B in and out
    w = 32 * 9 * 4 + 32 * 4  # 1,280 B
    foot = io + w + io
    assert c.dram_read_bytes == io + w
    assert c.dram_write_bytes == pytest.approx(io * (foot - 1_179_648) / foot)


def test_weights_rereads_reach_dram_when_they_exceed_l2():
    g = gpu("gtx1660")
    op = linear(196, 1280, 1000)  # 5.12 MB of fp32 weights > 2 x usable L2
    t = Tile(4, 1, 64, 32, 256)
    c = estimate("linear", (op,), t, "fp32", 1, g)
    w = 1000 * 1280 * 4 + 1000 * 4
    res = c.kernels[0]
    waves = math.ceil(res.blocks / (g.sm_count * res.blocks_per_sm))
    assert waves > 1
    assert c.dram_read_bytes == pytest.approx(196 * 1280 * 4 + w + (waves - 1) * w)
    # on the H100 (50 MiB L2) the same weights stay in L2
    h = estimate("linear", (op,), t, "fp32", 1, H100)
    assert h.dram_read_bytes == 196 * 1280 * 4 + w


def test_resources_and_time_by_hand():
    c = estimate("dw", (dw(144, 56, 56),), Tile(16, 16, 8, 8, 256), "fp32", 1, H100_T)
    r = c.kernels[0]
    # smem: 8 planes x 18 rows x 20 columns (the 18-column window is staged in float2 copies from an even
    #   column: tiles.dw_row_stride = rup(18 + 2 - 1, 2) = 20) x 4 B + 8 x 9 x 4 B = 11,520 + 288 = 11,808 B;
    #   regs as the dw kernel compiles at 256 threads (registers.COMPILED: 34 + 0 x 8 outputs/thread = 34)
    assert (r.smem_bytes, r.regs_per_thread, r.threads) == (11_808, 34, 256)
    # registers per warp 34 x 32 = 1,088 -> 1,280 in units of 256; blocks/SM = min(32 blocks,
    #   2048/256 = 8 threads, 65536 / (1280 * 8) = 6 regs, 233472/(11808 + 1024) = 18) = 6
    assert r.blocks_per_sm == 6 and r.occupancy == 6 * 256 / 2048
    assert r.waves == 288 / (132 * 6)
    # one partial wave: 288 blocks -> 3 per SM on 132 SMs
    # memory: the wave's bytes at the larger of L2 (5,612,544 B / 10 TB/s = 0.561 us) and measured DRAM
    #   (1,812,096 B / 2.94 TB/s = 0.616 us) time, 3 x 132 of 288 blocks' share -> 0.847 us
    mem_blk = max(c.gma_bytes / 10e12, c.dram_bytes / 2.94e12) / 288
    t_mem = 3 * 132 * mem_blk
    # own compute: an average block's 2 x 9 x 144 x 56 x 56 / 288 = 8,128,512 / 288 = 28,224 FLOPs
    #   (edge tiles included) on 8 warps, which compute like 8 ** 0.872 = 6.131 warps
    #   (block_warp_exponent of layer-by-layer kernels), each at the fp32 DW warp rate
    #   1.32 FLOP/clock x 1.98 GHz: 28,224 / (6.131 x 2.6136e9) = 1.761 us
    eff_warps = 8**0.872
    t_own = 28_224 / (eff_warps * 1.32 * 1.98e9)
    assert c.flops == 288 * 28_224
    # loads: the block's reads, 118,944 sectors x 32 B / 288 = 13,216 B, at what 6.131 warps keep in
    #   flight (6.01 B/clock each x 1.98 GHz): 0.181 us, under its 0.847 us share of the bandwidth
    assert c.gma_read_bytes == 118_944 * 32
    t_ld = 13_216 / (eff_warps * 6.01 * 1.98e9)
    assert t_ld < t_mem
    t_cmp = 3 * (c.flops / 66.9e12) * 132 / 288  # the 3 resident blocks' FLOPs at an SM's FP32 peak: 0.167 us
    # a block's chain is 1 iteration's latency + the larger of its bandwidth share and its load time
    #   + own compute (3.209 us), above the SM peak; then the write-back latency
    wave = max(1 * 0.6e-6 + max(t_mem, t_ld) + t_own, t_cmp) + 0.6e-6
    assert wave == pytest.approx(0.6e-6 + t_mem + t_own + 0.6e-6, rel=1e-12)
    assert c.time_s == pytest.approx(2.1e-6 + wave, rel=1e-12)  # 5.909 us
    # a fixed launch time (kernel_fixed_s, what a launch takes beyond the empty-launch floor) adds once
    fixed = estimate("dw", (dw(144, 56, 56),), Tile(16, 16, 8, 8, 256), "fp32", 1,
                     GpuSpec.model_validate({**H100_T.model_dump(), "kernel_fixed_s": 0.5e-6}))
    assert fixed.time_s == pytest.approx(c.time_s + 0.5e-6, rel=1e-12)
    # co-residency: the 3 blocks resident on an SM share its issue slots, each chain x 3 ** 0.2 = x 1.2457
    #   (coresident_exponent 0.2): 3.209 -> 3.997 us, 6.698 us in all
    shared = estimate("dw", (dw(144, 56, 56),), Tile(16, 16, 8, 8, 256), "fp32", 1,
                      GpuSpec.model_validate({**H100_T.model_dump(), "coresident_exponent": 0.2}))
    assert shared.time_s == pytest.approx(2.1e-6 + (0.6e-6 + t_mem + t_own) * 3**0.2 + 0.6e-6, rel=1e-12)
    # the H100 runs this layer far above the bandwidth floor, as measured (BACKGROUND section 4)
    assert c.time_s > 3 * (c.dram_bytes / 2.94e12)


def test_tensor_cores_and_precision():
    op = (pw(256, 256, 28, 28),)
    t = Tile(4, 28, 64, 32, 256)
    f32 = estimate("pw", op, t, "fp32", 8, H100_T)
    tf32 = estimate("pw", op, t, "fp32", 8, H100_T, precision="tf32")
    f16 = estimate("pw", op, t, "fp16", 8, H100_T)
    # 224 blocks, 3 per SM: one partial wave of 2 blocks per SM. A block's 2 x 256 x 256 x 112 =
    #   14,680,064 / 4 = 3,670,016 FLOPs run on 8 warps, computing like 8 ** 0.872 = 6.131 warps. Its own
    #   compute at the pw fp32 warp rate, 3,670,016 / (6.131 x 2.25 x 1.98e9) = 134.4 us, dwarfs the
    #   SM-peak term (2 blocks x 3,670,016 / (66.9e12 / 132) = 14.5 us), so the block's chain sets the time.
    per_clock = 3_670_016 / (8**0.872 * 1.98e9)  # the block's FLOPs per (FLOP/clock of one warp) in seconds
    # TF32 stores fp32 (same bytes) and its warp rate defaults to the fp32 one (not measured): same time
    assert tf32.gma_bytes == f32.gma_bytes and tf32.dram_bytes == f32.dram_bytes
    assert tf32.time_s == f32.time_s
    # where the TF32 warp rate is calibrated higher (2 x 2.25), tf32 gains exactly the own-compute
    #   difference 3,670,016 / (6.131 x 1.98e9) x (1/2.25 - 1/4.5) = 67.2 us; exact fp32 is unchanged
    fast = GpuSpec.model_validate({**H100_T.model_dump(), "pw_warp_flops_per_cycle_tf32": 4.5})
    tf32_fast = estimate("pw", op, t, "fp32", 8, fast, precision="tf32")
    assert estimate("pw", op, t, "fp32", 8, fast).time_s == f32.time_s
    assert f32.time_s - tf32_fast.time_s == pytest.approx(per_clock * (1 / 2.25 - 1 / 4.5), rel=1e-9)
    # fp16 halves the activation and weight bytes and runs at the fp16 warp rate (3.61 FLOP/clock):
    #   faster than fp32, and exactly 3,670,016 / (6.131 x 1.98e9) x (1/2.25 - 1/3.61) = 50.6 us faster
    #   than on a GPU whose fp16 warp rate were the fp32 one
    assert f16.gma_bytes < f32.gma_bytes and f16.time_s < f32.time_s
    slow16 = GpuSpec.model_validate({**H100_T.model_dump(), "pw_warp_flops_per_cycle_fp16": 2.25})
    gain16 = per_clock * (1 / 2.25 - 1 / 3.61)
    assert estimate("pw", op, t, "fp16", 8, slow16).time_s - f16.time_s == pytest.approx(gain16, rel=1e-9)
    with pytest.raises(PlanError, match="precision"):
        estimate("pw", op, t, "fp32", 1, H100_T, precision="bf16")


def test_infeasible_tile_reason():
    c = estimate("pw_dw_pw", (pw(160, 960, 7, 7), dw(960, 7, 7), pw(960, 160, 7, 7)), Tile(7, 7, 128, 64, 64),
                 "fp32", 1, gpu("gtx1660"))  # fmt: skip
    assert not c.feasible and "shared memory" in c.reason and c.time_s == 0.0


def test_bad_kind_and_members():
    with pytest.raises(PlanError, match="unknown kernel kind"):
        estimate("dw_dw", (dw(8, 8, 8), dw(8, 8, 8)), Tile(8, 8, 8, 8, 64), "fp32", 1, H100)
    with pytest.raises(PlanError, match="needs ops pw\\+dw"):
        estimate("pw_dw", (dw(8, 8, 8), pw(8, 8, 8, 8)), Tile(8, 8, 8, 8, 64), "fp32", 1, H100)
    with pytest.raises(PlanError, match="do not chain"):
        estimate("pw_dw", (pw(8, 16, 8, 8), dw(8, 8, 8)), Tile(8, 8, 8, 8, 64), "fp32", 1, H100)
    with pytest.raises(PlanError, match="batch"):
        estimate("dw", (dw(8, 8, 8),), Tile(8, 8, 8, 8, 64), "fp32", 0, H100)


def test_costs_add():
    a = estimate("pw", (pw(32, 64, 16, 16),), Tile(4, 16, 32, 16, 128), "fp32", 1, H100)
    b = estimate("dw", (dw(64, 16, 16),), Tile(4, 16, 8, 8, 128), "fp32", 1, "h100")
    s = a + b
    assert s.gma_bytes == a.gma_bytes + b.gma_bytes and s.launches == 2 and len(s.kernels) == 2
    assert s.time_s == a.time_s + b.time_s


def test_compulsory():
    comp = compulsory("pw_dw", PW_DW, "fp32", 2)
    # input 2 x 8 x 64 x 4 = 4,096; weights (128 + 16) + (144 + 16) = 304 el x 4 = 1,216; output 8,192
    assert comp == {"input": 4096.0, "weights": 1216.0, "residual": 0.0, "output": 8192.0}
    # fp16: activations halve (input 2 x 8 x 64 x 2 = 2,048; output 4,096); the PW weights are packed
    #   in fp16 (128 x 2 = 256), DW weights and both biases stay fp32 (16 + 144 + 16 = 176 el x 4 = 704)
    assert compulsory("pw_dw", PW_DW, "fp16", 2) == {"input": 2048.0, "weights": 960.0, "residual": 0.0, "output": 4096.0}
    # the pw kernel keeps its weight matrix in fp16 and its bias in fp32: 16 x 32 x 2 + 32 x 4 = 1,152
    assert compulsory("pw", (pw(16, 32, 8, 8, s=2),), "fp16", 1)["weights"] == 16 * 32 * 2 + 32 * 4
    # a stride-2 PW needs only every other row and column
    assert compulsory("pw", (pw(16, 32, 8, 8, s=2),), "fp16", 1)["input"] == 16 * 16 * 2


# ---------------------------------------------------------------- paper model


def test_paper_model_pw_dw():
    c = estimate("pw_dw", PW_DW, Tile(4, 8, 16, 8, 128), "fp32", 1, H100_T, model="paper")
    # n_h = 2, n_w = 1, nf = 1; ov = (2-1)(3-1)*8 + 0 = 16 el per channel, charged to the 8 PW inputs
    # reads: 1 x (512 + 8 x 16) + (128 + 144) x 2 = 640 + 544 = 1,184 el = 4,736 B; write 1,024 el
    assert c.gma_read_bytes == 4_736 and c.gma_write_bytes == 4_096
    assert c.dram_bytes == c.gma_bytes and c.time_s == c.gma_bytes / 2.94e12


def test_paper_model_dw_and_pw():
    d = estimate("dw", (dw(144, 56, 56),), Tile(16, 16, 8, 8, 256), "fp32", 1, H100, model="paper")
    # ov = 3 * 2 * 56 + 3 * 2 * 56 = 672 el/channel; reads 451,584 + 144*672 + 1,296 * 16 = 569,088 el
    assert d.gma_read_bytes == 569_088 * 4
    p = estimate("pw", (pw(32, 64, 16, 16),), Tile(4, 16, 32, 16, 128), "fp32", 2, H100, model="paper")
    # 2 filter tiles x 2 images x 8,192 + 2,048 weights x 4 tiles x 2 images = 49,152 el
    assert p.gma_read_bytes == 49_152 * 4 and p.gma_write_bytes == 2 * 16_384 * 4
    with pytest.raises(PlanError, match="cost model"):
        estimate("pw", (pw(32, 64, 16, 16),), Tile(4, 16, 32, 16, 128), "fp32", 1, H100, model="magic")


def test_paper_model_dw_pw_and_pw_pw_and_block():
    t = Tile(4, 8, 16, 8, 128)
    c = estimate("dw_pw", DW_PW, t, "fp32", 1, H100, model="paper")
    # nf = 2: 2 x (1,024 + 16 x 16) + (2 x 144 + 512) x 2 tiles = 2,560 + 1,600 = 4,160 el
    assert c.gma_read_bytes == 4_160 * 4
    c = estimate("pw_pw", (pw(16, 32, 8, 8), pw(32, 16, 8, 8)), Tile(8, 8, 8, 16, 256), "fp32", 1, H100, model="paper")
    # nf = 2: 2 x 1,024 + (2 x 512 + 512) x 1 = 3,584 el
    assert c.gma_read_bytes == 3_584 * 4
    c = estimate("pw_dw_pw", IR, Tile(4, 8, 8, 8, 64), "fp32", 1, H100, model="paper", residual=True)
    # nf = 1: (512 + 8 x 16) + (128 + 144 + 128) x 2 + residual 512 = 640 + 800 + 512 = 1,952 el
    assert c.gma_read_bytes == 1_952 * 4


def test_ours_sees_more_than_paper_on_the_measured_case():
    # the measured 118,897 sectors are 3.80 MB; the fixed paper count misses the sector waste
    t = Tile(16, 16, 8, 8, 256)
    ours = estimate("dw", (dw(144, 56, 56),), t, "fp32", 1, H100)
    paper = estimate("dw", (dw(144, 56, 56),), t, "fp32", 1, H100, model="paper")
    measured = 118_897 * 32
    assert abs(ours.gma_read_bytes - measured) < abs(paper.gma_read_bytes - measured)


# ---------------------------------------------------------------- estimate_op


def test_estimate_op_views_conv_and_opaque():
    from dataclasses import replace

    from opfactory import conv

    v = replace(pw(8, 8, 4, 4), op_type="Reshape", kind="opaque")
    assert estimate_op(v, "fp32", 4, H100) == Cost()
    stem = conv(3, 32, 224, 224, 3, 2)
    c = estimate_op(stem, "fp32", 1, H100)
    # reads input 3*224*224*4 = 602,112 + weights 864*4 = 3,456 -> 605,568; writes 32*112*112*4
    assert c.gma_read_bytes == 605_568 and c.gma_write_bytes == 1_605_632
    assert c.flops == 2 * 32 * 112 * 112 * 27 and c.launches == 1
    assert c.time_s > H100.launch_overhead_s
    layer = estimate_op(pw(32, 64, 16, 16), "fp32", 1, H100)
    assert layer.feasible and layer.kernels[0].kind == "pw"


# ---------------------------------------------------------------- L2 merging of neighbouring blocks' reads


def test_coalesced_by_hand():
    # The H100: up to 3.77 readers of one GPC merge, 8 GPCs, 8 consecutive blocks per GPC
    hw = gpu("h100").hw
    co = cost_model.coalesced
    assert co(1, 1, 1000, 1, hw) == 1.0
    # a launch of 72 or more blocks: only readers in one GPC's run of 8 consecutive blocks merge
    assert co(2, 1, 264, 1, hw) == 0.5  # two neighbours: max(1, 2 / 3.77) = 1 read
    assert co(16, 1, 264, 1, hw) == pytest.approx(1 / 3.77)  # 16 / 3.77 = 4.24 reads
    assert co(8, 2, 264, 1, hw) == pytest.approx(2 / 3.77)  # readers 2 apart: 8 x 2 / 3.77 = 4.24 reads
    assert co(8, 16, 264, 1, hw) == 1.0  # readers 16 apart: 8 reads
    # a 16-block launch read by all: its first 8 blocks merge (8 / 3.77 = 2.12 reads), the other 8
    # sit one per GPC, (16 - 8) / 8 = 1 block per run, 8 runs of 1 read: 10.12 reads of 16
    assert co(16, 1, 16, 1, hw) == pytest.approx((8 / 3.77 + 8) / 16)
    # a 32-block launch, 16 readers: 8 merged (2.12 reads), then runs of ceil(24 / 8) = 3 blocks:
    # 8 / 3 runs x max(1, 3 / 3.77) = 2.67 reads -> 4.79 of 16
    assert co(16, 1, 32, 1, hw) == pytest.approx((8 / 3.77 + 8 / 3) / 16)
    # clusters: 28 readers 8 apart read once per GPC (max(28 / 3.77, min(28, 8)) = 8 reads), 4 readers 4 times
    assert co(28, 8, 224, 8, hw) == pytest.approx(8 / 28)
    assert co(4, 8, 32, 8, hw) == 1.0
    no_merge = replace_spec(gpu("h100"), l2_coalesce_blocks=1.0).hw
    assert co(16, 1, 16, 1, no_merge) == co(28, 8, 224, 8, no_merge) == 1.0  # a GPU without merging


def test_first_pw_weights_of_pw_pw_merge_across_all_blocks():
    # A squeeze-excite pair on a 1x1 map, 960 -> 240 -> 960, tile 1x1/f64/c32: one spatial tile, 15
    # filter tiles, a 15-block launch. Every block reads all of W1 (packed per 32 mid channels: 8
    # chunks of 960 rows of 128 B = 30,720 sectors, + the bias in 8 parts of 128 B, 32 sectors, through
    # L1), its own W2 tile (packed per 64 filters: 240 rows of 256 B = 1,920 sectors per tile). With
    # merging the 15 readers of W1 read it as the 15-block launch places them: 8 merged
    # (8 / 3.77 = 2.12 reads) and 7 one per GPC: 9.12 reads of 15, not 15 (one spatial tile: W2 tiles
    # have one reader each). The weight reads count at fused_weight_l2_fraction (0.3 here):
    # 0.3 x 30,720 x (15 - 9.12) fewer sectors. The input (960 one-pixel channel planes, a sector
    # each, the per-plane count) is read by the same 15 blocks and merges alike: 960 x (15 - 9.12).
    a = pw(960, 240, 1, 1)
    b = pw(240, 960, 1, 1)
    tile = Tile(1, 1, 64, 32, 64)
    off = estimate("pw_pw", (a, b), tile, "fp32", 1, H100)
    on = estimate("pw_pw", (a, b), tile, "fp32", 1, replace_spec(H100, l2_coalesce_blocks=3.77))
    saved = (0.3 * 30_720 + 960) * (15 - (8 / 3.77 + 7))
    assert off.gma_read_bytes - on.gma_read_bytes == pytest.approx(32 * saved, rel=1e-3)


def test_linear_weight_reads_merge_across_token_tiles():
    # 256 tokens, 64 -> 128, tile 16x1/f16/c64: nsp 16 token tiles, nf 8 filter tiles. Each token
    # tile reads every filter tile's weights: 128 x 64 x 4 B = 1,024 sectors + bias in 8 parts of
    # 64 B = 16 -> 1,040 per token tile, x 16 = 16,640 sectors (Wr). The 16 readers of a filter tile
    # are consecutive blocks: with the H100's 3.77, L2 sees max(1/16, 1/3.77) of them:
    # 16,640 / 3.77 = 4,413.8 sectors (above the floor of one read, 1,040), 12,226.2 fewer.
    # The tokens (read by the 8 filter tiles, 16 blocks apart) are not merged.
    op = linear(256, 64, 128)
    tile = Tile(16, 1, 16, 64, 256)
    off = estimate("linear", (op,), tile, "fp32", 1, H100)
    on = estimate("linear", (op,), tile, "fp32", 1, replace_spec(H100, l2_coalesce_blocks=3.77))
    assert off.gma_read_bytes - on.gma_read_bytes == pytest.approx(32 * (16_640 - 16_640 / 3.77), abs=32)
    assert on.gma_write_bytes == off.gma_write_bytes and on.time_s == off.time_s  # loads still ask for them


def test_weight_readers_span_the_images_of_a_batch():
    # The grid runs spatial tiles fastest, then filter tiles, then images: a filter tile's readers in
    # image i + 1 come nsp x nf x ks blocks after those of image i.
    hw = H100.hw
    # 1 spatial tile, 2 filter tiles, 4 images
    se = Work(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, blocks=8, nf=2, nsp=1)
    # 1 x 2 x 1 = 2 blocks per image < the 8 the scheduler places on one GPC: the 4 images' readers run
    # in step, one every 2 blocks
    assert cost_model.weight_readers(se, 1, hw) == (4, 2.0)
    big = se._replace(blocks=98 * 4, nf=1, nsp=98)  # 98 spatial tiles: each image's readers merge alone
    assert cost_model.weight_readers(big, 1, hw) == (98, 1)
    cl = se._replace(blocks=7 * 4, nf=1, nsp=7)  # clusters of 8: every image's ranks together
    assert cost_model.weight_readers(cl, 8, hw) == (28, 8)
    assert cost_model.weight_readers(se._replace(blocks=2), 1, hw) == (1, 1)  # batch 1: the spatial tiles


def test_squeeze_excite_weights_merge_across_images():
    # A 1x1 map PW, 64 -> 128, tile 1x1/f64/c64, fp32, batch 4: 2 filter tiles x 4 images = 8 blocks.
    # Each block reads its filter tile's 64 rows x 256 B = 512 sectors + a 256 B bias = 520; 8 x 520 =
    # 4,160 sectors. A filter tile's 4 readers (one per image, 2 blocks apart) are all among the first
    # 8 blocks, which the scheduler puts on one GPC's run: 4 / 3.77 = 1.061 reads of 4, so L2 sees
    # 4,160 x 1.061 / 4 = 1,103.6 (above the floor of one read, 1,040): 3,056.4 fewer. The input (64
    # one-pixel planes per image, a sector each) is read by the 2 filter tiles of its image, 1 block
    # apart, and merges to one read: 4 x 64 = 256 fewer. Batch 1 saves only its input's 64.
    op = pw(64, 128, 1, 1)
    tile = Tile(1, 1, 64, 64, 64)
    on = replace_spec(H100, l2_coalesce_blocks=3.77)
    saved = [(estimate("pw", (op,), tile, "fp32", b, H100).gma_read_bytes
              - estimate("pw", (op,), tile, "fp32", b, on).gma_read_bytes) / 32 for b in (1, 4)]  # fmt: skip
    assert saved[0] == 64
    assert saved[1] == pytest.approx(4_160 - 4_160 * (4 / 3.77) / 4 + 4 * 64, abs=1)


def test_pw_dw_and_dw_pw_input_rereads_do_not_merge_in_l2():
    # 2 spatial tiles x 4 filter tiles = an 8-block launch reading 1,000 B of input windows again per
    # filter tile (in_read), one block per SM (no L1 sharing). Where L2 merges them (pw_pw, pw_dw_pw):
    # the 4 readers of a window are 2 blocks apart among the launch's first 8, which one GPC's run
    # holds: 4 / 3.77 = 1.061 reads of 4 -> 1,000 x (1 - 1.061 / 4) = 734.7 B never reach L2. PW->DW and
    # DW->PW launches read theirs once per filter tile (Nsight Compute, data/records/h100): nothing.
    hw = replace_spec(H100, l2_coalesce_blocks=3.77).hw
    w = Work(2_000, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, blocks=8, nf=4, nsp=2, in_read=1_000)
    merged = cost_model.coresident(w, 1, 1, hw, "pw_pw")
    assert w.gma_read - merged.gma_read == pytest.approx(1_000 * (1 - (4 / 3.77) / 4))
    assert merged.l1_hits == pytest.approx(w.gma_read - merged.gma_read)  # the loads still request them
    assert cost_model.coresident(w, 1, 1, hw, "pw_dw") == cost_model.coresident(w, 1, 1, hw, "dw_pw") == w
    assert {k for k in KERNEL_KINDS if not family_cost_model(k).MERGED_INPUT_REREADS} == {"pw_dw", "dw_pw"}
    # through the estimate: a PW->DW group's reads do not depend on the merging of its inputs
    e, d = pw(16, 64, 16, 16), dw(64, 16, 16, 3)
    tile = Tile(8, 16, 16, 16, 128)  # 2 spatial tiles, 4 filter tiles
    on = estimate("pw_dw", (e, d), tile, "fp32", 1, replace_spec(H100, l2_coalesce_blocks=3.77))  # merging on
    off = estimate("pw_dw", (e, d), tile, "fp32", 1, H100)
    km = cost_model.context("pw_dw", (e, d), "fp32")
    wk = km.work(tile, 1, False)
    assert (wk.nsp, wk.nf) == (2, 4) and wk.in_read > 0 and on.feasible
    # the whole difference is the weights' merging (l1_filtered), none of it the input windows
    spec_on = replace_spec(H100, l2_coalesce_blocks=3.77)
    w_on, w_off = (cost_model.launched("pw_dw", (e, d), tile, "fp32", 1, s, km, False, "fp32")[0].w_read
                   for s in (spec_on, H100))  # fmt: skip
    assert off.gma_read_bytes - on.gma_read_bytes == pytest.approx(w_off - w_on, abs=32)
    assert on.gma_read_bytes > w_on + 0.9 * wk.in_read  # every window re-read counted


def replace_spec(spec: GpuSpec, **fields) -> GpuSpec:
    return GpuSpec.model_validate({**spec.model_dump(), **fields})


def test_weights_every_block_reads_come_once_per_sm_for_blocks_that_run_together():
    # a pw_pw-like launch whose blocks all read W1: 8,000 B of it reach L2 after merging (w_all_l2),
    # of 9,000 B of weight reads, 500 B distinct; 132 SMs
    hw = H100.hw
    w = Work(10_000, 0, 0, 500, 0, 0, 0, 0, 0, 0, 0, 1, blocks=1056, nf=1, nsp=1056, w_read=9_000, w_all_l2=8_000)
    # 1,056 blocks at 8 per SM: 8 start together on each SM, one L1 fill serves them: 7/8 of 8,000 saved
    got = cost_model.coresident(w, 8, 1, hw, "pw_pw")
    assert (got.gma_read, got.w_read, got.l1_hits, got.w_all_l2) == (3_000, 2_000, 7_000, 1_000)
    # at most 4 blocks per SM: 4 together -> 3/4 of 8,000 = 6,000
    assert cost_model.coresident(w, 4, 1, hw, "pw_pw").w_read == 3_000
    # 264 blocks: 2 per SM whatever the occupancy -> half, 4,000
    assert cost_model.coresident(w._replace(blocks=264), 8, 1, hw, "pw_pw").w_read == 5_000
    # never below one read of every weight: 3,000 B distinct leave 6,000 to save, not 7,000
    assert cost_model.coresident(w._replace(w_unique=3_000), 8, 1, hw, "pw_pw").w_read == 3_000
    # one block per SM, or a cluster launch: nothing shared
    assert cost_model.coresident(w._replace(blocks=100), 8, 1, hw, "pw_pw") == w._replace(blocks=100)
    assert cost_model.coresident(w, 8, 2, hw, "pw_pw") == w
