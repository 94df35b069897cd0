"""Whole-model validation's comparison and report (fuseplanner.validation.whole) on fake measurements."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from fuseplanner.cost.execution import StepPrediction, WholePrediction
from fuseplanner.planning.whole import WholePlanPrediction
from fuseplanner.validation.whole import Latency, WholeResult, compare, to_markdown, write

FIXTURES = __import__("pathlib").Path(__file__).parent / "fixtures"


@dataclass(frozen=True)
class FakeStep:  # the fields of fuseplanner.run.device.StepTime that compare reads
    label: str
    kind: str
    op_type: str
    seconds: float


def _pred(context, planned_us, unfused_us):
    def whole(times):
        return WholePrediction(context, tuple(StepPrediction(lab, "pw", "Conv", t * 1e-6, 0, 0) for lab, t in times))
    return WholePlanPrediction("m", context, whole(planned_us), whole(unfused_us))


def _result():
    graph = _pred("graph", [("a+b", 60.0), ("c", 40.0), ("v", 0.0)], [("a", 50.0), ("b", 30.0), ("c", 40.0)])
    iso = _pred("isolated", [("a+b", 70.0), ("c", 50.0)], [("a", 60.0), ("b", 40.0), ("c", 50.0)])
    measured = [FakeStep("a+b", "pw_dw", "Conv+Conv", 50e-6), FakeStep("c", "pw", "Conv", 40e-6),
                FakeStep("v", "view", "Reshape", 1e-7), FakeStep("extra", "library", "Add", 2e-6)]
    return compare(graph, iso, Latency(median_s=110e-6, p10_s=105e-6, p90_s=120e-6),
                   Latency(median_s=125e-6, p10_s=120e-6, p90_s=130e-6), measured,
                   gpu="h100", dtype="fp32", precision="fp32", batch=1)


def test_compare_by_hand():
    r = _result()
    # predicted planned 60 + 40 = 100 us vs 110 measured: 100/110 - 1 = -9.09%
    assert r.error_planned == pytest.approx(100 / 110 - 1)
    # unfused 50 + 30 + 40 = 120 us vs 125: -4%
    assert r.error_unfused == pytest.approx(120 / 125 - 1)
    # saving predicted (120 - 100) / 120 = 16.67%, measured (125 - 110) / 125 = 12%: gap +4.67 points
    assert r.predicted_saving == pytest.approx(20 / 120)
    assert r.measured_saving == pytest.approx(15 / 125)
    assert r.saving_gap_points == pytest.approx(100 * (20 / 120 - 15 / 125))
    # isolated: (150 - 120) / 150 = 20%
    assert r.isolated_saving == pytest.approx(0.2)
    # steps: a+b 60/50 - 1 = +20%, c 40/40 - 1 = 0, v has no prediction (0 us): no error; extra unmatched
    errs = {s.label: s.error for s in r.steps}
    assert errs["a+b"] == pytest.approx(0.2) and errs["c"] == pytest.approx(0.0) and errs["v"] is None
    assert r.step_error_median == pytest.approx(0.1)  # median of |0.2|, |0.0|
    assert r.unmatched_steps == ["extra"]
    assert (r.launches_planned, r.launches_unfused) == (2, 3)


def test_steps_covered_by_a_predicted_step_add_up():
    """The executor runs a stem conv's Clip as its own step ("clip"), and merges two elementwise nodes
    into one chain step ("e1+e2"): each is matched to the predicted step covering it, their seconds summed."""
    graph = _pred("graph", [("conv", 30.0), ("c", 40.0)], [("conv", 30.0), ("c", 40.0)])
    measured = [FakeStep("conv", "library", "Conv", 20e-6), FakeStep("clip", "library", "Clip", 5e-6),
                FakeStep("c", "pw", "Conv", 30e-6), FakeStep("e1+e2", "library", "Add+Relu", 10e-6),
                FakeStep("x+y", "library", "Add+Relu", 1e-6)]
    owner = {"conv": "conv", "clip": "conv", "c": "c", "e2": "c"}
    r = compare(graph, graph, Latency(median_s=70e-6, p10_s=1e-6, p90_s=1e-6), Latency(median_s=70e-6, p10_s=1e-6,
                p90_s=1e-6), measured, gpu="h100", dtype="fp32", precision="fp32", batch=1, owner=owner)  # fmt: skip
    got = {s.label: s.measured_s for s in r.steps}
    # conv: 20 + 5 = 25 us (predicted 30: +20%); c: 30 + 10 = 40 us (predicted 40: 0%)
    assert got == pytest.approx({"conv": 25e-6, "c": 40e-6})
    errs = {s.label: s.error for s in r.steps}
    assert errs["conv"] == pytest.approx(30 / 25 - 1) and errs["c"] == pytest.approx(0.0)
    assert r.unmatched_steps == ["x+y"]


def test_markdown_and_json_round_trip(tmp_path):
    r = _result()
    md = to_markdown([r])
    assert "| m | fp32/fp32 | 1 | 110.0 | 100.0 | -9.1% |" in md
    assert "| m | fp32/fp32 | 1 | 12.0% | 16.7% | +4.7 |" in md
    js, _ = write([r], tmp_path)
    import json

    back = [WholeResult.model_validate(d) for d in json.loads(js.read_text())]
    assert back == [r]


def test_spilled_kernels_are_recorded_and_listed(tmp_path):
    from types import SimpleNamespace

    from fuseplanner.run.runtime import Spill, spill_of
    from fuseplanner.validation.whole import read, spilled

    step = SimpleNamespace(label="a+b", kind="pw_dw", tile="12x24/f64/c16/t256")

    def launch(local_bytes, regs=255):  # a launcher reporting what the compiler gave its kernel
        return SimpleNamespace(resources=lambda: {"regs": regs, "local_bytes": local_bytes, "blocks": 240})

    assert spill_of(step, launch(0)) is None and spill_of(step, lambda: None) is None  # no spill; no report
    assert spill_of(step, launch(16, regs=64)) is None  # local memory under the ceiling: a stack frame
    sp = spill_of(step, launch(16))
    assert sp == Spill("a+b", "pw_dw", "12x24/f64/c16/t256", 255, 16)
    assert "255 registers and 16 bytes of local memory" in sp.message()
    r = _result().model_copy(update={"spills": spilled(SimpleNamespace(spills=(sp,)), "planned")})
    assert "| m | fp32/fp32 | 1 | planned | a+b | pw_dw | 12x24/f64/c16/t256 | 255 | 16 |" in to_markdown([r])
    assert "spill" not in to_markdown([_result()])  # no spills: no table
    js, _ = write([r], tmp_path)
    assert read(js) == [r]
    assert read(FIXTURES / "whole_mobilenet_v1.json")[0].spills == []  # results saved before read with none


def test_run_summary_notes_each_spilled_kernel(capsys):
    from types import SimpleNamespace

    from fuseplanner.cli.cmd_run import _summary
    from fuseplanner.run.runtime import Spill

    sp = Spill("n1+n2", "pw_dw", "12x24/f64/c16/t256", 255, 24)
    program = SimpleNamespace(counts=lambda: {"pw_dw": 1}, name="m", dtype="fp16", precision="fp32")
    _summary(SimpleNamespace(program=program, steps=(), memory=2**20, gpu=True, spills=(sp,), avoided=()))
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == f"note: {sp.message()}" and lines[-1].startswith("note: n1+n2 (pw_dw 12x24/f64/c16/t256)")
    _summary(SimpleNamespace(program=program, steps=(), memory=2**20, gpu=True, spills=(), avoided=(sp,)))
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].startswith("note: planned again without the kernel of n1+n2 (pw_dw 12x24/f64/c16/t256")
    assert "255 registers, 24 bytes of local memory" in lines[-1]


def test_cli_whole_needs_a_gpu(capsys):
    from fuseplanner.cli.main import main

    pytest.importorskip("fuseplanner")
    try:
        import cupy  # noqa: F401
        pytest.skip("a GPU stack is present: the GPU test covers --whole")
    except ImportError:
        pass
    assert main(["validate", "mobilenet_v1", "--whole", "--gpu", "h100"]) == 2
    assert "error:" in capsys.readouterr().err


def test_owners_cover_epilogue_nodes():
    """MobileNetV1's stem conv (a library conv) absorbs its Clip (node "n4") into its op: the executor
    runs that Clip as its own step, which belongs to the conv's predicted step."""
    from fuseplanner.frontend.load import load_model
    from fuseplanner.hw.spec import gpu
    from fuseplanner.planning.search import plan
    from fuseplanner.validation.whole import owners

    g = load_model("mobilenet_v1")
    p = plan(g, gpu("h100"))
    own = owners(p, g)
    stem = g.ops()[0]
    assert stem.epilogue_nodes and all(own[n] == stem.name for n in stem.epilogue_nodes)
    first = p.groups[0]
    assert own[first.nodes[1]] == "+".join(first.nodes)


def test_repredict_saved_measurements_without_a_gpu(tmp_path, capsys):
    """A saved `validate --whole` result (MobileNetV1, H100) re-predicted with the bundled spec: the
    measurements are kept, the predictions are the current model's of the same plan."""
    import fuseplanner
    from fuseplanner.cli.main import main
    from fuseplanner.hw.spec import gpu
    from fuseplanner.planning.whole import predict_whole
    from fuseplanner.validation.whole import read, repredict

    saved = read(FIXTURES / "whole_mobilenet_v1.json")[0]
    again = repredict(saved, gpu("h100"))
    assert again.measured_planned == saved.measured_planned and again.measured_unfused == saved.measured_unfused
    g = fuseplanner.load_model("mobilenet_v1")
    p = fuseplanner.plan(g, gpu("h100"), workers=1)
    assert again.predicted_planned_s == pytest.approx(predict_whole(g, gpu("h100"), p, "graph").planned.time_s)
    assert again.error_planned == pytest.approx(again.predicted_planned_s / saved.measured_planned.median_s - 1)
    assert {s.label for s in again.steps} == {s.label for s in saved.steps}
    from fuseplanner.core.errors import PlanError
    from fuseplanner.validation.microbench import apply_measured

    strict = apply_measured(gpu("h100"), {"graph_fuse_min_speedup": 1.05})
    with pytest.raises(PlanError):  # the graph context plans other groups than were measured
        repredict(saved, strict, context="graph")
    out = tmp_path / "rep"
    assert main(["validate", "--whole", "--from-results", str(FIXTURES / "whole_mobilenet_v1.json"), "--gpu", "h100",
                 "--out", str(out)]) == 0  # fmt: skip
    assert "mobilenet_v1" in (out / "whole.md").read_text()
    capsys.readouterr()


def test_repredict_rejects_a_file_that_is_not_whole_json(tmp_path, capsys):
    from fuseplanner.cli.main import main

    bad = tmp_path / "whole.json"
    bad.write_text('{"model": 3}')
    assert main(["validate", "--whole", "--from-results", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:")


def test_steps_timed_by_one_replay_are_netted_of_its_once_cost():
    """A result whose graph-mode steps were timed by one replay of 10 copies: each step time holds a tenth
    of what the replay cost once (spec graph_replay_s); `net_of_replay` takes it off every graph-mode
    step, once, and leaves results timed by spacing alone."""
    from fuseplanner.hw.spec import gpu
    from fuseplanner.validation.microbench import apply_measured
    from fuseplanner.validation.whole import REPLAY_COPIES, net_of_replay, read
    from fuseplanner.validation.whole_decisions import MeasuredStep

    spec = apply_measured(gpu("h100"), {"graph_replay_s": 4e-6})
    saved = read(FIXTURES / "whole_mobilenet_v1.json")[0].model_copy(update={
        "step_mode": "graph", "unfused_steps": [MeasuredStep(label="a", kind="pw", measured_s=5e-6)]})
    assert saved.graph_step_timing == "replay" and REPLAY_COPIES == 10  # saved before steps were timed by spacing
    net = net_of_replay(saved, spec)
    # 4 us / 10 copies = 0.4 us off each step: 5.0 -> 4.6 us
    assert net.unfused_steps[0].measured_s == pytest.approx(4.6e-6)
    assert [s.measured_s for s in net.steps] == pytest.approx([s.measured_s - 0.4e-6 for s in saved.steps])
    assert net.graph_step_timing == "replay-net" and net_of_replay(net, spec) == net  # never twice
    spaced = saved.model_copy(update={"graph_step_timing": "spacing"})
    assert net_of_replay(spaced, spec) == spaced


def test_a_graph_replay_adds_its_once_cost_to_the_whole_prediction():
    import fuseplanner
    from fuseplanner.hw.spec import gpu
    from fuseplanner.validation.microbench import apply_measured

    g = fuseplanner.load_model("mobilenet_v1")
    base = apply_measured(gpu("h100"), {"graph_replay_s": 1e-6})
    p = fuseplanner.plan(g, base, workers=1)
    without = fuseplanner.predict_whole(g, base, p)
    with_once = fuseplanner.predict_whole(g, apply_measured(base, {"graph_replay_s": 5e-6}), p)
    # 5 - 1 = 4 us more once per replay, planned and unfused alike; no step changes
    assert with_once.planned.time_s - without.planned.time_s == pytest.approx(4e-6)
    assert with_once.unfused.time_s - without.unfused.time_s == pytest.approx(4e-6)
    assert [s.time_s for s in with_once.planned.steps] == [s.time_s for s in without.planned.steps]
    iso = fuseplanner.predict_whole(g, apply_measured(base, {"graph_replay_s": 4e-6}), p, "isolated")
    assert iso.planned.replay_s == 0.0  # one launch alone has no graph replay
