"""ConvTranspose: one matmul per group (weights^T x input -> per-tap columns), then col2im as a gather:
every output position sums the columns of the taps that land on it (at most ceil(k/s) per axis), a
zero column standing in for missing taps. No atomics; float32 sums for float16."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from fuseplanner.run.ops.conv import bias_getter, weight_shape
from fuseplanner.run.ops.linalg import matmul
from fuseplanner.run.ops.node import Node, store
from fuseplanner.run.ops.registry import Kernel, register


def _pad_head(node: Node, kernel, inner, out) -> list[int]:
    rank = len(kernel)
    strides = [int(s) for s in node.attr("strides", [1] * rank)]
    dil = [int(d) for d in node.attr("dilations", [1] * rank)]
    adj = [int(a) for a in node.attr("output_padding", [0] * rank)]
    auto_pad = node.attr("auto_pad", "NOTSET")
    if auto_pad in ("NOTSET", "") and node.attr("output_shape") is None:
        pads = [int(p) for p in node.attr("pads", [0] * (2 * rank))]
        return pads[:rank]
    if auto_pad == "VALID":
        return [0] * rank
    if auto_pad not in ("NOTSET", "", "SAME_UPPER", "SAME_LOWER"):
        raise node.error(f"auto_pad={auto_pad!r} is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID")
    total = [max(0, (i - 1) * s + a + (k - 1) * d + 1 - o)
             for i, s, a, k, d, o in zip(inner, strides, adj, kernel, dil, out, strict=True)]
    # ONNX: SAME_UPPER puts the smaller half first; NOTSET (output_shape given) and SAME_LOWER the larger
    return [t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in total]


def col2im_index(kernel, strides, dilations, head, inner, out) -> np.ndarray:
    """(slots, outputs) indices into the flattened (taps x inputs) columns plus one zero column at the end:
    slot j of output position p names the j-th tap that contributes to p."""
    npos_in = int(np.prod(inner))
    zero = len(list(itertools.product(*(range(k) for k in kernel)))) * npos_in
    grids = [g.reshape(-1) for g in np.meshgrid(*(np.arange(o) for o in out), indexing="ij")]
    rows = []
    for t, tap in enumerate(itertools.product(*(range(k) for k in kernel))):
        valid = np.ones(grids[0].shape, dtype=bool)
        src = np.zeros(grids[0].shape, dtype=np.int64)
        for g, k, s, d, h, i in zip(grids, tap, strides, dilations, head, inner, strict=True):
            num = g + h - k * d
            q = num // s
            valid &= (num % s == 0) & (q >= 0) & (q < i)
            src = src * i + np.clip(q, 0, i - 1)
        rows.append(np.where(valid, t * npos_in + src, zero))
    index = np.stack(rows)
    order = np.argsort(index == zero, axis=0, kind="stable")
    index = np.take_along_axis(index, order, axis=0)
    slots = max(int((index != zero).sum(axis=0).max(initial=0)), 1)
    return index[:slots]


@register("ConvTranspose")
def conv_transpose(xp: Any, node: Node) -> Kernel:
    wshape = weight_shape(node)
    n, c = node.in_shape[:2]
    groups = int(node.attr("group", 1))
    mg, kernel = wshape[1], tuple(wshape[2:])
    mch = mg * groups
    if c % groups or wshape[0] != c or node.out_shape[1] != mch:
        raise node.error(f"group={groups} does not fit input {node.in_shape} and weight {wshape}")
    inner, out = tuple(node.in_shape[2:]), tuple(node.out_shape[2:])
    rank = len(kernel)
    strides = [int(s) for s in node.attr("strides", [1] * rank)]
    dil = [int(d) for d in node.attr("dilations", [1] * rank)]
    index = xp.asarray(col2im_index(kernel, strides, dil, _pad_head(node, kernel, inner, out), inner, out))
    cg, ntaps, pin, pout = c // groups, int(np.prod(kernel)), int(np.prod(inner)), int(np.prod(out))
    const = node.const(1)
    wt_const = None if const is None else xp.asarray(
        np.ascontiguousarray(const.reshape(groups, cg, mg * ntaps).transpose(0, 2, 1)))
    bias = bias_getter(xp, node, (mch, 1))

    def kernel_fn(ins, outs):
        wt = wt_const if wt_const is not None else ins[1].reshape(groups, cg, mg * ntaps).transpose(0, 2, 1)
        cols = xp.empty((n, groups, mg * ntaps, pin), dtype=outs[0].dtype)
        matmul(xp, wt, ins[0].reshape(n, groups, cg, pin), cols)
        flat = cols.reshape(n, mch, ntaps * pin)
        flat = xp.concatenate([flat, xp.zeros((n, mch, 1), dtype=flat.dtype)], axis=2)
        acc = xp.take(flat, index, axis=2).sum(axis=2, dtype=np.float32)
        if bias is not None:
            acc += bias(ins)
        store(xp, outs[0].reshape(n, mch, pout), acc)

    return kernel_fn
