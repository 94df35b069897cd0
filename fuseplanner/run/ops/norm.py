"""Normalisations and softmax, all computed in float32 for float16 activations."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fuseplanner.run.ops.node import Node, norm_axis, store, upcast
from fuseplanner.run.ops.registry import Kernel, register


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
