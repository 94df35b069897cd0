"""A plan as the executed steps of one whole inference, and its prediction in an execution context.

`steps(graph, plan)` lists one `fuseplanner.cost.execution.Step` per kernel of the plan (a fused group
or an unfused layer, opaque and view nodes included) in the order the executor runs them (the
graph's order of each kernel's first node), labelled as the executor labels its steps (members
joined with '+', else the node name), with the activation tensors it reads from outside itself and
writes for a later step or as a model output. `predict_whole` predicts the plan and the unfused
model (the same graph planned with no fused kinds, as `fuseplanner.compile(fuse=False)` runs it) in
one context.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fuseplanner.core.ir import DTYPE_BYTES, ModelGraph, Op
from fuseplanner.cost.execution import Access, Step, WholePrediction, check_context, predict
from fuseplanner.cost.library import Launch, launches
from fuseplanner.hw.spec import GpuSpec


@dataclass(frozen=True)
class WholePlanPrediction:
    """A model planned and unfused, predicted whole in one context; `saving`: the plan's fraction of
    the unfused time saved."""

    model: str
    context: str
    planned: WholePrediction
    unfused: WholePrediction

    @property
    def saving(self) -> float:
        u = self.unfused.time_s
        return (u - self.planned.time_s) / u if u else 0.0


def _tensor_bytes(ops: list[Op], dtype: str) -> dict[str, float]:
    e = DTYPE_BYTES[dtype]
    out: dict[str, float] = {}
    for op in ops:
        for name, shape in (*zip(op.inputs, op.input_shapes, strict=False), *zip(op.outputs, op.output_shapes, strict=False)):
            out.setdefault(name, float(math.prod(shape) * e))
    return out


def _kernel_step(graph: ModelGraph, ops: dict[str, Op], covers: list[str], label: str, kind: str, op_type: str,
                 cost, extra: str | None, size: dict[str, float], library: tuple[Launch, ...] = ()) -> Step:  # fmt: skip
    inside = [ops[n] for n in covers if n in ops]
    made = {t for op in inside for t in op.outputs}
    names = set(covers)
    reads = dict.fromkeys(t for op in inside for t in op.inputs if t not in made)
    if extra and extra not in made:
        reads[extra] = None
    outs = graph.graph_outputs
    writes = [t for op in inside for t in op.outputs
              if t in outs or any(c not in names for c in graph.consumers(t))]  # fmt: skip
    return Step(label, kind, op_type, cost,
                tuple(Access(t, size.get(t, 0.0)) for t in reads if t),
                tuple(Access(t, size.get(t, 0.0)) for t in writes), library)  # fmt: skip


def steps(graph: ModelGraph, plan, spec: GpuSpec | None = None) -> tuple[Step, ...]:
    """The plan's kernels as executed steps (module docstring); with `spec`, each library step (a
    layer with no kernel of fuseplanner's) lists the kernels the operator library launches for it
    (`cost.library.launches`), which its graph-context time is charged by."""
    ops = {op.name: op.with_batch(plan.batch) for op in graph.ops()}
    size = _tensor_bytes(list(ops.values()), plan.dtype)
    pos = {n: i for i, n in enumerate(graph.order)}
    out = []
    for g in plan.groups:
        out.append((pos[g.nodes[0]], _kernel_step(graph, ops, g.covers, "+".join(g.nodes), g.kind,
                                                   "+".join(ops[n].op_type for n in g.nodes), g.fused_cost,
                                                   g.residual_input, size)))  # fmt: skip
    for lay in plan.layers:
        lib = launches(ops[lay.node], plan.dtype, spec.hw) if spec is not None and lay.tile is None else ()
        out.append((pos[lay.node], _kernel_step(graph, ops, lay.covers, lay.node, lay.kind, lay.op_type,
                                                 lay.ir_cost, lay.residual_input, size, lib)))  # fmt: skip
    return tuple(s for _, s in sorted(out, key=lambda p: p[0]))


def predict_whole(graph: ModelGraph, spec: GpuSpec, plan, context: str = "graph",
                  unfused_plan=None) -> WholePlanPrediction:  # fmt: skip
    """The plan and the unfused model (`unfused_plan`, else planned here with no fused kinds)
    predicted whole in `context`."""
    check_context(context)
    if unfused_plan is None:
        from fuseplanner.planning.search import plan as make_plan

        unfused_plan = make_plan(graph, spec, dtype=plan.dtype, batch=plan.batch, kinds=[], model=plan.cost_model,
                                 precision=plan.precision, workers=1)  # fmt: skip
    return WholePlanPrediction(plan.model, context, predict(steps(graph, plan, spec), spec, context),
                               predict(steps(graph, unfused_plan, spec), spec, context))  # fmt: skip
