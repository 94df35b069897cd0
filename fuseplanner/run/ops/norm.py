"""Normalisations and softmax, all computed in float32 for float16 activations."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fuseplanner.run.ops import _rows
from fuseplanner.run.ops.node import Node, norm_axis, store, upcast
from fuseplanner.run.ops.registry import Kernel, is_numpy, register


@register("Softmax", "LogSoftmax")
def softmax(xp: Any, node: Node) -> Kernel:
    shape = node.in_shape
    rank = len(shape)
    axis = norm_axis(node, int(node.attr("axis", -1 if node.opset >= 13 else 1)), rank)
    if node.opset < 13:  # coerced to 2-D: [prod(shape[:axis]), prod(shape[axis:])]
        view = (math.prod(shape[:axis]), math.prod(shape[axis:]))
        axis = 1
    else:
        view = shape
    log = node.op_type == "LogSoftmax"
    if not is_numpy(xp) and axis == len(view) - 1 and _rows.floats(node.input_dtypes[0], node.output_dtypes[0]):
        rows = _rows.softmax(xp, math.prod(view[:-1]), view[-1], log, (node.input_dtypes[0], node.output_dtypes[0]))
        return lambda ins, outs: rows(ins[0], outs[0])

    def kernel(ins, outs):
        x = upcast(ins[0]).reshape(view)
        shifted = x - x.max(axis=axis, keepdims=True)
        e = xp.exp(shifted)
        s = e.sum(axis=axis, keepdims=True)
        store(xp, outs[0].reshape(view), shifted - xp.log(s) if log else e / s)

    return kernel


@register("LayerNormalization")
def layer_norm(xp: Any, node: Node) -> Kernel:
    rank = len(node.in_shape)
    axis = norm_axis(node, int(node.attr("axis", -1)), rank)
    axes = tuple(range(axis, rank))
    eps = float(node.attr("epsilon", 1e-5))
    has_bias = node.has_input(2)
    fast = None if is_numpy(xp) else _fast_layer_norm(xp, node, axis, eps, has_bias)
    if fast is not None:
        return fast

    def kernel(ins, outs):
        x = upcast(ins[0])
        mean = x.mean(axis=axes, keepdims=True, dtype=np.float32)
        d = x - mean
        inv = 1.0 / xp.sqrt((d * d).mean(axis=axes, keepdims=True) + eps)
        y = d * inv * upcast(ins[1])
        if has_bias:
            y += upcast(ins[2])
        store(xp, outs[0], y)
        if len(outs) > 1 and outs[1] is not None:
            store(xp, outs[1], mean)
        if len(outs) > 2 and outs[2] is not None:
            store(xp, outs[2], inv)

    return kernel


def _fast_layer_norm(cp: Any, node: Node, axis: int, eps: float, has_bias: bool) -> Kernel | None:
    """The GPU's one-launch LayerNorm when only Y is asked for and scale (and bias) cover the normalised
    axes element for element; None otherwise."""
    shape = node.in_shape
    cols = math.prod(shape[axis:])
    wants_stats = any(s for s in node.output_shapes[1:]) and len(node.output_shapes) > 1
    sizes = [math.prod(s or ()) for s in node.input_shapes[1:3] if s is not None]
    dtypes = [d for d in node.input_dtypes[:3] if d is not None] + [node.output_dtypes[0]]
    if wants_stats or any(n != cols for n in sizes) or not _rows.floats(*dtypes):
        return None
    bias_dtype = node.input_dtypes[2] if has_bias else node.input_dtypes[1]
    run = _rows.layer_norm(cp, math.prod(shape[:axis]), cols, eps,
                           (node.input_dtypes[0], node.input_dtypes[1], bias_dtype, node.output_dtypes[0]), has_bias)
    return lambda ins, outs: run(ins[0], ins[1], ins[2] if has_bias else None, outs[0])


def _bn_affine(xp: Any, scale: Any, bias: Any, mean: Any, var: Any, eps: float, shape: tuple[int, ...]):
    a = upcast(scale) / xp.sqrt(upcast(var) + eps)
    b = upcast(bias) - upcast(mean) * a
    return a.astype(np.float32).reshape(shape), b.astype(np.float32).reshape(shape)


@register("BatchNormalization")
def batch_norm(xp: Any, node: Node) -> Kernel:
    if int(node.attr("training_mode", 0)) or len(node.output_shapes) > 1:
        raise node.error("training mode (running statistics outputs) is not supported: export for inference")
    if not int(node.attr("spatial", 1)):
        raise node.error("spatial=0 is not supported")
    eps = float(node.attr("epsilon", 1e-5))
    rank = len(node.in_shape)
    pshape = (node.in_shape[1],) + (1,) * (rank - 2) if rank > 1 else (node.in_shape[0],)
    consts = [node.const(i) for i in range(1, 5)]
    fixed = None
    if all(c is not None for c in consts):
        a, b = _bn_affine(np, *consts, eps, pshape)
        fixed = xp.asarray(a), xp.asarray(b)
    direct = np.dtype(node.output_dtypes[0]) == np.float32

    def kernel(ins, outs):
        a, b = fixed if fixed is not None else _bn_affine(xp, *ins[1:5], eps, pshape)
        if direct:
            xp.multiply(ins[0], a, out=outs[0])
            xp.add(outs[0], b, out=outs[0])
        else:
            store(xp, outs[0], upcast(ins[0]) * a + b)

    return kernel
