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
    kernels = {s.label for s in r.steps} | {s.label for s in r.unfused_steps}
    assert all(sp.plan in ("planned", "unfused") and sp.local_bytes > 0 and sp.label in kernels for sp in r.spills)


def test_cli_whole_writes_json_and_markdown(tmp_path):
    if detect() is None:
        pytest.skip("no bundled spec matches this GPU")
    assert main(["validate", "mobilenet_v1", "--whole", "--replays", "10", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "whole.json").read_text())
    assert WholeResult.model_validate(rows[0]).model == "mobilenet_v1"
    assert "End-to-end latency" in (tmp_path / "whole.md").read_text()


def test_decisions_mobilenet_v1():
    """Both contexts' plans compiled and timed (--decisions): every group either context fuses is
    measured, its fused step and the unfused steps of its members matched by covered nodes."""
    from fuseplanner.validation.whole_decisions import score, summarise

    spec = detect()
    if spec is None:
        pytest.skip("no bundled spec matches this GPU")
    lines: list[str] = []
    r = measure("mobilenet_v1", spec, batch=1, replays=10, step_repeats=5, decisions=True, progress=lines.append)
    # both contexts' plans measured: compiled apart where they differ (the H100 spec's do on MobileNetV1)
    assert any("compiling the graph-context plan" in x or "measured once" in x for x in lines)
    assert r.unfused_steps and all(s.measured_s > 0 for s in r.unfused_steps)
    assert r.graph_step_timing == "spacing"
    assert {run.context for run in r.decisions.runs} == {"isolated", "graph"}
    decisions = score(r)
    assert len(decisions) == 2 * len(r.decisions.candidates) > 0
    for d in decisions:
        assert d.measured is not None, d.group
        assert d.measured.fused_s > 0 and d.measured.unfused_s > 0
        assert set(d.measured.unfused_steps) >= set(d.group.split("+"))  # each member's unfused step matched
    assert all(s.unmeasured == 0 and s.scored > 0 for s in summarise(decisions))


def test_whole_counters_mobilenet_v1():
    """Nsight Compute over one graph replay, cold and warm: the counters of the planned and the unfused
    model, beside the graph-context prediction."""
    from fuseplanner.validation import ncu

    spec = detect()
    if spec is None:
        pytest.skip("no bundled spec matches this GPU")
    if ncu.find_ncu() is None:
        pytest.skip("Nsight Compute (ncu) is not installed")
    try:
        r = measure("mobilenet_v1", spec, batch=1, replays=10, step_repeats=5, counters=True, require_counters=True)
    except ncu.CountersUnavailable as exc:
        pytest.skip(f"counters not readable here: {exc}")
    t = r.traffic
    for m in (t.cold, t.warm):
        assert m.planned.l2_bytes > 0 and m.unfused.l2_bytes > 0
        assert m.planned.l2_bytes < m.unfused.l2_bytes  # fused intermediates never reach L2
    # one cold inference reads at least the weights from DRAM (4.2 M fp32 parameters, about 17 MB)
    assert t.cold.planned.dram_read_bytes > 10e6
    assert 0.5 < t.predicted_planned.l2_bytes / t.cold.planned.l2_bytes < 2.0  # sanity, not an accuracy target


def test_graph_step_times_are_spacings_within_a_replay():
    """Each step's graph-mode time is its spacing among graph kernels (no share of what a replay costs
    once): together they take less than one replay of the whole model, which pays that cost."""
    import fuseplanner

    spec = detect()
    if spec is None:
        pytest.skip("no bundled spec matches this GPU")
    net = fuseplanner.compile("mobilenet_v1", spec, batch=1)
    steps = net.time_nodes(repeats=10, mode="graph")
    assert steps and all(s.seconds > 0 for s in steps)
    assert sum(s.seconds for s in steps) < net.bench(replays=50).median_s
