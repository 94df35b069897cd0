"""Resize (nearest and linear, every coordinate transformation mode but tf_crop_and_resize) and the old
Upsample. Per resized axis, prepare() maps each output position to input positions (nearest: one index;
linear: two indices and weights, separable over axes); a kernel is a chain of `xp.take` gathers.
Coordinates are computed in float32, as onnxruntime does, so that ties round the same way."""

from __future__ import annotations

from typing import Any

import numpy as np

from fuseplanner.run.ops.node import Node, norm_axis, store, upcast
from fuseplanner.run.ops.registry import Kernel, register

f32 = np.float32


def source_coords(mode: str, out: int, size: int, scale: float) -> np.ndarray:
    """Input coordinate of each of `out` output positions along an axis of `size` (float32)."""
    x, s, n = np.arange(out, dtype=f32), f32(scale), f32(size)
    if mode == "half_pixel":
        return (x + f32(0.5)) / s - f32(0.5)
    if mode == "pytorch_half_pixel":
        return (x + f32(0.5)) / s - f32(0.5) if out > 1 else np.zeros(out, f32)
    if mode == "align_corners":
        return x * (n - 1) / f32(out - 1) if out > 1 else np.zeros(out, f32)
    if mode == "asymmetric":
        return x / s
    if mode == "tf_half_pixel_for_nn":
        return (x + f32(0.5)) / s
    if mode == "half_pixel_symmetric":
        adjust = f32(out) / (s * n)
        offset = n / f32(2) * (f32(1) - adjust)
        return offset + (x + f32(0.5)) / s - f32(0.5)
    raise ValueError(f"coordinate_transformation_mode={mode!r} is not supported")


def nearest_index(coords: np.ndarray, rule: str, size: int, scale: float) -> np.ndarray:
    if rule == "round_prefer_floor":
        idx = np.ceil(coords - f32(0.5))
    elif rule == "round_prefer_ceil":
        idx = np.floor(coords + f32(0.5))
    elif rule == "floor":
        idx = np.floor(coords)
    elif rule == "ceil":
        idx = np.ceil(coords)
    elif rule == "simple":  # opset < 11: ceil when downsampling, else truncate
        idx = np.ceil(coords) if scale < 1 else np.trunc(coords)
    else:
        raise ValueError(f"nearest_mode={rule!r} is not supported")
    return np.clip(idx, 0, size - 1).astype(np.int64)


def linear_taps(coords: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lower index, upper index and the upper index's weight of linear interpolation (edge-clamped)."""
    c = np.clip(coords, f32(0), f32(size - 1))
    lo = np.minimum(c.astype(np.int64), size - 1)
    hi = np.minimum(lo + 1, size - 1)
    return lo, hi, (c - lo.astype(f32)).astype(f32)


def _scales(node: Node, rank: int, axes: list[int]) -> list[float]:
    ins, outs = node.in_shape, node.out_shape
    if node.op_type == "Upsample":
        values = node.attr("scales") if node.opset < 9 else node.need_const(1, "scales")
        return [float(v) for v in np.asarray(values).reshape(-1)]
    scales_at = 1 if node.opset < 11 else 2
    const = node.const(scales_at)
    full = [1.0] * rank
    if const is not None and const.size:
        for ax, v in zip(axes, np.asarray(const, dtype=f32).reshape(-1), strict=True):
            full[ax] = float(v)
        return full
    if node.opset >= 11 and node.has_input(3):
        ratios = [float(f32(outs[a]) / f32(ins[a])) for a in axes]
        policy = node.attr("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            common = min(ratios) if policy == "not_larger" else max(ratios)
            ratios = [common] * len(axes)
        for ax, v in zip(axes, ratios, strict=True):
            full[ax] = v
        return full
    raise node.error("scales must be a constant (or sizes given)")


def _settings(node: Node) -> tuple[str, str, str]:
    if node.op_type == "Upsample" or node.opset < 11:
        return node.attr("mode", "nearest"), "asymmetric", "simple"
    return (node.attr("mode", "nearest"), node.attr("coordinate_transformation_mode", "half_pixel"),
            node.attr("nearest_mode", "round_prefer_floor"))


def _plan(node: Node) -> tuple[str, list[tuple[int, Any]]]:
    rank = len(node.in_shape)
    axes = [norm_axis(node, int(a), rank) for a in node.attr("axes", range(rank))]
    mode, ctm, rule = _settings(node)
    if mode not in ("nearest", "linear", "bilinear"):
        raise node.error(f"mode={mode!r} is not supported (nearest, linear)")
    if int(node.attr("antialias", 0)):
        raise node.error("antialias=1 is not supported")
    scales = _scales(node, rank, axes)
    steps = []
    try:
        for ax in range(rank):
            size, out = node.in_shape[ax], node.out_shape[ax]
            coords = source_coords(ctm, out, size, scales[ax])
            if out == size and np.array_equal(coords, np.arange(out, dtype=f32)):
                continue
            if mode == "nearest":
                steps.append((ax, nearest_index(coords, rule, size, scales[ax])))
            else:
                steps.append((ax, linear_taps(coords, size)))
    except ValueError as exc:
        raise node.error(str(exc)) from None
    return ("nearest" if mode == "nearest" else "linear"), steps


@register("Resize", "Upsample")
def resize(xp: Any, node: Node) -> Kernel:
    mode, steps = _plan(node)
    rank = len(node.in_shape)
    if mode == "nearest":
        gathers = [(ax, xp.asarray(idx)) for ax, idx in steps]

        def nearest(ins, outs):
            x = ins[0]
            for k, (ax, idx) in enumerate(gathers):
                x = xp.take(x, idx, axis=ax, out=outs[0] if k == len(gathers) - 1 else None)
            if not gathers:
                xp.copyto(outs[0], x)

        return nearest
    lerps = []
    for ax, (lo, hi, w) in steps:
        wshape = [1] * rank
        wshape[ax] = len(w)
        lerps.append((ax, xp.asarray(lo), xp.asarray(hi), xp.asarray(w.reshape(wshape))))

    def linear(ins, outs):
        x = upcast(ins[0])
        for ax, lo, hi, w in lerps:
            a = xp.take(x, lo, axis=ax)
            x = a + (xp.take(x, hi, axis=ax) - a) * w
        store(xp, outs[0], x)

    return linear
