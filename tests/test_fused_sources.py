"""Fused kernels on CPU: the defines `fuseplanner.kernels.families.fused.launch` derives for real groups compile for sm_90
with nvcc (when present) without spills, and the shared-memory layout the kernels assert equals
`tiles.smem_bytes`; the work-split choosers cover the GEMMs they are given."""

from __future__ import annotations

import concurrent.futures
import os
import re
import shutil
import tempfile

import pytest

from fuseplanner.core.ir import Op, Tile
from fuseplanner.kernels import kernel_source, nvcc_report, tiles
from fuseplanner.kernels.families.fused.launch import SOURCES, kernel_defines
from fuseplanner.kernels.tiles import fma_group, mma_group

NVCC = shutil.which("nvcc")
SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


def conv(name, kind, c_in, c_out, h, k=1, s=1, act="relu6"):
    pad = (k - 1) // 2
    ho = (h + 2 * pad - k) // s + 1
    return Op(name=name, op_type="Conv", kind=kind, index=0, inputs=("a",), outputs=("b",),
              input_shapes=((1, c_in, h, h),), output_shapes=((1, c_out, ho, ho),), kernel=(k, k), stride=(s, s),
              pads=(pad,) * 4, groups=c_in if kind == "dw" else 1, epilogue=("bias", act) if act else ("bias",))


E, D, P = conv("e", "pw", 24, 144, 56), conv("d", "dw", 144, 144, 56, 3, 2), conv("p", "pw", 144, 32, 28, act=None)
E7, D7, P7 = conv("e", "pw", 160, 960, 7), conv("d", "dw", 960, 960, 7, 5), conv("p", "pw", 960, 160, 7, act=None)
CASES = [
    ("pw_dw", (E, D), Tile(4, 4, 32, 32, 256)),
    ("dw_pw", (D, P), Tile(4, 8, 32, 32, 256)),
    ("pw_dw_pw", (E, D, P), Tile(2, 8, 32, 32, 256)),
    ("pw_pw", (conv("q", "pw", 144, 24, 28, act=None), conv("r", "pw", 24, 144, 28)), Tile(4, 8, 32, 32, 128)),
    ("dw_pw", (D7, P7), Tile(7, 7, 32, 64, 64)),
    ("pw_dw_pw", (E7, D7, P7), Tile(1, 7, 32, 32, 224)),
    ("pw_dw", (E7, D7), Tile(4, 4, 16, 64, 256)),  # odd W: fp16 rows staged from aligned starts (XA 2)
    # EfficientNet-B0's last projection and head: one 1152-row chunk of W1 is a 110,592 B stage
    ("pw_pw", (Q7 := conv("q", "pw", 1152, 320, 7, act=None), R7 := conv("r", "pw", 320, 1280, 7, act="silu")),
     Tile(1, 4, 32, 16, 64)),
    # a squeeze-excite pair on a 1x1 map: one-column fp16 tiles stage through registers (XA 0); the
    # 4-byte copy path must not be compiled for them (it once failed with a division by zero)
    ("pw_pw", (conv("q", "pw", 480, 120, 1), conv("r", "pw", 120, 480, 1, act="hardsigmoid")), Tile(1, 1, 256, 64, 256)),
]
MODES = [("fp32", "fp32"), ("fp32", "tf32"), ("fp16", "fp32")]


def _compile(kind, ops, tile, dtype, precision, workdir):
    d = kernel_defines(kind, ops, tile, dtype, precision, [True] * len(ops), False)
    src, _ = SOURCES[kind]
    return nvcc_report(NVCC, kernel_source(src, d), workdir, timeout=300)


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH: compile-only fused-kernel check skipped")
def test_fused_kernels_compile_for_sm90_without_spills():
    jobs = [(k, o, t, dt, pr) for k, o, t in CASES for dt, pr in MODES
            if k in ("pw_dw_pw", "dw_pw") or pr == "tf32" or o[0].c_in > 1000
            or (k == "pw_dw" and o[0].in_shape[3] % 2) or t.tw == 1]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp, concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as ex:
        results = list(ex.map(lambda j: (j, _compile(*j, tmp)), jobs))
    for (kind, _, tile, dtype, precision), (rc, rep) in results:
        assert rc == 0, f"{kind} {tile} {dtype}/{precision} failed (layout assert or syntax):\n{rep[-2000:]}"
        spills = [(int(a), int(b)) for a, b in SPILL.findall(rep)]
        assert spills and all(a <= 16 and b <= 16 for a, b in spills), f"{kind} {tile} {dtype}: spills {spills}"


def test_layout_total_matches_smem_bytes():
    for kind, ops, tile in CASES:
        for dtype in ("fp32", "fp16"):
            layout = tiles.fused_smem_layout(kind, ops, tile, dtype)
            assert all(v % tiles.SMEM_ALIGN == 0 for v in layout.values())
            assert tiles.smem_bytes(kind, ops, tile, dtype) == tiles.fused_smem_total(layout)


def test_pw_dw_layout_by_hand():
    # pw_dw, tile 4x4/f32/c32, DW 3x3 stride 2 -> window 9x9 = 81 px, padded to 88 (+8 row pad = 96)
    # one stage: xs 32 x 96 x 4 = 12288 + ws 32 x (32+8) x 4 = 5120 = 17408; 65536 // 17408 = 3 stages
    # for a 96-channel input (3 chunks of 32); E's 24 channels are one chunk: one stage
    # cs: 32 x 96 x 4 = 12288; wd: DW weights and biases 32 x (9 + 1) x 4 = 1280 (already 128-aligned)
    e96 = conv("e96", "pw", 96, 144, 56)
    assert tiles.fused_smem_layout("pw_dw", (e96, D), Tile(4, 4, 32, 32, 256), "fp32") == {
        "ring": 3 * 17408, "cs": 12288, "wd": 1280}
    assert tiles.smem_bytes("pw_dw", (e96, D), Tile(4, 4, 32, 32, 256), "fp32") == 3 * 17408 + 12288 + 1280
    assert tiles.fused_smem_layout("pw_dw", (E, D), Tile(4, 4, 32, 32, 256), "fp32")["ring"] == 17408
    assert tiles.fused_stages("pw_dw", (E, D), Tile(4, 4, 32, 32, 256), "fp32") == 1
    # 64 input channels in chunks of 32: two chunks, two stages (the ring budget allows three)
    e64 = conv("e64", "pw", 64, 144, 56)
    assert tiles.fused_stages("pw_dw", (e64, D), Tile(4, 4, 32, 32, 256), "fp32") == 2
    # fp16: 9 columns staged as 10 from an even column -> 90 px, padded to 96 (+8 = 104)
    # stage: xs 32 x 104 x 2 = 6656 + ws 32 x 40 x 2 = 2560 = 9216 -> 4 stages (the most); cs 32 x 104 x 4
    assert tiles.fused_smem_layout("pw_dw", (e96, D), Tile(4, 4, 32, 32, 256), "fp16") == {
        "ring": 3 * 9216, "cs": 13312, "wd": 1280}  # 3 chunks: 3 of the 4 stages the budget allows
    e256 = conv("e256", "pw", 256, 144, 56)
    assert tiles.fused_smem_layout("pw_dw", (e256, D), Tile(4, 4, 32, 32, 256), "fp16")["ring"] == 4 * 9216


def test_a_stage_over_the_ring_budget_runs_single_buffered():
    # W1 chunk 1152 x (16 + 8) x 4 = 110,592 B + W2 chunk 16 x (32 + 8) x 4 = 2,560 -> 113,152 B
    #   > FUSED_RING_BYTES (65,536): one stage; two would not fit beside xs in 232,448 B with the rest
    ops, tile = (Q7, R7), Tile(1, 4, 32, 16, 64)
    assert tiles.ring_stages(tiles.FUSED_RING_BYTES) == tiles.FUSED_MIN_STAGES  # one stage fits: clamped to 2
    assert tiles.ring_stages(tiles.FUSED_RING_BYTES + 1) == 1
    assert tiles.fused_stages("pw_pw", ops, tile, "fp32") == 1
    assert tiles.fused_smem_layout("pw_pw", ops, tile, "fp32")["ring"] == 113_152
    # in fp16 the same stage is 56,576 B: double-buffered
    assert tiles.fused_stages("pw_pw", ops, tile, "fp16") == 2


def test_strided_pointwise_member_is_infeasible():
    e2 = conv("e", "pw", 24, 144, 56, s=2)
    why = tiles.check("pw_dw", (e2, conv("d", "dw", 144, 144, 28, 3)), Tile(4, 4, 32, 32, 256), "fp32",
                      _Gpu())
    assert why is not None and "stride-1" in why


class _Gpu:
    name, smem_per_block_bytes, max_threads_per_block, regs_per_sm = "fake", 232448, 1024, 65536


@pytest.mark.parametrize("m,n,threads", [(24, 49, 256), (1, 1, 64), (96, 81, 128), (160, 8, 256)])
def test_fma_group_covers_gemm(m, n, threads):
    gm, gn, me, ne = fma_group(m, n, threads, resident=True)
    assert me >= m and ne >= n and me % gm == 0 and ne % gn == 0 and 16 % gm == 0 and 8 % gn == 0
    assert me - m < gm and ne - n < gn


@pytest.mark.parametrize("m,n,warps", [(16, 8, 2), (32, 56, 8), (160, 16, 4), (96, 104, 8)])
def test_mma_group_divides_padded_gemm(m, n, warps):
    gm, gn, me, ne = mma_group(m, n, warps, resident=False)
    assert (me, ne) == (m, n) and m % gm == 0 and n % gn == 0 and gm % 16 == 0 and gn % 8 == 0


def test_dw_pw_layout_by_hand():
    # dw_pw (D: 144 ch, 3x3 stride 2 on 56x56 -> 28x28; P: 144 -> 32), tile 4x8/f32/c32, fp32:
    # window (4-1)*2+3 = 9 x (8-1)*2+3 = 17; one stage: xw 32 x 9 x 17 x 4 = 19584 -> 19584 (153 x 128)
    #   + DW weights and biases 32 x (9 + 1) x 4 = 1280 + PW At 32 x (32 + 8) x 4 = 5120 = 25984
    # ring: 65536 // 25984 = 2 stages = 51968; ds: 32 x (32 + 8) x 4 = 5120; staging 32 x 40 x 4 = 5120
    layout = tiles.fused_smem_layout("dw_pw", (D, P), Tile(4, 8, 32, 32, 256), "fp32")
    assert layout == {"ring": 51968, "ds": 5120, "staging": 5120}
    assert tiles.fused_stages("dw_pw", (D, P), Tile(4, 8, 32, 32, 256), "fp32") == 2
    # fp16: rows staged from an even column, 17 -> 18 columns: xw 32 x 9 x 18 x 2 = 10368 (81 x 128);
    # + 1280 + PW 32 x 40 x 2 = 2560 -> 14208; 65536 // 14208 = 4 stages = 56832; ds 32 x 40 x 2 = 2560
    layout = tiles.fused_smem_layout("dw_pw", (D, P), Tile(4, 8, 32, 32, 256), "fp16")
    assert layout == {"ring": 56832, "ds": 2560, "staging": 5120}


class _Cc(_Gpu):
    def __init__(self, cc: str, sms: int = 132):
        self.compute_capability, self.sm_count = cc, sms


def test_cluster_split_fills_the_gpu_without_oversubscribing():
    d7 = conv("d", "dw", 960, 960, 7, 3)
    p7 = conv("p", "pw", 960, 160, 7, act=None)
    t = Tile(2, 4, 32, 64, 256)  # 4 x 2 spatial x 5 filter tiles = 40 blocks, 15 chunks of 64 channels
    # 40 x 2 = 80 and 40 x 4 = 160 <= 2 x 132 = 264; 40 x 8 = 320 is over -> 4
    assert tiles.cluster_split("dw_pw", (d7, p7), t, 1, _Cc("9.0")) == 4
    assert tiles.cluster_split("dw_pw", (d7, p7), t, 8, _Cc("9.0")) == 1  # 320 blocks already
    assert tiles.cluster_split("dw_pw", (d7, p7), t, 1, _Cc("8.0")) == 1  # no clusters before Hopper
    assert tiles.cluster_split("pw_dw", (E7, D7), t, 1, _Cc("9.0")) == 1
    # every block keeps two chunks: 960 / 256 -> 4 chunks -> KS 2; 960 / 512 -> 2 chunks -> no split
    assert tiles.cluster_split("dw_pw", (d7, p7), Tile(2, 4, 32, 256, 256), 1, _Cc("9.0")) == 2
    assert tiles.cluster_split("dw_pw", (d7, p7), Tile(2, 4, 32, 512, 256), 1, _Cc("9.0")) == 1
    # 7 chunks of 144: 2 x 4 = 8 > 7, so 2 (the grid alone would allow 4)
    assert tiles.cluster_split("dw_pw", (d7, p7), Tile(2, 4, 32, 144, 256), 1, _Cc("9.0")) == 2


def test_dw_pw_defines_choose_the_halo_copy_path():
    odd = conv("d", "dw", 16, 16, 7, 3), conv("p", "pw", 16, 8, 7, act=None)
    t = Tile(7, 7, 8, 8, 64)
    d16 = kernel_defines("dw_pw", odd, t, "fp16", "fp32", [True, True], False, split=2)
    d32 = kernel_defines("dw_pw", odd, t, "fp32", "fp32", [True, True], False)
    # fp16 pairs of an odd-width map: whole rows from each row's aligned start (XA 2); fp32 elements (1)
    assert d16["XA"] == 2 and d32["XA"] == 1
    # an x that is not 4-byte aligned goes through registers (0), whatever the dtype
    assert kernel_defines("dw_pw", odd, t, "fp16", "fp32", [True, True], False, aligned=False)["XA"] == 0
    assert kernel_defines("pw_dw", (E7, D7), Tile(4, 4, 16, 64, 256), "fp16", "fp32", [True, True], False)["XA"] == 2
    assert d16["KS"] == 2 and d16["TFP"] == 8 and d32["TFP"] == 8
    assert kernel_defines("dw_pw", (D, P), Tile(4, 8, 24, 32, 256), "fp16", "fp32", [True, True], False)["XA"] == 1


def test_dw_rows_per_item_define_follows_the_dw_channels():
    # pw_dw's DW runs over its 32-filter tile: 4 x 4 outputs on 256 threads, V = 4 needs 32 x 1 x 4 = 128
    # items (< 256), V = 2: 32 x 2 x 4 = 256 items -> 2
    assert kernel_defines("pw_dw", (E, D), Tile(4, 4, 32, 32, 256), "fp32", "fp32", [True, True], False)["DWV"] == 2
    # dw_pw's DW runs over a 16-channel chunk: 16 x 2 x 4 = 128 items at V = 2 (< 256), so V = 1
    assert kernel_defines("dw_pw", (D, P), Tile(4, 4, 32, 16, 256), "fp32", "fp32", [True, True], False)["DWV"] == 1
    # a tile of odd height takes one row an item whatever its channels
    assert tiles.dw_rows_per_item(512, 7, 7, 64) == 1
    assert "DWV" not in kernel_defines("pw_pw", CASES[3][1], CASES[3][2], "fp32", "fp32", [True, True], False)


def test_pack_pw_weights_layout_and_tf32_rounding():
    import numpy as np

    from fuseplanner.kernels.families.fused.launch import pack_pw_weights

    rng = np.random.default_rng(0)
    w = rng.standard_normal((10, 6)).astype(np.float32)  # N = 10 filters, C = 6 channels
    p = pack_pw_weights(np, w, 4, "fp32", "fp32")  # 3 filter tiles of 4, rows of 4 (16 B)
    assert p.shape == (3, 6, 4) and p.dtype == np.float32
    for f in range(10):
        assert np.array_equal(p[f // 4, :, f % 4], w[f])
    assert not p[2, :, 2:].any()  # filters 10, 11 do not exist: zero
    h = pack_pw_weights(np, w, 4, "fp16", "fp32")  # fp16 rows of 8 (16 B)
    assert h.shape == (3, 6, 8) and h.dtype == np.float16 and not h[:, :, 4:].any()
    t = pack_pw_weights(np, w, 4, "fp32", "tf32")
    assert not (t.view(np.uint32) & 0x1FFF).any()  # 10 mantissa bits left
    assert np.allclose(t[0, :, 0], w[0], rtol=2.0**-11, atol=0)
