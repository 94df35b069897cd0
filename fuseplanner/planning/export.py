"""Plan outputs: JSON, a markdown report, and the model rewritten with one node per fused group.

The rewritten ONNX model replaces each fused group (its member convolutions, their absorbed epilogue
nodes and an absorbed residual Add) by one node of domain ``ai.fuseplanner``, op type ``FusedConv``.
Its inputs are the group's activation input, the residual operand (when there is one) and every weight,
bias and constant the replaced nodes read, by reference; its attributes hold the kind, the tile and the
member names. All other nodes stay as they are. Initializers are never loaded: structure-only models
keep their external-data references.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import onnx
from onnx import helper

from fuseplanner.core.errors import PlanError
from fuseplanner.planning.fused_function import attach, conv_operands, function_for, member_attributes
from fuseplanner.planning.result import CostModel, GroupPlan, Plan

DOMAIN = "ai.fuseplanner"
OP_TYPE = "FusedConv"
DOMAIN_VERSION = 1


# ---- JSON -----------------------------------------------------------------------------------------


def to_json(plan: Plan, indent: int | None = 2) -> str:
    """The plan as JSON text (the shape of `Plan.model_json_schema()`)."""
    return plan.to_json(indent=indent)


def write_text(text: str, path: str | os.PathLike) -> Path:
    """Write `text` to `path` (UTF-8, trailing newline); PlanError when the folder does not exist."""
    p = Path(path)
    if not p.parent.is_dir():
        raise PlanError(f"cannot write {str(p)!r}: folder {str(p.parent)!r} does not exist")
    p.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    return p


# ---- markdown -------------------------------------------------------------------------------------


def _us(c: CostModel) -> str:
    return f"{c.time_s * 1e6:.2f}"


def _mb(v: float) -> str:
    return f"{v / 1e6:.3f}"


def _pct(before: float, after: float) -> str:
    return f"{(before - after) / before * 100:.1f}%" if before else "-"


def _row(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"


def _table(head: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    return [_row(head), _row(["---"] * len(head)), *(_row(r) for r in rows)]


def totals_rows(plan: Plan) -> list[list[str]]:
    """(metric, unfused, planned, saving) rows of the plan's totals."""
    u, p = plan.totals.unfused, plan.totals.planned
    return [
        ["time (us)", _us(u), _us(p), _pct(u.time_s, p.time_s)],
        ["GMA (MB)", _mb(u.gma_bytes), _mb(p.gma_bytes), _pct(u.gma_bytes, p.gma_bytes)],
        ["DRAM (MB)", _mb(u.dram_bytes), _mb(p.dram_bytes), _pct(u.dram_bytes, p.dram_bytes)],
        ["kernel launches", str(u.launches), str(p.launches), _pct(u.launches, p.launches)],
    ]


def summary_line(plan: Plan) -> str:
    """One line: how many groups, and what the plan saves by each metric."""
    u, p = plan.totals.unfused, plan.totals.planned
    fused_layers = sum(len(g.nodes) for g in plan.groups)
    return (
        f"{plan.model} on {plan.gpu} ({plan.dtype}, batch {plan.batch}, objective {plan.objective}"
        f"{f' decided in the {plan.context} context' if plan.objective == 'time' else ''}"
        f"{'' if plan.cost_model == 'ours' else f', cost model {plan.cost_model}'}): "
        f"{len(plan.groups)} fused groups covering {fused_layers} layers; "
        f"time {_us(u)} -> {_us(p)} us ({_pct(u.time_s, p.time_s)}), "
        f"GMA {_mb(u.gma_bytes)} -> {_mb(p.gma_bytes)} MB ({_pct(u.gma_bytes, p.gma_bytes)}), "
        f"DRAM {_mb(u.dram_bytes)} -> {_mb(p.dram_bytes)} MB ({_pct(u.dram_bytes, p.dram_bytes)})"
    )


def to_markdown(plan: Plan, max_rejected: int | None = None) -> str:
    """A human-readable report of the plan: settings, totals, groups, unfused layers, rejections."""
    lines = [
        f"# Fusion plan: {plan.model} on {plan.gpu}",
        "",
        f"dtype {plan.dtype}, batch {plan.batch}, objective {plan.objective}, cost model {plan.cost_model}, "
        f"precision {plan.precision}, context {plan.context}, kinds {', '.join(plan.kinds) or 'none'}.",
        "",
        summary_line(plan) + ".",
        "",
        "## Totals",
        "",
        *_table(["metric", "layer by layer", "planned", "saving"], totals_rows(plan)),
        "",
        f"## Fused groups ({len(plan.groups)})",
        "",
    ]
    rows = [
        [
            i,
            g.kind + (" +residual" if g.residual else ""),
            " -> ".join(g.nodes),
            str(g.tile),
            _us(g.fused),
            _us(g.unfused),
            _mb(g.fused.gma_bytes),
            _mb(g.unfused.gma_bytes),
            _mb(g.fused.dram_bytes),
            _pct(g.unfused.metric(plan.objective), g.fused.metric(plan.objective)),
        ]
        for i, g in enumerate(plan.groups)
    ]
    head = ["#", "kind", "nodes", "tile", "fused us", "unfused us", "fused GMA MB", "unfused GMA MB", "fused DRAM MB", "saving"]
    lines += _table(head, rows) if rows else ["No group helps on this GPU with these settings."]
    lines += ["", f"## Unfused layers ({len(plan.layers)})", ""]
    lay_rows = [
        [lay.node, lay.kind + ("+res" if lay.residual else ""), lay.op_type, str(lay.tile) if lay.tile else "-", _us(lay.cost), _mb(lay.cost.gma_bytes), _mb(lay.cost.dram_bytes)]
        for lay in plan.layers
    ]
    lines += _table(["node", "kind", "op", "tile", "us", "GMA MB", "DRAM MB"], lay_rows)
    rej = plan.rejected if max_rejected is None else plan.rejected[:max_rejected]
    lines += ["", f"## Candidates not fused ({len(plan.rejected)})", ""]
    lines += _table(["stage", "kind", "nodes", "reason"], [[r.stage, r.kind, " -> ".join(r.nodes + r.absorbed), r.reason] for r in rej])
    return "\n".join(lines) + "\n"


# ---- rewritten ONNX -------------------------------------------------------------------------------


def _prepared(source, input_shapes: Mapping[str, Sequence[int]] | None, batch: int | None):
    """The same prepared ModelProto (upgraded, shape-inferred) and ModelGraph the planner saw."""
    from fuseplanner.frontend.load import build_graph, read_model
    from fuseplanner.frontend.shapes import prepare
    from fuseplanner.frontend.view import GraphView

    proto, stem, path = read_model(source)
    model = prepare(proto, input_shapes, batch)
    view = GraphView(model)
    return model, view, build_graph(view, stem, path)


def _node_index(view) -> dict[str, int]:
    out: dict[str, int] = {}
    for i in range(len(view.nodes)):
        out.setdefault(view.node_name(i), i)
    return out


def _group_indices(group: GroupPlan, graph, by_name: Mapping[str, int]) -> list[int]:
    idx: list[int] = []
    for n in group.covers:
        if n not in graph.graph:
            raise PlanError(f"plan node {n!r} is not in the model: plan and model do not match (same --input-shape/--batch?)")
        idx.append(graph.op(n).index)
    for n in group.epilogue:
        if n in graph.graph:
            continue
        if n not in by_name:
            raise PlanError(f"epilogue node {n!r} is not in the model: plan and model do not match")
        idx.append(by_name[n])
    return sorted(set(idx))


def _fused_node(group: GroupPlan, nodes: Sequence[onnx.NodeProto], outer_uses: set[str], outputs: set[str], number: int, graph,
                every: Sequence[onnx.NodeProto]) -> onnx.NodeProto:  # fmt: skip
    made = {o for nd in nodes for o in nd.output if o}
    ext = list(dict.fromkeys(i for nd in nodes for i in nd.input if i and i not in made))
    first_in = graph.op(group.nodes[0]).inputs[0]
    lead = [first_in] + ([group.residual_input] if group.residual and group.residual_input else [])
    inputs = lead + [i for i in ext if i not in lead]
    outs = [o for o in dict.fromkeys(o for nd in nodes for o in nd.output if o) if o in outer_uses or o in outputs]
    if len(outs) != 1:
        raise PlanError(f"group {'+'.join(group.nodes)} leaves {len(outs)} tensors live ({', '.join(outs)}); it cannot be one node")
    t = group.tile
    members = [(graph.op(m), conv_operands(every[graph.op(m).index])) for m in group.nodes]
    return helper.make_node(
        OP_TYPE,
        inputs,
        outs,
        name=f"fused_{number}_{group.kind}",
        domain=DOMAIN,
        kind=group.kind,
        tile=[t.th, t.tw, t.tf, t.tc, t.threads],
        tile_names=["th", "tw", "tf", "tc", "threads"],
        members=list(group.nodes),
        epilogue=list(group.epilogue),
        replaced=[nd.name or nd.op_type for nd in nodes],
        residual=int(group.residual),
        predicted_time_s=float(group.fused.time_s),
        predicted_gma_bytes=float(group.fused.gma_bytes),
        **member_attributes(members, inputs),
    )


def rewrite_onnx(
    plan: Plan,
    source,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    batch: int | None = None,
) -> onnx.ModelProto:
    """The model with each fused group of `plan` replaced by one ``ai.fuseplanner::FusedConv`` node.

    `source`, `input_shapes` and `batch` must be what the plan's graph was loaded with (the model is
    prepared the same way so node names and indices match).
    """
    model, view, graph = _prepared(source, input_shapes, batch)
    by_name = _node_index(view)
    old = list(model.graph.node)
    drop: dict[int, int] = {}  # node index -> group number
    for k, g in enumerate(plan.groups):
        for i in _group_indices(g, graph, by_name):
            if i in drop:
                raise PlanError(f"ONNX node {view.node_name(i)!r} is in two groups: the plan is not legal")
            drop[i] = k
    graph_outputs = {o.name for o in model.graph.output}
    new_nodes: list[onnx.NodeProto] = []
    functions: list[onnx.FunctionProto] = []
    last_of = {k: max(i for i, kk in drop.items() if kk == k) for k in set(drop.values())}
    for i, nd in enumerate(old):
        if i not in drop:
            new_nodes.append(nd)
            continue
        k = drop[i]
        if i != last_of[k]:
            continue
        members = [old[j] for j in sorted(j for j, kk in drop.items() if kk == k)]
        outer = {x for j, n2 in enumerate(old) if drop.get(j) != k for x in n2.input}
        fused = _fused_node(plan.groups[k], members, outer, graph_outputs, k, graph, old)
        functions.append(function_for(fused, members, model.opset_import))
        new_nodes.append(fused)
    out = copy.deepcopy(model)
    del out.graph.node[:]
    out.graph.node.extend(_drop_dead_constants(new_nodes, graph_outputs))
    live = {x for nd in out.graph.node for x in (*nd.input, *nd.output)} | graph_outputs
    keep_vi = [v for v in out.graph.value_info if v.name in live]
    del out.graph.value_info[:]
    out.graph.value_info.extend(keep_vi)
    if not any(o.domain == DOMAIN for o in out.opset_import):
        out.opset_import.append(helper.make_opsetid(DOMAIN, DOMAIN_VERSION))
    attach(out, functions)
    out.producer_name = "fuseplanner"
    helper.set_model_props(out, {"fuseplanner.gpu": plan.gpu, "fuseplanner.dtype": plan.dtype, "fuseplanner.objective": plan.objective})
    return out


def _drop_dead_constants(nodes: list[onnx.NodeProto], graph_outputs: set[str]) -> list[onnx.NodeProto]:
    """Remove Constant nodes whose outputs nothing reads any more (e.g. Clip bounds of absorbed ReLU6)."""
    used = {x for nd in nodes for x in nd.input} | graph_outputs
    return [nd for nd in nodes if not (nd.op_type == "Constant" and not any(o in used for o in nd.output))]


def stub_free_copy(model: onnx.ModelProto, base_dir: str | os.PathLike | None = None) -> onnx.ModelProto:
    """A copy whose external-data initializers are graph inputs instead.

    Structure-only models reference weight files that do not exist, and onnx.checker looks for
    existing ones relative to the working directory, not the model's; it refuses such tensors
    regardless of the graph, so the graph is checked with them as typed inputs. (`base_dir` is
    accepted for compatibility; the weights themselves are written by `save_onnx`.)
    """
    out = copy.deepcopy(model)
    keep, moved = [], []
    for t in out.graph.initializer:
        loc = next((e.value for e in t.external_data if e.key == "location"), None)
        if t.data_location == onnx.TensorProto.EXTERNAL and loc is not None:
            moved.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        else:
            keep.append(t)
    if moved:
        del out.graph.initializer[:]
        out.graph.initializer.extend(keep)
        out.graph.input.extend(moved)
    return out


def check_onnx(model: onnx.ModelProto, base_dir: str | os.PathLike | None = None) -> None:
    """Run onnx.checker on a rewritten model (stubbed external weights treated as inputs)."""
    try:
        onnx.checker.check_model(stub_free_copy(model, base_dir))
    except onnx.checker.ValidationError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "validation failed"
        raise PlanError(f"rewritten model fails onnx.checker: {first}") from None


def write_onnx(
    plan: Plan,
    source,
    path: str | os.PathLike,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    batch: int | None = None,
) -> Path:
    """Rewrite `source` with the plan's fused nodes, check it, and save it to `path`."""
    p = Path(path)
    if not p.parent.is_dir():
        raise PlanError(f"cannot write {str(p)!r}: folder {str(p.parent)!r} does not exist")
    model = rewrite_onnx(plan, source, input_shapes, batch)
    check_onnx(model, p.parent)
    return save_onnx(model, p, source)


def _source_dir(source) -> Path | None:
    """The folder external-data locations of `source` are relative to (None for a ModelProto)."""
    if source is None or isinstance(source, onnx.ModelProto):
        return None
    from fuseplanner.frontend.load import resolve_model

    return resolve_model(source).parent


def _location(tensor: onnx.TensorProto) -> str | None:
    if tensor.data_location != onnx.TensorProto.EXTERNAL:
        return None
    return next((e.value for e in tensor.external_data if e.key == "location"), None)


def save_onnx(model: onnx.ModelProto, path: str | os.PathLike, source=None) -> Path:
    """Save a rewritten model to `path` with the weights it needs.

    Tensors whose external-data file exists beside `source` are read and written to one file,
    ``<path name>.data``, beside `path` (every other tensor stays inline), so the output loads with
    `onnx.load` wherever it is written. References to data files that do not exist (structure-only
    models) stay as they are.
    """
    from onnx.external_data_helper import load_external_data_for_tensor

    p = Path(path)
    base = _source_dir(source)
    loaded = False
    if base is not None:
        for tensor in model.graph.initializer:
            loc = _location(tensor)
            if loc is not None and (base / loc).is_file():
                load_external_data_for_tensor(tensor, str(base))
                tensor.data_location = onnx.TensorProto.DEFAULT
                del tensor.external_data[:]
                loaded = True
    if not loaded:
        onnx.save_model(model, str(p))
        return p
    data = p.with_name(p.name + ".data")
    if data.exists():
        data.unlink()  # onnx appends to an existing data file
    onnx.save_model(model, str(p), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=data.name, size_threshold=1024)
    return p
