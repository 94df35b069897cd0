"""A spec `fuseplanner calibrate --gpu auto --quick --from-scratch` wrote on an H200, and whole runs
measured with it (data/records/h200/calibrated/, docs/validation.md "Whole models on an H200"), on CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from fuseplanner.frontend.holdout import holdout_models
from fuseplanner.frontend.load import load_model
from fuseplanner.hw.spec import gpu
from fuseplanner.planning.search import plan
from fuseplanner.validation.whole import read

ROOT = Path(__file__).resolve().parent.parent / "data" / "records" / "h200" / "calibrated"
SPEC = ROOT / "calibrated_quick.toml"


def test_the_spec_is_a_fit_of_its_own_that_overlaps_launches():
    spec = gpu(str(SPEC))
    # its own fit (from the micro-sweep) holds the bundled h200 spec's [refit] graph terms it started from
    # (those of its time: the bundled spec refitted them since, on the fp16 runs measured again)
    assert not spec.fit.borrowed and spec.refit == {}
    assert spec.fit.graph_pw_kernel_s == pytest.approx(6.419e-07)
    assert "[refit] value" in spec.fit.sources["graph_pw_kernel_s"]
    # and a launch overlap of its own: what the graph context must not count again
    assert spec.eff("launch_overlap_s") > 1e-6 and spec.fit.record_count == 160


def test_the_runs_were_measured_with_it_on_an_h200():
    results = [r for p in sorted(ROOT.glob("whole/*/*.json.gz")) for r in read(p)]
    assert len(results) == 23 and {r.device for r in results} == {"NVIDIA H200"}
    assert {r.graph_step_timing for r in results} == {"spacing"}
    held = {m.name for m in holdout_models()}
    assert sum(r.model in held for r in results) == 11  # every held-out model at fp32 batch 1, two at fp16 batch 8


@pytest.mark.parametrize("model", ["mobilenet_v2"])
def test_its_plans_are_reproduced_and_the_graph_context_fuses(model):
    result = read(ROOT / "whole" / "fp32fp32_b1" / f"{model}.json.gz")[0]
    spec, graph = gpu(str(SPEC)), load_model(model, None, 1)
    measured = sorted(tuple(g.nodes) for g in result.plan.groups)  # the isolated-context plan it ran
    assert sorted(tuple(g.nodes) for g in plan(graph, spec, workers=1, context="isolated").groups) == measured
    # with the overlap counted twice in the graph context this plan had 3-4 groups
    assert len(plan(graph, spec, workers=1, context="graph").groups) >= len(measured) - 2 >= 12
