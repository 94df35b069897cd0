"""Ops that produce values from shapes or constants: Shape, Size, Constant, ConstantOfShape, Range,
and Pad (constant / reflect / edge / wrap)."""

from __future__ import annotations

from typing import Any

import numpy as np

from fuseplanner.run.ops.movement import constant_kernel
from fuseplanner.run.ops.node import Node, norm_axis, store
from fuseplanner.run.ops.registry import Kernel, register


@register("Shape")
def shape_op(xp: Any, node: Node) -> Kernel:
    dims = list(node.in_shape)
    rank = len(dims)
    start = int(node.attr("start", 0))
    end = node.attr("end")
    start = min(max(start + rank if start < 0 else start, 0), rank)
    stop = rank if end is None else min(max(int(end) + rank if int(end) < 0 else int(end), 0), rank)
    return constant_kernel(xp, np.array(dims[start:stop], dtype=np.int64), node)


@register("Size")
def size_op(xp: Any, node: Node) -> Kernel:
    return constant_kernel(xp, np.array(int(np.prod(node.in_shape)), dtype=np.int64), node)


_SCALAR_ATTRS = {"value_float": np.float32, "value_int": np.int64, "value_floats": np.float32,
                 "value_ints": np.int64}


@register("Constant")
def constant(xp: Any, node: Node) -> Kernel:
    if "value" in node.attrs:
        value = np.asarray(node.attrs["value"])
    elif "sparse_value" in node.attrs:
        raise node.error("sparse_value constants are not supported")
    else:
        key = next((k for k in _SCALAR_ATTRS if k in node.attrs), None)
        if key is None:
            raise node.error(f"no supported value attribute among {sorted(node.attrs)}")
        value = np.asarray(node.attrs[key], dtype=_SCALAR_ATTRS[key])
    return constant_kernel(xp, value, node)


@register("ConstantOfShape")
def constant_of_shape(xp: Any, node: Node) -> Kernel:
    value = node.attr("value")
    fill = np.asarray(value).reshape(-1)[0] if value is not None else np.float32(0)
    fill = np.asarray(fill).astype(node.output_dtypes[0])[()]
    return lambda ins, outs: outs[0].fill(fill)


@register("Range")
def range_op(xp: Any, node: Node) -> Kernel:
    n = node.out_shape[0]
    dtype = np.dtype(node.output_dtypes[0])
    start, delta = node.const(0), node.const(2)
    if start is not None and delta is not None:
        ramp = np.asarray(start).reshape(()) + np.arange(n, dtype=dtype) * np.asarray(delta).reshape(())
        return constant_kernel(xp, ramp.astype(dtype), node)
    steps = xp.asarray(np.arange(n, dtype=dtype))

    def kernel(ins, outs):
        store(xp, outs[0], ins[0].reshape(()) + steps * ins[2].reshape(()))

    return kernel


def _pad_amounts(node: Node, rank: int) -> list[int]:
    if node.opset < 11:
        pads = [int(p) for p in node.attr("pads", [])]
    else:
        pads = [int(p) for p in node.need_const(1, "pads").reshape(-1)]
    axes = list(range(rank))
    if node.opset >= 18 and node.has_input(3):
        axes = [norm_axis(node, int(a), rank) for a in node.need_const(3, "axes").reshape(-1)]
    if len(pads) != 2 * len(axes):
        raise node.error(f"pads {pads} must hold 2 values per padded axis ({len(axes)} axes)")
    full = [0] * (2 * rank)
    for k, ax in enumerate(axes):
        full[ax], full[rank + ax] = pads[k], pads[len(axes) + k]
    return full


def _source_index(mode: str, begin: int, dim: int, out: int) -> np.ndarray:
    """For each output position along one axis, the input position it copies (reflect/edge/wrap)."""
    pos = np.arange(out) - begin
    if mode == "edge":
        return np.clip(pos, 0, dim - 1)
    if mode == "wrap":
        return np.mod(pos, dim)
    if dim == 1:
        return np.zeros(out, dtype=np.int64)
    period = 2 * (dim - 1)
    pos = np.mod(pos, period)
    return np.where(pos < dim, pos, period - pos)


def _constant_pad_slices(shape, pads) -> tuple[tuple[slice, ...], tuple[slice, ...]]:
    rank = len(shape)
    dst, src = [], []
    for ax in range(rank):
        b, e = pads[ax], pads[rank + ax]
        src.append(slice(max(-b, 0), shape[ax] - max(-e, 0)))
        dst.append(slice(max(b, 0), max(b, 0) + max(shape[ax] - max(-b, 0) - max(-e, 0), 0)))
    return tuple(dst), tuple(src)


@register("Pad")
def pad(xp: Any, node: Node) -> Kernel:
    shape = node.in_shape
    rank = len(shape)
    mode = node.attr("mode", "constant")
    pads = _pad_amounts(node, rank)
    if mode == "constant":
        return _constant_pad(xp, node, shape, pads)
    if mode not in ("reflect", "edge", "wrap"):
        raise node.error(f"mode={mode!r} is not one of constant, reflect, edge, wrap")
    if mode == "reflect" and any(max(pads[a], pads[rank + a]) >= shape[a] > 1 for a in range(rank)):
        raise node.error("reflect pads must be smaller than the padded axis")
    steps = [(ax, xp.asarray(_source_index(mode, pads[ax], shape[ax], node.out_shape[ax])))
             for ax in range(rank) if pads[ax] or pads[rank + ax]]

    def kernel(ins, outs):
        x = ins[0]
        for k, (ax, idx) in enumerate(steps):
            last = k == len(steps) - 1
            x = xp.take(x, idx, axis=ax, out=outs[0] if last else None)
        if not steps:
            xp.copyto(outs[0], x)

    return kernel


def _constant_pad(xp: Any, node: Node, shape, pads) -> Kernel:
    dst, src = _constant_pad_slices(shape, pads)
    value_in = node.has_input(2) and node.opset >= 11
    const = node.const(2) if value_in else node.attr("value", 0.0)
    fill = None if const is None else np.asarray(const).astype(node.output_dtypes[0]).reshape(-1)
    fill = None if fill is None else (fill[0] if fill.size else fill.dtype.type(0))

    def kernel(ins, outs):
        if fill is not None:
            outs[0].fill(fill)
        else:
            xp.copyto(outs[0], ins[2].reshape(()))
        xp.copyto(outs[0][dst], ins[0][src])

    return kernel
