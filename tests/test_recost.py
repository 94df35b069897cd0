"""A plan costed with another spec (`planning.recost`), and whole results re-predicted from the plan they
measured (`WholeResult.plan`): spec changes that would plan otherwise are scored on saved runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from script_module import load

from fuseplanner.core.errors import PlanError
from fuseplanner.core.ir import Tile
from fuseplanner.frontend.load import load_model
from fuseplanner.hw.spec import gpu
from fuseplanner.planning.recost import recost
from fuseplanner.planning.search import plan
from fuseplanner.validation.microbench import apply_measured
from fuseplanner.validation.whole import read, repredict, stored

FIXTURES = Path(__file__).parent / "fixtures"
WHOLE = Path(__file__).resolve().parents[1] / "data" / "records" / "h100" / "whole"


@pytest.mark.parametrize("model,dtype,batch", [("mobilenet_v2", "fp32", 1), ("efficientnet_b0", "fp16", 8)])
def test_recost_with_the_planning_spec_gives_the_plan_back(model, dtype, batch):
    g = load_model(model, None, batch)
    p = plan(g, gpu("h100"), dtype=dtype, workers=1)
    r = recost(g, p, gpu("h100"))
    assert [(x.nodes, x.tile, x.fused, x.unfused) for x in r.groups] == [(x.nodes, x.tile, x.fused, x.unfused) for x in p.groups]
    assert [(x.node, x.tile, x.cost) for x in r.layers] == [(x.node, x.tile, x.cost) for x in p.layers]
    assert r.totals == p.totals


def test_recost_keeps_the_tiles_and_moves_the_costs():
    g = load_model("mobilenet_v2", None, 1)
    spec = gpu("h100")
    p = plan(g, spec, workers=1)
    extra = 1e-6
    slower = apply_measured(spec, {"fused_kernel_fixed_s": spec.hw.fused_kernel_fixed_s + extra})
    r = recost(g, p, slower)
    assert [(x.nodes, x.tile) for x in r.groups] == [(x.nodes, x.tile) for x in p.groups]
    # the fixed time is added once per fused launch: each group's fused time grows by exactly 1 us, its
    # unfused time (layer-by-layer kernels) and every layer's cost stay, and the plan's total grows by
    # 1 us per group (no launch overlap on the H100: launch_overlap_s = 0)
    for old, new in zip(p.groups, r.groups, strict=True):
        assert new.fused.time_s - old.fused.time_s == pytest.approx(extra, rel=1e-9)
        assert new.unfused == old.unfused
    assert [x.cost for x in r.layers] == [x.cost for x in p.layers]
    assert r.totals.planned.time_s - p.totals.planned.time_s == pytest.approx(len(p.groups) * extra, rel=1e-6)
    assert r.totals.unfused == p.totals.unfused


def test_recost_refuses_a_tile_the_spec_cannot_run():
    g = load_model("mobilenet_v2", None, 1)
    p = plan(g, gpu("h100"), workers=1)
    first = p.groups[0]
    broken = p.model_copy(update={"groups": [first.model_copy(update={"tile": Tile(1, 1, 7, 8, 96)}), *p.groups[1:]]})
    with pytest.raises(PlanError, match="cannot run on h100 as planned"):
        recost(g, broken, gpu("h100"))


def test_repredict_costs_the_measured_plan_when_the_spec_would_plan_otherwise():
    saved = read(WHOLE / "fp32fp32_b1" / "mobilenet_v1.json.gz")[0]
    assert saved.plan is not None and len(saved.plan.groups) >= 1
    same = repredict(saved, gpu("h100"))
    # a threshold no group reaches: planning again would fuse nothing, but the measured plan is costed,
    # and a threshold changes no cost, so the prediction is the one of the planning spec
    strict = apply_measured(gpu("h100"), {"fuse_min_speedup": 4.0})
    assert not plan(load_model("mobilenet_v1", None, 1), strict, workers=1, context="isolated").groups
    again = repredict(saved, strict)
    assert again.predicted_planned_s == pytest.approx(same.predicted_planned_s)
    assert [s.label for s in again.steps] == [s.label for s in same.steps] and again.plan == saved.plan
    # without its plan, the result can only be re-predicted by planning again, which this spec refuses
    with pytest.raises(PlanError, match="plans differently"):
        repredict(saved.model_copy(update={"plan": None}), strict)


def test_whole_results_keep_their_plan_through_json(tmp_path):
    from fuseplanner.validation.whole import write

    saved = read(FIXTURES / "whole_mobilenet_v1.json")[0]
    g = load_model("mobilenet_v1", None, 1)
    p = stored(plan(g, gpu("h100"), workers=1))
    assert not p.rejected
    js, _ = write([saved.model_copy(update={"plan": p})], tmp_path)
    assert read(js)[0].plan == p


def _store_script():
    return load(Path(__file__).resolve().parents[1] / "scripts" / "store_whole_plans.py")


def test_store_whole_plans_adds_the_plan_that_reproduces_the_run(tmp_path, monkeypatch, capsys):
    import gzip
    import sys

    from fuseplanner.validation.whole import to_json

    mod = _store_script()
    saved = read(WHOLE / "fp32fp32_b1" / "mobilenet_v1.json.gz")[0].model_copy(update={"plan": None})
    good, bad = tmp_path / "good.json.gz", tmp_path / "bad.json"
    good.write_bytes(gzip.compress(to_json([saved]).encode()))
    # a run whose measured steps no plan of this spec has: left without a plan, and the script says so
    renamed = saved.model_copy(update={"steps": [s.model_copy(update={"label": "nowhere"}) for s in saved.steps]})
    bad.write_text(to_json([renamed]))
    monkeypatch.setattr(sys, "argv", ["store_whole_plans.py", "--gpu", "h100", str(good), str(bad)])
    assert mod.main() == 1
    got = read(good)[0]
    # the runs were planned in the isolated context, as the script plans them again
    again = plan(load_model("mobilenet_v1", None, 1), gpu("h100"), workers=1, context="isolated")
    assert got.plan is not None and got.plan == stored(again)
    assert read(bad)[0].plan is None and "does not reproduce" in capsys.readouterr().out
