"""Pinned predictions: the pooled accuracy of the bundled H100 spec over the curated record set, and
the quick-start plan. A change to the cost model, the planner or the bundled spec that moves any of
these numbers fails here, so that it is made on purpose (update the numbers, the tables in
docs/validation.md and README.md, in the same change).

The accuracy numbers were computed by

    fuseplanner analyze accuracy --gpu h100 data/records/h100/fit/*.json.gz
    fuseplanner analyze accuracy --gpu h100 data/records/h100/holdout/*.json.gz
    fuseplanner analyze accuracy --gpu h100 data/records/h100/*/*.json.gz

on the curated set (data/records/README.md), printed there to one decimal; here to three.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "data" / "records" / "h100"

from fuseplanner.analysis.accuracy import AccuracyRow, accuracy  # noqa: E402
from fuseplanner.analysis.runs import load_runs  # noqa: E402
from fuseplanner.hw import spec as specs  # noqa: E402

#: set -> (runs, records, GMA median, GMA p90, DRAM median, time median, time p90, decisions agreeing, decided)
PINNED = {
    "fit": (29, 4100, 5.923, 23.872, 4.893, 10.885, 27.349, 615, 668),
    "holdout": (35, 6328, 6.289, 25.328, 3.142, 15.655, 53.965, 380, 424),
}


@pytest.fixture(scope="module")
def runs():
    spec = specs.gpu("h100")
    return {name: load_runs(sorted((RECORDS / name).glob("*.json.gz")), spec) for name in PINNED}


def pooled(runs) -> AccuracyRow:
    return accuracy(runs)[-1]


def _numbers(acc: AccuracyRow) -> tuple:
    return (acc.time.n, acc.gma.median, acc.gma.p90, acc.dram.median, acc.time.median, acc.time.p90,
            acc.agreeing, acc.groups)  # fmt: skip


@pytest.mark.parametrize("name", sorted(PINNED))
def test_pooled_accuracy_of_each_set_is_pinned(runs, name):
    n_runs, *want = PINNED[name]
    assert len(runs[name]) == n_runs
    got = _numbers(pooled(runs[name]))
    assert got == pytest.approx(tuple(want), abs=5e-4)


def test_pooled_accuracy_of_the_whole_set_is_pinned(runs):
    # every record of both sets: 4,100 + 6,328 = 10,428; decisions 615 + 380 = 995 of 668 + 424 = 1,092
    both = pooled(runs["fit"] + runs["holdout"])
    assert _numbers(both) == pytest.approx((10428, 6.142, 24.871, 3.874, 13.237, 40.942, 995, 1092), abs=5e-4)
    assert 100 * both.agreeing / both.groups == pytest.approx(91.12, abs=0.01)  # 995 / 1092


def test_quick_start_plan_is_pinned():
    # README's quick start: `fuseplanner plan mobilenet_v2 --gpu h100` (fp32, batch 1), decided in the
    # graph context (the default)
    import fuseplanner as fp
    from fuseplanner.planning.whole import predict_whole

    graph, spec = fp.load_model("mobilenet_v2"), fp.gpu("h100")
    plan = fp.plan(graph, spec, dtype="fp32", batch=1)
    assert plan.context == "graph"
    assert len(plan.groups) == 17 and sum(len(g.nodes) for g in plan.groups) == 35
    assert plan.totals.unfused.time_s * 1e6 == pytest.approx(371.60, abs=0.005)
    assert plan.totals.planned.time_s * 1e6 == pytest.approx(323.34, abs=0.005)
    # its last line, the whole inference as the executor runs it (graph context): 234.5 -> 226.4 us
    whole = predict_whole(graph, spec, plan, "graph")
    assert (whole.unfused.time_s * 1e6, whole.planned.time_s * 1e6) == pytest.approx((234.5, 226.4), abs=0.05)
    # `--context isolated`: 17 groups of 40 layers, 371.60 -> 321.11 us isolated, 234.5 -> 237.2 us whole
    iso = fp.plan(graph, spec, dtype="fp32", batch=1, context="isolated")
    assert len(iso.groups) == 17 and sum(len(g.nodes) for g in iso.groups) == 40
    assert iso.totals.planned.time_s * 1e6 == pytest.approx(321.11, abs=0.005)
    assert predict_whole(graph, spec, iso, "graph").planned.time_s * 1e6 == pytest.approx(237.2, abs=0.05)
