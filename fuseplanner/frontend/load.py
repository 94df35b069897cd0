"""ONNX model -> `ModelGraph`: read, upgrade, infer shapes, classify nodes, absorb epilogues.

    graph = load_model("mobilenet_v2")                       # a bundled fixture
    graph = load_model("model.onnx", input_shapes={"x": (1, 3, 224, 224)}, batch=8)

Structure-only models (large initializers pointing at external files that do not exist) load fine:
weights are never read, only their dims. Every failure is a `ModelError` with a one-line message.
"""

from __future__ import annotations

import gzip
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from importlib import resources
from pathlib import Path

import networkx as nx
import onnx
from google.protobuf.message import DecodeError

from fuseplanner.core.errors import ModelError
from fuseplanner.core.ir import ModelGraph, Op, TensorInfo
from fuseplanner.frontend.epilogues import absorb
from fuseplanner.frontend.ops import OpFields, dtype_name, node_fields
from fuseplanner.frontend.shapes import activation_inputs, default_opset, prepare
from fuseplanner.frontend.view import GraphView

ModelSource = str | os.PathLike | onnx.ModelProto


# ---- locating and reading ------------------------------------------------------------------------
def bundled_dir() -> Path:
    """Directory of the bundled fixture models (``fuseplanner/data/models``)."""
    return Path(str(resources.files("fuseplanner") / "data" / "models"))


def bundled_models() -> list[str]:
    """Stems of the bundled fixtures, e.g. ``mobilenet_v2`` (``.struct`` suffixes dropped)."""
    folder = bundled_dir()
    if not folder.is_dir():
        return []
    return sorted({_stem(p) for p in folder.glob("*.onnx")})


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".onnx", ".struct"):
        name = name.removesuffix(suffix)
    return name


def resolve_model(name_or_path: str | os.PathLike) -> Path:
    """A model path: an existing file as given, or a bundled fixture stem such as ``mobilenet_v2`` (or a
    held-out model's name, `frontend.holdout`)."""
    path = Path(name_or_path)
    if path.exists():
        return path
    text = str(name_or_path)
    if os.sep not in text and "/" not in text:
        stem = text.removesuffix(".onnx")
        for candidate in (f"{stem}.onnx", f"{stem}.struct.onnx", f"holdout/{stem}.struct.onnx.gz"):
            bundled = bundled_dir() / candidate
            if bundled.is_file():
                return bundled
    names = ", ".join(bundled_models()) or "none installed"
    raise ModelError(
        f"model file {text!r} does not exist: check the path, or use a bundled model ({names})"
    )


def _looks_like_text(data: bytes) -> bool:
    sample = data[:4096]
    try:
        decoded = sample.decode("utf-8")
    except UnicodeDecodeError:
        return False
    printable = sum(ch.isprintable() or ch in "\r\n\t" for ch in decoded)
    return printable >= 0.95 * max(len(decoded), 1)


def _parse(path: Path) -> onnx.ModelProto:
    data = path.read_bytes()
    if not data:
        raise ModelError(f"model file '{path}' is empty (0 bytes): re-export the model or check the copy")
    if data[:2] == b"\x1f\x8b":  # a gzip-compressed model (e.g. model.onnx.gz)
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError):
            raise ModelError(f"'{path}' is a truncated or corrupt gzip file: re-compress the model") from None
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError):
        if _looks_like_text(data):
            raise ModelError(
                f"'{path}' is a text file, not a binary ONNX model: give the .onnx file the exporter wrote"
            ) from None
        if data[:1] == b"\x08":  # field 1 (ir_version, varint): an ONNX file that stops early
            raise ModelError(
                f"'{path}' is truncated or corrupt (its {len(data)} bytes stop in the middle of the model): "
                "re-export or re-download the model"
            ) from None
        raise ModelError(f"'{path}' is not an ONNX model (its bytes do not parse as one): check the file") from None
    return model


def _check_structure(model: onnx.ModelProto, label: str) -> None:
    """Reject protobufs that parsed but are not usable ONNX graphs (random bytes, truncation)."""
    g = model.graph
    if model.ir_version <= 0 or not model.opset_import or not g.node or not g.output:
        raise ModelError(
            f"{label} is not a complete ONNX model (missing IR version, opset, nodes or outputs): "
            "re-export it, or check that the file is not truncated"
        )
    known = {i.name for i in g.input} | {t.name for t in g.initializer}
    known |= {t.values.name for t in g.sparse_initializer}
    for node in g.node:
        for name in node.input:
            if name and name not in known:
                raise ModelError(
                    f"{label} is corrupt or truncated: node {node.name or node.op_type!r} reads {name!r}, "
                    "which nothing produces; re-export the model"
                )
        known.update(o for o in node.output if o)
    for out in g.output:
        if out.name not in known:
            raise ModelError(
                f"{label} is corrupt or truncated: graph output {out.name!r} is never produced; re-export the model"
            )


def read_model(source: ModelSource) -> tuple[onnx.ModelProto, str, str]:
    """(ModelProto, model name, source path or "") without external data; ModelError for bad input."""
    if isinstance(source, onnx.ModelProto):
        name = source.graph.name or "model"
        _check_structure(source, f"model {name!r}")
        return source, name, ""
    if not isinstance(source, str | os.PathLike):
        raise ModelError(f"cannot load a model from {type(source).__name__}: give a path or an onnx.ModelProto")
    path = resolve_model(source)
    if path.is_dir():
        raise ModelError(f"'{path}' is a directory, not an ONNX file: give the path of a .onnx file")
    try:
        model = _parse(path)
    except OSError as exc:
        raise ModelError(f"cannot read '{path}': {exc.strerror or exc}; check the file's permissions") from None
    _check_structure(model, f"'{path}'")
    return model, _stem(path), str(path)


# ---- building the graph --------------------------------------------------------------------------
def _to_op(f: OpFields, view: GraphView) -> tuple[Op, set[int]]:
    """Attach epilogues to a conv/linear record and freeze it; also the node indices absorbed."""
    epilogue: list[str] = []
    nodes: list[str] = []
    absorbed: set[int] = set()
    outputs = f.outputs
    params, has_bias = f.params, f.has_bias
    if f.kind != "opaque":
        rank = len(f.output_shapes[0])
        for ep in absorb(view, f.outputs[0], f.channels, rank, f.channel_axis):
            epilogue.append(ep.name)
            nodes.extend(view.node_name(i) for i in ep.nodes)
            absorbed.update(ep.nodes)
            params += ep.params
            has_bias = has_bias or ep.name == "bias"
            outputs = (ep.output,)
    out_shapes = f.output_shapes
    bias_elems = f.channels if (has_bias or "bn" in epilogue) and f.kind != "opaque" else 0
    attrs = f.attrs
    op = Op(
        name=f.name,
        op_type=f.op_type,
        kind=f.kind,
        index=f.index,
        inputs=f.inputs,
        outputs=outputs,
        input_shapes=f.input_shapes,
        output_shapes=out_shapes,
        kernel=tuple(attrs.get("kernel", (1, 1))),
        stride=tuple(attrs.get("stride", (1, 1))),
        pads=tuple(attrs.get("pads", (0, 0, 0, 0))),
        dilation=tuple(attrs.get("dilation", (1, 1))),
        groups=int(attrs.get("groups", 1)),
        dtype=f.dtype,
        epilogue=tuple(epilogue),
        epilogue_nodes=tuple(nodes),
        has_bias=has_bias,
        params=params,
        flops=f.flops,
        input_bytes=sum(math.prod(s) for s in f.input_shapes if s) * f.itemsize,
        output_bytes=sum(math.prod(s) for s in out_shapes if s) * f.itemsize,
        weight_bytes=(f.weight_elems + bias_elems) * f.weight_itemsize,
    )
    return op, absorbed


def _unique(name: str, index: int, seen: set[str]) -> str:
    key = name if name not in seen else f"{name}#{index}"
    seen.add(key)
    return key


def _tensor_info(view: GraphView, name: str, shape: tuple[int, ...]) -> TensorInfo:
    dtype, itemsize = dtype_name(view.elem_type(name))
    return TensorInfo(name=name, shape=tuple(shape), dtype=dtype, itemsize=itemsize)


def _model_batch(ops: list[Op], view: GraphView) -> int:
    """The batch the shapes were inferred at: the leading dimension of the first conv, else of the
    first activation input."""
    for op in ops:
        if op.is_conv and op.in_shape:
            return op.in_shape[0]
    for v in activation_inputs(view.model):
        dims = v.type.tensor_type.shape.dim
        if dims and dims[0].dim_value:
            return dims[0].dim_value
    return 0


def _with_images(ops: list[Op], view: GraphView) -> list[Op]:
    """Ops with an activation (rank 3 or more) whose leading dimension is not the model batch (a ViT
    hybrid's patches unfolded into sequences, a stacked q/k/v) record the batch as `images`, so that
    `Op.batch` and `Op.with_batch` count images, not sequences."""
    b = _model_batch(ops, view)
    if b < 1:
        return ops

    def folds(op: Op) -> bool:
        lead = [s[0] for s in (*op.input_shapes, *op.output_shapes) if len(s) >= 3]
        return any(d != b for d in lead)

    return [replace(op, images=b) if folds(op) else op for op in ops]


def build_graph(view: GraphView, name: str, source: str = "") -> ModelGraph:
    """The `ModelGraph` of a shape-inferred model view."""
    absorbed: set[int] = set()
    ops: list[Op] = []
    seen: set[str] = set()
    for index in view.compute:
        if index in absorbed:
            continue
        fields_ = node_fields(view, index)
        fields_.name = _unique(fields_.name, index, seen)
        op, eaten = _to_op(fields_, view)
        absorbed |= eaten
        ops.append(op)
    ops = _with_images(ops, view)
    graph = nx.DiGraph()
    producer: dict[str, str] = {}
    tensors: dict[str, TensorInfo] = {}
    for op in ops:
        graph.add_node(op.name, op=op)
        for t, shape in zip(op.inputs, op.input_shapes, strict=False):
            tensors.setdefault(t, _tensor_info(view, t, shape))
            src = producer.get(t)
            if src is not None and not graph.has_edge(src, op.name):
                graph.add_edge(src, op.name, tensor=t, bytes=tensors[t].bytes)
        for t, shape in zip(op.outputs, op.output_shapes, strict=False):
            tensors[t] = _tensor_info(view, t, shape)
            producer[t] = op.name
    inputs = tuple(_graph_io(view, v.name) for v in activation_inputs(view.model))
    outputs = tuple(_graph_io(view, v.name) for v in view.model.graph.output)
    for info in inputs + outputs:
        tensors.setdefault(info.name, info)
    return ModelGraph(
        name=name,
        graph=graph,
        order=tuple(op.name for op in ops),
        inputs=inputs,
        outputs=outputs,
        tensors=tensors,
        opset=default_opset(view.model),
        source=source,
    )


def _graph_io(view: GraphView, name: str) -> TensorInfo:
    shape = view.shape(name) or ()
    return _tensor_info(view, name, tuple(d if d is not None else 0 for d in shape))


def load_model(
    source: ModelSource,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    batch: int | None = None,
    name: str | None = None,
) -> ModelGraph:
    """Read an ONNX model (path, bundled fixture stem, or ModelProto) into a `ModelGraph`.

    input_shapes: pin graph inputs, e.g. ``{"x": (1, 3, 224, 224)}`` (needed for dynamic dims);
    batch: override the leading dim of every input (Reshape targets that hard-code the export batch
    are re-solved). Raises `ModelError` with a one-line message for anything it cannot read.
    """
    proto, stem, path = read_model(source)
    model = prepare(proto, input_shapes, batch)
    view = GraphView(model)
    return build_graph(view, name or stem, path)
