"""One-node ONNX cases for the executor's operator library (fuseplanner.run.ops), shared by the CPU test
(onnxruntime reference) and the GPU test (CuPy against NumPy).

A case names an op, its inputs (random graph inputs, constant initializers, absent ones) and its
attributes; `build` turns it into a ModelProto, `reference` runs it with onnxruntime, and `node_for`
makes the `Node` that `prepare` consumes, optionally with float16 activations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from fuseplanner.run.ops import Node


@dataclass(frozen=True)
class In:
    """One input: `value` fixed or drawn at random from `shape`/`dtype`/`kind`; `const` -> initializer;
    `half` -> becomes float16 in the float16 variant."""

    shape: tuple[int, ...] = ()
    dtype: str = "float32"
    const: bool = False
    value: Any = None
    kind: str = "normal"  # normal | positive | wide | int | bool
    half: bool = True

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        if self.value is not None:
            return np.asarray(self.value, dtype=self.dtype)
        if self.kind == "int":
            v = rng.integers(-4, 5, size=self.shape)
        elif self.kind == "bool":
            v = rng.random(self.shape) < 0.5
        elif self.kind == "positive":
            v = rng.uniform(0.5, 2.0, size=self.shape)
        else:
            v = rng.standard_normal(self.shape) * (4.0 if self.kind == "wide" else 1.0)
            v = np.where(np.abs(v) < 1e-3, 0.5, v)  # never exact zeros
        return np.asarray(v).astype(self.dtype)


def R(*shape: int, kind: str = "normal", dtype: str = "float32") -> In:
    """A random runtime (graph) input."""
    return In(shape=shape, dtype=dtype, kind=kind)


def W(*shape: int, kind: str = "normal") -> In:
    """A random constant (initializer) float input, float16 in the float16 variant."""
    return In(shape=shape, const=True, kind=kind)


def C(value: Any, dtype: str = "int64") -> In:
    """A fixed constant (initializer) that keeps its dtype in every variant."""
    return In(value=np.asarray(value, dtype=dtype), dtype=dtype, const=True, half=False)


def V(value: Any, dtype: str = "int64") -> In:
    """A fixed runtime input that keeps its dtype."""
    return In(value=np.asarray(value, dtype=dtype), dtype=dtype, half=False)


NONE = None  # an absent optional input ("")


@dataclass(frozen=True)
class Case:
    op: str
    inputs: tuple[In | None, ...]
    attrs: dict = field(default_factory=dict)
    opset: int = 18
    outputs: int = 1
    half: bool = True  # also run a float16 variant
    id: str = ""


def build(case: Case, values: list[np.ndarray | None]) -> onnx.ModelProto:
    names, graph_inputs, inits = [], [], []
    for i, (spec, v) in enumerate(zip(case.inputs, values, strict=True)):
        if spec is None:
            names.append("")
            continue
        name = f"in{i}"
        names.append(name)
        if spec.const:
            inits.append(numpy_helper.from_array(v, name))
        else:
            elem = helper.np_dtype_to_tensor_dtype(v.dtype)
            graph_inputs.append(helper.make_tensor_value_info(name, elem, v.shape))
    outs = [f"out{k}" for k in range(case.outputs)]
    node = helper.make_node(case.op, names, outs, name=f"{case.op.lower()}_node", **case.attrs)
    out_info = [onnx.ValueInfoProto(name=o) for o in outs]
    graph = helper.make_graph([node], case.id, graph_inputs, out_info, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", case.opset)])
    model.ir_version = 8
    return model


def draw(case: Case, seed: int) -> list[np.ndarray | None]:
    rng = np.random.default_rng(seed)
    return [None if s is None else s.draw(rng) for s in case.inputs]


def reference(case: Case, values: list[np.ndarray | None]) -> list[np.ndarray]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(build(case, values).SerializeToString(), opts, providers=["CPUExecutionProvider"])
    feed = {f"in{i}": v for i, (s, v) in enumerate(zip(case.inputs, values, strict=True))
            if s is not None and not s.const}
    return sess.run(None, feed)


def halve(case: Case, values: list[np.ndarray | None]) -> tuple[list, list]:
    """(float16 inputs for the library, the same values in float32 for the reference)."""
    lib, ref = [], []
    for spec, v in zip(case.inputs, values, strict=True):
        if spec is not None and spec.half and v.dtype == np.float32:
            h = v.astype(np.float16)
            lib.append(h)
            ref.append(h.astype(np.float32))
        else:
            lib.append(v)
            ref.append(v)
    return lib, ref


def node_for(case: Case, values: list, refs: list[np.ndarray], half: bool = False) -> Node:
    """The library's Node for `case` with the given input arrays and the reference outputs' shapes."""
    model = build(case, [None if v is None else np.asarray(v) for v in values])
    proto = model.graph.node[0]
    shapes: dict[str, tuple[int, ...]] = {}
    dtypes: dict[str, str] = {}
    consts: dict[str, np.ndarray] = {}
    for name, spec, v in zip(proto.input, case.inputs, values, strict=True):
        if spec is None:
            continue
        shapes[name], dtypes[name] = tuple(v.shape), v.dtype.name
        if spec.const:
            consts[name] = v
    for name, r in zip(proto.output, refs, strict=True):
        shapes[name] = tuple(r.shape)
        dtypes[name] = "float16" if half and r.dtype == np.float32 and case.op != "Cast" else r.dtype.name
    return Node.from_onnx(proto, shapes, dtypes, consts, case.opset)


def _elementwise() -> list[Case]:
    x = (2, 3, 4, 5)
    cases = [Case(op, (R(*x, kind=k),)) for op, k in (
        ("Sqrt", "positive"), ("Exp", "normal"), ("Erf", "normal"), ("Tanh", "normal"), ("Sigmoid", "wide"),
        ("Relu", "normal"), ("Neg", "normal"), ("Abs", "normal"), ("Reciprocal", "positive"),
        ("HardSwish", "wide"), ("HardSigmoid", "wide"))]
    cases += [
        Case("HardSigmoid", (R(*x, kind="wide"),), {"alpha": 0.3, "beta": 0.4}, id="HardSigmoid-ab"),
        Case("LeakyRelu", (R(*x),), {"alpha": 0.1}),
        Case("LeakyRelu", (R(*x),), id="LeakyRelu-default"),
        Case("Gelu", (R(*x, kind="wide"),), opset=20),
        Case("Gelu", (R(*x, kind="wide"),), {"approximate": "tanh"}, opset=20, id="Gelu-tanh"),
        Case("Relu", (R(3, 4, kind="int", dtype="int64"),), half=False, id="Relu-int"),
        Case("Abs", (R(3, 4, kind="int", dtype="int32"),), half=False, id="Abs-int32"),
        Case("Not", (R(3, 4, kind="bool", dtype="bool"),), half=False),
    ]
    for op in ("Add", "Sub", "Mul", "Div"):
        cases += [Case(op, (R(2, 3, 4), R(3, 1, kind="positive"))),
                  Case(op, (R(4, kind="positive"), R(2, 3, 4)), id=f"{op}-bcast-left"),
                  Case(op, (R(2, 3), W(3, kind="positive")), id=f"{op}-const")]
    cases += [
        Case("Div", (R(3, 4, kind="int", dtype="int64"), V([[3, -3, 2, -2]] * 3)), half=False, id="Div-int"),
        Case("Add", (R(3, 4, kind="int", dtype="int64"), C(7)), half=False, id="Add-int"),
        Case("Pow", (R(2, 3, kind="positive"), R(2, 3))),
        Case("Pow", (R(2, 3), C(2.0, "float32")), id="Pow-square"),
        Case("Pow", (R(2, 3, kind="positive"), C(3, "int64")), id="Pow-int-exp"),
        Case("Equal", (R(3, 4, kind="int", dtype="int64"), R(4, kind="int", dtype="int64")), half=False),
        Case("Less", (R(3, 4), R(4))),
        Case("Greater", (R(3, 4), W(1))),
        Case("LessOrEqual", (R(3, 4, kind="int", dtype="int64"), R(3, 4, kind="int", dtype="int64")), half=False),
        Case("GreaterOrEqual", (R(3, 4), R(3, 1))),
        Case("And", (R(3, 4, kind="bool", dtype="bool"), R(4, kind="bool", dtype="bool")), half=False),
        Case("Or", (R(3, 4, kind="bool", dtype="bool"), R(3, 4, kind="bool", dtype="bool")), half=False),
        Case("Xor", (R(3, 4, kind="bool", dtype="bool"), R(3, 4, kind="bool", dtype="bool")), half=False),
        Case("Where", (R(3, 4, kind="bool", dtype="bool"), R(3, 4), R(4))),
        Case("Where", (R(3, 1, kind="bool", dtype="bool"), R(1, 4, kind="int", dtype="int64"), C(9)), half=False,
             id="Where-int"),
        Case("Cast", (R(3, 4, kind="wide"),), {"to": onnx.TensorProto.INT64}, half=False, id="Cast-f2i"),
        Case("Cast", (R(3, 4, kind="int", dtype="int64"),), {"to": onnx.TensorProto.FLOAT}, half=False,
             id="Cast-i2f"),
        Case("Cast", (R(3, 4),), {"to": onnx.TensorProto.BOOL}, half=False, id="Cast-f2b"),
        Case("Cast", (R(3, 4, kind="bool", dtype="bool"),), {"to": onnx.TensorProto.FLOAT}, half=False,
             id="Cast-b2f"),
        Case("Cast", (R(3, 4),), {"to": onnx.TensorProto.FLOAT16}, half=False, id="Cast-f2h"),
        Case("Min", (R(2, 3, 4), R(3, 1), R(4))),
        Case("Max", (R(2, 3, 4), R(3, 1), R(4))),
        Case("Max", (R(2, 3),), id="Max-one"),
        Case("Sum", (R(2, 3, 4), R(4))),
        Case("Mean", (R(2, 3, 4), R(4), R(3, 1))),
        Case("Clip", (R(3, 4, kind="wide"), C(-1.0, "float32"), C(2.0, "float32")), id="Clip-both"),
        Case("Clip", (R(3, 4, kind="wide"), NONE, C(0.5, "float32")), id="Clip-max-only"),
        Case("Clip", (R(3, 4, kind="wide"),), id="Clip-none"),
        Case("Clip", (R(3, 4, kind="wide"), V(-0.5, "float32"), V(0.7, "float32")), half=False, id="Clip-runtime"),
        Case("Clip", (R(3, 4, kind="wide"),), {"min": -1.0, "max": 3.0}, opset=6, id="Clip-attrs"),
        Case("Clip", (R(3, 4, kind="int", dtype="int64"), C(-2), C(3)), half=False, id="Clip-int"),
    ]
    return cases


def _linalg() -> list[Case]:
    return [
        Case("MatMul", (R(2, 3, 4), W(4, 5))),
        Case("MatMul", (R(5), R(2, 5, 3)), id="MatMul-vec-left"),
        Case("MatMul", (R(2, 1, 3, 4), R(3, 4, 2)), id="MatMul-bcast"),
        Case("MatMul", (R(2, 3, 4), R(4)), id="MatMul-vec-right"),
        Case("MatMul", (R(4), R(4)), id="MatMul-dot"),
        Case("MatMul", (R(1, 64, 40), R(40, 24)), id="MatMul-deep"),
        Case("Gemm", (R(3, 4), W(4, 5), W(5))),
        Case("Gemm", (R(4, 3), W(5, 4), W(3, 1)), {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0},
             id="Gemm-tt"),
        Case("Gemm", (R(3, 4), R(5, 4), R(1)), {"transB": 1, "beta": -1.0}, id="Gemm-scalarC"),
        Case("Gemm", (R(3, 4), R(4, 5)), {"alpha": 2.0}, id="Gemm-noC"),
        Case("Gemm", (R(3, 4), R(4, 5), R(3, 5)), {"beta": 0.0}, id="Gemm-beta0"),
    ]


def _norm() -> list[Case]:
    bn = (W(4), W(4), W(4), W(4, kind="positive"))
    return [
        Case("BatchNormalization", (R(2, 4, 5, 6), *bn), {"epsilon": 1e-3}),
        Case("BatchNormalization", (R(3, 4), *bn), id="BatchNormalization-2d"),
        Case("BatchNormalization", (R(2, 4, 7), R(4), R(4), R(4), R(4, kind="positive")), id="BatchNorm-runtime"),
        Case("LayerNormalization", (R(2, 5, 8), W(8), W(8))),
        Case("LayerNormalization", (R(2, 5, 8), W(5, 8)), {"axis": 1, "epsilon": 1e-3}, id="LayerNorm-axis1"),
        Case("LayerNormalization", (R(3, 16), W(16), W(16)), outputs=3, id="LayerNorm-stats"),
        Case("Softmax", (R(2, 3, 7, kind="wide"),)),
        Case("Softmax", (R(2, 3, 7, kind="wide"),), {"axis": 1}, id="Softmax-axis1"),
        Case("Softmax", (R(2, 3, 7, kind="wide"),), {"axis": 0}, id="Softmax-axis0"),
        Case("Softmax", (R(2, 3, 7, kind="wide"),), opset=11, id="Softmax-v11"),
        Case("Softmax", (R(2, 3, 7, kind="wide"),), {"axis": 2}, opset=11, id="Softmax-v11-axis2"),
        Case("LogSoftmax", (R(2, 3, 7, kind="wide"),)),
    ]


def _reduce() -> list[Case]:
    x = R(2, 3, 4, 5)
    return [
        Case("ReduceMean", (x,), {"axes": [1, -1]}, opset=13),
        Case("ReduceMean", (x, C([2])), {"keepdims": 0}, id="ReduceMean-input"),
        Case("ReduceMean", (x,), id="ReduceMean-all"),
        Case("ReduceSum", (x, C([-2, 0])), opset=13),
        Case("ReduceSum", (x,), {"noop_with_empty_axes": 1}, opset=13, id="ReduceSum-noop"),
        Case("ReduceSum", (x, C([], "int64")), {"keepdims": 0}, id="ReduceSum-empty-all"),
        Case("ReduceSum", (R(3, 4, kind="int", dtype="int64"), C([1])), half=False, id="ReduceSum-int"),
        Case("ReduceMax", (x,), {"axes": [3], "keepdims": 0}, opset=13),
        Case("ReduceMax", (x, C([1, 2])), id="ReduceMax-input"),
        Case("ReduceMin", (x, C([0])), id="ReduceMin"),
        Case("ReduceProd", (R(2, 3, 4, kind="positive"), C([1])), id="ReduceProd"),
        Case("GlobalAveragePool", (R(2, 3, 5, 6),)),
        Case("GlobalAveragePool", (R(2, 3, 7),), id="GlobalAveragePool-1d"),
        Case("GlobalMaxPool", (R(2, 3, 5, 6),)),
    ]


def _pool() -> list[Case]:
    x = R(2, 3, 9, 8)
    return [
        Case("AveragePool", (x,), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
        Case("AveragePool", (x,), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                                   "count_include_pad": 1}, id="AveragePool-incl"),
        Case("AveragePool", (x,), {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1}, id="AvgPool-ceil"),
        Case("AveragePool", (x,), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 1, 1], "ceil_mode": 1,
                                   "count_include_pad": 1}, id="AvgPool-ceil-incl"),
        Case("AveragePool", (x,), {"kernel_shape": [2, 3], "auto_pad": "SAME_UPPER"}, id="AvgPool-same"),
        Case("AveragePool", (R(2, 3, 10),), {"kernel_shape": [2], "strides": [2]}, id="AvgPool-1d"),
        Case("MaxPool", (x,), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
        Case("MaxPool", (x,), {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}, id="MaxPool-ceil"),
        Case("MaxPool", (x,), {"kernel_shape": [3, 3], "dilations": [2, 2], "pads": [2, 1, 0, 2]},
             id="MaxPool-dil"),
        Case("MaxPool", (x,), {"kernel_shape": [4, 3], "strides": [2, 1], "auto_pad": "SAME_LOWER"},
             id="MaxPool-same-lower"),
        Case("MaxPool", (R(1, 2, 4, 5, 6),), {"kernel_shape": [2, 2, 3], "strides": [2, 2, 2]}, id="MaxPool-3d"),
        Case("MaxPool", (R(1, 2, 6, 6, kind="int", dtype="int8"),), {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1]},
             half=False, id="MaxPool-int8"),
    ]


def _conv() -> list[Case]:
    x = R(2, 4, 9, 8)
    return [
        Case("Conv", (x, W(6, 4, 3, 3), W(6)), {"pads": [1, 1, 1, 1]}),
        Case("Conv", (x, W(5, 4, 3, 3)), {"strides": [2, 2], "pads": [0, 1, 1, 0]}, id="Conv-s2-asym"),
        Case("Conv", (x, W(3, 4, 3, 2), W(3)), {"dilations": [2, 3], "pads": [2, 1, 1, 2]}, id="Conv-dil"),
        Case("Conv", (x, W(6, 2, 3, 3), W(6)), {"group": 2, "pads": [1, 1, 1, 1], "strides": [1, 2]},
             id="Conv-group2"),
        Case("Conv", (R(2, 8, 9, 8), W(8, 1, 3, 3), W(8)), {"group": 8, "pads": [1, 1, 1, 1], "strides": [2, 2]},
             id="Conv-dw-s2"),
        Case("Conv", (R(1, 8, 10, 7), W(8, 1, 5, 5)), {"group": 8, "pads": [2, 2, 2, 2]}, id="Conv-dw-k5"),
        Case("Conv", (R(2, 4, 9, 8), W(8, 1, 3, 3), W(8)), {"group": 4, "pads": [1, 0, 1, 2], "dilations": [2, 1]},
             id="Conv-dw-mult2"),
        Case("Conv", (R(2, 6, 11), W(6, 1, 3), W(6)), {"group": 6, "pads": [1, 1]}, id="Conv-dw-1d"),
        Case("Conv", (x, W(7, 4, 1, 1), W(7)), id="Conv-1x1"),
        Case("Conv", (x, W(7, 4, 1, 1)), {"strides": [2, 2]}, id="Conv-1x1-s2"),
        Case("Conv", (x, W(6, 4, 4, 4), W(6)), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}, id="Conv-same-upper"),
        Case("Conv", (x, W(6, 4, 4, 3)), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}, id="Conv-same-lower"),
        Case("Conv", (x, W(6, 4, 3, 3)), {"auto_pad": "VALID", "strides": [3, 2]}, id="Conv-valid"),
        Case("Conv", (R(2, 3, 12), W(5, 3, 4), W(5)), {"pads": [2, 1], "strides": [2]}, id="Conv-1d"),
        Case("Conv", (R(1, 2, 5, 6, 4), W(3, 2, 3, 3, 2)), {"pads": [1, 1, 0, 1, 1, 1]}, id="Conv-3d"),
        Case("Conv", (x, R(6, 4, 3, 3), R(6)), {"pads": [1, 1, 1, 1]}, id="Conv-runtime-w"),
        Case("Conv", (R(1, 8, 7, 7), R(8, 1, 3, 3)), {"group": 8, "pads": [1, 1, 1, 1]}, id="Conv-dw-runtime-w"),
        Case("Conv", (R(1, 16, 14, 14), W(32, 16, 3, 3), W(32)), {"pads": [1, 1, 1, 1]}, id="Conv-deep"),
        # 40 x 9 = 360 products per output: over _cuda.DIRECT_MAX_TERMS, so CuPy takes im2col + GEMM
        Case("Conv", (R(1, 40, 9, 9), W(8, 40, 3, 3), W(8)), {"pads": [1, 1, 1, 1], "strides": [2, 2]},
             id="Conv-deeper-gemm"),
        Case("Conv", (R(2, 12, 9, 8), R(6, 4, 3, 3), R(6)), {"group": 3, "pads": [1, 2, 0, 1]}, id="Conv-group3-runtime-w"),
        Case("ConvTranspose", (x, W(4, 3, 3, 3), W(3)), {"strides": [2, 2], "pads": [1, 1, 1, 1],
                                                        "output_padding": [1, 1]}),
        Case("ConvTranspose", (x, W(4, 5, 4, 4)), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, id="ConvT-k4s2"),
        Case("ConvTranspose", (x, W(4, 2, 3, 3), W(4)), {"group": 2, "strides": [1, 2]}, id="ConvT-group2"),
        Case("ConvTranspose", (x, W(4, 3, 3, 2)), {"dilations": [2, 2], "pads": [1, 0, 2, 1]}, id="ConvT-dil"),
        Case("ConvTranspose", (x, W(4, 3, 3, 3)), {"strides": [2, 2], "output_shape": [18, 16]},
             id="ConvT-output-shape"),
        Case("ConvTranspose", (x, W(4, 3, 3, 3)), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}, id="ConvT-same"),
        Case("ConvTranspose", (x, W(4, 3, 3, 3)), {"strides": [2, 2], "auto_pad": "SAME_LOWER"},
             id="ConvT-same-lower"),
        Case("ConvTranspose", (R(2, 3, 7), W(3, 2, 3), W(2)), {"strides": [3], "pads": [1, 0]}, id="ConvT-1d"),
        Case("ConvTranspose", (x, R(4, 2, 2, 2)), {"strides": [2, 2]}, id="ConvT-runtime-w"),
    ]


def _resize() -> list[Case]:
    x = R(1, 2, 5, 6)
    roi = NONE
    up = C([1, 1, 2, 2], "float32")
    cases = [
        Case("Resize", (x, roi, up), {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                                      "nearest_mode": "floor"}, id="Resize-nn-asym-floor"),
        Case("Resize", (x, roi, C([1, 1, 0.5, 0.5], "float32")), {"mode": "nearest"}, id="Resize-nn-down"),
        Case("Resize", (x, roi, C([1, 1, 1.5, 2.5], "float32")), {"mode": "linear"}, id="Resize-lin-frac"),
        Case("Resize", (x, roi, C([1, 1, 0.6, 0.5], "float32")), {"mode": "linear"}, id="Resize-lin-down"),
        Case("Resize", (x, roi, C([1, 2, 2, 3], "float32")), {"mode": "nearest"}, id="Resize-nn-chan"),
    ]
    for ctm in ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"):
        for rule in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
            cases.append(Case("Resize", (x, roi, NONE, C([1, 2, 8, 9])), {
                "mode": "nearest", "coordinate_transformation_mode": ctm, "nearest_mode": rule},
                id=f"Resize-nn-{ctm}-{rule}"))
        cases.append(Case("Resize", (x, roi, up), {"mode": "linear", "coordinate_transformation_mode": ctm},
                          id=f"Resize-lin-{ctm}"))
        cases.append(Case("Resize", (x, roi, NONE, C([1, 2, 3, 1])), {
            "mode": "linear", "coordinate_transformation_mode": ctm}, id=f"Resize-lin-sizes-{ctm}"))
    cases += [
        Case("Resize", (x, C([1, 1, 2, 2], "float32")), {"mode": "nearest"}, opset=10, id="Resize-v10"),
        Case("Resize", (x, roi, C([2, 3], "float32")), {"mode": "linear", "axes": [2, 3]}, id="Resize-axes"),
        Case("Resize", (x, roi, NONE, C([7, 7])), {"mode": "nearest", "axes": [2, 3],
                                                   "keep_aspect_ratio_policy": "not_larger"}, id="Resize-keep-ar"),
        Case("Resize", (x, roi, up), {"mode": "nearest", "coordinate_transformation_mode": "half_pixel_symmetric"},
             opset=19, id="Resize-hp-sym"),
        Case("Upsample", (x, C([1, 1, 2, 3], "float32")), {"mode": "nearest"}, opset=9),
        Case("Upsample", (x,), {"mode": "nearest", "scales": [1.0, 1.0, 2.0, 2.0]}, opset=7, id="Upsample-v7"),
        Case("Upsample", (x, C([1, 1, 2, 2], "float32")), {"mode": "linear"}, opset=9, id="Upsample-linear"),
    ]
    return cases


def _movement() -> list[Case]:
    x = R(2, 3, 4, 5)
    return [
        Case("Concat", (R(2, 3, 4), R(2, 1, 4), R(2, 2, 4)), {"axis": 1}),
        Case("Concat", (R(2, 3, 4), W(2, 3, 2)), {"axis": -1}, id="Concat-last"),
        Case("Split", (x,), {"axis": 1, "split": [1, 2]}, opset=11, outputs=2, id="Split-attr"),
        Case("Split", (x, C([2, 1, 2])), {"axis": -1}, opset=13, outputs=3, id="Split-input"),
        Case("Split", (x,), {"axis": 3, "num_outputs": 3}, opset=18, outputs=3, id="Split-num-outputs"),
        Case("Split", (x,), {"axis": 0}, opset=13, outputs=2, id="Split-equal"),
        Case("Slice", (x, C([1, -1]), C([3, -100]), C([2, 3]), C([1, -2]))),
        Case("Slice", (x, C([0, 10]), C([100, 2]), C([-1, 1]), C([2, -1])), id="Slice-clamp"),
        Case("Slice", (x, C([1]), C([-1])), id="Slice-default-axes"),
        Case("Slice", (x,), {"starts": [1, 0], "ends": [2, 3], "axes": [0, 2]}, opset=9, id="Slice-v9"),
        Case("Gather", (x, C([[0, -1], [2, 1]])), {"axis": 2}),
        Case("Gather", (x, C(1)), {"axis": 1}, id="Gather-scalar"),
        Case("Gather", (x, V([3, -2, 0])), {"axis": -1}, id="Gather-runtime"),
        Case("Gather", (V([5, 7, 9, 11]), V(-1)), half=False, id="Gather-shape-like"),
        Case("Reshape", (x, C([0, -1, 5]))),
        Case("Reshape", (x, C([0, 0, 20])), {"allowzero": 0}, id="Reshape-zero-copies"),
        Case("Flatten", (x,), {"axis": 2}),
        Case("Flatten", (x,), {"axis": 0}, id="Flatten-0"),
        Case("Squeeze", (R(2, 1, 3, 1), C([1, -1]))),
        Case("Squeeze", (R(2, 1, 3, 1),), id="Squeeze-all"),
        Case("Unsqueeze", (R(2, 3), C([0, -1]))),
        Case("Unsqueeze", (R(2, 3),), {"axes": [1]}, opset=11, id="Unsqueeze-v11"),
        Case("Identity", (x,)),
        Case("Dropout", (x,), opset=13),
        Case("Dropout", (x, C(0.3, "float32")), opset=13, outputs=2, id="Dropout-mask"),
        Case("Transpose", (x,)),
        Case("Transpose", (x,), {"perm": [0, 2, 3, 1]}, id="Transpose-nhwc"),
        Case("Pad", (x, C([0, 0, 1, 2, 0, 1, 2, 0]), C(1.5, "float32"))),
        Case("Pad", (x, C([0, 0, 1, 2, 0, 0, 2, 1])), {"mode": "reflect"}, id="Pad-reflect"),
        Case("Pad", (x, C([0, 1, 2, 3, 1, 0, 3, 2])), {"mode": "edge"}, id="Pad-edge"),
        Case("Pad", (x, C([0, 0, -1, 2, 0, 0, 1, -2])), id="Pad-negative"),
        Case("Pad", (x, C([1, 2, 2, 1]), NONE, C([1, 3])), id="Pad-axes"),
        Case("Pad", (x, C([0, 0, 1, 6, 0, 0, 2, 1])), {"mode": "wrap"}, opset=19, id="Pad-wrap"),
        Case("Pad", (x,), {"pads": [0, 0, 1, 1, 0, 0, 1, 1], "value": -2.0}, opset=2, id="Pad-v2"),
        Case("Expand", (R(3, 1), C([2, 3, 4]))),
        Case("Expand", (R(2, 1, 4), C([3, 1, 1, 1])), id="Expand-grow"),
        Case("Tile", (R(2, 3), C([2, 3]))),
        Case("Shape", (x,), half=False),
        Case("Shape", (x,), {"start": 1, "end": -1}, half=False, id="Shape-slice"),
        Case("Size", (x,), half=False),
        Case("Constant", (), {"value": numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3))},
             half=False),
        Case("Constant", (), {"value_ints": [3, 1, 4]}, half=False, id="Constant-ints"),
        Case("Constant", (), {"value_float": 2.5}, half=False, id="Constant-float"),
        Case("ConstantOfShape", (C([2, 3]),), half=False),
        Case("ConstantOfShape", (C([4]),), {"value": numpy_helper.from_array(np.array([7], dtype=np.int64))},
             half=False, id="ConstantOfShape-int"),
        Case("Range", (C(2), C(11), C(3)), half=False),
        Case("Range", (V(1.5, "float32"), V(-2.0, "float32"), V(-0.75, "float32")), half=False, id="Range-runtime"),
    ]


def all_cases() -> list[Case]:
    cases = _elementwise() + _linalg() + _norm() + _reduce() + _pool() + _conv() + _resize() + _movement()
    return [c if c.id else Case(**{**c.__dict__, "id": c.op}) for c in cases]
