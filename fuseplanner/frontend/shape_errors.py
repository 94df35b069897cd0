"""One-line diagnostics for shapes that planning cannot use.

`check_input_channels` compares pinned input shapes with the weights of the convolutions that read
them; `conv_channels_error` does the same for any convolution; `unknown_shape_error` explains a
conv/linear input whose shape stays unknown although every input shape is static: it names the
node where shape inference stops and the graph input the tensor depends on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import onnx

from fuseplanner.core.errors import ModelError
from fuseplanner.frontend.shapes import activation_inputs, dims_of, shape_table

#: Ops that keep the channel count of their input (walked through to reach the first conv).
_CHANNEL_PRESERVING = {"Sub", "Div", "Mul", "Add", "Cast", "Identity", "Relu", "Clip", "BatchNormalization"}


def _fmt(dims: Sequence[int | None] | None) -> str:
    return "x".join("?" if d is None else str(d) for d in dims) if dims else "unknown"


def conv_channels_error(node_name: str, c_in: int, w_shape: Sequence[int], groups: int) -> ModelError:
    """The error for a Conv whose input channels disagree with its weights."""
    return ModelError(
        f"Conv node {node_name!r} receives {c_in} input channels but its weights "
        f"({_fmt(w_shape)}, group {groups}) take {int(w_shape[1]) * groups}: the model and its input shapes disagree"
    )


def _weight_dims(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    table = shape_table(model)
    inits = {t.name for t in model.graph.initializer}
    consts = {n.output[0] for n in model.graph.node if n.op_type == "Constant" and n.output}
    return {k: v[0] for k, v in table.items() if (k in inits or k in consts) and all(d is not None for d in v[0])}


def check_input_channels(model: onnx.ModelProto, pinned: Mapping[str, Sequence[int]] | None) -> None:
    """Raise ModelError when a pinned input's channel dim does not match the first conv reading it."""
    if not pinned:
        return
    weights = _weight_dims(model)
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    for value in activation_inputs(model):
        if value.name not in pinned:
            continue
        dims = [int(d) for d in pinned[value.name]]
        for node in _first_convs(value.name, readers):
            w = weights.get(node.input[1]) if len(node.input) > 1 else None
            groups = next((a.i for a in node.attribute if a.name == "group"), 1)
            if w is None or len(w) != len(dims) or len(dims) < 2 or dims[1] == w[1] * groups:
                continue
            fixed = "x".join(str(d) for d in [dims[0], w[1] * groups, *dims[2:]])
            raise ModelError(
                f"--input-shape {value.name}={_fmt(dims)} gives Conv node {node.name or node.op_type!r} "
                f"{dims[1]} input channels but its weights ({_fmt(w)}, group {groups}) take {w[1] * groups}: "
                f"pin {value.name}={fixed}"
            )


def _first_convs(name: str, readers: Mapping[str, list[onnx.NodeProto]], depth: int = 8) -> list[onnx.NodeProto]:
    """Conv nodes reached from tensor `name` through channel-preserving elementwise ops."""
    found, frontier = [], [name]
    for _ in range(depth):
        nxt = []
        for t in frontier:
            for node in readers.get(t, ()):
                if node.op_type == "Conv" and node.input and node.input[0] == t:
                    found.append(node)
                elif node.op_type in _CHANNEL_PRESERVING and node.output:
                    nxt.append(node.output[0])
        frontier = nxt
    return found


def unknown_shape_error(model: onnx.ModelProto, tensor: str, node_index: int) -> ModelError:
    """Why `tensor` (read by node `node_index`) has no static shape: the node where inference stops
    and the graph inputs it depends on."""
    nodes = list(model.graph.node)
    table = shape_table(model)
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    inputs = {v.name: v for v in activation_inputs(model)}

    def known(name: str) -> bool:
        entry = table.get(name)
        return entry is not None and all(d is not None for d in entry[0])

    culprit, seen, stack, sources = None, set(), [tensor], []
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in inputs:
            sources.append(name)
            continue
        index = producer.get(name)
        if index is None:
            continue
        node = nodes[index]
        unknown_inputs = [i for i in node.input if i and not known(i)]
        if not known(name) and not unknown_inputs and culprit is None:
            culprit = node
        stack.extend(i for i in node.input if i)
    reader = nodes[node_index]
    where = f"tensor {tensor!r} read by {reader.op_type} node {reader.name or '#' + str(node_index)!r}"
    srcs = ", ".join(f"{s!r} ({_fmt(dims_of(inputs[s]))})" for s in sorted(sources)) or "no graph input"
    if any(dims_of(inputs[s]) is None or None in dims_of(inputs[s]) for s in sources):
        return ModelError(f"the shape of {where} stays unknown because it depends on input {srcs}: pin that input "
                          "with --input-shape NAME=DIMS")
    stop = (f"{culprit.op_type} node {culprit.name or culprit.output[0]!r} gets known input shapes but its output "
            "shape cannot be inferred") if culprit is not None else "no node on the way has a computable shape"
    return ModelError(f"the shape of {where} stays unknown although it depends only on input {srcs}: {stop} "
                      "(even after folding shape subgraphs to constants)")
