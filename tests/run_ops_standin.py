"""A NumPy stand-in of the operator library (`fuseplanner.run.ops`) for the executor's CPU tests.

Same interface: `Node`, `prepare(xp, node) -> kernel(inputs, outputs)`, `SUPPORTED`, `VIEW_OPS`,
`unsupported(model)`. Each kernel evaluates its node with `onnx.reference` (Conv with
`fuseplanner.validation.reference.conv2d`, which is faster) on the host and writes the preallocated outputs.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from fuseplanner.core.ir import Op
from fuseplanner.validation.reference import conv2d

SUPPORTED = frozenset({
    "Add", "Sub", "Mul", "Div", "Relu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Erf", "Pow", "Sqrt",
    "GlobalAveragePool", "ReduceMean", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Gemm", "MatMul",
    "Conv", "Transpose", "Softmax", "LayerNormalization", "Slice", "Concat", "Gather", "BatchNormalization",
})
VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"})


@dataclass(frozen=True)
class Node:
    name: str
    op_type: str
    attrs: dict
    input_shapes: tuple
    input_dtypes: tuple
    output_shapes: tuple
    output_dtypes: tuple
    consts: tuple
    opset: int = 18


def unsupported(model: onnx.ModelProto) -> dict[str, int]:
    return dict(Counter(n.op_type for n in model.graph.node if n.op_type not in SUPPORTED | {"Constant"}))


def _conv(node: Node):
    a = node.attrs
    pads = tuple(a.get("pads", (0, 0, 0, 0)))
    op = Op(name=node.name, op_type="Conv", kind="conv", index=0, inputs=(), outputs=(), input_shapes=(),
            output_shapes=(), kernel=tuple(a["kernel_shape"]), stride=tuple(a.get("strides", (1, 1))),
            pads=pads, dilation=tuple(a.get("dilations", (1, 1))), groups=int(a.get("group", 1)))

    def kernel(inputs, outputs):
        y = conv2d(np.asarray(inputs[0], np.float64), np.asarray(inputs[1], np.float64), op)
        if len(inputs) > 2 and inputs[2] is not None:
            y = y + np.asarray(inputs[2], np.float64).reshape(1, -1, 1, 1)
        outputs[0][...] = y

    return kernel


def prepare(xp, node: Node):
    """A host kernel for `node` (xp must be numpy)."""
    assert xp is np, "the stand-in runs on NumPy only"
    if node.op_type == "Conv":
        return _conv(node)
    from onnx.reference import ReferenceEvaluator

    names = [f"i{k}" for k in range(len(node.input_shapes))]
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.dtype(d)), s)
           for n, d, s in zip(names, node.input_dtypes, node.input_shapes, strict=True) if d is not None]
    outs = [helper.make_tensor_value_info(f"o{k}", helper.np_dtype_to_tensor_dtype(np.dtype(d)), s)
            for k, (d, s) in enumerate(zip(node.output_dtypes, node.output_shapes, strict=True))]
    onode = helper.make_node(node.op_type, [n if d is not None else "" for n, d in zip(names, node.input_dtypes, strict=True)],
                             [o.name for o in outs], **node.attrs)
    model = helper.make_model(helper.make_graph([onode], "n", ins, outs),
                              opset_imports=[helper.make_opsetid("", node.opset)])
    ev = ReferenceEvaluator(model)

    def kernel(inputs, outputs):
        feeds = {n: (c if c is not None else x) for n, c, x in zip(names, node.consts, inputs, strict=True)
                 if c is not None or x is not None}
        for o, v in zip(outputs, ev.run(None, feeds), strict=True):
            o[...] = v

    return kernel
