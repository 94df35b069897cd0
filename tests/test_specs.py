"""GPU spec library: bundled files, schema validation, effective values, detection."""

from __future__ import annotations

import builtins
import math

import pytest
from pydantic import ValidationError

import fuseplanner
from fuseplanner.core.errors import SpecError
from fuseplanner.hw.spec import MEASURABLE, GpuSpec, detect, gpu, list_gpus, match_device

STEMS = {"gtx1660", "rtx_a4000", "orin", "t4", "v100", "a100_80gb", "l4", "rtx4090", "h100", "h200"}
NUMERIC = [n for n, f in GpuSpec.model_fields.items() if f.annotation in (int, float, float | None)]


def test_bundled_stems_and_lookup():
    assert {s.name for s in list_gpus()} == STEMS
    assert fuseplanner.gpu("h100") is gpu("h100")
    assert gpu("a100").name == "a100_80gb"  # alias


def test_key_numbers():
    h = gpu("h100")
    assert (h.sm_count, h.l2_bytes, h.compute_capability) == (132, 52428800, "9.0")
    assert h.smem_per_block_bytes == 227 * 1024 and h.smem_per_sm_bytes == 228 * 1024
    assert gpu("rtx_a4000").sm_count == 48  # the published repo's 96 is wrong
    assert gpu("gtx1660").sm_count == 22 and gpu("orin").sm_count == 16
    assert gpu("a100_80gb").l2_bytes == 40 * 2**20
    assert gpu("v100").max_blocks_per_sm == 32 and gpu("t4").max_threads_per_sm == 1024


@pytest.mark.parametrize("stem", sorted(STEMS))
def test_every_number_has_a_source(stem):
    s = gpu(stem)
    for field in NUMERIC:
        assert field in s.sources and len(s.sources[field]) > 10, f"{stem}.{field} has no source note"
    for field in s.measured:
        assert f"measured.{field}" in s.sources
    for field in s.refit:
        assert len(s.sources.get(f"refit.{field}", "")) > 10, f"{stem}: refit.{field} has no source note"


@pytest.mark.parametrize("stem", sorted(STEMS))
def test_limits_are_consistent(stem):
    s = gpu(stem)
    assert s.smem_per_block_bytes <= s.smem_per_sm_bytes
    assert s.max_threads_per_block <= s.max_threads_per_sm
    assert s.fp16_flops >= s.fp32_flops
    if s.fp16_tc_flops:
        assert s.fp16_tc_flops > s.fp16_flops
    # TF32 exists only from Ampere (cc 8.0) on
    assert (s.tf32_tc_flops is not None) == (float(s.compute_capability) >= 8.0)


def test_measured_overrides_datasheet():
    h = gpu("h100")
    assert h.dram_bw_bytes_per_s == 3.35e12
    assert h.eff("dram_bw_bytes_per_s") == 3.009e12 == h.hw.dram_bw  # [measured] in gpu_specs/h100.toml
    assert h.eff("fp32_flops") == 5.533e13 < h.fp32_flops  # measured fmaf rate under the 66.9e12 peak
    assert "fp16_tc_flops" not in h.measured and h.eff("fp16_tc_flops") == h.fp16_tc_flops  # datasheet
    # a GPU without tensor cores falls back to the CUDA-core rate in the cost model's tuple
    g = gpu("gtx1660")
    assert g.fp16_tc_flops is None and g.hw.fp16_tc_flops == g.fp16_flops
    assert g.hw.tf32_tc_flops == g.fp32_flops


def test_hashable_and_frozen():
    h = gpu("h100")
    assert hash(h) == hash(h.model_copy())
    with pytest.raises(ValidationError):
        h.sm_count = 1  # type: ignore[misc]


def _write(tmp_path, text: str, name: str = "mygpu.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def _base_text() -> str:
    from importlib import resources

    return (resources.files("fuseplanner") / "data" / "gpu_specs" / "h100.toml").read_text()


def test_user_file_by_path(tmp_path):
    p = _write(tmp_path, _base_text().replace("sm_count = 132", "sm_count = 114").replace("cluster_sms = 120", "cluster_sms = 104"))
    s = gpu(str(p))
    assert s.name == "mygpu" and s.sm_count == 114 and s.hw.cluster_sms == 104


@pytest.mark.parametrize(
    "old,new,field",
    [
        ("sm_count = 132", "sm_count = -3", "sm_count"),
        ("l2_bytes = 52428800", 'l2_bytes = "big"', "l2_bytes"),
        ('compute_capability = "9.0"', 'compute_capability = "nine"', "compute_capability"),
        ("dram_bw_bytes_per_s = 3.009e12", "dram_bandwidth = 3.009e12", "measured.dram_bandwidth"),
        ("sm_count = 132\n", "", "sm_count"),
        ("smem_per_block_bytes = 232448", "smem_per_block_bytes = 999999", "smem_per_block_bytes exceeds"),
        ("cluster_sms = 120", "cluster_sms = 133", "cluster_sms exceeds"),
    ],
)
def test_invalid_file_names_the_field(tmp_path, old, new, field):
    text = _base_text()
    assert old in text
    p = _write(tmp_path, text.replace(old, new, 1))
    with pytest.raises(SpecError) as ei:
        gpu(str(p))
    msg = str(ei.value)
    assert field in msg and "\n" not in msg and str(p) in msg


def test_bad_toml_and_missing_file(tmp_path):
    p = _write(tmp_path, "sm_count = = 3")
    with pytest.raises(SpecError, match="not valid TOML"):
        gpu(str(p))
    with pytest.raises(SpecError, match="cannot read"):
        gpu(str(tmp_path / "none.toml"))


def test_unknown_name_lists_known():
    with pytest.raises(SpecError) as ei:
        gpu("h300")
    assert "h100" in str(ei.value) and "rtx_a4000" in str(ei.value)


def test_measurable_fields_exist():
    for f in MEASURABLE:
        assert f in GpuSpec.model_fields


def test_match_device():
    assert match_device("NVIDIA H100 80GB HBM3", 132, "9.0").name == "h100"
    assert match_device("NVIDIA H200", 132, "9.0").name == "h200"
    assert match_device("NVIDIA RTX A4000", 48, "8.6").name == "rtx_a4000"
    assert match_device("NVIDIA H100 PCIe", 114, "9.0") is None  # not bundled
    assert match_device("NVIDIA GeForce RTX 4090", 128, "8.9").name == "rtx4090"


def test_detect_without_cupy_returns_none(monkeypatch):
    real = builtins.__import__

    def fake(name, *a, **k):
        if name == "cupy" or name.startswith("cupy."):
            raise ImportError("no cupy")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake)
    assert detect() is None


def test_lanes_are_whole():
    # fp32 FLOP/s / (2 * clock * SMs) is the FP32 lanes per SM the time model uses: 64 or 128
    for s in list_gpus():
        lanes = s.fp32_flops / (2 * s.clock_hz * s.sm_count)
        assert min(abs(lanes - 64), abs(lanes - 128)) < 0.06 * lanes, (s.name, lanes)
        assert math.isfinite(lanes)
