"""scripts/decision_noise.py: candidates measured in two planned runs, on CPU."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from test_whole_decisions import synthetic  # noqa: E402

from fuseplanner.validation.whole_decisions import measure_candidate  # noqa: E402

spec = importlib.util.spec_from_file_location("decision_noise", ROOT / "scripts" / "decision_noise.py")
dn = importlib.util.module_from_spec(spec)
spec.loader.exec_module(dn)


def _with_graph_run(scale: float):
    r = synthetic("a", True)
    first = r.decisions.runs[0]
    steps = [s.model_copy(update={"measured_s": s.measured_s * scale}) for s in first.steps]
    runs = [first, first.model_copy(update={"context": "graph", "steps": steps})]
    return r.model_copy(update={"decisions": r.decisions.model_copy(update={"runs": runs})})


def test_each_candidate_is_paired_with_its_saving_in_both_runs():
    r = _with_graph_run(1.1)  # the second run's steps 10% slower: every saving falls by 10% of its planned steps
    pairs = dn.twice_measured([r])
    measured = [c.label for c in r.decisions.candidates if measure_candidate(c.label, r.decisions.runs[0].steps, r.unfused_steps)]
    assert len(pairs) == len(measured) > 0
    for label, (first, second) in zip(measured, pairs, strict=True):
        m = measure_candidate(label, r.decisions.runs[0].steps, r.unfused_steps)
        assert first == pytest.approx(m.saving_s)
        assert second == pytest.approx(m.unfused_s - 1.1 * m.planned_s)


def test_a_run_repeated_from_the_other_is_left_out():
    assert dn.twice_measured([_with_graph_run(1.0)]) == []  # same kernels: measured once, no second sample
