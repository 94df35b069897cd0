"""Data movement: views (Reshape family, Identity, Dropout), Transpose, Concat, Split, Slice, Gather,
Expand, Tile. Shapes are static, so every slice and index is fixed when the kernel is prepared."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fuseplanner.run.ops.node import Node, norm_axis, store
from fuseplanner.run.ops.registry import Kernel, register

#: Ops whose output may alias their (first) input buffer: the executor may skip them.
VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"})


@register("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity")
def view(xp: Any, node: Node) -> Kernel:
    if math.prod(node.in_shape) != math.prod(node.out_shape):
        raise node.error(f"cannot view {node.in_shape} as {node.out_shape}")
    shape = node.out_shape
    return lambda ins, outs: xp.copyto(outs[0], ins[0].reshape(shape))


@register("Dropout")
def dropout(xp: Any, node: Node) -> Kernel:
    training = node.const(2)
    if node.has_input(2) and (training is None or bool(np.asarray(training).reshape(-1)[0])):
        raise node.error("training_mode must be a constant false: only inference is supported")
    with_mask = len(node.output_shapes) > 1

    def kernel(ins, outs):
        xp.copyto(outs[0], ins[0])
        if with_mask and outs[1] is not None:
            outs[1].fill(True)

    return kernel


@register("Transpose")
def transpose(xp: Any, node: Node) -> Kernel:
    rank = len(node.in_shape)
    perm = tuple(int(p) for p in node.attr("perm", range(rank - 1, -1, -1)))
    if sorted(perm) != list(range(rank)):
        raise node.error(f"perm {list(perm)} is not a permutation of {rank} axes")
    return lambda ins, outs: xp.copyto(outs[0], ins[0].transpose(perm))


def _axis_slices(rank: int, axis: int, sizes: list[int]) -> list[tuple[slice, ...]]:
    """Consecutive blocks of `sizes` along `axis` as index tuples."""
    starts = np.cumsum([0, *sizes])
    lead = (slice(None),) * axis
    return [lead + (slice(int(a), int(b)),) for a, b in zip(starts[:-1], starts[1:], strict=True)]


@register("Concat")
def concat(xp: Any, node: Node) -> Kernel:
    rank = len(node.out_shape)
    axis = norm_axis(node, int(node.attr("axis", 0)), rank)
    present = [i for i, s in enumerate(node.input_shapes) if s is not None and s[axis] > 0]
    blocks = _axis_slices(rank, axis, [node.input_shapes[i][axis] for i in present])

    def kernel(ins, outs):
        for i, sl in zip(present, blocks, strict=True):
            xp.copyto(outs[0][sl], ins[i])

    return kernel


@register("Split")
def split(xp: Any, node: Node) -> Kernel:
    rank = len(node.in_shape)
    axis = norm_axis(node, int(node.attr("axis", 0)), rank)
    sizes = [s[axis] for s in node.output_shapes]
    if sum(sizes) != node.in_shape[axis]:
        raise node.error(f"output sizes {sizes} along axis {axis} do not add up to {node.in_shape[axis]}")
    blocks = _axis_slices(rank, axis, sizes)

    def kernel(ins, outs):
        for out, sl in zip(outs, blocks, strict=True):
            if out is not None:
                xp.copyto(out, ins[0][sl])

    return kernel


def _slice_1d(start: int, end: int, step: int, dim: int) -> slice:
    """ONNX Slice clamping for one axis, as a Python slice."""
    if step == 0:
        raise ValueError("step 0")
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        return slice(min(max(start, 0), dim), min(max(end, 0), dim), step)
    start = min(max(start, 0), dim - 1)
    end = min(max(end, -1), dim - 1)
    return slice(start, None if end < 0 else end, step)


@register("Slice")
def slice_op(xp: Any, node: Node) -> Kernel:
    shape = node.in_shape
    rank = len(shape)
    if node.opset < 10:
        starts, ends = node.attr("starts"), node.attr("ends")
        axes, steps = node.attr("axes", list(range(len(starts)))), [1] * len(starts)
    else:
        starts, ends = node.ints("starts", 1), node.ints("ends", 2)
        axes = node.ints("axes", 3) if node.has_input(3) else list(range(len(starts)))
        steps = node.ints("steps", 4) if node.has_input(4) else [1] * len(starts)
    index = [slice(None)] * rank
    try:
        for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
            ax = norm_axis(node, int(a), rank)
            index[ax] = _slice_1d(int(s), int(e), int(st), shape[ax])
    except ValueError as exc:
        raise node.error(f"invalid starts/ends/axes/steps: {exc}") from None
    index = tuple(index)
    got = np.empty(shape, dtype=np.bool_)[index].shape
    if got != tuple(node.out_shape):
        raise node.error(f"slicing {shape} gives {got}, not the declared {node.out_shape}")
    return lambda ins, outs: xp.copyto(outs[0], ins[0][index])


@register("Gather")
def gather(xp: Any, node: Node) -> Kernel:
    shape = node.in_shape
    axis = norm_axis(node, int(node.attr("axis", 0)), len(shape))
    dim = shape[axis]
    flat_out = shape[:axis] + (math.prod(node.input_shapes[1]),) + shape[axis + 1:]
    const = node.const(1)
    if const is not None:
        idx = np.asarray(const).astype(np.int64).reshape(-1)
        if ((idx < -dim) | (idx >= dim)).any():
            raise node.error(f"constant indices fall outside [-{dim}, {dim})")
        dev = xp.asarray(np.where(idx < 0, idx + dim, idx))
        return lambda ins, outs: xp.take(ins[0], dev, axis=axis, out=outs[0].reshape(flat_out))

    def kernel(ins, outs):
        raw = ins[1].reshape(-1)
        idx = xp.where(raw < 0, raw + dim, raw)
        xp.take(ins[0], idx, axis=axis, out=outs[0].reshape(flat_out))

    return kernel


@register("Expand")
def expand(xp: Any, node: Node) -> Kernel:
    return lambda ins, outs: xp.copyto(outs[0], ins[0])


@register("Tile")
def tile(xp: Any, node: Node) -> Kernel:
    reps = [o // i if i else 0 for o, i in zip(node.out_shape, node.in_shape, strict=True)]
    # x tiled r times along an axis == x broadcast on a new leading axis of length r, then merged
    split = tuple(d for r, i in zip(reps, node.in_shape, strict=True) for d in (r, i))
    expanded = tuple(1 if k % 2 == 0 else d for k, d in enumerate(split))

    def kernel(ins, outs):
        xp.copyto(outs[0].reshape(split), ins[0].reshape(expanded))

    return kernel


def constant_kernel(xp: Any, value: np.ndarray, node: Node) -> Kernel:
    """Kernel writing a host value fixed at prepare time (uploaded once)."""
    dev = xp.asarray(np.asarray(value).astype(node.output_dtypes[0]).reshape(node.out_shape))
    return lambda ins, outs: xp.copyto(outs[0], dev)


__all__ = ["VIEW_OPS", "store"]
