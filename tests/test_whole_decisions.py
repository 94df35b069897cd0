"""Fuse decisions of both contexts scored against executor step times (fuseplanner.validation.whole_decisions).

Every step time here is SYNTHETIC (made up to exercise the scoring), not a measurement. The model:
nodes a, a_relu, b, b_relu, c, c_relu, d, add, e, f. The isolated plan fuses A = a+b and C = c+d (C
leaves the residual Add that d applies alone to run as its own step); the graph plan fuses B = b+c and
E = e+f. Times in us:

    unfused:  a [a, a_relu] 10 | b [b] 8 | b_relu [b_relu] 2 (a library activation) | c [c, c_relu] 9 |
              d [d, add] 7 | e [e] 5 | f [f] 6
    isolated: a+b [a, a_relu, b, b_relu] 16 | c+d [c, c_relu, d] 15 | add [add] 3 | e 5 | f 6
    graph:    a 10 | b+c [b, b_relu, c, c_relu] 17 | d [d, add] 7 | e+f [e, f] 12

Measured savings (unfused - planned over the steps covering the same nodes):
    A: (10 + 8 + 2) - 16 = +4      C: (9 + 7) - (15 + 3) = -2 (the Add joins through d's covers)
    B: (8 + 2 + 9) - 17 = +2       E: (5 + 6) - 12 = -1
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fuseplanner.validation.whole import Latency, WholeResult, read, write
from fuseplanner.validation.whole_decisions import (
    Candidate,
    DecisionData,
    MeasuredStep,
    PlanRun,
    closure,
    fuse_all_lost_s,
    measure_candidate,
    score,
    summarise,
    time_lost,
    to_markdown,
)

FIXTURES = Path(__file__).parent / "fixtures"
US = 1e-6


def _steps(rows) -> list[MeasuredStep]:
    return [MeasuredStep(label=lab, kind=kind, measured_s=t * US, covers=covers) for lab, kind, covers, t in rows]


UNFUSED = _steps([("a", "pw", ["a", "a_relu"], 10), ("b", "dw", ["b"], 8), ("b_relu", "library", ["b_relu"], 2),
                  ("c", "pw", ["c", "c_relu"], 9), ("d", "pw", ["d", "add"], 7), ("e", "dw", ["e"], 5),
                  ("f", "pw", ["f"], 6)])  # fmt: skip
ISOLATED = _steps([("a+b", "pw_dw", ["a", "a_relu", "b", "b_relu"], 16), ("c+d", "pw_pw", ["c", "c_relu", "d"], 15),
                   ("add", "library", ["add"], 3), ("e", "dw", ["e"], 5), ("f", "pw", ["f"], 6)])  # fmt: skip
GRAPH = _steps([("a", "pw", ["a", "a_relu"], 10), ("b+c", "dw_pw", ["b", "b_relu", "c", "c_relu"], 17),
                ("d", "pw", ["d", "add"], 7), ("e+f", "dw_pw", ["e", "f"], 12)])  # fmt: skip
CANDIDATES = [  # predicted savings are synthetic too
    Candidate(label="a+b", kind="pw_dw", covers=["a", "b"], fused_isolated=True, fused_graph=False,
              predicted_isolated_s=3 * US, predicted_graph_s=0.5 * US),
    Candidate(label="c+d", kind="pw_pw", covers=["c", "d"], fused_isolated=True, fused_graph=False,
              predicted_isolated_s=2 * US, predicted_graph_s=-0.5 * US),
    Candidate(label="b+c", kind="dw_pw", covers=["b", "c"], fused_isolated=False, fused_graph=True,
              predicted_isolated_s=1 * US, predicted_graph_s=1.5 * US),
    Candidate(label="e+f", kind="dw_pw", covers=["e", "f"], fused_isolated=False, fused_graph=True,
              predicted_isolated_s=0.2 * US, predicted_graph_s=0.8 * US),
]  # fmt: skip


def synthetic(model: str, both_runs: bool) -> WholeResult:
    """A `WholeResult` with synthetic numbers; `both_runs` False: measured without --decisions (only the
    isolated plan compiled)."""
    runs = [PlanRun(context="isolated", steps=ISOLATED)] + ([PlanRun(context="graph", steps=GRAPH)] if both_runs else [])
    lat = Latency(median_s=50 * US, p10_s=49 * US, p90_s=51 * US)
    return WholeResult(
        model=model, gpu="h100", device="synthetic numbers, not a measurement", dtype="fp32", precision="fp32",
        batch=1, context="graph", launches_planned=5, launches_unfused=7, measured_planned=lat, measured_unfused=lat,
        predicted_planned_s=50 * US, predicted_unfused_s=50 * US, isolated_planned_s=50 * US, isolated_unfused_s=50 * US,
        error_planned=0.0, error_unfused=0.0, predicted_saving=0.0, measured_saving=0.0, isolated_saving=0.0,
        saving_gap_points=0.0, step_mode="graph", graph_step_timing="spacing", unfused_steps=UNFUSED,
        decisions=DecisionData(candidates=CANDIDATES, runs=runs))  # fmt: skip


def _right(decisions) -> dict[tuple[str, str], bool | None]:
    return {(d.context, d.group): d.right for d in decisions}


def test_closure_grows_until_both_sides_cover_the_same_nodes():
    # seeded with C's fused step: d's unfused step covers the Add, which pulls in the isolated run's Add step
    mine, theirs = closure(ISOLATED[1].covers, ISOLATED, UNFUSED)
    assert (mine, theirs) == ([1, 2], [3, 4])


def test_measured_savings_by_hand():
    got = {c.label: measure_candidate(c.label, ISOLATED if c.fused_isolated else GRAPH, UNFUSED) for c in CANDIDATES}
    assert {k: m.saving_s / US for k, m in got.items()} == pytest.approx({"a+b": 4, "c+d": -2, "b+c": 2, "e+f": -1})
    assert got["c+d"].planned_steps == ("c+d", "add") and got["c+d"].unfused_steps == ("c", "d")
    assert got["a+b"].fused_s == pytest.approx(16 * US) and got["a+b"].unfused_steps == ("a", "b", "b_relu")
    assert measure_candidate("b+c", ISOLATED, UNFUSED) is None  # the isolated run has no such kernel step


def test_score_by_hand():
    d = score(synthetic("syn", both_runs=True))
    assert _right(d) == {
        ("isolated", "a+b"): True,   # fused, +4 > 0
        ("isolated", "c+d"): False,  # fused, -2
        ("isolated", "b+c"): True,   # not fused for a+b and c+d: +2 <= max(0, 4 - 2), though it saves
        ("isolated", "e+f"): True,   # not fused, nothing overlapping: -1 <= 0
        ("graph", "a+b"): False,     # not fused for b+c: +4 > max(0, +2)
        ("graph", "c+d"): True,      # not fused for b+c: -2 <= max(0, +2)
        ("graph", "b+c"): True,      # fused, +2
        ("graph", "e+f"): False,     # fused, -1
    }  # fmt: skip
    iso, gra = summarise(d)
    assert (iso.right, iso.scored, iso.unmeasured) == (3, 4, 0)
    assert (gra.right, gra.scored, gra.unmeasured) == (2, 4, 0)
    instead = {(x.context, x.group): x.instead for x in d}
    assert instead[("isolated", "b+c")] == ("a+b", "c+d") and instead[("graph", "a+b")] == ("b+c",)


def test_score_without_the_other_contexts_run_leaves_its_groups_unmeasured():
    d = score(synthetic("syn", both_runs=False))
    # b+c and e+f have no kernel step in the isolated run; every decision weighed against b+c is unmeasured
    assert _right(d) == {("isolated", "a+b"): True, ("isolated", "c+d"): False, ("isolated", "b+c"): None,
                         ("isolated", "e+f"): None, ("graph", "a+b"): None, ("graph", "c+d"): None,
                         ("graph", "b+c"): None, ("graph", "e+f"): None}  # fmt: skip
    iso, gra = summarise(d)
    assert (iso.right, iso.scored, iso.unmeasured, gra.scored, gra.unmeasured) == (1, 2, 2, 0, 4)


def test_markdown_lists_the_wrong_decisions_and_pooled_shares():
    md = to_markdown([synthetic("syn", True), synthetic("syn2", False)])
    assert "| syn | fp32/fp32 | 1 | 4 | 3/4 (75.0%) | 2/4 (50.0%) | 0 / 0 |" in md
    assert "| syn2 | fp32/fp32 | 1 | 4 | 1/2 (50.0%) | n/a | 2 / 4 |" in md
    # pooled: isolated 3 + 1 right of 4 + 2 scored; graph 2 of 4
    assert "| all | | | 8 | 4/6 (66.7%) | 2/4 (50.0%) | 2 / 4 |" in md
    # c+d fused in the isolated context: predicted +2.00 us, measured -2.00 us
    assert "| syn | fp32 | 1 | isolated | c+d | fuse | +2.00 | -2.00 |" in md
    assert "| syn | fp32 | 1 | graph | a+b | not | +0.50 | +4.00 |" in md
    # c+d's planned side is its kernel and the Add it leaves alone: 15 + 3 = 18 us against 9 + 7 = 16 unfused
    assert ("| syn | fp32 | 1 | c+d | pw_pw | fuse, +2.00, WRONG | not (b+c instead), -0.50, right | -2.00 | "
            "18.00 / 16.00 |") in md  # fmt: skip
    assert to_markdown([synthetic("syn", True).model_copy(update={"decisions": None})]) == ""


def test_records_round_trip_and_old_files_read(tmp_path):
    r = synthetic("syn", True)
    js, md = write([r], tmp_path)
    assert read(js) == [r]
    assert "Fuse decisions measured in the executor" in md.read_text()
    old = read(FIXTURES / "whole_mobilenet_v1.json")[0]  # written before the decision fields existed
    assert old.unfused_steps == [] and old.decisions is None and score(old) == []
    assert "unfused_steps" not in json.loads((FIXTURES / "whole_mobilenet_v1.json").read_text())[0]


def test_fixture_is_the_synthetic_results():
    assert read(FIXTURES / "whole_decisions_synthetic.json") == [synthetic("synthetic_a", True),
                                                                 synthetic("synthetic_b", False)]  # fmt: skip


def test_repredict_keeps_the_decision_measurements():
    from fuseplanner.hw.spec import gpu
    from fuseplanner.validation.whole import net_of_replay, repredict

    saved = read(FIXTURES / "whole_mobilenet_v1.json")[0]
    extra = synthetic("x", True)
    saved = saved.model_copy(update={"unfused_steps": extra.unfused_steps, "decisions": extra.decisions,
                                     "graph_step_timing": "spacing"})  # fmt: skip
    again = repredict(saved, gpu("h100"))
    assert again.unfused_steps == saved.unfused_steps and again.decisions == saved.decisions
    # steps timed by one replay come back net of its once cost (whole.net_of_replay), the rest as saved
    legacy = saved.model_copy(update={"graph_step_timing": "replay"})
    net = repredict(legacy, gpu("h100"))
    assert net.graph_step_timing == "replay-net"
    assert net.unfused_steps == net_of_replay(legacy, gpu("h100")).unfused_steps != saved.unfused_steps


# ---- the CLI ---------------------------------------------------------------------------------------
def test_cli_scores_decisions_from_results(tmp_path, capsys):
    from fuseplanner.cli.main import main

    fix = str(FIXTURES / "whole_decisions_synthetic.json")
    argv = ["validate", "--whole", "--decisions", "--from-results", fix, fix, "--out", str(tmp_path), "--as-saved"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Decisions as saved in the results" in out
    # the fixture twice: isolated (3 + 1) x 2 = 8 right of (4 + 2) x 2 = 12; graph 2 x 2 of 4 x 2
    assert "| all | | | 16 | 8/12 (66.7%) | 4/8 (50.0%) | 4 / 8 |" in out
    assert (tmp_path / "decisions.md").read_text() in out


def test_cli_decision_errors(tmp_path, capsys):
    from fuseplanner.cli.main import main

    old = str(FIXTURES / "whole_mobilenet_v1.json")
    for argv in (["validate", "--whole", "--decisions", "--from-results", old, "--out", str(tmp_path)],
                 ["validate", "--decisions", "--from-results", old],
                 ["validate", "--whole", "--from-results", old, "--as-saved", "--out", str(tmp_path)],
                 # re-deciding plans the model the results name: the synthetic one is no model
                 ["validate", "--whole", "--decisions", "--from-results", str(FIXTURES / "whole_decisions_synthetic.json"),
                  "--out", str(tmp_path)],
                 ["validate", "--from-results", old, old]):  # fmt: skip
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error:"), argv


# ---- candidates from real plans (no GPU) -----------------------------------------------------------
@pytest.fixture(scope="module")
def mobilenet():
    import fuseplanner
    from fuseplanner.frontend.load import load_model
    from fuseplanner.hw.spec import gpu
    from fuseplanner.planning.search import plan
    from fuseplanner.validation.microbench import apply_measured

    # the graph context at the isolated threshold, where MobileNetV1's two plans differ (at the H100's own
    # graph threshold, 1.0, they fuse the same groups)
    spec = apply_measured(gpu("h100"), {"graph_fuse_min_speedup": 1.05})
    g = load_model("mobilenet_v1", None, 1)
    plans = {c: plan(g, spec, context=c, workers=1) for c in ("isolated", "graph")}
    iso = fuseplanner.compile("mobilenet_v1", spec, plans["isolated"], device="cpu")
    bare = fuseplanner.compile("mobilenet_v1", spec, device="cpu", fuse=False)
    return spec, plans, iso, bare


def test_candidates_follow_the_planners_objective(mobilenet):
    from fuseplanner.cost.execution import context_time, launch_terms
    from fuseplanner.validation.whole_decisions import candidates

    spec, plans, _, bare = mobilenet
    cands = {c.label: c for c in candidates(plans["isolated"], plans["graph"], bare.plan, spec)}
    for ctx, p in plans.items():
        labels = {"+".join(g.nodes) for g in p.groups}
        assert {k for k, c in cands.items() if c.fused(ctx)} == labels
        for g in p.groups:  # MobileNetV1's groups absorb no Add: the saving is the group's own
            want = context_time(g.unfused_cost, launch_terms(spec), ctx) - context_time(g.fused_cost, launch_terms(spec), ctx)
            assert cands["+".join(g.nodes)].predicted_s(ctx) == pytest.approx(want)
            assert want > 0  # the planner fuses only what it predicts to save
    fused = [{"+".join(g.nodes) for g in p.groups} for p in plans.values()]
    assert fused[0] != fused[1] and set(cands) == fused[0] | fused[1]  # the plans differ: every group of either


def test_executor_steps_match_by_covers(mobilenet):
    """The CPU-compiled executor programs (the steps the GPU run times), with synthetic times of 1 us
    per covered node: each isolated-plan group is matched to its own kernel step and the unfused steps
    of its members (their epilogue activations included), so the synthetic saving is 0."""
    from fuseplanner.run.device import StepTime
    from fuseplanner.validation.whole import with_covers
    from fuseplanner.validation.whole_decisions import measure_candidate

    _, plans, iso, bare = mobilenet

    def timed(m):
        steps = [s for s in m.steps if s.kind != "view"]
        return with_covers(m, [StepTime(s.label, s.kind, s.op_type, len(s.covers) * US) for s in steps])

    run, unfused = timed(iso), timed(bare)
    for g in plans["isolated"].groups:
        m = measure_candidate("+".join(g.nodes), run, unfused)
        assert m is not None and m.planned_steps == ("+".join(g.nodes),)
        assert set(m.unfused_steps) == set(g.nodes) and m.saving_s == pytest.approx(0.0)


def test_time_lost_by_hand():
    d = score(synthetic("syn", both_runs=True))
    lost = {(x.context, x.group): x.lost_s / US for x in d}
    # isolated c+d: fused, measured -2 -> 2 us lost; graph a+b: not fused for b+c, 4 - max(0, 2) = 2 us;
    # graph e+f: fused, measured -1 -> 1 us; every right decision loses 0
    assert lost == pytest.approx({("isolated", "a+b"): 0, ("isolated", "c+d"): 2, ("isolated", "b+c"): 0,
                                  ("isolated", "e+f"): 0, ("graph", "a+b"): 2, ("graph", "c+d"): 0,
                                  ("graph", "b+c"): 0, ("graph", "e+f"): 1})  # fmt: skip
    iso, gra = summarise(d)
    assert (iso.lost_s / US, gra.lost_s / US) == pytest.approx((2, 3))
    # fusing all four loses c+d's 2 and e+f's 1 us; over 100 us of unfused runs: 2 / 3 / 3 %
    assert fuse_all_lost_s(d) / US == pytest.approx(3)
    assert time_lost(d, 100 * US) == "2.00 / 3.00 / 3.00"
    assert all(x.lost_s is None for x in score(synthetic("syn", both_runs=False)) if x.right is None)


def test_pooled_table_gives_time_lost_over_the_runs_unfused_latency():
    # two runs of 50 us unfused each (synthetic): syn loses 2 / 3 / 3 us, syn2 (isolated run only) 2 / 0 / 2 us
    md = to_markdown([synthetic("syn", True), synthetic("syn2", False)], held_out=frozenset({"syn2"}))
    assert "| bundled | fp32/fp32 | 1 | 4 (0) | 3/4 (75.0%) | 2/4 (50.0%) | 2/4 (50.0%) | 4.00 / 6.00 / 6.00 | 0 / 0 |" in md
    assert "| held-out | fp32/fp32 | 1 | 4 (2) | 1/2 (50.0%) | n/a | 1/2 (50.0%) | 4.00 / 0.00 / 4.00 | 2 / 4 |" in md
    assert "| all | all | all | 8 (2) | 4/6 (66.7%) | 2/4 (50.0%) | 3/6 (50.0%) | 4.00 / 3.00 / 5.00 | 2 / 4 |" in md
