"""ReduceMean/Sum/Max/Min/Prod and GlobalAverage/MaxPool; sums and means in float32 for float16."""

from __future__ import annotations

from typing import Any

import numpy as np

from fuseplanner.run.ops.node import Node, compute_dtype, norm_axis, store
from fuseplanner.run.ops.registry import Kernel, register

#: ONNX opset from which `axes` is an input rather than an attribute.
_AXES_INPUT = {"ReduceSum": 13}
_FUNCS = {"ReduceMean": "mean", "ReduceSum": "sum", "ReduceMax": "max", "ReduceMin": "min", "ReduceProd": "prod"}


def _axes(node: Node, rank: int) -> tuple[int, ...] | None:
    """Normalised reduce axes; None for "no reduction" (empty axes with noop_with_empty_axes)."""
    from_input = node.opset >= _AXES_INPUT.get(node.op_type, 18)
    axes = node.ints("axes", 1) if from_input else node.ints("axes", 99)
    if not axes:
        if int(node.attr("noop_with_empty_axes", 0)):
            return None
        return tuple(range(rank))
    return tuple(sorted({norm_axis(node, a, rank) for a in axes}))


def reduce_kernel(xp: Any, node: Node, func: str, axes: tuple[int, ...] | None) -> Kernel:
    shape = node.in_shape
    if axes is None:
        return lambda ins, outs: xp.copyto(outs[0], ins[0])
    kept = tuple(1 if i in axes else d for i, d in enumerate(shape))
    dtype = np.dtype(node.input_dtypes[0])
    accumulate = func in ("mean", "sum", "prod")
    work = compute_dtype(dtype.name) if accumulate else dtype

    options = {"dtype": work} if accumulate else {}

    def kernel(ins, outs):
        # float16 accumulates in float32 inside the reduction (no float32 copy of the input first)
        value = getattr(ins[0], func)(axis=axes, keepdims=True, **options)
        store(xp, outs[0].reshape(kept), value)

    return kernel


@register(*_FUNCS)
def reduce_op(xp: Any, node: Node) -> Kernel:
    return reduce_kernel(xp, node, _FUNCS[node.op_type], _axes(node, len(node.in_shape)))


@register("GlobalAveragePool", "GlobalMaxPool")
def global_pool(xp: Any, node: Node) -> Kernel:
    axes = tuple(range(2, len(node.in_shape)))
    return reduce_kernel(xp, node, "mean" if node.op_type == "GlobalAveragePool" else "max", axes)
