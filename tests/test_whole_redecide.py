"""Saved whole-model fuse decisions decided again (fuseplanner.validation.whole_redecide) and scored
from the saved step times, without a GPU.

The real record: MobileNetV2, fp32, batch 1, as measured on the H100 (data/records/h100/whole/). The
synthetic one: tests/test_whole_decisions.py's model and step times, with one more candidate no run
measured.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fuseplanner.validation.whole import net_of_replay, read
from fuseplanner.validation.whole_decisions import Candidate, DecisionData, score, summarise, to_markdown
from fuseplanner.validation.whole_redecide import redecide

RECORD = Path(__file__).resolve().parents[1] / "data/records/h100/whole/fp32fp32_b1/mobilenet_v2.json.gz"
US = 1e-6


@pytest.fixture(scope="module")
def redecided():
    from fuseplanner.frontend.load import load_model
    from fuseplanner.hw.spec import gpu
    from fuseplanner.planning.search import plan

    spec = gpu("h100")
    saved = net_of_replay(read(RECORD)[0], spec)  # timed by one replay: its step times net of the once cost
    graph = load_model(saved.model, None, saved.batch)
    plans = {c: plan(graph, spec, dtype=saved.dtype, precision=saved.precision, context=c) for c in ("isolated", "graph")}
    return saved, redecide(saved, spec), plans


def _labels(groups) -> set[str]:
    return {"+".join(g.nodes) for g in groups}


def test_redecided_candidates_are_the_fresh_plans_groups(redecided):
    saved, again, plans = redecided
    fresh = again.decisions.candidates
    for ctx, p in plans.items():
        assert {c.label for c in fresh if c.fused(ctx)} == _labels(p.groups)
    assert {c.label for c in fresh} == _labels(plans["isolated"].groups) | _labels(plans["graph"].groups)
    # only the candidates are new: the measurements and everything else are the saved ones
    assert again.decisions.runs == saved.decisions.runs
    assert again.model_copy(update={"decisions": saved.decisions}) == saved


def test_a_group_no_saved_run_fused_is_unmeasured(redecided):
    saved, again, _ = redecided
    stepped = {s.label for run in saved.decisions.runs for s in run.steps if s.kind not in ("library", "view")}
    absent = {c.label for c in again.decisions.candidates} - stepped
    assert absent  # the graph context decides differently with the per-class launch terms
    decisions = score(again)
    assert {d.group for d in decisions if d.measured is None} == absent
    assert all(d.right is None for d in decisions if d.group in absent)
    iso, gra = summarise(decisions)
    assert iso.unmeasured >= len(absent) and gra.unmeasured >= len(absent)
    assert iso.scored + iso.unmeasured == gra.scored + gra.unmeasured == len(again.decisions.candidates)
    md = to_markdown([again])
    assert f"({len(absent)} of {len(again.decisions.candidates)} candidates)" in md


def test_a_result_without_decisions_comes_back_unchanged():
    from fuseplanner.hw.spec import gpu

    bare = read(RECORD)[0].model_copy(update={"decisions": None})
    assert redecide(bare, gpu("h100")) is bare


def test_pooled_table_counts_unmeasured_per_context():
    from test_whole_decisions import CANDIDATES, synthetic

    r = synthetic("syn", True)
    # d+e: fused in the graph context only, no run has its kernel step. Isolated: d+e itself is unmeasured
    # (weighed against c+d). Graph: d+e unmeasured, and c+d (not fused, weighed against b+c and d+e) too;
    # a+b against b+c only: +4 > +2, wrong; b+c right; e+f wrong (-1). So isolated 3 of 4 right, 1
    # unmeasured; graph 1 of 3, 2 unmeasured.
    extra = Candidate(label="d+e", kind="pw_dw", covers=["d", "e"], fused_isolated=False, fused_graph=True,
                      predicted_isolated_s=-1 * US, predicted_graph_s=1 * US)  # fmt: skip
    r = r.model_copy(update={"decisions": DecisionData(candidates=[*CANDIDATES, extra], runs=r.decisions.runs)})
    held = synthetic("held", True)  # the unchanged synthetic result: isolated 3 of 4, graph 2 of 4
    md = to_markdown([r, held], "Decisions made up.", frozenset({"held"}))
    assert "Decisions made up." in md and "(1 of 9 candidates)" in md
    # fuse all: of the measured candidates a+b (+4), b+c (+2) save, c+d (-2) and e+f (-1) do not: 2 of 4.
    # Time lost in each result: isolated c+d 2 us; graph a+b 4 - 2 = 2 and e+f 1 us; fuse all 2 + 1 us;
    # over 50 us unfused per result: 4 / 6 / 6 %, the same pooled over both (8 / 12 / 12 us of 100)
    assert "| bundled | fp32/fp32 | 1 | 5 (1) | 3/4 (75.0%) | 1/3 (33.3%) | 2/4 (50.0%) | 4.00 / 6.00 / 6.00 | 1 / 2 |" in md
    assert "| held-out | all | all | 4 (0) | 3/4 (75.0%) | 2/4 (50.0%) | 2/4 (50.0%) | 4.00 / 6.00 / 6.00 | 0 / 0 |" in md
    assert "| all | all | all | 9 (1) | 6/8 (75.0%) | 3/7 (42.9%) | 4/8 (50.0%) | 4.00 / 6.00 / 6.00 | 1 / 2 |" in md
    assert "Pooled per model set" not in to_markdown([r])


# ---- the CLI ---------------------------------------------------------------------------------------
def test_cli_redecides_by_default(redecided, tmp_path, capsys):
    from fuseplanner.cli.main import main
    from fuseplanner.frontend.holdout import holdout_models

    _, again, _ = redecided
    assert main(["validate", "--whole", "--decisions", "--from-results", str(RECORD), "--gpu", "h100",
                 "--out", str(tmp_path)]) == 0  # fmt: skip
    text = (tmp_path / "decisions.md").read_text()
    assert text in capsys.readouterr().out
    note = ("Decisions re-decided with spec `h100` and the current cost model; step times as saved (net of the "
            "replay's once cost where one replay timed them).")
    assert text == to_markdown([again], note, frozenset(m.name for m in holdout_models()))


def test_cli_as_saved_scores_the_saved_decisions(redecided, tmp_path, capsys):
    from fuseplanner.cli.main import main

    saved, again, _ = redecided
    assert main(["validate", "--whole", "--decisions", "--from-results", str(RECORD), "--as-saved",
                 "--out", str(tmp_path)]) == 0  # fmt: skip
    text = (tmp_path / "decisions.md").read_text()
    assert "Decisions as saved in the results (decided at measurement time); step times net" in text
    iso, gra = summarise(score(saved))
    row = f"| all | all | all | {len(saved.decisions.candidates)} (0) | {iso.right}/{iso.scored} "
    assert row in text and saved.decisions != again.decisions
