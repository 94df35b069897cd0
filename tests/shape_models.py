"""Small ONNX models (onnx.helper) that exercise shape folding and batch overrides.

    edgenext_like()            a Shape -> Gather -> Add -> Div -> Mul -> Slice chain picks the channels
                               a depthwise/pointwise pair reads (EdgeNeXt's split, legacy exporter style)
    token_mixer(style)         conv -> Reshape to tokens -> linear -> Reshape back -> conv, with the
                               Reshape targets as constants holding the export batch ("constant",
                               "minus_one": [1, -1, ...], "patches": batch folded into a MobileViT-style
                               patch dim) or derived from Shape ("shape")
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(0)


def _w(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array((RNG.standard_normal(shape) * 0.1).astype(np.float32), name)


def _i64(name: str, values) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def _model(nodes, inits, in_shape, out_shape, name: str) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, in_shape)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, out_shape)],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def edgenext_like(size: int = 32, channels: int = 16) -> onnx.ModelProto:
    """Stem conv, then channels [0 : ((C + 1) // 2) * 1] (computed from Shape) through DW 3x3 -> PW."""
    half = channels // 2
    nodes = [
        helper.make_node("Conv", ["input", "stem.w"], ["x"], name="stem", kernel_shape=[3, 3], pads=[1] * 4),
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node("Gather", ["shape", "one"], ["c"], name="gather", axis=0),
        helper.make_node("Add", ["c", "one"], ["c1"], name="add"),
        helper.make_node("Div", ["c1", "two"], ["c2"], name="div"),
        helper.make_node("Mul", ["c2", "one"], ["end"], name="mul"),
        helper.make_node("Unsqueeze", ["end", "axes0"], ["ends"], name="unsqueeze"),
        helper.make_node("Slice", ["x", "zero1", "ends", "axes1"], ["xs"], name="slice"),
        helper.make_node("Conv", ["xs", "dw.w"], ["y"], name="dw", kernel_shape=[3, 3], pads=[1] * 4, group=half),
        helper.make_node("Relu", ["y"], ["yr"], name="dw_relu"),
        helper.make_node("Conv", ["yr", "pw.w"], ["out"], name="pw", kernel_shape=[1, 1]),
    ]
    inits = [
        _w("stem.w", channels, 3, 3, 3), _w("dw.w", half, 1, 3, 3), _w("pw.w", channels, half, 1, 1),
        _i64("one", 1), _i64("two", 2), _i64("axes0", [0]), _i64("zero1", [0]), _i64("axes1", [1]),
    ]
    return _model(nodes, inits, [1, 3, size, size], [1, channels, size, size], "edgenext_like")


def token_mixer(style: str = "constant", batch: int = 1, size: int = 8, channels: int = 16) -> onnx.ModelProto:
    """Conv -> tokens (B, HW, C) -> MatMul -> back to (B, C, H, W) -> DW -> PW, exported at `batch`."""
    hw = size * size
    nodes = [helper.make_node("Conv", ["input", "stem.w"], ["x"], name="stem", kernel_shape=[1, 1])]
    inits = [_w("stem.w", channels, 3, 1, 1), _w("mix.w", channels, channels),
             _w("dw.w", channels, 1, 3, 3), _w("pw.w", channels, channels, 1, 1)]
    if style == "shape":
        nodes += [
            helper.make_node("Shape", ["x"], ["xs"], name="shape"),
            helper.make_node("Gather", ["xs", "zero"], ["n"], name="gather", axis=0),
            helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"], name="unsqueeze"),
            helper.make_node("Concat", ["n1", "to_tokens_rest"], ["to_tokens"], name="concat", axis=0),
            helper.make_node("Concat", ["n1", "to_map_rest"], ["to_map"], name="concat_back", axis=0),
        ]
        inits += [_i64("zero", 0), _i64("axes0", [0]), _i64("to_tokens_rest", [channels, hw]),
                  _i64("to_map_rest", [channels, size, size])]
    elif style == "patches":  # the batch multiplies a patch count: (B * 4, C, HW / 4), as MobileViT's unfold
        inits += [_i64("to_tokens", [batch * 4, channels, hw // 4]), _i64("to_map", [batch, channels, size, size])]
    else:
        first = -1 if style == "minus_one" else channels
        inits += [_i64("to_tokens", [batch, channels, hw]), _i64("to_map", [batch, first, size, size])]
    to_tok = ["tok_in", "tok"] if style != "patches" else ["tok_in", "tok"]
    nodes += [
        helper.make_node("Reshape", ["x", "to_tokens"], [to_tok[0]], name="to_tokens_reshape"),
        helper.make_node("Transpose", [to_tok[0]], [to_tok[1]], name="to_tokens_t", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["tok", "mix.w"], ["mixed"], name="mix"),
        helper.make_node("Transpose", ["mixed"], ["mixed_t"], name="back_t", perm=[0, 2, 1]),
        helper.make_node("Reshape", ["mixed_t", "to_map"], ["m"], name="to_map_reshape"),
        helper.make_node("Conv", ["m", "dw.w"], ["d"], name="dw", kernel_shape=[3, 3], pads=[1] * 4, group=channels),
        helper.make_node("Conv", ["d", "pw.w"], ["out"], name="pw", kernel_shape=[1, 1]),
    ]
    out = ["N" if style == "shape" else batch, channels, size, size]
    return _model(nodes, inits, [batch, 3, size, size], out, f"token_mixer_{style}")
