"""FusedElementwise: a chain of elementwise nodes merged by the executor (`fuseplanner.run.chains`).

`node.attrs["chain"]` lists the members (`ChainOp`: an op-library node and the chain values it reads:
the fused node's inputs, then the members' results in order). Under CuPy the chain is one generated
elementwise kernel: every input read once as float32, every member computed in float32 registers,
one store of the last result (float16 storage rounds once, at the end). Under NumPy, and for a
member without a CUDA expression (or over 24 inputs), the members' own kernels run in order on intermediates prepared
once: exactly what the separate steps compute.
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Any

import numpy as np

from fuseplanner.run.ops.elementwise import cuda_expression
from fuseplanner.run.ops.node import Node
from fuseplanner.run.ops.registry import BUILDERS, Kernel, is_numpy, register

#: Type placeholders of the generated kernel's inputs (CuPy's are one letter; Y is the output's).
_PLACEHOLDERS = "ABCDEFGHIJKLMNOPQRSTUVWX"
_CUDA_BINARY = {"Add": "({a} + {b})", "Sub": "({a} - {b})", "Mul": "({a} * {b})", "Div": "({a} / {b})"}


def _composed(xp: Any, node: Node, chain) -> Kernel:
    kernels = [BUILDERS[m.node.op_type](xp, m.node) for m in chain]
    temps = [xp.empty(m.node.out_shape, dtype=np.dtype(m.node.output_dtypes[0])) for m in chain[:-1]]

    def kernel(ins, outs):
        values = [*ins, *temps, outs[0]]
        for m, run, out in zip(chain, kernels, values[len(ins):], strict=True):
            run([None if k is None else values[k] for k in m.operands], [out])

    return kernel


def _clip_expression(member, a: str) -> str | None:
    """fminf/fmaxf of a Clip with constant (or absent) bounds, or None."""
    node = member.node
    bounds = []
    for i, key in ((1, "min"), (2, "max")):
        if node.opset < 11:
            value = node.attr(key)
        elif i < len(member.operands) and member.operands[i] is not None:
            value = node.const(i)
            if value is None:
                return None
        else:
            value = None
        bound = None if value is None else float(np.asarray(value).reshape(-1)[0])
        bounds.append(bound if bound is None or math.isfinite(bound) else None)  # an infinite bound clips nothing
    lo, hi = bounds
    expr = a if lo is None else f"fmaxf({a}, {lo!r}f)"
    return expr if hi is None else f"fminf({expr}, {hi!r}f)"


def _member_expression(member, operand) -> str | None:
    op = member.node.op_type
    if op in _CUDA_BINARY:
        return _CUDA_BINARY[op].format(a=operand(member.operands[0]), b=operand(member.operands[1]))
    if op == "Clip":
        return _clip_expression(member, operand(member.operands[0]))
    expr = cuda_expression(member.node)
    if expr is None:
        return None
    return "(" + re.sub(r"\bv\b", operand(member.operands[0]), expr) + ")"


def cuda_source(node: Node, chain) -> str | None:
    """The body of the generated kernel (inputs x0.., output y), or None when a member has no expression."""
    n = len(node.input_shapes)

    def operand(k: int) -> str:
        return f"(float)x{k}" if k < n else f"r{k - n}"

    lines = []
    for j, m in enumerate(chain):
        expr = _member_expression(m, operand)
        if expr is None:
            return None
        lines.append(f"const float r{j} = {expr};")
    lines.append(f"y = (Y)r{len(chain) - 1};")
    return "\n".join(lines)


@register("FusedElementwise")
def fused(xp: Any, node: Node) -> Kernel:
    chain = node.attr("chain")
    if not chain:
        raise node.error("the chain has no members")
    count = len(node.input_shapes)
    body = None if is_numpy(xp) or count > len(_PLACEHOLDERS) else cuda_source(node, chain)
    if body is None:
        return _composed(xp, node, chain)
    params = ", ".join(f"{_PLACEHOLDERS[k]} x{k}" for k in range(count))
    name = "fuseplanner_chain_" + hashlib.sha1(body.encode()).hexdigest()[:12]
    kern = xp.ElementwiseKernel(params, "Y y", body, name)
    return lambda ins, outs: kern(*ins, outs[0])
