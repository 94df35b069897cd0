"""Calibration output: the GPU spec TOML with a [measured] table, and applying a calibration (CPU)."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fuseplanner.validation import microbench as calibrate

ROOT = Path(__file__).resolve().parent.parent
CAL = calibrate.Calibration(
    device_name="NVIDIA H100 80GB HBM3", sm_count=132, l2_bytes=52428800, dram_bw_bytes_per_s=2.9e12,
    l2_bw_bytes_per_s=8.5e12, launch_overhead_s=2.05e-6, launch_warm_s=1.3e-6, launch_interval_s=1.1e-6, fp32_flops=5.9e13,
    fp16_flops=1.1e14,
)


def test_measured_keys_are_spec_fields():
    m = CAL.measured()
    assert set(m) == set(calibrate.SPEC_FIELDS.values())
    assert m["l2_bw_bytes_per_s"] == 8.5e12


def test_toml_round_trip_keeps_the_base_spec(tmp_path):
    base = tomllib.loads((ROOT / "gpu_specs" / "h100.toml").read_text())
    path = calibrate.write_spec(tmp_path / "h100_cal.toml", base, CAL)
    back = tomllib.loads(path.read_text())
    # every datasheet field is kept unchanged
    for k, v in base.items():
        if k not in ("measured", "sources", "estimated"):
            assert back[k] == v, k
    # a measured field is no longer listed as an estimate; the others stay
    assert back["estimated"] == [f for f in base["estimated"] if f not in CAL.measured()]
    assert "l2_bw_bytes_per_s" in base["estimated"] and "mem_latency_s" in back["estimated"]
    # measured values are ours (the bundled copy-bandwidth value is replaced by the new measurement)
    assert back["measured"]["dram_bw_bytes_per_s"] == 2.9e12
    assert back["measured"]["launch_overhead_s"] == 2.05e-6
    # a source note for each measured value, beside the bundled notes
    assert "ld.global.cg" in back["sources"]["measured.l2_bw_bytes_per_s"]
    assert back["sources"]["sm_count"] == base["sources"]["sm_count"]


def test_toml_values():
    text = calibrate.to_toml({"name": 'a "b"', "n": 3, "ok": True, "xs": [1, 2]}, {"fp32_flops": 1.5e13})
    d = tomllib.loads(text)
    assert d == {"name": 'a "b"', "n": 3, "ok": True, "xs": [1, 2], "measured": {"fp32_flops": 1.5e13}}


@dataclass(frozen=True)
class _Spec:
    name: str = "x"
    dram_bw_bytes_per_s: float = 3.35e12
    l2_bw_bytes_per_s: float = 1e13
    launch_overhead_s: float = 2e-6
    fp32_flops: float = 6.7e13
    fp16_flops: float = 1.3e14
    measured: dict = field(default_factory=lambda: {"dram_bw_bytes_per_s": 2.94e12, "mem_latency_s": 6e-7})


def test_apply_overrides_measured_and_keeps_datasheet():
    spec = _Spec()
    cal = calibrate.apply(spec, CAL)
    assert cal.measured["dram_bw_bytes_per_s"] == 2.9e12
    assert cal.measured["mem_latency_s"] == 6e-7  # a measured value calibrate does not touch survives
    assert calibrate.datasheet_values(cal)["dram_bw_bytes_per_s"] == 3.35e12
    assert spec.measured["dram_bw_bytes_per_s"] == 2.94e12  # the original is not modified


def test_calibrate_without_gpu_raises_device_error():
    from fuseplanner.core.errors import DeviceError
    from fuseplanner.kernels import require_device

    try:
        require_device()
    except DeviceError:
        with pytest.raises(DeviceError):
            calibrate.calibrate()
    else:
        pytest.skip("a CUDA device is present")
