"""`--gpu auto` on a GPU without a bundled spec: a spec from its device properties (fake properties, CPU)."""

from __future__ import annotations

import pytest

from fuseplanner.core.errors import SpecError
from fuseplanner.hw import device_spec

#: cudaDeviceProp of an imaginary sm_89 card (no bundled spec has 46 SMs at cc 8.9).
PROPS = {
    "name": b"NVIDIA Imaginary 46", "major": 8, "minor": 9, "multiProcessorCount": 46, "clockRate": 2_000_000,
    "memoryClockRate": 10_000_000, "memoryBusWidth": 192, "l2CacheSize": 32 * 2**20,
    "sharedMemPerMultiprocessor": 102400, "sharedMemPerBlockOptin": 101376, "reservedSharedMemPerBlock": 1024,
    "maxThreadsPerMultiProcessor": 1536, "maxThreadsPerBlock": 1024, "maxBlocksPerMultiProcessor": 24,
    "regsPerMultiprocessor": 65536, "warpSize": 32,
}


def test_spec_from_properties():
    s = device_spec.spec_from_properties(PROPS)
    assert (s.name, s.compute_capability, s.sm_count) == ("nvidia_imaginary_46", "8.9", 46)
    assert s.clock_hz == 2.0e9
    # 2 (double data rate) x 10 GHz x 192 bits / 8 = 480 GB/s
    assert s.dram_bw_bytes_per_s == pytest.approx(480e9)
    # 46 SMs x 2 GHz x 256 FLOP/clock (128 FP32 FMA lanes) = 23.552 TFLOP/s
    assert s.fp32_flops == pytest.approx(23.552e12)
    # tensor cores: 46 x 2 GHz x 1024 = 94.208 TFLOP/s fp16, half of it TF32
    assert s.fp16_tc_flops == pytest.approx(94.208e12) and s.tf32_tc_flops == pytest.approx(47.104e12)
    assert (s.smem_per_block_bytes, s.l1_bytes, s.max_blocks_per_sm) == (101376, 131072, 24)
    assert s.fit.borrowed and not s.plan_only
    w = s.warnings()
    assert any("borrowed" in x for x in w) and any("estimate" in x for x in w)


def test_a100_like_properties_use_sm80_rates():
    props = {**PROPS, "major": 8, "minor": 0, "multiProcessorCount": 108, "clockRate": 1_410_000}
    s = device_spec.spec_from_properties(props)
    # 108 x 1.41 GHz x 128 FLOP/clock = 19.49184 TFLOP/s (the A100 datasheet's 19.5)
    assert s.fp32_flops == pytest.approx(19.49184e12)
    # 108 x 1.41 GHz x 2048 = 311.9 TFLOP/s dense FP16 tensor (datasheet 312)
    assert s.fp16_tc_flops == pytest.approx(311.87e12, rel=1e-4)


def test_old_gpu_is_plan_only():
    s = device_spec.spec_from_properties({**PROPS, "major": 7, "minor": 5})
    assert s.plan_only and any("sm_80" in x for x in s.warnings())


def test_missing_property_is_a_spec_error():
    props = {k: v for k, v in PROPS.items() if k != "memoryBusWidth"}
    with pytest.raises(SpecError, match="memoryBusWidth"):
        device_spec.spec_from_properties(props)


def test_note_suggests_calibrate():
    note = device_spec.uncalibrated_note(device_spec.spec_from_properties(PROPS))
    assert note.startswith("note: ") and "\n" not in note
    assert "uncalibrated" in note and "fuseplanner calibrate --out FILE" in note


def test_plan_with_auto_prints_one_uncalibrated_note(capsys, monkeypatch):
    from fuseplanner.cli.main import main

    spec = device_spec.spec_from_properties(PROPS)
    monkeypatch.setattr(device_spec, "local_spec", lambda device=0: (spec, device_spec.uncalibrated_note(spec)))
    assert main(["plan", "mobilenet_v2", "--gpu", "auto", "--json", "-"]) == 0
    cap = capsys.readouterr()
    assert '"gpu": "nvidia_imaginary_46"' in cap.out
    assert sum("uncalibrated" in line for line in cap.err.splitlines()) == 1


def test_local_spec_without_cupy(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "cupy", None)
    assert device_spec.local_spec() == (None, "")
