"""MaxPool and AveragePool over any number of spatial axes: a padded copy of the input, then one
strided slice per kernel tap (max, or a float32 sum divided by the per-position tap count)."""

from __future__ import annotations

from typing import Any

import numpy as np

from fuseplanner.run.ops.geometry import Window, padded, tap_count, window
from fuseplanner.run.ops.node import Node, store
from fuseplanner.run.ops.registry import Kernel, register


def _pool_window(node: Node) -> Window:
    kernel = tuple(int(k) for k in node.attr("kernel_shape", ()))
    rank = len(node.in_shape) - 2
    if len(kernel) != rank or rank < 1:
        raise node.error(f"kernel_shape {list(kernel)} does not match a rank-{rank + 2} input")
    return window(node, kernel, tuple(node.in_shape[2:]), tuple(node.out_shape[2:]))


def _lowest(dtype: np.dtype) -> Any:
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


@register("MaxPool")
def max_pool(xp: Any, node: Node) -> Kernel:
    if len(node.output_shapes) > 1:
        raise node.error("the Indices output is not supported")
    win = _pool_window(node)
    lowest = _lowest(np.dtype(node.input_dtypes[0]))
    lead = (slice(None), slice(None))
    first, *rest = [lead + win.tap_slices(t) for t in win.taps]

    def kernel(ins, outs):
        xpad = padded(xp, ins[0], win, lowest)
        out = outs[0]
        xp.copyto(out, xpad[first])
        for sl in rest:
            xp.maximum(out, xpad[sl], out=out)

    return kernel


@register("AveragePool")
def average_pool(xp: Any, node: Node) -> Kernel:
    win = _pool_window(node)
    count = tap_count(win, bool(node.attr("count_include_pad", 0)))
    if (count == 0).any():
        raise node.error("a pooling window covers no input element")
    inv = xp.asarray(1.0 / count)
    lead = (slice(None), slice(None))
    slices = [lead + win.tap_slices(t) for t in win.taps]

    def kernel(ins, outs):
        xpad = padded(xp, ins[0], win, 0, dtype=np.float32)
        acc = xp.zeros(outs[0].shape, dtype=np.float32)
        for sl in slices:
            acc += xpad[sl]
        acc *= inv
        store(xp, outs[0], acc)

    return kernel
