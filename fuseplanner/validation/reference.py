"""Float64 NumPy reference for every kernel kind, and seeded random parameters and inputs.

The reference applies the member ops in order; each op is a convolution (any stride, padding,
dilation, groups) or a linear layer over the last axis, followed by its epilogue: bias -> activation,
and after the last op the residual (when given). Activations match kernels/common.cuh: hardsigmoid
is relu6(x + 3) / 6 (PyTorch's), leakyrelu uses slope 0.01, gelu is the exact erf form.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.special import erf

from fuseplanner.core.errors import PlanError
from fuseplanner.core.ir import Op
from fuseplanner.core.tf32 import tf32_rounded

__all__ = ["ACTIVATIONS", "activation", "conv2d", "linear", "random_input", "random_params", "reference"]


def _relu6(v: np.ndarray) -> np.ndarray:
    return np.clip(v, 0.0, 6.0)


#: Activation functions by canonical epilogue name.
ACTIVATIONS = {
    "relu": lambda v: np.maximum(v, 0.0),
    "relu6": _relu6,
    "hardswish": lambda v: v * _relu6(v + 3.0) / 6.0,
    "hardsigmoid": lambda v: _relu6(v + 3.0) / 6.0,
    "sigmoid": lambda v: 1.0 / (1.0 + np.exp(-v)),
    "silu": lambda v: v / (1.0 + np.exp(-v)),
    "gelu": lambda v: 0.5 * v * (1.0 + erf(v / math.sqrt(2.0))),
    "leakyrelu": lambda v: np.where(v >= 0, v, 0.01 * v),
}
_PASSIVE = frozenset({"bias", "bn", "add"})


def activation(op: Op, v: np.ndarray) -> np.ndarray:
    """Apply the activations in `op.epilogue` (bias/bn/add are handled elsewhere)."""
    for name in op.epilogue:
        if name in _PASSIVE:
            continue
        if name not in ACTIVATIONS:
            raise PlanError(f"op {op.name}: epilogue {name!r} has no reference implementation")
        v = ACTIVATIONS[name](v)
    return v


def conv2d(x: np.ndarray, w: np.ndarray, op: Op) -> np.ndarray:
    """NCHW convolution of float64 `x` with ONNX-layout weights `w` (C_out, C_in/groups, kh, kw)."""
    n, c, h, wd = x.shape
    (kh, kw), (sh, sw), (dh, dwl) = op.kernel, op.stride, op.dilation
    pt, pl, pb, pr = op.pads
    g = op.groups
    co = w.shape[0]
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    ho = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    wo = (wd + pl + pr - dwl * (kw - 1) - 1) // sw + 1
    # patches[n, c, ky, kx, y, x] = xp[n, c, y*sh + ky*dh, x*sw + kx*dw]
    rows = (np.arange(ho) * sh)[None, :] + (np.arange(kh) * dh)[:, None]  # (kh, ho)
    cols = (np.arange(wo) * sw)[None, :] + (np.arange(kw) * dwl)[:, None]  # (kw, wo)
    patches = xp[:, :, rows[:, None, :, None], cols[None, :, None, :]]  # (n, c, kh, kw, ho, wo)
    patches = patches.reshape(n, g, c // g, kh, kw, ho, wo)
    wg = w.reshape(g, co // g, c // g, kh, kw)
    out = np.einsum("ngcijyx,gocij->ngoyx", patches, wg, optimize=True)
    return out.reshape(n, co, ho, wo)


def linear(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Tokens (..., C_in) times weights (C_out, C_in)^T."""
    return x @ w.reshape(w.shape[0], -1).T


def tf32_round(a) -> np.ndarray:
    """`a` rounded to TF32 (10 mantissa bits, to nearest, ties away from zero: cvt.rna.tf32.f32), as
    float64: what the TF32 kernels multiply (weights rounded on the host, activations as loaded)."""
    return tf32_rounded(np, a).astype(np.float64)


def _apply(op: Op, x: np.ndarray, w: np.ndarray, b: np.ndarray | None, precision: str = "fp32") -> np.ndarray:
    if precision == "tf32" and op.kind in ("pw", "linear"):  # the tensor-core GEMMs; depthwise stays fp32
        x, w = tf32_round(x), tf32_round(w)
    if op.kind == "linear":
        y = linear(x, w)
        if b is not None:
            y = y + b.reshape(-1)
    else:
        y = conv2d(x, w, op)
        if b is not None:
            y = y + b.reshape(1, -1, 1, 1)
    return activation(op, y)


def reference(kind: str, ops: Sequence[Op], x, params, residual=None, precision: str = "fp32") -> np.ndarray:
    """Float64 output of kernel `kind` over `ops` for input `x` and per-op `(weight, bias)` params;
    `precision` "tf32" rounds each pointwise/linear op's input and weights to TF32 first (`tf32_round`).

    Arrays may be NumPy or anything `np.asarray` accepts (CuPy arrays: pass `.get()`).
    """
    if len(params) != len(ops):
        raise PlanError(f"params must hold one (weight, bias) pair per op: got {len(params)} for {len(ops)}")
    y = np.asarray(x, dtype=np.float64)
    for op, (w, b) in zip(ops, params, strict=True):
        y = _apply(op, y, np.asarray(w, dtype=np.float64), None if b is None else np.asarray(b, dtype=np.float64),
                   precision)  # fmt: skip
    if residual is not None:
        y = y + np.asarray(residual, dtype=np.float64)
    return y


def weight_shape(op: Op) -> tuple[int, ...]:
    """ONNX-layout weight shape of an op: (C_out, C_in/groups, kh, kw), or (C_out, C_in) for linear."""
    if op.kind == "linear":
        return (op.c_out, op.c_in)
    return (op.c_out, op.c_in // op.groups, *op.kernel)


def random_params(ops: Sequence[Op], rng: np.random.Generator, bias: bool = True) -> list:
    """Per-op float32 (weight, bias) with unit-variance-preserving scale (1/sqrt(fan_in))."""
    out = []
    for op in ops:
        shape = weight_shape(op)
        fan_in = math.prod(shape[1:])
        w = (rng.standard_normal(shape) / math.sqrt(fan_in)).astype(np.float32)
        b = (0.1 * rng.standard_normal(op.c_out)).astype(np.float32) if bias else None
        out.append((w, b))
    return out


def random_input(op: Op, batch: int, rng: np.random.Generator) -> np.ndarray:
    """A float32 standard-normal input of `op` for a batch of `batch` images, shaped as the kernels
    take it (`Op.kernel_shape`)."""
    at = op.with_batch(batch)
    shape = at.kernel_shape(at.in_shape)
    return rng.standard_normal(shape).astype(np.float32)
