"""The planner's exact optimum, pinned: plans of bundled models (several GPUs, dtypes, batches,
objectives and precisions) must match those recorded before the tile search was made faster
(tests/fixtures/pinned_plans.json, decided in the isolated context: totals, every group's kind, members, tile and fused time, every
unfused layer's tile and time, the number of rejected candidates).

Regenerate the fixture only for a deliberate change of the cost model or the candidate set, and say
so: a faster search must leave it as it is.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fuseplanner import load_model
from fuseplanner.planning import search as planner

PINNED = json.loads((Path(__file__).parent / "fixtures" / "pinned_plans.json").read_text())


def _tile(t):
    return None if t is None else [t.th, t.tw, t.tf, t.tc, t.threads]


def _digest(plan) -> dict:
    return {
        "totals": {k: [getattr(plan.totals, k).time_s, getattr(plan.totals, k).gma_bytes,
                       getattr(plan.totals, k).dram_bytes, getattr(plan.totals, k).launches]
                   for k in ("unfused", "planned")},  # fmt: skip
        "groups": [[g.kind, list(g.nodes), _tile(g.tile), g.fused.time_s] for g in plan.groups],
        "layers": [[lay.node, _tile(lay.tile), lay.cost.time_s] for lay in plan.layers],
        "rejected": len(plan.rejected),
    }


@pytest.mark.parametrize("case", sorted(PINNED))
def test_plan_matches_the_pinned_optimum(case):
    model, gpu, dtype, batch, objective, precision = case.rsplit("-", 5)
    plan = planner.plan(load_model(model), gpu, dtype=dtype, batch=None if batch == "None" else int(batch),
                        objective=objective, precision=precision, workers=1, context="isolated")  # fmt: skip
    got, want = _digest(plan), PINNED[case]
    assert [g[:3] for g in got["groups"]] == [g[:3] for g in want["groups"]]
    assert [lay[:2] for lay in got["layers"]] == [lay[:2] for lay in want["layers"]]
    assert got["rejected"] == want["rejected"]
    assert _close(got, want)


def _close(got, want) -> bool:
    """Equal structure, floats within 1e-12 relative (the same arithmetic in another order)."""
    if isinstance(want, dict):
        return got.keys() == want.keys() and all(_close(got[k], want[k]) for k in want)
    if isinstance(want, list):
        return len(got) == len(want) and all(_close(a, b) for a, b in zip(got, want, strict=True))
    if isinstance(want, float):
        return got == pytest.approx(want, rel=1e-12)
    return got == want
