"""Fuse decisions of saved whole-model results, decided again with the current spec and cost model.

A `validate --whole --decisions` result saves the candidates its planner decided at measurement
time. `redecide` (pure, no GPU) plans the model again in both contexts and unfused, as
`whole.measure` and `whole.repredict` do, and replaces the saved candidates with those of the fresh
plans (`whole_decisions.candidates`); the saved runs and unfused steps stay. `whole_decisions.score`
then measures each fresh candidate from the saved runs by its label: a group no saved run has a
kernel step for (neither plan measured fused it) is unmeasured, and so is every decision weighed
against it. A group a saved run did fuse is measured with that run's tile, which may not be the
tile the fresh plan picks.
"""

from __future__ import annotations

from fuseplanner.validation.whole import WholeResult, _both_plans, net_of_replay, unfused_plan
from fuseplanner.validation.whole_decisions import DecisionData, candidates


def redecide(result: WholeResult, spec, model=None) -> WholeResult:
    """`result` with its decision candidates those of `spec` and the current cost model; the saved
    runs kept. A result without decision measurements comes back unchanged. `model` names the ONNX
    file or bundled model when not `result.model`."""
    from fuseplanner.frontend.load import load_model

    if result.decisions is None:
        return result
    result = net_of_replay(result, spec)
    graph = load_model(model or result.model, None, result.batch)
    plans = _both_plans(graph, spec, result.dtype, result.precision, lambda _line: None)
    bare = unfused_plan(graph, spec, result.dtype, result.precision, plans["isolated"].batch)
    fresh = candidates(plans["isolated"], plans["graph"], bare, spec)
    return result.model_copy(update={"decisions": DecisionData(candidates=fresh, runs=result.decisions.runs)})
