"""Constant folding of shape subgraphs once the input shapes are known.

Exporters compute Reshape targets, Slice bounds and Pad amounts from ``Shape`` of activations
(``Shape -> Gather -> Add -> Div -> Mul -> Slice`` and the like). onnx shape inference propagates
such values only through a few ops, so a conv input downstream of an integer Div stays unknown.
With static input shapes every such chain is a constant: `fold_shapes` evaluates it with numpy,
replaces the folded nodes by initializers and lets the caller infer shapes again.

Only shape-like values are folded: integer or bool tensors, and anything computed from a
``Shape``/``Size``. Float chains over weights are left alone (weights are never read), and nothing
larger than `MAX_ELEMENTS` is materialised.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from fuseplanner.frontend.shapes import constant_node_tensor, shape_table

#: Largest tensor (elements) the folder reads or writes.
MAX_ELEMENTS = 4096
_INT_KINDS = "iub"

Values = Mapping[str, np.ndarray]


def _attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _axes(node: onnx.NodeProto, args: Sequence[np.ndarray | None], index: int) -> list[int] | None:
    """Axes from the opset-13 input `index`, else the older ``axes`` attribute."""
    if len(args) > index and args[index] is not None:
        return [int(a) for a in np.asarray(args[index]).reshape(-1)]
    attr = _attr(node, "axes")
    return None if attr is None else [int(a) for a in attr]


def _slice(node, args):
    data, starts, ends = args[0], args[1], args[2]
    axes = _axes(node, args, 3)
    steps = args[4] if len(args) > 4 and args[4] is not None else np.ones(len(starts), np.int64)
    axes = list(range(len(starts))) if axes is None else axes
    index = [slice(None)] * data.ndim
    for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
        index[int(a)] = slice(int(s), int(e), int(st))
    return data[tuple(index)]


def _legacy_slice(node, args):
    starts, ends = _attr(node, "starts"), _attr(node, "ends")
    axes = _attr(node, "axes", list(range(len(starts))))
    index = [slice(None)] * args[0].ndim
    for s, e, a in zip(starts, ends, axes, strict=True):
        index[int(a)] = slice(int(s), int(e))
    return args[0][tuple(index)]


def _unsqueeze(node, args):
    out = args[0]
    axes = sorted(a % (out.ndim + len(_axes(node, args, 1))) for a in _axes(node, args, 1))
    for a in axes:
        out = np.expand_dims(out, a)
    return out


def _squeeze(node, args):
    axes = _axes(node, args, 1)
    return np.squeeze(args[0]) if axes is None else np.squeeze(args[0], axis=tuple(axes))


def _reshape(node, args):
    data, target = args[0], [int(d) for d in args[1]]
    if not _attr(node, "allowzero", 0):
        target = [data.shape[i] if d == 0 else d for i, d in enumerate(target)]
    return data.reshape(target)


def _div(node, args):
    a, b = args
    if a.dtype.kind in _INT_KINDS and b.dtype.kind in _INT_KINDS:
        return (np.trunc(a / b)).astype(np.result_type(a, b))  # ONNX integer Div truncates toward zero
    return a / b


def _cast(node, args):
    return args[0].astype(helper.tensor_dtype_to_np_dtype(_attr(node, "to")))


def _constant_of_shape(node, args):
    value = _attr(node, "value")
    fill = numpy_helper.to_array(value).reshape(-1) if value is not None else np.zeros(1, np.float32)
    return np.full([int(d) for d in args[0]], fill[0], dtype=fill.dtype)


def _gather(node, args):
    return np.take(args[0], args[1].astype(np.int64), axis=int(_attr(node, "axis", 0)))


def _concat(node, args):
    return np.concatenate([np.atleast_1d(a) if a.ndim == 0 else a for a in args], axis=int(_attr(node, "axis", 0)))


def _reduce(fn: Callable) -> Callable:
    def run(node, args):
        axes = _axes(node, args, 1)
        keep = bool(_attr(node, "keepdims", 1))
        if axes is None or not axes:
            if axes is not None and _attr(node, "noop_with_empty_axes", 0):
                return args[0]
            return fn(args[0], axis=None, keepdims=keep).astype(args[0].dtype)
        return fn(args[0], axis=tuple(axes), keepdims=keep).astype(args[0].dtype)

    return run


def _binary(fn: Callable) -> Callable:
    def run(node, args):
        out = fn(args[0], args[1])
        return out.astype(np.result_type(args[0], args[1])) if out.dtype.kind not in "b" else out

    return run


#: Evaluators: (node, input values) -> output value (one output each).
EVALUATORS: dict[str, Callable] = {
    "Identity": lambda node, args: args[0],
    "Add": _binary(np.add),
    "Sub": _binary(np.subtract),
    "Mul": _binary(np.multiply),
    "Div": _div,
    "Mod": _binary(np.fmod),
    "Neg": lambda node, args: -args[0],
    "Abs": lambda node, args: np.abs(args[0]),
    "Floor": lambda node, args: np.floor(args[0]),
    "Ceil": lambda node, args: np.ceil(args[0]),
    "Sqrt": lambda node, args: np.sqrt(args[0]),
    "Min": lambda node, args: np.minimum.reduce(np.broadcast_arrays(*args)),
    "Max": lambda node, args: np.maximum.reduce(np.broadcast_arrays(*args)),
    "Equal": lambda node, args: np.equal(args[0], args[1]),
    "Less": lambda node, args: np.less(args[0], args[1]),
    "Greater": lambda node, args: np.greater(args[0], args[1]),
    "Not": lambda node, args: np.logical_not(args[0]),
    "And": lambda node, args: np.logical_and(args[0], args[1]),
    "Or": lambda node, args: np.logical_or(args[0], args[1]),
    "Where": lambda node, args: np.where(args[0], args[1], args[2]),
    "Cast": _cast,
    "Gather": _gather,
    "Concat": _concat,
    "Slice": lambda node, args: _slice(node, args) if len(args) > 1 else _legacy_slice(node, args),
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Reshape": _reshape,
    "Flatten": lambda node, args: args[0].reshape(
        int(np.prod(args[0].shape[: int(_attr(node, "axis", 1))])), -1),
    "Range": lambda node, args: np.arange(args[0], args[1], args[2]).astype(args[0].dtype),
    "ConstantOfShape": _constant_of_shape,
    "Expand": lambda node, args: args[0] * np.ones([int(d) for d in args[1]], dtype=args[0].dtype),
    "Tile": lambda node, args: np.tile(args[0], [int(r) for r in args[1]]),
    "Transpose": lambda node, args: np.transpose(args[0], _attr(node, "perm")),
    "ReduceProd": _reduce(np.prod),
    "ReduceSum": _reduce(np.sum),
    "ReduceMin": _reduce(np.min),
    "ReduceMax": _reduce(np.max),
}


def _shape_value(node: onnx.NodeProto, dims) -> np.ndarray | None:
    if dims is None or any(d is None for d in dims):
        return None
    if node.op_type == "Size":
        return np.array(int(np.prod(dims)), dtype=np.int64)
    rank = len(dims)
    start, end = int(_attr(node, "start", 0)), _attr(node, "end", None)
    start = max(0, start + rank if start < 0 else start)
    end = rank if end is None else max(0, int(end) + rank if int(end) < 0 else int(end))
    return np.array(dims[start:min(end, rank)], dtype=np.int64)


def _known_values(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Small inline initializers and Constant node values (weights and external tensors skipped)."""
    out: dict[str, np.ndarray] = {}
    tensors = list(model.graph.initializer)
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output:
            t = constant_node_tensor(node)
            if t is not None:
                t.name = node.output[0]
                tensors.append(t)
    for t in tensors:
        if t.data_location == onnx.TensorProto.EXTERNAL or t.external_data or int(np.prod(t.dims)) > MAX_ELEMENTS:
            continue
        try:
            out[t.name] = numpy_helper.to_array(t)
        except Exception:
            continue
    return out


def _evaluate(node: onnx.NodeProto, values: Values, table) -> np.ndarray | None:
    """The node's single output value, or None when it cannot or should not be folded."""
    if node.op_type in ("Shape", "Size"):
        entry = table.get(node.input[0]) if node.input else None
        return _shape_value(node, entry[0] if entry else None)
    fn = EVALUATORS.get(node.op_type)
    if fn is None or len([o for o in node.output if o]) != 1 or node.domain not in ("", "ai.onnx"):
        return None
    args = [values.get(i) if i else None for i in node.input]
    if any(a is None for i, a in zip(node.input, args, strict=True) if i):
        return None
    try:
        with np.errstate(all="ignore"):
            out = np.asarray(fn(node, args))
    except Exception:  # malformed or unusual nodes stay as they are; shape inference reports them
        return None
    return out if out.size <= MAX_ELEMENTS else None


def fold_shapes(model: onnx.ModelProto) -> bool:
    """Fold shape subgraphs of a shape-inferred model in place; True when any node was folded."""
    table = shape_table(model)
    values = _known_values(model)
    derived: set[str] = set()
    folded: dict[int, np.ndarray] = {}
    for index, node in enumerate(model.graph.node):
        if node.op_type == "Constant":
            continue
        out = _evaluate(node, values, table)
        if out is None:
            continue
        from_shape = node.op_type in ("Shape", "Size") or any(i in derived for i in node.input)
        if not from_shape and out.dtype.kind not in _INT_KINDS:
            continue
        values[node.output[0]] = out
        derived.add(node.output[0])
        folded[index] = out
    if not folded:
        return False
    _replace(model, folded)
    return True


def _replace(model: onnx.ModelProto, folded: Mapping[int, np.ndarray]) -> None:
    """Drop folded nodes, add initializers for their outputs still read, drop dead Constant nodes."""
    nodes = list(model.graph.node)
    kept = [n for i, n in enumerate(nodes) if i not in folded]
    graph_outputs = {o.name for o in model.graph.output}
    read = {i for n in kept for i in n.input} | graph_outputs
    for index, value in folded.items():
        name = nodes[index].output[0]
        if name in read:
            model.graph.initializer.append(numpy_helper.from_array(value, name))
    kept = [n for n in kept if not (n.op_type == "Constant" and n.output and n.output[0] not in read)]
    del model.graph.node[:]
    model.graph.node.extend(kept)


def fold_and_infer(model: onnx.ModelProto, infer: Callable[[onnx.ModelProto], onnx.ModelProto],
                   max_rounds: int = 8) -> onnx.ModelProto:
    """Fold shape subgraphs and infer shapes again, until nothing more folds."""
    for _ in range(max_rounds):
        if not fold_shapes(model):
            break
        del model.graph.value_info[:]
        model = infer(model)
    return model
