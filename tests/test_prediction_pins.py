"""Same predictions: the plans of the quick-start models on the h100 and a100_80gb specs match the
totals, group tiles and layer costs recorded in tests/fixtures/plan_pins.json (written from the plans
before the GPU spec was split into facts and a kernel fit, decided in the isolated context; regenerate
only for an intended model change: ``python -m tests.test_prediction_pins``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fuseplanner import load_model, plan

PINS = Path(__file__).parent / "fixtures" / "plan_pins.json"
#: (model, gpu, dtype, batch): the quick-start plan and the issue's other pinned ones
CASES = [(m, g, d, b) for g in ("h100", "a100_80gb")
         for m, d, b in (("mobilenet_v2", "fp32", None), ("efficientnet_b0", "fp16", 8), ("mobilevit_xxs", "fp32", None))]
COST_KEYS = ("gma_bytes", "dram_bytes", "time_s", "flops", "launches")


def _cost(c: dict) -> dict:
    return {k: c[k] for k in COST_KEYS}


def digest(p: dict) -> dict:
    """The numbers of a plan JSON the pins compare: totals, each group's kind, nodes, tile and costs,
    each layer's tile and cost."""
    return {
        "totals": {k: _cost(v) for k, v in p["totals"].items()},
        "groups": [{"kind": g["kind"], "nodes": g["nodes"], "tile": g["tile"], "fused": _cost(g["fused"]),
                    "unfused": _cost(g["unfused"])} for g in p["groups"]],
        "layers": [{"node": x["node"], "tile": x["tile"], "cost": _cost(x["cost"])} for x in p["layers"]],
    }


def _key(model: str, gpu: str, dtype: str, batch: int | None) -> str:
    return f"{model}/{gpu}/{dtype}/{batch or 1}"


def _plan(model: str, gpu: str, dtype: str, batch: int | None) -> dict:
    return json.loads(plan(load_model(model, batch=batch), gpu, dtype=dtype, batch=batch, workers=1,
                           context="isolated").to_json())  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[_key(*c) for c in CASES])
def test_plan_numbers_unchanged(case):
    pinned = json.loads(PINS.read_text())[_key(*case)]
    assert digest(_plan(*case)) == pinned


def test_quick_start_plan_totals():
    # the README's quick start with --context isolated: 17 groups / 40 layers, 371.60 -> 321.11 us on
    # MobileNetV2, h100, fp32
    pinned = json.loads(PINS.read_text())[_key("mobilenet_v2", "h100", "fp32", None)]
    assert len(pinned["groups"]) == 17 and sum(len(g["nodes"]) for g in pinned["groups"]) == 40
    t = pinned["totals"]
    assert (round(t["unfused"]["time_s"] * 1e6, 2), round(t["planned"]["time_s"] * 1e6, 2)) == (371.60, 321.11)


if __name__ == "__main__":
    PINS.write_text(json.dumps({_key(*c): digest(_plan(*c)) for c in CASES}, indent=None) + "\n")
