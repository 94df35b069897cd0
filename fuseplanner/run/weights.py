"""Weights of a model: read them, generate them for structure-only models, fold them per kernel.

`materialize(model, seed)` returns a full ModelProto: every initializer inline, read from its
external data file when that exists, otherwise (structure-only models, see models/README.md)
generated, seeded, at the exporter's own initialisation scale:

- Conv weights: kaiming-normal with fan_out (torchvision), std = sqrt(2 / (C_out * kh * kw));
  conv biases zero;
- Gemm weights (torchvision classifiers): normal(0, 0.01), bias zero; MatMul weights and the bias Add
  after them (timm / torch Linear): uniform(+-1/sqrt(fan_in));
- BatchNormalization: gamma ~ 1 + 0.1 N, beta ~ 0.1 N, running_mean ~ 0.1 s N, running_var ~ s^2 U(0.5, 1.5)
  where s is the conv's output scale for a unit-variance input (sqrt(fan_in) * weight std);
- a generated conv weight with no BN after it (the exporter folded BN into the conv) gets such a BN's
  scale gamma / sqrt(running_var) folded in, and then, since that only undoes the conv's own gain and
  not the shrinking of its real input (SiLU, squeeze-excitation gates), a data-driven rescale
  (`fuseplanner.run.calibrate_init`, LSUV-style): the model runs once in float32 on a seeded
  standard-normal input and each such weight is divided by one scalar so that its conv's output
  (bias excluded) has RMS 1 on that input, as a trained BN normalises its real input. Nothing is
  calibrated when no such weight was generated (every user weight is read, never rescaled);
- LayerNormalization scale 1 + 0.1 N, bias 0.1 N; anything else normal(0, 0.02).

Each tensor's values depend only on (seed, tensor name) and, for the calibrated conv weights, on the
model's structure and its other weights. Users bring trained models: nothing here
assumes anything about real weight values; generation only fills tensors that do not exist.

`fold(view, values, op)` gives one planned op's (weight, bias) in ONNX layout, float32: the conv or
linear weight with its bias, then every bias Add and BatchNormalization of the op's epilogue folded in
exactly (in float64), Gemm alpha/beta/transB and MatMul's (K, N) layout resolved.
"""

from __future__ import annotations

import copy
import math
import zlib
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from fuseplanner.core.errors import ModelError
from fuseplanner.core.ir import Op
from fuseplanner.frontend.view import GraphView

#: Ops that pass a constant through unchanged in value (followed to find what consumes a weight).
_PASS = ("Identity", "Cast", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Transpose")
_FLOAT = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16)


# ---- reading and generating ---------------------------------------------------------------------------
def _location(t: onnx.TensorProto) -> str | None:
    if t.data_location != onnx.TensorProto.EXTERNAL:
        return None
    return {e.key: e.value for e in t.external_data}.get("location", "")


def missing(model: onnx.ModelProto, base_dir: str | Path | None) -> list[str]:
    """Initializers whose external data file does not exist (structure-only tensors)."""
    out = []
    for t in model.graph.initializer:
        loc = _location(t)
        if loc is not None and (base_dir is None or not (Path(base_dir) / loc).is_file()):
            out.append(t.name)
    return out


def _uses(model: onnx.ModelProto) -> dict[str, list[tuple[onnx.NodeProto, int]]]:
    """Tensor -> (node, input position) of its readers, looking through value-preserving ops."""
    direct: dict[str, list[tuple[onnx.NodeProto, int]]] = defaultdict(list)
    for node in model.graph.node:
        for i, name in enumerate(node.input):
            if name:
                direct[name].append((node, i))
    out: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for name in list(direct):
        found, todo, seen = [], [name], set()
        while todo:
            cur = todo.pop()
            if cur in seen:
                continue
            seen.add(cur)
            for node, i in direct.get(cur, ()):
                if node.op_type in _PASS and i == 0:
                    todo.extend(o for o in node.output if o)
                else:
                    found.append((node, i))
        out[name] = found
    return out


def _rng(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([int(seed), zlib.crc32(name.encode())])


def _conv_scale(shape: tuple[int, ...]) -> tuple[float, float]:
    """(weight std of kaiming-normal fan_out, expected output scale for a unit-variance input)."""
    std = math.sqrt(2.0 / (shape[0] * math.prod(shape[2:])))
    return std, std * math.sqrt(math.prod(shape[1:]))


def _bn_param(position: int, c: int, scale: float, rng: np.random.Generator) -> np.ndarray:
    draws = {1: lambda: 1.0 + 0.1 * rng.standard_normal(c), 2: lambda: 0.1 * rng.standard_normal(c),
             3: lambda: 0.1 * scale * rng.standard_normal(c), 4: lambda: scale**2 * rng.uniform(0.5, 1.5, c)}  # fmt: skip
    return draws[position]()


def _bn_after(model_uses, conv: onnx.NodeProto) -> onnx.NodeProto | None:
    """The BatchNormalization reading the conv's output (directly or after a bias Add), if any."""
    for node, i in model_uses.get(conv.output[0], ()):
        if node.op_type == "BatchNormalization" and i == 0:
            return node
    return None


def _feeding_conv(model: onnx.ModelProto, bn: onnx.NodeProto, shapes: Mapping[str, tuple]) -> tuple | None:
    for node in model.graph.node:
        if node.op_type == "Conv" and node.output and node.output[0] == bn.input[0] and node.input[1] in shapes:
            return shapes[node.input[1]]
    return None


def _generate(name: str, shape: tuple[int, ...], uses, model, shapes, seed: int) -> np.ndarray:
    """Values of one missing initializer by what reads it (see the module docstring)."""
    rng = _rng(seed, name)
    roles = uses.get(name, [])
    node, pos = roles[0] if roles else (None, -1)
    op = node.op_type if node is not None else ""
    n = math.prod(shape)
    if op == "Conv" and pos == 1 and len(shape) == 4:
        std, scale = _conv_scale(shape)
        w = std * rng.standard_normal(shape)
        if _folded_bn_target(name, shape, uses) is not None:  # BN folded by the exporter: fold a generated one in
            w *= (_bn_param(1, shape[0], scale, rng) / np.sqrt(_bn_param(4, shape[0], scale, rng)))[:, None, None, None]
        return w
    if op == "BatchNormalization" and pos in (1, 2, 3, 4):
        conv_w = _feeding_conv(model, node, shapes)
        scale = _conv_scale(conv_w)[1] if conv_w else 1.0
        return _bn_param(pos, n, scale, rng).reshape(shape)
    if op == "Gemm" and pos == 1:
        return 0.01 * rng.standard_normal(shape)
    if op == "MatMul" and pos == 1 and len(shape) >= 2:
        bound = 1.0 / math.sqrt(shape[-2])
        return rng.uniform(-bound, bound, shape)
    if op in ("Conv", "ConvTranspose", "Gemm") and pos == 2:
        return np.zeros(shape)
    if op == "LayerNormalization" and pos in (1, 2):
        return (1.0 if pos == 1 else 0.0) + 0.1 * rng.standard_normal(shape)
    if op == "Add" and len(shape) <= 1:
        bound = 1.0 / math.sqrt(max(n, 1))
        return rng.uniform(-bound, bound, shape)
    return 0.02 * rng.standard_normal(shape)


def _folded_bn_target(name: str, shape: tuple[int, ...], uses) -> str | None:
    """The output tensor of the conv whose generated weight `name` got a folded BN scale, else None."""
    node, pos = (uses.get(name) or [(None, -1)])[0]
    if node is None or node.op_type != "Conv" or pos != 1 or len(shape) != 4 or _bn_after(uses, node) is not None:
        return None
    return node.output[0]


def _rescale(out: onnx.ModelProto, factors: Mapping[str, float]) -> None:
    for i, t in enumerate(out.graph.initializer):
        if t.name in factors:
            w = numpy_helper.to_array(t)
            scaled = (w.astype(np.float64) / factors[t.name]).astype(w.dtype)
            out.graph.initializer[i].CopyFrom(numpy_helper.from_array(scaled, t.name))


def materialize(model: onnx.ModelProto, seed: int = 0, base_dir: str | Path | None = None,
                input_shapes=None) -> onnx.ModelProto:  # fmt: skip
    """A copy of `model` with every initializer inline: read from `base_dir` where its external data
    exists, generated (see the module docstring) where it does not. Runs in onnxruntime as is.
    `input_shapes` serve the calibration run only where the model's own input dims are dynamic."""
    out = copy.deepcopy(model)
    gone = set(missing(out, base_dir))
    uses = _uses(out)
    shapes = {t.name: tuple(int(d) for d in t.dims) for t in out.graph.initializer}
    targets: dict[str, str] = {}
    for i, t in enumerate(out.graph.initializer):
        if _location(t) is None:
            continue
        if t.name not in gone:
            from onnx.external_data_helper import load_external_data_for_tensor

            load_external_data_for_tensor(t, str(base_dir))
            t.data_location = onnx.TensorProto.DEFAULT
            del t.external_data[:]
            continue
        if t.data_type not in _FLOAT:
            raise ModelError(f"initializer {t.name!r} ({onnx.TensorProto.DataType.Name(t.data_type)}) has no data "
                             "file and is not a float weight: give the model with its external data")
        values = _generate(t.name, shapes[t.name], uses, out, shapes, seed)
        dt = onnx.helper.tensor_dtype_to_np_dtype(t.data_type)
        out.graph.initializer[i].CopyFrom(numpy_helper.from_array(values.astype(dt), t.name))
        conv_out = _folded_bn_target(t.name, shapes[t.name], uses)
        if conv_out is not None:
            targets[conv_out] = t.name
    if targets:
        from fuseplanner.run.calibrate_init import calibrate

        _rescale(out, calibrate(out, targets, seed, input_shapes))
    return out


# ---- folding per planned op ---------------------------------------------------------------------------
def _node_index(view: GraphView) -> dict[str, int]:
    return {view.node_name(i): i for i in range(len(view.nodes))}


def _const(values: Mapping[str, np.ndarray], name: str, what: str) -> np.ndarray:
    if name not in values:
        raise ModelError(f"{what} {name!r} is not a constant: it cannot be folded into a kernel's weights")
    return np.asarray(values[name], dtype=np.float64)


def _channel_vector(v: np.ndarray, c: int, what: str) -> np.ndarray:
    """A per-channel constant (one value, or one per channel along any single axis) as c values."""
    flat = v.reshape(-1)
    if flat.size == 1:
        return np.full(c, float(flat[0]))
    if flat.size != c:
        raise ModelError(f"{what} has {flat.size} values, expected 1 or {c} (one per channel)")
    return flat.copy()


def _base(view: GraphView, values, node: onnx.NodeProto, op: Op) -> tuple[np.ndarray, np.ndarray]:
    """(weight in kernel layout, bias) of the op's own node, float64."""
    w = _const(values, node.input[1], f"{op.name} weight")
    c = op.c_out
    b = np.zeros(c)
    if len(node.input) > 2 and node.input[2]:
        b = _channel_vector(_const(values, node.input[2], f"{op.name} bias"), c, f"{op.name} bias")
    if op.kind != "linear":
        return w, b
    if node.op_type == "Gemm":
        if view.attr(node, "transB", 0) == 0:
            w = w.T
        w = w * float(view.attr(node, "alpha", 1.0))
        b = b * float(view.attr(node, "beta", 1.0))
    else:
        w = w.T
    return np.ascontiguousarray(w), b


def fold(view: GraphView, values: Mapping[str, np.ndarray], op: Op) -> tuple[np.ndarray, np.ndarray]:
    """(weight, bias) of a conv/linear op in ONNX layout, float32, with its epilogue's bias Adds and
    BatchNormalizations folded in (exactly, in float64)."""
    index = _node_index(view)
    w, b = _base(view, values, view.nodes[op.index], op)
    axis_w = (slice(None),) + (None,) * (w.ndim - 1)
    passive = 0
    while passive < len(op.epilogue) and op.epilogue[passive] in ("bias", "bn"):
        passive += 1  # bias/BN come first, one node each; activation patterns follow
    for name in op.epilogue_nodes[:passive]:
        node = view.nodes[index[name]]
        if node.op_type == "Add":
            other = node.input[1] if not view.is_const(node.input[0]) else node.input[0]
            b = b + _channel_vector(_const(values, other, f"{name} bias"), op.c_out, f"{name} bias")
        elif node.op_type == "BatchNormalization":
            gamma, beta, mean, var = (_channel_vector(_const(values, t, f"{name} input"), op.c_out, name)
                                      for t in node.input[1:5])  # fmt: skip
            s = gamma / np.sqrt(var + float(view.attr(node, "epsilon", 1e-5)))
            w = w * s[axis_w]
            b = (b - mean) * s + beta
    return w.astype(np.float32), b.astype(np.float32)
