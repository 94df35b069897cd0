"""Compile-only check of every kernel source for sm_90 with nvcc (when present), with the register
and spill report; plus the CPU contract of `fuseplanner.kernels` (imports without CuPy, DeviceError)."""

from __future__ import annotations

import concurrent.futures
import importlib.util
import os
import re
import shutil
import tempfile

import pytest

from fuseplanner.core.errors import DeviceError
from fuseplanner.core.ir import Op, Tile
from fuseplanner.kernels import kernel_source, nvcc_report
from fuseplanner.kernels._build import source_dirs

NVCC = shutil.which("nvcc")

BASE_DW = {"TH": 8, "TW": 32, "TF": 8, "THREADS": 256, "KH": 3, "KW": 3, "SH": 1, "SW": 1, "PAD_T": 1,
           "PAD_L": 1, "DIL_H": 1, "DIL_W": 1, "V": 4, "VEC": 4, "ACT": 2, "HAS_BIAS": 1, "HAS_RES": 0,
           "T_HALF": 0}
BASE_PW = {"TH": 8, "TW": 8, "TF": 64, "TC": 32, "THREADS": 256, "SH": 1, "SW": 1, "CL": 0, "XU": 4, "WU": 4, "STAGES": 3,
           "USE_TC": 0, "A_THR": 8, "ACT": 2, "HAS_BIAS": 1, "HAS_RES": 0, "T_HALF": 0}
MMA = {"WARPS_M": 2, "WARPS_N": 4, "WM_T": 2, "WN_T": 2}

#: (source, kernel, defines, is a default tile that must not spill)
COMBOS = [
    ("dw.cu", "dw_kernel", BASE_DW, True),
    ("dw.cu", "dw_kernel", {**BASE_DW, "T_HALF": 1, "VEC": 8, "KH": 7, "KW": 7, "PAD_T": 3, "PAD_L": 3}, True),
    ("dw.cu", "dw_kernel", {**BASE_DW, "SH": 2, "SW": 2, "KH": 5, "KW": 5, "VEC": 1, "ACT": 7, "HAS_RES": 1}, True),
    ("pw.cu", "pw_kernel", BASE_PW, True),
    ("pw.cu", "pw_kernel", {**BASE_PW, "USE_TC": 1, **MMA}, True),
    # exact fp32 register block whose threads along pixels (16) do not divide the tile's 28 pixels
    ("pw.cu", "pw_kernel", {**BASE_PW, "TH": 4, "TW": 7, "XU": 1, "A_THR": 16}, True),
    ("pw.cu", "pw_kernel", {**BASE_PW, "TH": 4, "TW": 7, "XU": 1, "A_THR": 16, "KS": 4}, True),
    # vector shared-memory reads: weights 4 channels at a time, 4 / 2 neighbouring pixels per read, or
    # scalar pixels past a 49-pixel tile; split reduction and residual with vector reads
    ("pw.cu", "pw_kernel", {**BASE_PW, "TH": 4, "TW": 7, "XU": 1, "A_THR": 32, "KVEC": 4, "PVEC": 4}, True),
    ("pw.cu", "pw_kernel", {**BASE_PW, "A_THR": 8, "KVEC": 4, "PVEC": 2, "HAS_RES": 1}, True),
    ("pw.cu", "pw_kernel", {**BASE_PW, "A_THR": 32, "KVEC": 4, "PVEC": 4}, True),  # two runs of 4 per thread
    ("pw.cu", "pw_kernel", {**BASE_PW, "TH": 7, "TW": 7, "XU": 1, "TF": 128, "A_THR": 32, "KVEC": 4, "PVEC": 1,
                            "KS": 4}, True),
    ("pw.cu", "pw_kernel", {**BASE_PW, "USE_TC": 2, "T_HALF": 1, "XU": 8, "WU": 8, **MMA}, True),
    ("pw.cu", "pw_kernel", {**BASE_PW, "USE_TC": 2, "T_HALF": 1, "TC": 8, "XU": 8, "WU": 8, **MMA}, True),
    ("pw.cu", "pw_kernel", {**BASE_PW, "CL": 1, "TH": 64, "TW": 1, "USE_TC": 1, **MMA, "ACT": 6}, True),
    ("pw.cu", "pw_kernel", {**BASE_PW, "SH": 2, "SW": 2, "XU": 1, "FLAT": 1, "TH": 7, "TW": 7, "TF": 64,
                            "THREADS": 64}, False),
    ("pw.cu", "pw_kernel", {**BASE_PW, "T_HALF": 1, "XU": 0, "WU": 0, "HAS_RES": 1, "ACT": 3, "USE_TC": 2, **MMA}, True),
    ("pw.cu", "pw_kernel", {**BASE_PW, "T_HALF": 1, "XU": 0, "WU": 0, "HAS_RES": 1, "ACT": 3, "TC": 12}, False),
    # cluster split of the reduction (KS blocks per cluster), every math path
    ("pw.cu", "pw_kernel", {**BASE_PW, "KS": 4}, True),
    ("pw.cu", "pw_kernel", {**BASE_PW, "KS": 8, "USE_TC": 1, **MMA, "HAS_RES": 1}, True),
    ("pw.cu", "pw_kernel", {**BASE_PW, "KS": 2, "USE_TC": 2, "T_HALF": 1, "XU": 8, "WU": 8, **MMA}, True),
    ("pw.cu", "pw_kernel", {**BASE_PW, "KS": 2, "SH": 2, "SW": 2, "XU": 1, "FLAT": 1, "TH": 7, "TW": 7,
                            "THREADS": 64}, False),
    ("pw.cu", "pw_kernel", {**BASE_PW, "KS": 4, "CL": 1, "TH": 64, "TW": 1, "USE_TC": 1, **MMA, "ACT": 6}, True),
    ("probe_placement.cu", "probe_placement", {"THREADS": 256, "KS": 8}, True),
    ("probe_copy.cu", "probe_copy", {"MODE": 1, "VB": 16, "SEG": 256, "ROWS": 16, "PITCH": 256, "REGION": 4096,
                                     "DIV": 4, "NDIST": 33, "THREADS": 256, "SMEM": 4352, "PAD": 16}, True),
]

SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
REGS = re.compile(r"Used (\d+) registers")


def _compile(source: str, name: str, defines: dict, workdir: str) -> str:
    rc, rep = nvcc_report(NVCC, kernel_source(source, defines), workdir, timeout=120)
    assert rc == 0, f"nvcc failed for {source} {defines}:\n{rep[-3000:]}"
    return rep


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH: compile-only kernel check skipped")
def test_every_kernel_source_compiles_for_sm90_without_spills():
    with tempfile.TemporaryDirectory() as tmp, concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as ex:
        futures = [ex.submit(_compile, s, n, d, tmp) for s, n, d, _ in COMBOS]
        reports = [f.result() for f in futures]
    lines = []
    for (source, _, defines, default), rep in zip(COMBOS, reports, strict=True):
        regs = [int(r) for r in REGS.findall(rep)]
        spills = [(int(a), int(b)) for a, b in SPILL.findall(rep)]
        assert regs, f"no resource report for {source}: {rep[-500:]}"
        lines.append(f"{source} regs={max(regs)} spills={spills} {defines}")
        if default:
            assert all(a == 0 and b == 0 for a, b in spills), f"{source} spills with {defines}: {spills}"
            assert max(regs) <= 255
    print("\n".join(lines))


def test_every_source_is_compile_checked():
    # here: the layer-by-layer kernels and the placement and copy probes; tests/test_fused_sources.py: fused_*.cu
    from fuseplanner.kernels import tiles

    sources = {p.name for d in source_dirs() for p in d.glob("*.cu")}
    assert {"dw.cu", "pw.cu", "probe_placement.cu"} <= sources
    assert sources == {s for s, *_ in COMBOS} | {f"fused_{k}.cu" for k in tiles.FUSED_KINDS}


def test_kernels_import_without_cupy_and_run_raises_device_error():
    if importlib.util.find_spec("cupy") is not None:
        pytest.skip("CuPy is installed here: the no-CuPy path cannot be observed")
    import fuseplanner.kernels as k

    op = Op(name="p", op_type="Conv", kind="pw", index=0, inputs=("x",), outputs=("y",),
            input_shapes=((1, 8, 4, 4),), output_shapes=((1, 8, 4, 4),))
    with pytest.raises(DeviceError, match="CuPy"):
        k.run("pw", [op], Tile(4, 4, 8, 8, 64), None, [(None, None)])
    with pytest.raises(DeviceError):
        k.compile_kernel("pw.cu", "pw_kernel", {})


def test_kernel_source_injects_defines_only():
    text = kernel_source("pw.cu", {"TH": 4, "ACT": 2})
    head = text.splitlines()[:3]
    assert head[0] == "#define ACT 2" and head[1] == "#define TH 4" and head[2].startswith("#line 1")
    with pytest.raises(DeviceError, match="not found"):
        kernel_source("nope.cu", {})


def test_fused_launch_rejects_images_past_32_bit_offsets():
    from types import SimpleNamespace

    from fuseplanner.core.errors import PlanError
    from fuseplanner.kernels.families.fused.launch import _nchw

    # the fused kernels index one image with 32-bit offsets: 128 x 4096 x 4096 = 2^31 elements is one too many
    with pytest.raises(PlanError, match="32-bit offsets"):
        _nchw(SimpleNamespace(ndim=4, shape=(1, 128, 4096, 4096)))
    assert _nchw(SimpleNamespace(ndim=4, shape=(2, 127, 4096, 4096))) == (2, 127, 4096, 4096)


def test_fma_map_fewest_load_cycles_per_useful_output():
    from fuseplanner.kernels.tiles import fma_map, pw_variant

    # Scalar reads (vector=False). 64 filters x 28 pixels (4x7), 256 threads: 7 outputs per thread;
    # cycles per channel = max(wavefronts, issue / 4), per useful output x b / (rf * 28).
    #   A_THR 64: 4 threads along pixels, RP 7, RF 1, 8 filter rows per warp (one wavefront):
    #             max(1 + 7, (1 + 7 + 7) / 4) = 8 cycles x 4 / 28 = 1.143
    #   A_THR 32: 8 along pixels, RP 4 (32 slots, 4 idle), RF 2, 4 rows: max(2 + 4, (2 + 4 + 8) / 4) = 6
    #             x 8 / 56 = 0.857
    #   A_THR 16: 16 along pixels, RP 2 (32 slots, 4 idle), RF 4, 2 rows: max(4 + 2, 3.5) = 6 x 16 / 112
    #             = 0.857, the same; equal idle slots, so the one with more threads along pixels wins
    def split(*a):
        s = fma_map(*a)
        return None if s is None else (s.a_thr, s.pvec)

    assert split(64, 28, 256) == (16, 1)
    assert fma_map(64, 28, 256).cycles == pytest.approx(6 * 16 / 112)
    # Vector reads, rows of 28 + 8 = 36 words: weights one float4 per filter per 4 channels.
    #   A_THR 16: RP 2 -> PVEC 2 (32 slots <= 36): wavefronts 4 / 4 + 2 / 2 x ceil(16 x 2 / 32) = 2,
    #             issue (1 + 1 + 8) / 4 = 2.5 -> 2.5 x 16 / 112 = 0.357
    #   A_THR 32: RP 4 -> PVEC 4: wavefronts 2 / 4 + 1 x ceil(8 x 4 / 32) = 1.5, issue (0.5 + 1 + 8) / 4
    #             = 2.375 -> 2.375 x 8 / 56 = 0.339, the least
    #   A_THR 8: RP 1, PVEC 1, RF 8, one row: wavefronts 8 / 4 + 1 = 3, issue (2 + 1 + 8) / 4 = 2.75 ->
    #             3 x 32 / 224 = 0.429
    assert split(64, 28, 256, True, 36) == (32, 4)
    assert fma_map(64, 28, 256, True, 36).cycles == pytest.approx(2.375 * 8 / 56)
    # 64 x 64 over 256 threads, scalar: A_THR 16 (RF 4, RP 4, 2 rows): max(4 + 4, 24 / 4) = 8 x 16 / 256
    # = 0.5; A_THR 8 (RF 8, RP 2, 1 row): max(8 + 2, 26 / 4) = 10 x 32 / 512 = 0.625; A_THR 32 (RF 2,
    # RP 8, 4 rows): max(2 + 8, 26 / 4) = 10 x 8 / 128 = 0.625
    assert split(64, 64, 256) == (16, 1)
    assert fma_map(64, 64, 256).cycles == pytest.approx(0.5)
    # 3 filters x 5 pixels over 64 threads: A_THR must divide both 3 and 64, so only A_THR 1 (64 threads
    # along 5 pixels: 59 of 64 slots idle) is left and rejected: no split, the kernel runs FLAT
    assert fma_map(3, 5, 64) is None
    assert pw_variant(Tile(1, 5, 3, 1, 64), "fp32", "fp32") == {"USE_TC": 0, "FLAT": 1}
    # fp32 reads vectors (linear: weights only, its tokens are not contiguous per channel); fp16 never.
    # Pixel runs on 7-wide rows cannot store as vectors: only a reduction of >= 128 channels takes them.
    runs = {"USE_TC": 0, "A_THR": 32, "KVEC": 4, "PVEC": 4}
    assert pw_variant(Tile(4, 7, 64, 64, 256), "fp32", "fp32", "pw", 7, 320) == runs
    # (single pixels, weights by float4: A_THR 16 = 4 / 4 + 2 x 1 = 3 wavefronts x 16 / 112 = 0.429, A_THR 8 =
    # 8 / 4 + 1 = 3 x 32 / 224 = 0.429, equal idle slots: more threads along pixels, A_THR 8)
    assert pw_variant(Tile(4, 7, 64, 64, 256), "fp32", "fp32", "pw", 7, 96) == {**runs, "A_THR": 8, "PVEC": 1}
    # 4 x 8 pixels of a 56-wide map: runs of 4 store as float4 whatever the depth
    assert pw_variant(Tile(4, 8, 64, 16, 256), "fp32", "fp32", "pw", 56, 16)["PVEC"] > 1
    assert pw_variant(Tile(28, 1, 64, 64, 256), "fp32", "fp32", "linear", 1, 320)["PVEC"] == 1
    assert "KVEC" not in pw_variant(Tile(4, 7, 64, 12, 256), "fp16", "fp32", "pw", 7, 320)
    # every split covers the tile and idles at most a quarter of its slots; vector pixel reads divide
    # a thread's pixels and stay inside the padded row
    for tf, p, threads in [(64, 28, 128), (128, 49, 256), (16, 112, 128), (32, 196, 256), (128, 14, 256)]:
        for vector in (False, True):
            a, pv = split(tf, p, threads, vector, p + 8)
            b = threads // a
            rp = -(-p // b)
            assert tf % a == 0 and b * rp >= p and b * rp - p <= b * rp / 4
            assert pv == 1 or (rp % pv == 0 and (p + 8) % pv == 0 and b * rp <= p + 8)


def test_pw_launch_rejects_offsets_past_32_bits():
    from fuseplanner.core.errors import PlanError
    from fuseplanner.kernels.families.pw.launch import _check_pw_offsets

    t = Tile(8, 8, 64, 32, 256)
    # NCHW, 127 channels of 4096 x 4096: the last chunk's rows reach channel 128 (127 rounded up to TC 32),
    # 128 x 2^24 + (4096 rows x 4096) + 4096 columns = 2^31 + 2^24 + 4096 = 2,164,264,960 -> past a signed
    # 32-bit offset, although the image's own 127 x 2^24 elements would fit
    with pytest.raises(PlanError, match="one image needs element offsets up to 2164264960,"):
        _check_pw_offsets("p", t, False, 127, 4096, 4096, 8, 4096, 4096, 1, 1)
    # 96 channels: 96 x 2^24 + 4096 x 4096 + 4096 = 1,627,394,048 < 2^31 -> accepted
    _check_pw_offsets("p", t, False, 96, 4096, 4096, 8, 4096, 4096, 1, 1)
    # weights 65,536 x 32,768 (C_out rounded to TF 64 is itself) + 32,768 columns: 2^31 + 32,768 -> rejected
    with pytest.raises(PlanError, match="the weight matrix needs"):
        _check_pw_offsets("p", t, True, 32768, 1, 1, 65536, 1, 1, 1, 1)
    # linear tokens: 65,536 tokens (a multiple of P = 64) x 32,768 channels + 32,768 = 2^31 + 32,768 -> rejected
    with pytest.raises(PlanError, match="one image needs"):
        _check_pw_offsets("p", t, True, 32768, 65536, 1, 64, 65536, 1, 1, 1)
