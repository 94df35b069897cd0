"""ONNX builders (onnx.helper) for reference architectures, from their published layer tables.

    model = zoo.mobilenet_v2()                          # ModelProto, opset 18, random weights
    model = zoo.efficientnet_b0(weights="external")     # structure-only: large weights are stubs
    model = zoo.mobilenet_v1(width=0.25, opset=11, weights="constant", dynamic=True)  # converter style

Weights modes: ``random`` (inline initializers, He-normal, fixed seed), ``external`` (tensors over 1024
elements point at an external file that does not exist: a small structure-only model, read with
``load_external_data=False``), ``constant`` (weights as ``Constant`` nodes, as third-party converters
write them). `structure_only` turns any ModelProto into a structure-only one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: Tensors with more elements than this become external stubs in structure-only models.
STUB_THRESHOLD = 1024

# (expansion t, output channels c, repeats n, first stride s): Sandler et al. 2018, Table 2.
MOBILENET_V2_TABLE = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))
# (output channels of the pointwise conv, depthwise stride): Howard et al. 2017, Table 1.
MOBILENET_V1_TABLE = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1), (512, 1), (512, 1),
                      (512, 1), (512, 1), (1024, 2), (1024, 1))
# (expansion, kernel, first stride, output channels, repeats): Tan & Le 2019, Table 1 (EfficientNet-B0).
EFFICIENTNET_B0_TABLE = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3),
                         (6, 5, 2, 192, 4), (6, 3, 1, 320, 1))


def make_divisible(value: float, divisor: int = 8) -> int:
    """Round channels to a multiple of `divisor` without dropping more than 10% (the reference rule)."""
    new = max(divisor, int(value + divisor / 2) // divisor * divisor)
    if new < 0.9 * value:
        new += divisor
    return new


def _stub(name: str, shape: Sequence[int], location: str) -> TensorProto:
    tensor = TensorProto()
    tensor.name = name
    tensor.data_type = TensorProto.FLOAT
    tensor.dims.extend(int(d) for d in shape)
    tensor.data_location = TensorProto.EXTERNAL
    nbytes = 4 * math.prod(shape)
    for key, value in (("location", location), ("offset", "0"), ("length", str(nbytes))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return tensor


def structure_only(model: onnx.ModelProto, location: str = "weights.missing.bin",
                   threshold: int = STUB_THRESHOLD) -> onnx.ModelProto:
    """A copy whose initializers over `threshold` elements point at a missing external file."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for i, tensor in enumerate(out.graph.initializer):
        if math.prod(tensor.dims) > threshold:
            stub = _stub(tensor.name, tensor.dims, location)
            stub.data_type = tensor.data_type
            out.graph.initializer[i].CopyFrom(stub)
    return out


class GraphBuilder:
    """Accumulates nodes and weights of one graph; helpers return the name of the tensor they produce."""

    def __init__(self, name: str, opset: int = 18, weights: str = "random", seed: int = 0,
                 trained: bool = False) -> None:
        if weights not in ("random", "external", "constant"):
            raise ValueError(f"weights must be random, external or constant, got {weights!r}")
        self.name, self.opset, self.mode, self.trained = name, opset, weights, trained
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[TensorProto] = []
        self._n = 0

    def fresh(self, hint: str) -> str:
        self._n += 1
        return f"{hint}_{self._n}"

    def node(self, op: str, inputs: Sequence[str], name: str | None = None, n_out: int = 1, **attrs) -> str:
        """Append a node; returns its first output."""
        nm = name or self.fresh(op)
        outs = [f"{nm}_out{i}" if i else f"{nm}_out" for i in range(n_out)]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=nm, **attrs))
        return outs[0]

    def const(self, name: str, value: np.ndarray) -> str:
        """A small constant (always inline; a Constant node in ``constant`` mode)."""
        value = np.asarray(value)
        if self.mode == "constant":
            self.nodes.append(
                helper.make_node("Constant", [], [name], name=f"{name}_const", value=numpy_helper.from_array(value, name))
            )
        else:
            self.inits.append(numpy_helper.from_array(value, name))
        return name

    def weight(self, name: str, shape: Sequence[int], fan_in: int | None = None, fill: float | None = None,
               variance: bool = False) -> str:
        """A float32 parameter tensor in the builder's weights mode (`variance`: a BN running variance)."""
        numel = math.prod(shape)
        if self.mode == "external" and numel > STUB_THRESHOLD:
            self.inits.append(_stub(name, shape, f"{self.name}.weights.missing.bin"))
            return name
        if fill is not None and self.trained:
            value = self._trained_fill(shape, fill, variance)
        elif fill is not None:
            value = np.full(shape, fill, dtype=np.float32)
        else:
            std = math.sqrt(2.0 / max(fan_in or shape[-1], 1))
            value = (self.rng.standard_normal(shape) * std).astype(np.float32)
        return self.const(name, value)

    def _trained_fill(self, shape: Sequence[int], fill: float, variance: bool) -> np.ndarray:
        """A parameter that init fills with `fill`, as training leaves it: a running variance
        `fill` * U(0.5, 1.5), anything else `fill` + 0.1 N (scales near 1, biases and means near 0)."""
        if variance:
            return (fill * self.rng.uniform(0.5, 1.5, shape)).astype(np.float32)
        return (fill + 0.1 * self.rng.standard_normal(shape)).astype(np.float32)

    def batchnorm(self, x: str, c: int, prefix: str) -> str:
        """BatchNormalization over `c` channels (identity statistics, or trained-like ones when `trained`)."""
        params = [self.weight(f"{prefix}.bn.{p}", (c,), fill=f, variance=p == "running_var")
                  for p, f in (("weight", 1.0), ("bias", 0.0), ("running_mean", 0.0), ("running_var", 1.0))]
        return self.node("BatchNormalization", [x, *params], name=f"{prefix}/BatchNormalization", epsilon=1e-5)

    # ---- layers ----------------------------------------------------------------------------------
    def conv(self, x: str, c_in: int, c_out: int, k: int = 1, stride: int = 1, groups: int = 1,
             prefix: str = "conv", bn: bool = False, act: str | None = None) -> str:
        """Conv (+ BatchNormalization or bias) (+ activation)."""
        w = self.weight(f"{prefix}.weight", (c_out, c_in // groups, k, k), fan_in=c_in // groups * k * k)
        inputs = [x, w] if bn else [x, w, self.weight(f"{prefix}.bias", (c_out,), fill=0.0)]
        pad = k // 2
        y = self.node("Conv", inputs, name=f"{prefix}/Conv", kernel_shape=[k, k], strides=[stride, stride],
                      pads=[pad] * 4, group=groups, dilations=[1, 1])
        if bn:
            y = self.batchnorm(y, c_out, prefix)
        return self.act(y, act, prefix) if act else y

    def act(self, x: str, kind: str, prefix: str = "act") -> str:
        """An activation as exporters write it (ReLU6 = Clip(0, 6), SiLU = x * Sigmoid(x), GELU via Erf)."""
        if kind == "relu":
            return self.node("Relu", [x], name=f"{prefix}/Relu")
        if kind == "relu6":
            if self.opset < 11:
                return self.node("Clip", [x], name=f"{prefix}/Clip", min=0.0, max=6.0)
            lo = self.const(self.fresh("clip_min"), np.array(0.0, dtype=np.float32))
            hi = self.const(self.fresh("clip_max"), np.array(6.0, dtype=np.float32))
            return self.node("Clip", [x, lo, hi], name=f"{prefix}/Clip")
        if kind == "hardswish":
            return self.node("HardSwish", [x], name=f"{prefix}/HardSwish")
        if kind in ("silu", "sigmoid"):
            s = self.node("Sigmoid", [x], name=f"{prefix}/Sigmoid")
            return s if kind == "sigmoid" else self.node("Mul", [x, s], name=f"{prefix}/Mul")
        if kind == "gelu":
            return self.gelu(x, "erf", prefix)
        raise ValueError(f"unknown activation {kind!r}")

    def gelu(self, x: str, form: str = "erf", prefix: str = "gelu") -> str:
        """GELU: ``erf`` (x * 0.5 * (1 + erf(x / sqrt 2))), ``tanh`` approximation, or the ``op`` (opset 20)."""
        if form == "op":
            return self.node("Gelu", [x], name=f"{prefix}/Gelu")
        f32 = np.float32
        if form == "erf":
            d = self.node("Div", [x, self.const(self.fresh("sqrt2"), np.array(math.sqrt(2.0), f32))], name=f"{prefix}/Div")
            e = self.node("Erf", [d], name=f"{prefix}/Erf")
            a = self.node("Add", [e, self.const(self.fresh("one"), np.array(1.0, f32))], name=f"{prefix}/Add")
            m = self.node("Mul", [x, a], name=f"{prefix}/Mul")
            return self.node("Mul", [m, self.const(self.fresh("half"), np.array(0.5, f32))], name=f"{prefix}/Mul_1")
        if form == "tanh":
            p = self.node("Pow", [x, self.const(self.fresh("three"), np.array(3.0, f32))], name=f"{prefix}/Pow")
            c = self.node("Mul", [p, self.const(self.fresh("c"), np.array(0.044715, f32))], name=f"{prefix}/Mul")
            s = self.node("Add", [x, c], name=f"{prefix}/Add")
            k = self.node("Mul", [s, self.const(self.fresh("k"), np.array(math.sqrt(2 / math.pi), f32))],
                          name=f"{prefix}/Mul_1")
            t = self.node("Tanh", [k], name=f"{prefix}/Tanh")
            a = self.node("Add", [t, self.const(self.fresh("one"), np.array(1.0, f32))], name=f"{prefix}/Add_1")
            m = self.node("Mul", [x, a], name=f"{prefix}/Mul_2")
            return self.node("Mul", [m, self.const(self.fresh("half"), np.array(0.5, f32))], name=f"{prefix}/Mul_3")
        raise ValueError(f"unknown GELU form {form!r}: use erf, tanh or op")

    def linear(self, x: str, c_in: int, c_out: int, prefix: str) -> str:
        """Token-wise linear layer as PyTorch exports it: MatMul with a (C_in, C_out) weight, then bias Add."""
        y = self.node("MatMul", [x, self.weight(f"{prefix}.weight", (c_in, c_out), fan_in=c_in)], name=f"{prefix}/MatMul")
        return self.node("Add", [y, self.weight(f"{prefix}.bias", (c_out,), fill=0.0)], name=f"{prefix}/Add")

    def head(self, x: str, channels: int, num_classes: int, converter: bool = False) -> str:
        """Global average pool, flatten and classifier (Gemm; or converter style Shape->Reshape->MatMul+Add)."""
        p = self.node("GlobalAveragePool", [x], name="head/GlobalAveragePool")
        if not converter:
            f = self.node("Flatten", [p], name="head/Flatten", axis=1)
            w = self.weight("classifier.weight", (num_classes, channels), fan_in=channels)
            b = self.weight("classifier.bias", (num_classes,), fill=0.0)
            return self.node("Gemm", [f, w, b], name="head/Gemm", transB=1)
        shape = self.node("Shape", [p], name="head/Shape")
        n = self.node("Gather", [shape, self.const("head.zero", np.array(0, dtype=np.int64))], name="head/Gather", axis=0)
        if self.opset < 13:
            n1 = self.node("Unsqueeze", [n], name="head/Unsqueeze", axes=[0])
        else:
            n1 = self.node("Unsqueeze", [n, self.const("head.axes", np.array([0], dtype=np.int64))], name="head/Unsqueeze")
        target = self.node("Concat", [n1, self.const("head.minus1", np.array([-1], dtype=np.int64))],
                           name="head/Concat", axis=0)
        f = self.node("Reshape", [p, target], name="head/Reshape")
        return self.linear(f, channels, num_classes, "classifier")

    def build(self, input_shape: Sequence[int | str], output: str, output_shape: Sequence[int | str],
              doc: str = "", output_name: str = "logits") -> onnx.ModelProto:
        """The finished, checked ModelProto with input ``input`` and output `output_name`."""
        if not self.nodes or self.nodes[-1].output[0] != output:
            raise ValueError("the output must be the last node's first output")
        self.nodes[-1].output[0] = output_name
        graph = helper.make_graph(
            self.nodes, self.name,
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, list(input_shape))],
            [helper.make_tensor_value_info(output_name, TensorProto.FLOAT, list(output_shape))],
            initializer=self.inits,
        )
        ir = 6 if self.opset <= 11 else 7 if self.opset <= 12 else 8 if self.opset <= 18 else 9
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)],
                                  producer_name="fuseplanner.zoo", ir_version=ir, doc_string=doc)
        if self.mode != "external":  # the checker insists that external files exist
            onnx.checker.check_model(model)
        return model


def _input_shape(resolution: int, batch: int, dynamic: bool) -> list[int | str]:
    return ["N", 3, "H", "W"] if dynamic else [batch, 3, resolution, resolution]


def _output_shape(num_classes: int, batch: int, dynamic: bool) -> list[int | str]:
    return ["N" if dynamic else batch, num_classes]


def mobilenet_v1(width: float = 1.0, resolution: int = 224, num_classes: int = 1000, batch: int = 1,
                 act: str = "relu", bn: bool = False, opset: int = 18, weights: str = "random",
                 dynamic: bool = False, converter: bool = False, name: str = "mobilenet_v1") -> onnx.ModelProto:
    """MobileNetV1 (Howard et al. 2017, Table 1): 3x3 stem, 13 depthwise-separable blocks, classifier."""
    b = GraphBuilder(name, opset, weights)
    c = max(8, int(32 * width))
    x = b.conv("input", 3, c, 3, 2, prefix="stem", bn=bn, act=act)
    for i, (out, stride) in enumerate(MOBILENET_V1_TABLE):
        out = max(8, int(out * width))
        x = b.conv(x, c, c, 3, stride, groups=c, prefix=f"blocks.{i}.dw", bn=bn, act=act)
        x = b.conv(x, c, out, 1, 1, prefix=f"blocks.{i}.pw", bn=bn, act=act)
        c = out
    y = b.head(x, c, num_classes, converter=converter)
    return b.build(_input_shape(resolution, batch, dynamic), y, _output_shape(num_classes, batch, dynamic),
                   "MobileNetV1 from the published layer table")


def mobilenet_v2(width: float = 1.0, resolution: int = 224, num_classes: int = 1000, batch: int = 1,
                 bn: bool = False, opset: int = 18, weights: str = "random", dynamic: bool = False,
                 name: str = "mobilenet_v2") -> onnx.ModelProto:
    """MobileNetV2 (Sandler et al. 2018, Table 2): inverted residual blocks with linear bottlenecks."""
    b = GraphBuilder(name, opset, weights)
    c = make_divisible(32 * width)
    x = b.conv("input", 3, c, 3, 2, prefix="features.0", bn=bn, act="relu6")
    block = 1
    for t, ch, n, s in MOBILENET_V2_TABLE:
        out = make_divisible(ch * width)
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = c * t
            p = f"features.{block}"
            y = x
            if t != 1:
                y = b.conv(y, c, hidden, 1, prefix=f"{p}.expand", bn=bn, act="relu6")
            y = b.conv(y, hidden, hidden, 3, stride, groups=hidden, prefix=f"{p}.dw", bn=bn, act="relu6")
            y = b.conv(y, hidden, out, 1, prefix=f"{p}.project", bn=bn)
            x = b.node("Add", [x, y], name=f"{p}/Add") if stride == 1 and c == out else y
            c = out
            block += 1
    last = make_divisible(1280 * max(1.0, width))
    x = b.conv(x, c, last, 1, prefix=f"features.{block}", bn=bn, act="relu6")
    y = b.head(x, last, num_classes)
    return b.build(_input_shape(resolution, batch, dynamic), y, _output_shape(num_classes, batch, dynamic),
                   "MobileNetV2 from the published layer table")


def efficientnet_b0(resolution: int = 224, num_classes: int = 1000, batch: int = 1, bn: bool = False,
                    opset: int = 18, weights: str = "random", dynamic: bool = False,
                    name: str = "efficientnet_b0") -> onnx.ModelProto:
    """EfficientNet-B0 (Tan & Le 2019, Table 1): MBConv blocks with squeeze-excitation and SiLU."""
    b = GraphBuilder(name, opset, weights)
    c = 32
    x = b.conv("input", 3, c, 3, 2, prefix="stem", bn=bn, act="silu")
    block = 0
    for t, k, s, out, n in EFFICIENTNET_B0_TABLE:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = c * t
            p = f"blocks.{block}"
            y = x
            if t != 1:
                y = b.conv(y, c, hidden, 1, prefix=f"{p}.expand", bn=bn, act="silu")
            y = b.conv(y, hidden, hidden, k, stride, groups=hidden, prefix=f"{p}.dw", bn=bn, act="silu")
            y = _squeeze_excite(b, y, hidden, max(1, c // 4), f"{p}.se")
            y = b.conv(y, hidden, out, 1, prefix=f"{p}.project", bn=bn)
            x = b.node("Add", [x, y], name=f"{p}/Add") if stride == 1 and c == out else y
            c = out
            block += 1
    x = b.conv(x, c, 1280, 1, prefix="head.conv", bn=bn, act="silu")
    y = b.head(x, 1280, num_classes)
    return b.build(_input_shape(resolution, batch, dynamic), y, _output_shape(num_classes, batch, dynamic),
                   "EfficientNet-B0 from the published layer table")


def _squeeze_excite(b: GraphBuilder, x: str, channels: int, squeeze: int, prefix: str) -> str:
    """SE: global pool, 1x1 reduce + SiLU, 1x1 expand + Sigmoid, channel-wise scale."""
    p = b.node("GlobalAveragePool", [x], name=f"{prefix}/GlobalAveragePool")
    r = b.conv(p, channels, squeeze, 1, prefix=f"{prefix}.reduce", act="silu")
    e = b.conv(r, squeeze, channels, 1, prefix=f"{prefix}.expand", act="sigmoid")
    return b.node("Mul", [x, e], name=f"{prefix}/Mul")


def token_mlp(tokens: int = 196, dim: int = 192, hidden: int = 768, batch: int = 1, gelu: str = "erf",
              layernorm: bool = True, weights: str = "random", name: str = "token_mlp") -> onnx.ModelProto:
    """A transformer MLP block over tokens: [LayerNorm] -> Linear -> GELU -> Linear -> residual Add.

    The shape is (batch, tokens, dim); ``gelu`` selects the exported form (erf, tanh or the opset-20 op).
    """
    b = GraphBuilder(name, 20 if gelu == "op" else 18, weights)
    x = "input"
    if layernorm:
        x = b.node("LayerNormalization", [x, b.weight("norm.weight", (dim,), fill=1.0),
                                          b.weight("norm.bias", (dim,), fill=0.0)], name="norm/LayerNormalization",
                   axis=-1, epsilon=1e-6)
    h = b.linear(x, dim, hidden, "mlp.fc1")
    h = b.gelu(h, gelu, "mlp.act")
    y = b.linear(h, hidden, dim, "mlp.fc2")
    y = b.node("Add", ["input", y], name="residual/Add")
    return b.build([batch, tokens, dim], y, [batch, tokens, dim], "transformer MLP block over tokens")


# (output channels, first stride, repeats) per backbone stage of `text_detector`: outputs at 1/4, 1/8, 1/16, 1/32.
TEXT_DETECTOR_STAGES = ((24, 2, 2), (40, 2, 2), (96, 2, 3), (160, 2, 2))


def _inverted_residual(b: GraphBuilder, x: str, c: int, out: int, stride: int, prefix: str) -> str:
    """MobileNetV2 block with expansion 4: PW expand + BN + ReLU, DW 3x3 + BN + ReLU, PW project + BN, residual."""
    y = b.conv(x, c, 4 * c, 1, prefix=f"{prefix}.expand", bn=True, act="relu")
    y = b.conv(y, 4 * c, 4 * c, 3, stride, groups=4 * c, prefix=f"{prefix}.dw", bn=True, act="relu")
    y = b.conv(y, 4 * c, out, 1, prefix=f"{prefix}.project", bn=True)
    return b.node("Add", [x, y], name=f"{prefix}/Add") if stride == 1 and c == out else y


def _resize(b: GraphBuilder, x: str, scale: int, mode: str, prefix: str) -> str:
    """Upsampling as torch exports F.interpolate: nearest (asymmetric, floor) or bilinear (pytorch_half_pixel)."""
    scales = b.const(b.fresh(f"{prefix}.scales"), np.array([1, 1, scale, scale], dtype=np.float32))
    if mode == "nearest":
        return b.node("Resize", [x, "", scales], name=f"{prefix}/Resize", mode="nearest",
                      coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    return b.node("Resize", [x, "", scales], name=f"{prefix}/Resize", mode="linear",
                  coordinate_transformation_mode="pytorch_half_pixel")


def _conv_transpose(b: GraphBuilder, x: str, c_in: int, c_out: int, prefix: str) -> str:
    """ConvTranspose 2x2, stride 2, with bias: doubles height and width."""
    w = b.weight(f"{prefix}.weight", (c_in, c_out, 2, 2), fan_in=c_in)
    bias = b.weight(f"{prefix}.bias", (c_out,), fill=0.0)
    return b.node("ConvTranspose", [x, w, bias], name=f"{prefix}/ConvTranspose", kernel_shape=[2, 2], strides=[2, 2])


def _db_head(b: GraphBuilder, x: str, inner: int, prefix: str) -> str:
    """DBNet head branch: 3x3 conv + BN + ReLU, ConvTranspose x2 + BN + ReLU, ConvTranspose x2 to one map, Sigmoid."""
    y = b.conv(x, inner, inner // 4, 3, prefix=f"{prefix}.conv", bn=True, act="relu")
    y = _conv_transpose(b, y, inner // 4, inner // 4, f"{prefix}.up1")
    y = b.act(b.batchnorm(y, inner // 4, f"{prefix}.up1"), "relu", f"{prefix}.up1")
    y = _conv_transpose(b, y, inner // 4, 1, f"{prefix}.up2")
    return b.node("Sigmoid", [y], name=f"{prefix}/Sigmoid")


def _fpn(b: GraphBuilder, feats: Sequence[tuple[str, int]], inner: int) -> str:
    """DBFPN neck: 1x1 laterals, top-down nearest x2 upsampling with Adds, 3x3 smoothing to inner/4
    channels, every level resized to 1/4 (bilinear) and concatenated (inner channels)."""
    lat = [b.conv(x, c, inner, 1, prefix=f"neck.lateral{i}") for i, (x, c) in enumerate(feats)]
    top = [lat[-1]]
    for i in range(len(lat) - 2, -1, -1):
        up = _resize(b, top[0], 2, "nearest", f"neck.topdown{i}")
        top.insert(0, b.node("Add", [lat[i], up], name=f"neck.topdown{i}/Add"))
    outs = []
    for i, t in enumerate(top):
        y = b.conv(t, inner, inner // 4, 3, prefix=f"neck.smooth{i}")
        outs.append(_resize(b, y, 2**i, "linear", f"neck.up{i}") if i else y)
    return b.node("Concat", outs[::-1], name="neck/Concat", axis=1)


def trained_batchnorm(model: onnx.ModelProto, calibration: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """A copy of `model` whose BatchNormalization running statistics are what training leaves: each BN's
    per-channel input mean and variance over a standard-normal batch run through `calibration` (the same
    weights, possibly a smaller input), scaled by U(0.8, 1.25) (a running average is not the batch's)."""
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(seed)
    values = {t.name: numpy_helper.to_array(t) for t in calibration.graph.initializer}
    dims = [d.dim_value for d in calibration.graph.input[0].type.tensor_type.shape.dim]
    values[calibration.graph.input[0].name] = rng.standard_normal(dims).astype(np.float32)
    stats: dict[str, np.ndarray] = {}
    for node in calibration.graph.node:
        if node.op_type == "BatchNormalization":
            x = values[node.input[0]].astype(np.float64)
            axes = (0, *range(2, x.ndim))
            stats[node.input[3]] = x.mean(axis=axes).astype(np.float32)
            stats[node.input[4]] = (x.var(axis=axes) * rng.uniform(0.8, 1.25, x.shape[1])).astype(np.float32)
            values.update({k: stats[k] for k in node.input[3:5]})
        feeds = {n: values[n] for n in dict.fromkeys(i for i in node.input if i)}
        inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), None) for n, v in feeds.items()]
        outputs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in node.output]
        one = helper.make_model(helper.make_graph([node], "calibrate", inputs, outputs),
                                opset_imports=calibration.opset_import, ir_version=calibration.ir_version)  # fmt: skip
        values.update(zip(node.output, ReferenceEvaluator(one).run(None, feeds), strict=True))
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for i, t in enumerate(out.graph.initializer):
        if t.name in stats:
            out.graph.initializer[i].CopyFrom(numpy_helper.from_array(stats[t.name], t.name))
    return out


def _text_detector(resolution: int, batch: int, inner: int, k: float, seed: int, name: str) -> onnx.ModelProto:
    b = GraphBuilder(name, 18, "random", seed, trained=True)
    x = b.conv("input", 3, 16, 3, 2, prefix="stem", bn=True, act="relu")
    c, feats, block = 16, [], 0
    for out, stride, n in TEXT_DETECTOR_STAGES:
        for i in range(n):
            x = _inverted_residual(b, x, c, out, stride if i == 0 else 1, f"backbone.{block}")
            c, block = out, block + 1
        feats.append((x, c))
    fused = _fpn(b, feats, inner)
    prob = _db_head(b, fused, inner, "head.binarize")
    thresh = _db_head(b, fused, inner, "head.thresh")
    d = b.node("Sub", [prob, thresh], name="head.binary/Sub")
    e = b.node("Exp", [b.node("Neg", [b.node("Mul", [d, b.const("head.k", np.array(k, np.float32))],
                                                name="head.binary/Mul")], name="head.binary/Neg")],
               name="head.binary/Exp")  # fmt: skip
    a = b.node("Add", [e, b.const("head.one", np.array(1.0, np.float32))], name="head.binary/Add")
    binary = b.node("Reciprocal", [a], name="head.binary/Reciprocal")
    y = b.node("Concat", [prob, thresh, binary], name="head/Concat", axis=1)
    return b.build([batch, 3, resolution, resolution], y, [batch, 3, resolution, resolution],
                   "DBNet-style text detector: DW/PW backbone, FPN neck, ConvTranspose heads", output_name="maps")


def text_detector(resolution: int = 640, batch: int = 1, inner: int = 96, k: float = 50.0, seed: int = 0,
                  name: str = "text_detector") -> onnx.ModelProto:
    """A DBNet-style text detector (Liao et al. 2020), opset 18, with trained-like weights.

    Backbone: 3x3 stem + MobileNetV2 blocks (DW/PW, BN, ReLU) to 1/4..1/32; neck: `_fpn` (nearest and
    bilinear Resize, Concat); head: probability and threshold branches (ConvTranspose x2 twice, BN,
    Sigmoid) and the approximate binary map 1 / (1 + exp(-k (P - T))). Output ``maps``: (N, 3, H, W),
    channels probability, threshold, binary. Weights: kaiming-normal convs, scales 1 + 0.1 N, biases
    0.1 N, BN statistics by `trained_batchnorm` (calibrated at 128x128). `resolution`: a multiple of 32."""
    if resolution % 32 or resolution < 64:
        raise ValueError(f"resolution {resolution} is not a multiple of 32 of at least 64")
    model = _text_detector(resolution, batch, inner, k, seed, name)
    return trained_batchnorm(model, _text_detector(128, 1, inner, k, seed, name), seed)


def _attention(b: GraphBuilder, x: str, batch: int, tokens: int, dim: int, heads: int, prefix: str) -> str:
    """Multi-head self-attention as timm exports it: one qkv linear, Reshape/Transpose, Gather q, k, v,
    MatMul, scale, Softmax, MatMul, Transpose/Reshape back, output projection."""
    dh = dim // heads
    qkv = b.linear(x, dim, 3 * dim, f"{prefix}.qkv")
    shape = b.const(b.fresh(f"{prefix}.shape"), np.array([batch, tokens, 3, heads, dh], np.int64))
    r = b.node("Transpose", [b.node("Reshape", [qkv, shape], name=f"{prefix}/Reshape")], name=f"{prefix}/Transpose",
               perm=[2, 0, 3, 1, 4])  # fmt: skip
    q, k, v = (b.node("Gather", [r, b.const(b.fresh(f"{prefix}.i"), np.array(i, np.int64))], name=f"{prefix}/Gather_{i}",
                      axis=0) for i in range(3))  # fmt: skip
    kt = b.node("Transpose", [k], name=f"{prefix}/Transpose_k", perm=[0, 1, 3, 2])
    s = b.node("MatMul", [q, kt], name=f"{prefix}/MatMul_qk")
    s = b.node("Mul", [s, b.const(b.fresh(f"{prefix}.scale"), np.array(dh**-0.5, np.float32))], name=f"{prefix}/Mul")
    p = b.node("Softmax", [s], name=f"{prefix}/Softmax", axis=-1)
    o = b.node("Transpose", [b.node("MatMul", [p, v], name=f"{prefix}/MatMul_pv")], name=f"{prefix}/Transpose_o",
               perm=[0, 2, 1, 3])  # fmt: skip
    back = b.const(b.fresh(f"{prefix}.back"), np.array([batch, tokens, dim], np.int64))
    return b.linear(b.node("Reshape", [o, back], name=f"{prefix}/Reshape_o"), dim, dim, f"{prefix}.proj")


def _layernorm(b: GraphBuilder, x: str, dim: int, prefix: str) -> str:
    scale, bias = b.weight(f"{prefix}.weight", (dim,), fill=1.0), b.weight(f"{prefix}.bias", (dim,), fill=0.0)
    return b.node("LayerNormalization", [x, scale, bias], name=f"{prefix}/LayerNormalization", axis=-1, epsilon=1e-6)


def vit_hybrid(resolution: int = 128, batch: int = 1, dim: int = 96, heads: int = 4, depth: int = 2,
               num_classes: int = 1000, seed: int = 0, name: str = "vit_hybrid") -> onnx.ModelProto:
    """A small hybrid vision transformer, opset 18, with trained-like weights: conv stem and two
    MobileNetV2 blocks (1/4), a 2x2 patch embedding (1/8) to tokens plus a learned position embedding,
    `depth` pre-norm transformer blocks (LayerNorm, `_attention`, GELU MLP), tokens folded back to a
    map, 1x1 conv and classifier. Weights as `text_detector`'s (LayerNorm scales 1 + 0.1 N, BN
    statistics calibrated on the model itself). `resolution` must be a multiple of 8."""
    if resolution % 8 or dim % heads:
        raise ValueError(f"resolution {resolution} must be a multiple of 8 and dim {dim} of heads {heads}")
    b = GraphBuilder(name, 18, "random", seed, trained=True)
    x = b.conv("input", 3, 16, 3, 2, prefix="stem", bn=True, act="silu")
    x = _inverted_residual(b, x, 16, 32, 2, "stages.0")
    x = _inverted_residual(b, x, 32, 32, 1, "stages.1")
    side = resolution // 8
    t = side * side
    patch = [x, b.weight("patch_embed.weight", (dim, 32, 2, 2), fan_in=128), b.weight("patch_embed.bias", (dim,), fill=0.0)]
    x = b.node("Conv", patch, name="patch_embed/Conv", kernel_shape=[2, 2], strides=[2, 2])
    x = b.node("Reshape", [x, b.const("tokens.shape", np.array([batch, dim, t], np.int64))], name="tokens/Reshape")
    x = b.node("Transpose", [x], name="tokens/Transpose", perm=[0, 2, 1])
    x = b.node("Add", [x, b.weight("pos_embed", (1, t, dim), fan_in=5000)], name="tokens/Add")  # std 0.02
    for i in range(depth):
        p = f"blocks.{i}"
        a = _attention(b, _layernorm(b, x, dim, f"{p}.norm1"), batch, t, dim, heads, f"{p}.attn")
        x = b.node("Add", [x, a], name=f"{p}/Add")
        h = b.gelu(b.linear(_layernorm(b, x, dim, f"{p}.norm2"), dim, 2 * dim, f"{p}.mlp.fc1"), "erf", f"{p}.mlp.act")
        x = b.node("Add", [x, b.linear(h, 2 * dim, dim, f"{p}.mlp.fc2")], name=f"{p}/Add_1")
    x = b.node("Transpose", [_layernorm(b, x, dim, "norm")], name="fold/Transpose", perm=[0, 2, 1])
    x = b.node("Reshape", [x, b.const("fold.shape", np.array([batch, dim, side, side], np.int64))], name="fold/Reshape")
    x = b.conv(x, dim, 2 * dim, 1, prefix="head.conv", bn=True, act="silu")
    y = b.head(x, 2 * dim, num_classes)
    model = b.build([batch, 3, resolution, resolution], y, [batch, num_classes], "hybrid ViT: conv stem, attention")
    return trained_batchnorm(model, model, seed)

BUILDERS = {
    "mobilenet_v1": mobilenet_v1,
    "mobilenet_v2": mobilenet_v2,
    "efficientnet_b0": efficientnet_b0,
    "token_mlp": token_mlp,
    "text_detector": text_detector,
    "vit_hybrid": vit_hybrid,
}
