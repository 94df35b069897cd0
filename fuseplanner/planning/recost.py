"""A given plan costed with another GPU spec: the same groups, tiles and layers, every cost recomputed.

What it is for: scoring a spec on measurements of plans that spec would not make (a whole run measured
with one spec, re-predicted with a refitted one: `validation.whole.repredict` costs the plan the run
stored), or comparing what two specs predict for one plan. Nothing is re-chosen: a group keeps its tile (a tile
the new spec finds infeasible is a `PlanError`, never a free kernel), a layer keeps its tile, a
library or opaque node is costed as the planner costs it (`cost.estimate_op`). A group's unfused cost
is its nodes' layers in the spec's unfused plan (each with its best tile), and the totals are summed
as `planning.search.plan` sums them (back-to-back launches less the spec's `launch_overlap_s`).
"""

from __future__ import annotations

from fuseplanner.core.errors import PlanError
from fuseplanner.core.ir import Cost, ModelGraph


def _check(cost: Cost, what: str, spec) -> Cost:
    if not cost.feasible:
        raise PlanError(f"{what} cannot run on {spec.name} as planned: {cost.reason or 'no feasible launch'}")
    return cost


def recost(graph: ModelGraph, plan, spec, unfused_plan=None):
    """`plan` (a `Plan` of `graph`) with every cost recomputed with `spec` (module docstring);
    `unfused_plan`: the model planned with no fused kind on `spec` (planned here when not given)."""
    from fuseplanner.cost import estimate, estimate_op
    from fuseplanner.planning.result import CostModel, Totals
    from fuseplanner.planning.search import plan as make_plan

    b, dt, pr, model = plan.batch, plan.dtype, plan.precision, plan.cost_model
    ops = {op.name: op.with_batch(b) for op in graph.ops()}
    base = unfused_plan or make_plan(graph, spec, dtype=dt, batch=b, kinds=[], model=model, precision=pr, workers=1)
    overlap = float(spec.eff("launch_overlap_s")) if model == "ours" else 0.0
    groups = []
    for g in plan.groups:
        members = tuple(ops[n] for n in g.nodes)
        fused = _check(estimate(g.kind, members, g.tile, dt, b, spec, model=model, residual=g.residual,
                                precision=pr), f"group {'+'.join(g.nodes)} ({g.kind} {g.tile})", spec)  # fmt: skip
        covers = set(g.covers)
        unfused = sum((lay.ir_cost for lay in base.layers if covers & set(lay.covers)), Cost()).overlapped(overlap)
        groups.append(g.model_copy(update={"fused": CostModel.from_cost(fused), "unfused": CostModel.from_cost(unfused)}))
    layers = []
    for lay in plan.layers:
        op = ops[lay.node]
        if lay.tile is None:
            cost = estimate_op(op, dt, b, spec, precision=pr)
        else:
            cost = _check(estimate(lay.kind, (op,), lay.tile, dt, b, spec, model=model, residual=lay.residual,
                                   precision=pr), f"layer {lay.node} ({lay.kind} {lay.tile})", spec)  # fmt: skip
        layers.append(lay.model_copy(update={"cost": CostModel.from_cost(cost)}))
    planned = (sum((g.fused_cost for g in groups), Cost()) + sum((lay.ir_cost for lay in layers), Cost())).overlapped(overlap)
    return plan.model_copy(update={
        "gpu": spec.name, "groups": groups, "layers": layers,
        "totals": Totals(unfused=base.totals.unfused, planned=CostModel.from_cost(planned)),
        "warnings": spec.warnings(kernel_fit=model == "ours")})  # fmt: skip
