"""Fused kernels on CPU: the defines `fuseplanner.kernels.fused` derives for real groups compile for sm_90
with nvcc (when present) without spills, and the shared-memory layout the kernels assert equals
`tiles.smem_bytes`; the work-split choosers cover the GEMMs they are given."""

from __future__ import annotations

import concurrent.futures
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from fuseplanner import tiles
from fuseplanner.ir import Op, Tile
from fuseplanner.kernels import kernel_source, kernels_dir
from fuseplanner.kernels.fused import SOURCES, fma_group, kernel_defines, mma_group

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
]
MODES = [("fp32", "fp32"), ("fp32", "tf32"), ("fp16", "fp32")]


def _compile(kind, ops, tile, dtype, precision, workdir):
    d = kernel_defines(kind, ops, tile, dtype, precision, [True] * len(ops), False)
    src, name = SOURCES[kind]
    f = Path(workdir) / f"{name}_{dtype}_{precision}_{abs(hash(str(tile)))}.cu"
    f.write_text(kernel_source(src, d))
    proc = subprocess.run([NVCC, "-arch=sm_90", "-cubin", "-std=c++17", "--resource-usage", f"-I{kernels_dir()}",
                           "-o", str(f.with_suffix(".cubin")), str(f)], capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH: compile-only fused-kernel check skipped")
def test_fused_kernels_compile_for_sm90_without_spills():
    jobs = [(k, o, t, dt, pr) for k, o, t in CASES for dt, pr in MODES if k in ("pw_dw_pw", "dw_pw") or pr == "tf32"]
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
    # xs: 32 x 96 x 4 = 12288; ws: 32 x (32+8) x 4 = 5120; cs: 32 x 96 x 4 = 12288; wd: 32 x 9 x 4 = 1152 (already 128-aligned)
    assert tiles.fused_smem_layout("pw_dw", (E, D), Tile(4, 4, 32, 32, 256), "fp32") == {
        "xs": 12288, "ws": 5120, "cs": 12288, "wd": 1152}
    assert tiles.smem_bytes("pw_dw", (E, D), Tile(4, 4, 32, 32, 256), "fp32") == 12288 + 5120 + 12288 + 1152


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
