"""Plan values: JSON shape, round trip, schema, per-group access to tiles and costs."""

from __future__ import annotations

import json

import fakes
import graphs as G
import pytest
from pydantic import ValidationError

from fuseplanner.core.ir import Cost, KernelResources, Tile
from fuseplanner.planning import search as planner
from fuseplanner.planning.result import CostModel, Plan

GPU = fakes.FakeGpu()


@pytest.fixture
def residual_plan(monkeypatch):
    monkeypatch.setattr(planner, "_cost_functions", lambda: (fakes.bytes_estimate, fakes.bytes_estimate_op))
    return fakes.plan(G.residual(h=4), GPU, objective="gma")


@pytest.fixture
def diamond_plan(monkeypatch):
    monkeypatch.setattr(planner, "_cost_functions", lambda: (fakes.bytes_estimate, fakes.bytes_estimate_op))
    return fakes.plan(G.diamond(), GPU)


def test_json_has_the_documented_shape(diamond_plan):
    d = json.loads(diamond_plan.to_json())
    for key in ("model", "gpu", "dtype", "batch", "objective", "groups", "layers", "totals", "rejected", "cost_model", "precision"):
        assert key in d
    assert (d["model"], d["gpu"], d["dtype"], d["batch"], d["objective"]) == ("diamond", "fake", "fp32", 1, "time")
    grp = d["groups"][0]
    assert set(grp) >= {"kind", "nodes", "epilogue", "tile", "fused", "unfused"}
    assert set(grp["tile"]) == {"th", "tw", "tf", "tc", "threads"}
    for cost in (grp["fused"], grp["unfused"], d["totals"]["unfused"], d["totals"]["planned"]):
        assert {"gma_bytes", "dram_bytes", "time_s"} <= set(cost)
    lay = d["layers"][0]
    assert set(lay) >= {"node", "kind", "tile", "cost"}
    concat = next(x for x in d["layers"] if x["node"] == "cat")
    assert concat["tile"] is None
    assert {"kind", "nodes", "stage", "reason"} <= set(d["rejected"][0])


def test_round_trip_is_exact(diamond_plan, residual_plan):
    for p in (diamond_plan, residual_plan):
        again = Plan.from_json(p.to_json())
        assert again == p
        assert again.to_json() == p.to_json()


def test_group_gives_ir_tile_and_cost(residual_plan):
    g = residual_plan.groups[0]
    assert isinstance(g.tile, Tile)
    assert isinstance(g.fused_cost, Cost) and isinstance(g.unfused_cost, Cost)
    assert g.fused_cost.gma_bytes == g.fused.gma_bytes
    assert g.saving("gma") == pytest.approx(1 - g.fused.gma_bytes / g.unfused.gma_bytes)
    assert residual_plan.group_of("add") is g
    assert residual_plan.group_of("dw") is g
    assert residual_plan.tiles() == {"pw1+dw+pw2": g.tile}


def test_cost_model_mirrors_ir_cost():
    k = KernelResources("pw", 1024, 256, 48, 10, 4, 0.1, 0.5)
    c = Cost(gma_read_bytes=100, gma_write_bytes=28, dram_read_bytes=64, dram_write_bytes=32, flops=9, time_s=1e-6, launches=1, kernels=(k,))
    m = CostModel.from_cost(c)
    assert (m.gma_bytes, m.dram_bytes) == (128, 96)
    assert m.to_cost() == c


def test_totals_saving(residual_plan):
    t = residual_plan.totals
    assert residual_plan.saving() == pytest.approx(1 - t.planned.gma_bytes / t.unfused.gma_bytes)
    assert residual_plan.saving() > 0


def test_invalid_json_is_refused(residual_plan):
    d = json.loads(residual_plan.to_json())
    d["objective"] = "speed"
    with pytest.raises(ValidationError):
        Plan.model_validate(d)
    d = json.loads(residual_plan.to_json())
    d["groups"][0]["kind"] = "dw_dw"
    with pytest.raises(ValidationError):
        Plan.model_validate(d)
    with pytest.raises(ValidationError):
        Plan.from_json("{}")


def test_schema_lists_the_fields():
    s = Plan.model_json_schema()
    assert {"model", "gpu", "dtype", "batch", "objective", "groups", "layers", "totals"} <= set(s["required"]) | set(s["properties"])
    assert s["properties"]["objective"]["enum"] == ["time", "gma", "dram"]
    assert "GroupPlan" in s["$defs"] and "CostModel" in s["$defs"] and "Tile" in s["$defs"]
