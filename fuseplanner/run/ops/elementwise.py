"""Elementwise ops: activations and math (float16 computed in float32), binary arithmetic with
broadcasting, comparisons and logic (bool outputs), Where, Cast, Clip and the variadic Min/Max/Sum/Mean.

Erf (and Gelu, which uses it) calls scipy.special.erf under NumPy and cupyx.scipy.special.erf under CuPy:
the same function from each library's special-function module.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from fuseplanner.run.ops.node import Node, compute_dtype, store, upcast
from fuseplanner.run.ops.registry import Kernel, is_numpy, register

Fn = Callable[[Any, Any], Any]  # fn(x, out): writes f(x) into out (same dtype as x)


def special(xp: Any) -> Any:
    """The special-function module of `xp` (erf)."""
    if is_numpy(xp):
        import scipy.special

        return scipy.special
    import cupyx.scipy.special

    return cupyx.scipy.special


def _sigmoid(xp: Any) -> Fn:
    def fn(x, o):
        e = xp.exp(-xp.abs(x))
        r = 1.0 / (1.0 + e)
        xp.copyto(o, xp.where(x >= 0, r, e * r))

    return fn


def _hard_sigmoid(xp: Any, alpha: float, beta: float) -> Fn:
    def fn(x, o):
        xp.clip(x * alpha + beta, 0.0, 1.0, out=o)

    return fn


def _hard_swish(xp: Any) -> Fn:
    def fn(x, o):
        xp.multiply(x, xp.clip(x * (1.0 / 6.0) + 0.5, 0.0, 1.0), out=o)

    return fn


def _gelu(xp: Any, approximate: str) -> Fn:
    if approximate == "tanh":
        c = math.sqrt(2.0 / math.pi)

        def fn(x, o):
            inner = xp.tanh((x + 0.044715 * x * x * x) * c)
            xp.multiply(x * 0.5, inner + 1.0, out=o)

        return fn
    erf = special(xp).erf

    def fn_erf(x, o):
        xp.multiply(x * 0.5, erf(x * math.sqrt(0.5)) + 1.0, out=o)

    return fn_erf


def _leaky(xp: Any, alpha: float) -> Fn:
    def fn(x, o):
        xp.copyto(o, xp.where(x >= 0, x, x * alpha))

    return fn


def _unary_fn(xp: Any, node: Node) -> Fn:
    op, a = node.op_type, node.attr
    simple = {"Sqrt": xp.sqrt, "Exp": xp.exp, "Tanh": xp.tanh, "Neg": xp.negative, "Abs": xp.abs,
              "Reciprocal": xp.reciprocal, "Not": xp.logical_not}
    if op in simple:
        f = simple[op]
        return lambda x, o: f(x, out=o)
    if op == "Relu":
        return lambda x, o: xp.maximum(x, 0, out=o)
    if op == "Erf":
        erf = special(xp).erf
        return lambda x, o: erf(x, out=o)
    if op == "Sigmoid":
        return _sigmoid(xp)
    if op == "HardSigmoid":
        return _hard_sigmoid(xp, float(a("alpha", 0.2)), float(a("beta", 0.5)))
    if op == "HardSwish":
        return _hard_swish(xp)
    if op == "LeakyRelu":
        return _leaky(xp, float(a("alpha", 0.01)))
    approximate = a("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise node.error(f"approximate={approximate!r} is not one of none, tanh")
    return _gelu(xp, approximate)


#: CUDA expressions of the float activations over `v` (the input as float32): the GPU computes each op in
#: one elementwise kernel, the same function as the NumPy composition above.
_CUDA_EXPR = {
    "Sqrt": "sqrtf(v)", "Exp": "expf(v)", "Tanh": "tanhf(v)", "Neg": "-v", "Abs": "fabsf(v)", "Reciprocal": "1.f / v",
    "Relu": "fmaxf(v, 0.f)", "Erf": "erff(v)", "Sigmoid": "1.f / (1.f + expf(-v))",
    "HardSigmoid": "fminf(fmaxf(ALPHA * v + BETA, 0.f), 1.f)",
    "HardSwish": "v * fminf(fmaxf(v * (1.f / 6.f) + 0.5f, 0.f), 1.f)", "LeakyRelu": "v >= 0.f ? v : v * ALPHA",
    "Gelu": "0.5f * v * (1.f + erff(v * 0.70710678118654752f))",
    "GeluTanh": "0.5f * v * (1.f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)))",
}
_FLOATS = (np.dtype(np.float32), np.dtype(np.float16))


def cuda_expression(node: Node) -> str | None:
    """The CUDA float expression of a float activation node over `v` (its input as float32), or None."""
    key = "GeluTanh" if node.op_type == "Gelu" and node.attr("approximate", "none") == "tanh" else node.op_type
    if key not in _CUDA_EXPR or np.dtype(node.input_dtypes[0]) not in _FLOATS:
        return None
    default_alpha = 0.2 if node.op_type == "HardSigmoid" else 0.01
    alpha, beta = float(node.attr("alpha", default_alpha)), float(node.attr("beta", 0.5))
    return _CUDA_EXPR[key].replace("ALPHA", f"{alpha!r}f").replace("BETA", f"{beta!r}f")


def _cuda_unary(cp: Any, node: Node) -> Kernel | None:
    """One CuPy elementwise kernel for a float activation, or None where the generic path applies."""
    expr = cuda_expression(node)
    if expr is None:
        return None
    name = f"fuseplanner_{node.op_type.lower()}{'_tanh' if node.attr('approximate', 'none') == 'tanh' else ''}"
    kern = cp.ElementwiseKernel("T x", "O y", f"float v = (float)x; y = (O)({expr});", name)
    return lambda ins, outs: kern(ins[0], outs[0])


@register("Sqrt", "Exp", "Erf", "Tanh", "Sigmoid", "HardSigmoid", "HardSwish", "Relu", "LeakyRelu", "Gelu",
          "Neg", "Abs", "Reciprocal", "Not")
def unary(xp: Any, node: Node) -> Kernel:
    fast = None if is_numpy(xp) else _cuda_unary(xp, node)
    if fast is not None:
        return fast
    fn = _unary_fn(xp, node)
    work = compute_dtype(node.input_dtypes[0])
    if work == np.dtype(node.output_dtypes[0]):
        return lambda ins, outs: fn(ins[0], outs[0])
    shape = node.out_shape

    def kernel(ins, outs):
        tmp = xp.empty(shape, dtype=work)
        fn(upcast(ins[0]), tmp)
        store(xp, outs[0], tmp)

    return kernel


def _int_div(xp: Any) -> Fn:
    """Integer Div truncates toward zero (C semantics), unlike floor_divide."""

    def fn(a, b, o):
        q = xp.floor_divide(a, b)
        fix = (xp.remainder(a, b) != 0) & ((a < 0) != (b < 0))
        xp.add(q, fix.astype(q.dtype), out=o)

    return fn


_BINARY = {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide", "Equal": "equal",
           "Less": "less", "Greater": "greater", "LessOrEqual": "less_equal", "GreaterOrEqual": "greater_equal",
           "And": "logical_and", "Or": "logical_or", "Xor": "logical_xor"}


@register(*_BINARY)
def binary(xp: Any, node: Node) -> Kernel:
    dt = np.dtype(node.input_dtypes[0] or "float32")
    if node.op_type == "Div" and dt.kind in "iu":
        fn = _int_div(xp)
    else:
        ufunc = getattr(xp, _BINARY[node.op_type])
        fn = lambda a, b, o: ufunc(a, b, out=o)  # noqa: E731
    return lambda ins, outs: fn(ins[0], ins[1], outs[0])


@register("Pow")
def power(xp: Any, node: Node) -> Kernel:
    work = compute_dtype(node.input_dtypes[0])
    exponent = node.const(1)
    if exponent is not None and exponent.size == 1 and float(exponent.reshape(-1)[0]) == 2.0:
        return lambda ins, outs: store(xp, outs[0], upcast(ins[0]) * upcast(ins[0]))

    def kernel(ins, outs):
        store(xp, outs[0], xp.power(upcast(ins[0]), ins[1].astype(work)))

    return kernel


@register("Min", "Max", "Sum", "Mean")
def variadic(xp: Any, node: Node) -> Kernel:
    op = node.op_type
    ufunc = {"Min": xp.minimum, "Max": xp.maximum}.get(op, xp.add)
    work = compute_dtype(node.output_dtypes[0]) if op in ("Sum", "Mean") else np.dtype(node.output_dtypes[0])
    count = len(node.input_shapes)

    def kernel(ins, outs):
        acc = outs[0] if work == outs[0].dtype else xp.empty(outs[0].shape, dtype=work)
        xp.copyto(acc, ins[0])
        for x in ins[1:]:
            ufunc(acc, x, out=acc)
        if op == "Mean":
            xp.divide(acc, count, out=acc)
        if acc is not outs[0]:
            store(xp, outs[0], acc)

    return kernel


@register("Where")
def where(xp: Any, node: Node) -> Kernel:
    return lambda ins, outs: store(xp, outs[0], xp.where(ins[0], ins[1], ins[2]))


@register("Cast")
def cast(xp: Any, node: Node) -> Kernel:
    dtypes = [np.dtype(d) for d in (*node.input_dtypes, *node.output_dtypes) if d]
    if node.attr("to") == 8 or any(d.kind in "OSU" for d in dtypes):  # 8: TensorProto.STRING
        raise node.error("casts to or from strings are not supported")
    return lambda ins, outs: store(xp, outs[0], ins[0])


def _bound(node: Node, index: int, key: str, dtype: np.dtype) -> tuple[Any, int | None]:
    """Clip bound: (host scalar, None) when known in advance, (None, input index) when read at run time,
    (None, None) when absent."""
    if node.opset < 11:
        value = node.attr(key)
        return (None if value is None else dtype.type(value)), None
    if not node.has_input(index):
        return None, None
    value = node.const(index)
    if value is not None:
        return dtype.type(np.asarray(value).reshape(-1)[0]), None
    return None, index


@register("Clip")
def clip(xp: Any, node: Node) -> Kernel:
    dtype = np.dtype(node.input_dtypes[0])
    lo, lo_in = _bound(node, 1, "min", dtype)
    hi, hi_in = _bound(node, 2, "max", dtype)

    def kernel(ins, outs):
        out = outs[0]
        xp.copyto(out, ins[0])
        low = ins[lo_in] if lo_in is not None else lo
        high = ins[hi_in] if hi_in is not None else hi
        if low is not None:
            xp.maximum(out, low, out=out)
        if high is not None:
            xp.minimum(out, high, out=out)

    return kernel
