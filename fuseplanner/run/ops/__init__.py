"""Operator library of the whole-model executor: every ONNX node that is not a planned DW/PW/fused group
runs through a kernel built here, on NumPy (CPU, tests) or CuPy (GPU: cuBLAS through `cupy.matmul`,
CuPy elementwise/reduction kernels, and a CUDA kernel for 2-D depthwise Conv).

    kernel = prepare(xp, node)       # host work once: attributes, constants, index arrays uploaded
    kernel(inputs, outputs)          # writes the preallocated C-contiguous outputs; no host sync

Ops with CuPy-only code: Conv (2-D with short reductions: `_cuda.conv2d`), Erf and Gelu (cupyx.scipy.special.erf),
and float16 MatMul/Gemm/Conv/ConvTranspose (cuBLAS accumulates in float32; NumPy upcasts).
"""

from __future__ import annotations

from typing import Any

import onnx

from fuseplanner.run.ops import (  # noqa: F401  (each module registers its builders)
    chain,
    conv,
    convt,
    elementwise,
    generate,
    linalg,
    norm,
    pool,
    reduce,
    resize,
)
from fuseplanner.run.ops.movement import VIEW_OPS
from fuseplanner.run.ops.node import Node
from fuseplanner.run.ops.registry import BUILDERS, Kernel

#: Op types (default ONNX domain) that `prepare` handles.
SUPPORTED: frozenset[str] = frozenset(BUILDERS)
_DEFAULT_DOMAINS = ("", "ai.onnx")


def prepare(xp: Any, node: Node) -> Kernel:
    """The kernel of `node` for array module `xp` (numpy or cupy); raises ModelError when unsupported."""
    builder = BUILDERS.get(node.op_type)
    if builder is None:
        raise node.error("this op type is not supported by the operator library")
    if len(node.input_dtypes) != len(node.input_shapes) or not node.output_shapes:
        raise node.error("the node record lacks input dtypes or output shapes")
    return builder(xp, node)


def unsupported(model: onnx.ModelProto) -> dict[str, int]:
    """Op type -> node count of the top-level graph's nodes that `prepare` cannot run
    (ops of other domains are named "domain:OpType")."""
    counts: dict[str, int] = {}
    for node in model.graph.node:
        default = node.domain in _DEFAULT_DOMAINS
        if default and node.op_type in SUPPORTED:
            continue
        key = node.op_type if default else f"{node.domain}:{node.op_type}"
        counts[key] = counts.get(key, 0) + 1
    return counts


__all__ = ["Kernel", "Node", "SUPPORTED", "VIEW_OPS", "prepare", "unsupported"]
