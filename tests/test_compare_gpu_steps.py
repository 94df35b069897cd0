"""scripts/compare_gpu_steps.py: the same executor steps timed on two GPUs, on CPU."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from fuseplanner.hw.spec import gpu
from fuseplanner.validation.whole import REPLAY_COPIES, read

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("compare_gpu_steps", ROOT / "scripts" / "compare_gpu_steps.py")
cgs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cgs)

H100 = ROOT / "data/records/h100/whole/fp32fp32_b1/mobilenet_v2.json.gz"
H200 = ROOT / "data/records/h200/whole/fp32fp32_b1/mobilenet_v2.json.gz"


def _scaled(result, factor: float):
    steps = [s.model_copy(update={"measured_s": s.measured_s * factor}) for s in result.unfused_steps]
    return result.model_copy(update={"unfused_steps": steps})


def test_a_result_against_a_scaled_copy_gives_the_scale():
    a = cgs.results([str(H200)], gpu("h200"))  # timed by spacing: read as it is
    b = {k: _scaled(r, 1.25) for k, r in a.items()}
    ratios = cgs.step_ratios(a, b)
    assert ratios and all(x == pytest.approx(1.25) for v in ratios.values() for x in v)
    assert sum(map(len, ratios.values())) == sum(s.measured_s > 0 for s in next(iter(a.values())).unfused_steps)


def test_steps_timed_by_one_replay_are_netted_first():
    raw = read(H100)[0]
    assert raw.graph_step_timing == "replay"
    netted = cgs.results([str(H100)], gpu("h100"))
    once = gpu("h100").eff("graph_replay_s") / REPLAY_COPIES  # 3.72 us / 10 = 0.372 us off every step
    first = next(s for s in raw.unfused_steps if s.measured_s > 1e-6)
    got = next(s for s in next(iter(netted.values())).unfused_steps if s.label == first.label)
    assert got.measured_s == pytest.approx(first.measured_s - once)


def test_the_two_lent_gpus_run_mobilenet_v2_alike():
    a, b = cgs.results([str(H100)], gpu("h100")), cgs.results([str(H200)], gpu("h200"))
    steps = [x for v in cgs.step_ratios(a, b).values() for x in v]
    assert len(steps) > 50 and 0.95 < sorted(steps)[len(steps) // 2] < 1.05
    assert len(cgs.replay_ratios(a, b)) == 1


def test_no_common_result_is_an_error(capsys):
    with pytest.raises(SystemExit, match="no unfused step"):
        cgs.main(["--gpus", "h100", "h200", "--a", str(H100),
                  "--b", str(ROOT / "data/records/h200/whole/fp32fp32_b1/mobilenet_v1.json.gz")])
