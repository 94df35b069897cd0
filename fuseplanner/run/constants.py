"""Constant folding at load: the value of every constant tensor of a shape-inferred model.

Constants are what `GraphView` calls constant: initializers, Constant nodes, Shape/Size of tensors
with static shapes, and every node whose inputs are all constants (the shape-only subgraphs and the
Identity/Cast chains in front of weights). Nodes are evaluated once, on the host, with
`onnx.reference` at the model's opset; they never become steps of the program.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper, numpy_helper

from fuseplanner.core.errors import ModelError
from fuseplanner.frontend.shapes import constant_node_tensor
from fuseplanner.frontend.view import GraphView


def _opsets(model: onnx.ModelProto) -> list[onnx.OperatorSetIdProto]:
    return [helper.make_opsetid(o.domain, o.version) for o in model.opset_import]


def eval_node(node: onnx.NodeProto, feeds: dict[str, np.ndarray], model: onnx.ModelProto) -> list[np.ndarray]:
    """Outputs of one ONNX node on host arrays, by `onnx.reference` at the model's opsets."""
    from onnx.reference import ReferenceEvaluator

    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(feeds[n].dtype), None)
              for n in dict.fromkeys(i for i in node.input if i)]  # fmt: skip
    outputs = [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in node.output if o]
    graph = helper.make_graph([node], "fold", inputs, outputs)
    proto = helper.make_model(graph, opset_imports=_opsets(model), ir_version=model.ir_version or 8)
    try:
        got = ReferenceEvaluator(proto).run(None, {n: feeds[n] for n in dict.fromkeys(i for i in node.input if i)})
    except Exception as exc:
        label = node.name or node.op_type
        raise ModelError(f"cannot fold constant node {label!r} ({node.op_type}) at load: "
                         f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    return [np.asarray(v) for v in got]


def _shape_value(view: GraphView, node: onnx.NodeProto) -> np.ndarray:
    dims = np.array([int(d) for d in view.shape(node.input[0])], dtype=np.int64)
    if node.op_type == "Size":
        return np.array(math.prod(dims.tolist()), dtype=np.int64)
    rank = len(dims)
    start = int(view.attr(node, "start", 0))
    end = int(view.attr(node, "end", rank))
    return dims[slice(start, end)]


def fold_constants(view: GraphView) -> tuple[dict[str, np.ndarray], list[int]]:
    """(value of every constant tensor, indices of the nodes folded) of `view`'s model."""
    values = {t.name: numpy_helper.to_array(t) for t in view.model.graph.initializer}
    folded: list[int] = []
    compute = set(view.compute)
    for index, node in enumerate(view.nodes):
        if index in compute:
            continue
        folded.append(index)
        if node.op_type == "Constant":
            tensor = constant_node_tensor(node)
            if tensor is None:
                raise ModelError(f"Constant node {view.node_name(index)!r} has no value attribute this loader reads")
            values[node.output[0]] = numpy_helper.to_array(tensor)
            continue
        if node.op_type in ("Shape", "Size") and node.input[0] not in values:
            values[node.output[0]] = _shape_value(view, node)
            continue
        outs = eval_node(node, values, view.model)
        values.update({o: v for o, v in zip((o for o in node.output if o), outs, strict=False)})
    return values, folded
