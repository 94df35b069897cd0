"""Conv: im2col (one gather of the padded input) + a batched matmul per group; 1x1 stride-1 convs skip
the gather; depthwise convs (one input channel per group) accumulate one strided slice per kernel tap
in float32. Under CuPy, 2-D convs whose output element sums at most `cost.layers.DIRECT_MAX_TERMS` products
(depthwise, stems, narrow groups) run as one elementwise CUDA kernel instead (`_cuda.conv2d`) that
computes the same float32 sum without the padded copy, the gather and the GEMM launches.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fuseplanner.run.ops.geometry import Window, padded, window
from fuseplanner.run.ops.linalg import matmul
from fuseplanner.run.ops.node import Node, store, upcast
from fuseplanner.run.ops.registry import Kernel, is_numpy, register


def conv_window(node: Node, kernel: tuple[int, ...]) -> Window:
    declared = node.attr("kernel_shape")
    if declared is not None and tuple(int(k) for k in declared) != kernel:
        raise node.error(f"kernel_shape {list(declared)} disagrees with the weight's {list(kernel)}")
    return window(node, kernel, tuple(node.in_shape[2:]), tuple(node.out_shape[2:]))


def weight_getter(xp: Any, node: Node, shape: tuple[int, ...], dtype: Any = None):
    """Getter of the weight input (index 1) reshaped to `shape`: uploaded once when it is a constant."""
    const = node.const(1)
    if const is not None:
        w = xp.asarray(const.astype(dtype or const.dtype).reshape(shape))
        return lambda ins: w
    return lambda ins: ins[1].reshape(shape).astype(dtype or ins[1].dtype, copy=False)


def bias_getter(xp: Any, node: Node, shape: tuple[int, ...]):
    """Getter of the optional bias input (index 2) reshaped to `shape`, or None."""
    if not node.has_input(2):
        return None
    const = node.const(2)
    if const is not None:
        b = xp.asarray(const.reshape(shape))
        return lambda ins: b
    return lambda ins: ins[2].reshape(shape)


def _direct(xp: Any, node: Node, win: Window, c: int, groups: int) -> bool:
    """Whether CuPy runs this conv as `_cuda.conv2d` (2-D, float, a short reduction per output)."""
    if is_numpy(xp) or len(win.kernel) != 2 or node.input_dtypes[0] not in ("float16", "float32"):
        return False
    from fuseplanner.cost.layers import DIRECT_MAX_TERMS  # the rule the cost model costs dense convs by

    return c // groups * len(win.taps) <= DIRECT_MAX_TERMS


def _depthwise(xp: Any, node: Node, win: Window) -> Kernel:
    n, c = node.in_shape[:2]
    m = node.out_shape[1] // c
    if _direct(xp, node, win, c, c):
        from fuseplanner.run.ops._cuda import conv2d

        return conv2d(xp, node, win, c)
    taps = win.taps
    weights = weight_getter(xp, node, (c, m, len(taps)) + (1,) * len(win.out), np.float32)
    bias = bias_getter(xp, node, (c, m) + (1,) * len(win.out))
    lead = (slice(None), slice(None))
    slices = [lead + win.tap_slices(t) for t in taps]
    split = (n, c, m, *win.out)

    def kernel(ins, outs):
        xpad = padded(xp, ins[0], win, 0)
        w = weights(ins)
        acc = xp.zeros(split, dtype=np.float32)
        for i, sl in enumerate(slices):
            acc += xpad[sl][:, :, None] * w[:, :, i]
        if bias is not None:
            acc += upcast(bias(ins))
        store(xp, outs[0].reshape(split), acc)

    return kernel


def weight_shape(node: Node) -> tuple[int, ...]:
    """The static shape of the weight input, checked against the input's rank."""
    wshape = node.input_shapes[1] if len(node.input_shapes) > 1 else None
    if wshape is None or len(wshape) != len(node.in_shape) or len(wshape) < 3:
        raise node.error(f"weight shape {wshape} does not match input {node.in_shape}")
    return wshape


@register("Conv")
def conv(xp: Any, node: Node) -> Kernel:
    wshape = weight_shape(node)
    n, c = node.in_shape[:2]
    mch, cg = wshape[:2]
    groups = int(node.attr("group", 1))
    if c != cg * groups or mch % groups:
        raise node.error(f"group={groups} does not divide {c} input / {mch} output channels (weight {wshape})")
    win = conv_window(node, tuple(wshape[2:]))
    if groups == c and cg == 1 and groups > 1:
        return _depthwise(xp, node, win)
    if _direct(xp, node, win, c, groups):
        from fuseplanner.run.ops._cuda import conv2d

        return conv2d(xp, node, win, groups)
    ntaps, npos = len(win.taps), int(np.prod(win.out))
    mg = mch // groups
    weights = weight_getter(xp, node, (groups, mg, cg * ntaps))
    bias = bias_getter(xp, node, (mch, 1))
    pointwise = ntaps == 1 and win.unpadded and set(win.strides) == {1} and win.out == win.inner
    index = None if pointwise else xp.asarray(win.gather_index())
    plane = int(np.prod(win.extent))

    def kernel(ins, outs):
        if pointwise:
            cols = ins[0].reshape(n, groups, cg, npos)
        else:
            xpad = padded(xp, ins[0], win, 0)
            cols = xp.take(xpad.reshape(n, c, plane), index, axis=2).reshape(n, groups, cg * ntaps, npos)
        matmul(xp, weights(ins), cols, outs[0].reshape(n, groups, mg, npos))
        if bias is not None:
            out3 = outs[0].reshape(n, mch, npos)
            xp.add(out3, bias(ins), out=out3)

    return kernel
