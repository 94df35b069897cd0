"""MatMul and Gemm: `numpy.matmul` on the CPU, the executor's own batched GEMM kernel on the GPU
(`_gemm`: CuPy refuses cuBLAS inside CUDA-graph capture).

float16 GEMMs accumulate in float32 on both paths: the NumPy path upcasts to float32 and rounds once, the
GPU kernel converts each operand to float32 and rounds the sum once.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fuseplanner.run.ops._gemm import FLOAT_TYPES, batched_gemm
from fuseplanner.run.ops.node import Node, store
from fuseplanner.run.ops.registry import Kernel, is_numpy, register


def matmul(xp: Any, a: Any, b: Any, out: Any) -> None:
    """out = a @ b (numpy broadcasting rules), float32 accumulation for float16."""
    if is_numpy(xp):
        if out.dtype == np.float16:
            store(xp, out, np.matmul(a.astype(np.float32), b.astype(np.float32)))
        else:
            np.matmul(a, b, out=out)
    elif a.ndim >= 2 and b.ndim >= 2 and {out.dtype, a.dtype, b.dtype} <= FLOAT_TYPES:
        batched_gemm(xp, a, b, out)  # callers pass matrices (MatMul reshapes vectors first)
    else:
        xp.matmul(a, b, out=out)


@register("MatMul")
def matmul_op(xp: Any, node: Node) -> Kernel:
    sa, sb = node.input_shapes[0], node.input_shapes[1]
    if not sa or not sb:
        raise node.error("0-d operands are not valid for MatMul")
    a2 = (1, sa[0]) if len(sa) == 1 else sa
    b2 = (sb[0], 1) if len(sb) == 1 else sb
    batch = np.broadcast_shapes(a2[:-2], b2[:-2])
    full = (*batch, a2[-2], b2[-1])
    if int(np.prod(full)) != int(np.prod(node.out_shape)):
        raise node.error(f"output shape {node.out_shape} does not match inputs {sa} x {sb}")

    def kernel(ins, outs):
        matmul(xp, ins[0].reshape(a2), ins[1].reshape(b2), outs[0].reshape(full))

    return kernel


@register("Gemm")
def gemm(xp: Any, node: Node) -> Kernel:
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    ta, tb = bool(node.attr("transA", 0)), bool(node.attr("transB", 0))
    has_c = node.has_input(2) and beta != 0.0

    def kernel(ins, outs):
        out = outs[0]
        a = ins[0].T if ta else ins[0]
        b = ins[1].T if tb else ins[1]
        matmul(xp, a, b, out)
        if alpha != 1.0:
            xp.multiply(out, alpha, out=out)
        if has_c:
            xp.add(out, ins[2] if beta == 1.0 else ins[2] * beta, out=out)

    return kernel
