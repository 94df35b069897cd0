"""Per-node record builders: an ONNX node of a `GraphView` -> the fields of an `ir.Op`.

Conv nodes become ``dw`` / ``pw`` / ``conv``; MatMul/Gemm with a constant 2-D weight over the last
dim of an activation become ``linear``; everything else is ``opaque`` with shapes, bytes and a FLOP
estimate. Epilogues are attached afterwards by `fuseplanner.frontend.load`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import onnx

from fuseplanner.frontend.view import GraphView

#: Ops that only move or relabel data: no arithmetic.
_MOVEMENT = {
    "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Concat", "Slice", "Split", "Gather",
    "Identity", "Expand", "Pad", "Tile", "Cast", "Dropout", "DepthToSpace", "SpaceToDepth", "GatherElements",
}
#: Ops whose cost is one pass over their input.
_REDUCE = {
    "GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceL2",
}
#: Rough FLOPs per output element of normalisations and softmax (exp, sums, scale).
_PER_ELEMENT = {"Softmax": 5, "LayerNormalization": 8, "InstanceNormalization": 8, "GroupNormalization": 8}


@dataclass
class OpFields:
    """The fields of an `ir.Op` before its epilogue is attached, plus what epilogue matching needs."""

    name: str
    op_type: str
    kind: str
    index: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    input_shapes: tuple[tuple[int, ...], ...]
    output_shapes: tuple[tuple[int, ...], ...]
    dtype: str
    itemsize: int
    attrs: dict = field(default_factory=dict)
    has_bias: bool = False
    params: int = 0
    weight_elems: int = 0
    weight_itemsize: int = 4
    flops: int = 0
    channels: int = 0
    channel_axis: int = 1


def dtype_name(elem_type: int) -> tuple[str, int]:
    """ONNX element type -> (numpy-style name such as "float32", itemsize in bytes)."""
    try:
        dt = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception:
        return "float32", 4
    return dt.name, dt.itemsize


def _static(view: GraphView, name: str) -> tuple[int, ...] | None:
    shape = view.shape(name)
    if shape is None or any(d is None for d in shape):
        return None
    return tuple(int(d) for d in shape)  # type: ignore[arg-type]


def _need_static(view: GraphView, name: str, index: int) -> tuple[int, ...]:
    shape = _static(view, name)
    if shape is None:
        from fuseplanner.frontend.shape_errors import unknown_shape_error

        raise unknown_shape_error(view.model, name, index)
    return shape


def _pads(node: onnx.NodeProto, view: GraphView, hw_in, hw_out, kernel, stride, dilation) -> tuple[int, ...]:
    auto = view.attr(node, "auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else str(auto)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        out = []
        for i in range(2):
            total = max((hw_out[i] - 1) * stride[i] + (kernel[i] - 1) * dilation[i] + 1 - hw_in[i], 0)
            small, big = total // 2, total - total // 2
            out.append((small, big) if auto == "SAME_UPPER" else (big, small))
        return (out[0][0], out[1][0], out[0][1], out[1][1])
    if auto == "VALID":
        return (0, 0, 0, 0)
    pads = list(view.attr(node, "pads", [0, 0, 0, 0]))
    return tuple(int(p) for p in pads) if len(pads) == 4 else (0, 0, 0, 0)


def _conv_out(hw_in, kernel, stride, dilation, pads) -> tuple[int, int]:
    return tuple(  # type: ignore[return-value]
        (hw_in[i] + pads[i] + pads[i + 2] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1 for i in range(2)
    )


def conv_fields(view: GraphView, index: int) -> OpFields | None:
    """A 2-D Conv with a constant weight as dw/pw/conv, or None (then it is opaque)."""
    node = view.nodes[index]
    if len(node.input) < 2 or view.is_const(node.input[0]) or not view.is_const(node.input[1]):
        return None
    x, w = node.input[0], node.input[1]
    w_shape = view.shape(w)
    if w_shape is None or len(w_shape) != 4 or any(d is None for d in w_shape):
        return None
    x_shape = _need_static(view, x, index)
    if len(x_shape) != 4:
        return None
    n, c_in, h, wd = x_shape
    m, cpg, kh, kw = (int(d) for d in w_shape)  # type: ignore[arg-type]
    groups = int(view.attr(node, "group", 1))
    if c_in != cpg * groups:
        from fuseplanner.frontend.shape_errors import conv_channels_error

        raise conv_channels_error(view.node_name(index), c_in, w_shape, groups)
    kernel = tuple(view.attr(node, "kernel_shape", [kh, kw]))
    stride = tuple(view.attr(node, "strides", [1, 1]))
    dilation = tuple(view.attr(node, "dilations", [1, 1]))
    out = node.output[0]
    y_shape = _static(view, out)
    pads = _pads(node, view, (h, wd), y_shape[2:] if y_shape else (h, wd), kernel, stride, dilation)
    if y_shape is None:
        y_shape = (n, m, *_conv_out((h, wd), kernel, stride, dilation, pads))
    if groups == c_in and cpg == 1 and c_in > 1 and m % c_in == 0:
        kind = "dw"
    elif kernel == (1, 1) and groups == 1 and pads == (0, 0, 0, 0):
        kind = "pw"
    else:
        kind = "conv"
    bias = node.input[2] if len(node.input) > 2 and node.input[2] else ""
    w_elems = math.prod(int(d) for d in w_shape)  # type: ignore[arg-type]
    dtype, itemsize = dtype_name(view.elem_type(x))
    return OpFields(
        name=view.node_name(index),
        op_type=node.op_type,
        kind=kind,
        index=index,
        inputs=(x,),
        outputs=(out,),
        input_shapes=(x_shape,),
        output_shapes=(y_shape,),
        dtype=dtype,
        itemsize=itemsize,
        attrs={"kernel": kernel, "stride": stride, "pads": pads, "dilation": dilation, "groups": groups},
        has_bias=bool(bias),
        params=w_elems + (view.numel(bias) if bias else 0),
        weight_elems=w_elems,
        weight_itemsize=dtype_name(view.elem_type(w))[1],
        flops=2 * n * m * y_shape[2] * y_shape[3] * cpg * kh * kw,
        channels=m,
        channel_axis=1,
    )


def linear_fields(view: GraphView, index: int) -> OpFields | None:
    """MatMul/Gemm applying a constant 2-D weight over the last dim of an activation, or None."""
    node = view.nodes[index]
    if node.op_type not in ("MatMul", "Gemm") or len(node.input) < 2:
        return None
    a, b = node.input[0], node.input[1]
    if view.is_const(a) or not view.is_const(b):
        return None
    if node.op_type == "Gemm" and view.attr(node, "transA", 0):
        return None
    b_shape = view.shape(b)
    if b_shape is None or len(b_shape) != 2 or any(d is None for d in b_shape):
        return None
    k, nout = (int(d) for d in b_shape)  # type: ignore[arg-type]
    if node.op_type == "Gemm" and view.attr(node, "transB", 0):
        k, nout = nout, k
    a_shape = _need_static(view, a, index)
    if len(a_shape) < 2 or a_shape[-1] != k:
        return None
    out = node.output[0]
    y_shape = _static(view, out) or (*a_shape[:-1], nout)
    bias = node.input[2] if node.op_type == "Gemm" and len(node.input) > 2 and node.input[2] else ""
    tokens = math.prod(a_shape[:-1])
    dtype, itemsize = dtype_name(view.elem_type(a))
    return OpFields(
        name=view.node_name(index),
        op_type=node.op_type,
        kind="linear",
        index=index,
        inputs=(a,),
        outputs=(out,),
        input_shapes=(a_shape,),
        output_shapes=(y_shape,),
        dtype=dtype,
        itemsize=itemsize,
        has_bias=bool(bias),
        params=k * nout + (view.numel(bias) if bias else 0),
        weight_elems=k * nout,
        weight_itemsize=dtype_name(view.elem_type(b))[1],
        flops=2 * tokens * k * nout,
        channels=nout,
        channel_axis=-1,
    )


def _opaque_flops(view: GraphView, node: onnx.NodeProto, in_shapes, out_shapes) -> int:
    out_numel = sum(math.prod(s) for s in out_shapes if s)
    in_numel = sum(math.prod(s) for s in in_shapes if s)
    op = node.op_type
    if op in _MOVEMENT:
        return 0
    if op in ("MatMul", "Gemm") and in_shapes and in_shapes[0]:
        return 2 * out_numel * in_shapes[0][-1]
    if op in _REDUCE:
        return in_numel
    if op in ("MaxPool", "AveragePool", "LpPool"):
        return out_numel * math.prod(view.attr(node, "kernel_shape", [1]))
    if op in ("Conv", "ConvTranspose") and len(node.input) > 1:
        w = view.shape(node.input[1])
        if w and all(d is not None for d in w):
            return 2 * out_numel * math.prod(w[1:])  # type: ignore[arg-type]
    return out_numel * _PER_ELEMENT.get(op, 1)


def opaque_fields(view: GraphView, index: int) -> OpFields:
    """Any node as an opaque record: activation inputs, outputs, shapes (``()`` when unknown), bytes."""
    node = view.nodes[index]
    inputs = tuple(view.activations(node))
    outputs = tuple(o for o in node.output if o)
    in_shapes = tuple(_static(view, t) or () for t in inputs)
    out_shapes = tuple(_static(view, t) or () for t in outputs)
    ref = inputs[0] if inputs else (outputs[0] if outputs else "")
    dtype, itemsize = dtype_name(view.elem_type(ref))
    consts = [i for i in node.input if i and view.is_const(i)]
    float_consts = [c for c in consts if dtype_name(view.elem_type(c))[0].startswith(("float", "bfloat"))]
    params = sum(view.numel(c) for c in float_consts)
    return OpFields(
        name=view.node_name(index),
        op_type=node.op_type,
        kind="opaque",
        index=index,
        inputs=inputs,
        outputs=outputs,
        input_shapes=in_shapes,
        output_shapes=out_shapes,
        dtype=dtype,
        itemsize=itemsize,
        params=params,
        weight_elems=params,
        weight_itemsize=itemsize,
        flops=_opaque_flops(view, node, in_shapes, out_shapes),
    )


def node_fields(view: GraphView, index: int) -> OpFields:
    """The record fields of compute node `index` (conv kinds, linear, or opaque)."""
    node = view.nodes[index]
    fields_ = None
    if node.op_type == "Conv":
        fields_ = conv_fields(view, index)
    elif node.op_type in ("MatMul", "Gemm"):
        fields_ = linear_fields(view, index)
    return fields_ if fields_ is not None else opaque_fields(view, index)
