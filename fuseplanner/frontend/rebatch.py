"""Batch override for Reshape targets that hold the export batch as a constant.

Legacy exporters (and shape subgraphs folded at the export batch) leave Reshape targets such as
``[1, 8, 8, 7, 7, -1]`` or ``[4, 256, 64]`` in which the traced batch is a number. After the batch
changes from `b0` to `b`, such a target either fails or silently moves the batch into another dim.
`rebatch_reshapes` compares every constant-target Reshape with its output at the export batch: when
its input grew by exactly ``b / b0``, the output must be the export-time output with its leading
dim scaled by ``b / b0``, and the target is rewritten to say so explicitly.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np
import onnx
from onnx import numpy_helper

from fuseplanner.frontend.shapes import Shape, inline_value, shape_table

#: Reshape output name -> (input element count, output dims) at the export batch.
ExportShapes = Mapping[str, tuple[int, tuple[int, ...]]]


def _static(shape: Shape | None) -> tuple[int, ...] | None:
    if shape is None or any(d is None for d in shape):
        return None
    return tuple(int(d) for d in shape)  # type: ignore[arg-type]


def export_batch(model: onnx.ModelProto, inputs: list[onnx.ValueInfoProto]) -> int | None:
    """The common static leading dim of the model's activation inputs as exported, else None."""
    leads = set()
    for value in inputs:
        dims = value.type.tensor_type.shape.dim
        if not dims or not dims[0].HasField("dim_value") or dims[0].dim_value <= 0:
            return None
        leads.add(int(dims[0].dim_value))
    return leads.pop() if len(leads) == 1 else None


def reshape_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, tuple[int, ...]]]:
    """(input element count, output dims) of every Reshape whose shapes are fully known."""
    table = shape_table(model)
    out = {}
    for node in model.graph.node:
        if node.op_type != "Reshape" or len(node.input) < 2:
            continue
        x = _static(table.get(node.input[0], (None, 0))[0])
        y = _static(table.get(node.output[0], (None, 0))[0])
        if x is not None and y is not None:
            out[node.output[0]] = (math.prod(x), y)
    return out


def _resolve(target: list[int], in_shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """What a Reshape to `target` produces from `in_shape` (0 copies, -1 infers), None if invalid."""
    dims = [in_shape[i] if d == 0 and i < len(in_shape) else d for i, d in enumerate(target)]
    known = math.prod(d for d in dims if d != -1)
    if dims.count(-1) > 1 or known == 0:
        return None
    if -1 in dims:
        dims[dims.index(-1)] = math.prod(in_shape) // known
    return tuple(dims)


def _constant_values(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    from fuseplanner.frontend.shapes import constant_node_tensor

    values = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output:
            tensor = constant_node_tensor(node)
            if tensor is not None:
                values[node.output[0]] = tensor
    return values


def _fixes(model: onnx.ModelProto, exported: ExportShapes, b0: int, b: int) -> dict[int, tuple[int, ...]]:
    table = shape_table(model)
    values = _constant_values(model)
    fixes = {}
    for index, node in enumerate(model.graph.node):
        if node.op_type != "Reshape" or len(node.input) < 2 or node.output[0] not in exported:
            continue
        x = _static(table.get(node.input[0], (None, 0))[0])
        tensor = values.get(node.input[1])
        target = None if tensor is None else inline_value(tensor)
        if x is None or target is None or target.ndim != 1:
            continue
        numel0, y0 = exported[node.output[0]]
        if math.prod(x) * b0 != numel0 * b or not y0 or (y0[0] * b) % b0:
            continue
        expected = (y0[0] * b // b0, *y0[1:])
        if _resolve([int(d) for d in target], x) != expected:
            fixes[index] = expected
    return fixes


def rebatch_reshapes(model: onnx.ModelProto, exported: ExportShapes, b0: int, b: int,
                     reinfer: Callable[[onnx.ModelProto], onnx.ModelProto], max_rounds: int = 64) -> onnx.ModelProto:
    """Rewrite constant Reshape targets that disagree with the export-time shapes scaled to batch `b`."""
    if b0 == b or not exported:
        return model
    for _ in range(max_rounds):
        fixes = _fixes(model, exported, b0, b)
        if not fixes:
            break
        for index, dims in fixes.items():
            node = model.graph.node[index]
            name = f"{node.output[0]}__fuseplanner_batch{b}"
            model.graph.initializer.append(numpy_helper.from_array(np.array(dims, dtype=np.int64), name))
            node.input[1] = name
        del model.graph.value_info[:]
        for out in model.graph.output:
            out.type.tensor_type.ClearField("shape")
        model = reinfer(model)
    return model
