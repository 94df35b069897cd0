"""`validate --whole` on the GPU: the executor planned and unfused against the graph-context prediction."""

from __future__ import annotations

import json

import pytest

cp = pytest.importorskip("cupy", reason="CuPy is not installed: GPU tests need a CUDA machine")
if not cp.cuda.is_available():
    pytest.skip("no CUDA device visible: GPU tests skipped", allow_module_level=True)

from fuseplanner.cli.main import main  # noqa: E402
from fuseplanner.hw.spec import detect  # noqa: E402
from fuseplanner.validation.whole import WholeResult, measure  # noqa: E402


def test_measure_mobilenet_v1():
    spec = detect()
    if spec is None:
        pytest.skip("no bundled spec matches this GPU")
    r = measure("mobilenet_v1", spec, replays=20)
    assert r.measured_planned.median_s > 0 and r.measured_unfused.median_s > 0
    assert r.launches_planned < r.launches_unfused
    assert len(r.steps) >= r.launches_planned - 2  # every kernel step matched by label (views aside)
    assert r.unmatched_steps == [], r.unmatched_steps
    assert -0.9 < r.error_planned < 2.0  # a sanity range, not an accuracy target


def test_cli_whole_writes_json_and_markdown(tmp_path):
    if detect() is None:
        pytest.skip("no bundled spec matches this GPU")
    assert main(["validate", "mobilenet_v1", "--whole", "--replays", "10", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "whole.json").read_text())
    assert WholeResult.model_validate(rows[0]).model == "mobilenet_v1"
    assert "End-to-end latency" in (tmp_path / "whole.md").read_text()
