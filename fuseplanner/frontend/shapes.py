"""Shape preparation for ONNX models: opset upgrade, input pinning, batch override and shape inference.

Everything here works on a `onnx.ModelProto` whose large initializers may point at external data that
does not exist (structure-only models): only tensor dims are used, never weight values. Small constant
tensors that are stored inline (Reshape targets, Clip bounds) may be read.
"""

from __future__ import annotations

import contextlib
import copy
import math
import tempfile
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import numpy_helper, shape_inference

from fuseplanner.core.errors import ModelError, ModelNote

#: The opset the importer normalises to.
TARGET_OPSET = 18
#: Ops whose output depends only on their input's shape, not its values.
_SHAPE_ONLY_OPS = ("Shape", "Size")

Shape = tuple[int | None, ...]


def default_opset(model: onnx.ModelProto) -> int:
    """Opset version of the default ONNX domain, or raise ModelError if the model does not say."""
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    raise ModelError("the model declares no default-domain opset: re-export it with an ONNX exporter (opset 11-18)")


def check_versions(model: onnx.ModelProto) -> int:
    """Raise ModelError when the IR version or opset is one this onnx package cannot read."""
    if model.ir_version <= 0:
        raise ModelError("the model has no IR version (not an ONNX model?): re-export it with an ONNX exporter")
    if model.ir_version > onnx.IR_VERSION:
        raise ModelError(
            f"the model uses ONNX IR version {model.ir_version} but the installed onnx {onnx.__version__} "
            f"reads up to {onnx.IR_VERSION}: upgrade onnx (pip install -U onnx) or re-export with an older exporter"
        )
    opset = default_opset(model)
    newest = onnx.defs.onnx_opset_version()
    if opset < 1 or opset > newest:
        raise ModelError(
            f"the model uses opset {opset} but the installed onnx {onnx.__version__} knows opsets 1-{newest}: "
            "upgrade onnx (pip install -U onnx) or re-export with opset 18"
        )
    return opset


def upgrade_opset(model: onnx.ModelProto, target: int = TARGET_OPSET) -> onnx.ModelProto:
    """The model converted to `target` opset when onnx's version converter can; else the model unchanged."""
    if default_opset(model) >= target:
        return model
    try:
        from onnx import version_converter

        converted = version_converter.convert_version(model, target)
    except Exception:  # the converter raises many kinds of errors on exotic graphs: keep the original
        return model
    if len(converted.graph.node) == 0 and len(model.graph.node) > 0:
        return model
    return converted


def initializer_names(model: onnx.ModelProto) -> set[str]:
    """Names of the graph's initializers (including sparse ones)."""
    names = {t.name for t in model.graph.initializer}
    names.update(t.values.name for t in model.graph.sparse_initializer)
    return names


def activation_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Graph inputs that are fed at run time (not initializers listed as inputs, as IR < 4 models do)."""
    inits = initializer_names(model)
    return [v for v in model.graph.input if v.name not in inits]


def dims_of(value: onnx.ValueInfoProto) -> Shape | None:
    """Dims of a tensor value_info (None for an unknown dim); None when it has no shape at all."""
    tt = value.type.tensor_type
    if not value.type.HasField("tensor_type") or not tt.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tt.shape.dim)


def _dim_labels(value: onnx.ValueInfoProto) -> list[str]:
    labels = []
    for d in value.type.tensor_type.shape.dim:
        if d.HasField("dim_value") and d.dim_value > 0:
            labels.append(str(d.dim_value))
        else:
            labels.append(d.dim_param or "?")
    return labels


def _set_dims(value: onnx.ValueInfoProto, dims: Sequence[int]) -> None:
    shape = value.type.tensor_type.shape
    del shape.dim[:]
    for d in dims:
        shape.dim.add().dim_value = int(d)


def pin_inputs(
    model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]] | None, batch: int | None
) -> bool:
    """Fix graph-input dims in place: `input_shapes` pins whole shapes, `batch` sets dim 0.

    A lone unknown leading (batch) dim becomes `batch` or 1. Returns True when any dim changed.
    """
    inputs = activation_inputs(model)
    names = [v.name for v in inputs]
    for name, dims in (input_shapes or {}).items():
        if name not in names:
            raise ModelError(
                f"--input-shape names {name!r} but the model's inputs are {', '.join(names) or 'none'}: "
                "use one of those names"
            )
        if not dims or any(int(d) <= 0 for d in dims):
            raise ModelError(f"input shape for {name!r} must be positive dims such as 1x3x224x224, got {dims!r}")
    changed = False
    for value in inputs:
        old = dims_of(value)
        if value.name in (input_shapes or {}):
            new = [int(d) for d in input_shapes[value.name]]  # type: ignore[index]
            if old is not None and len(old) != len(new):
                raise ModelError(
                    f"input {value.name!r} has rank {len(old)} but --input-shape gives {len(new)} dims: "
                    f"give {len(old)} dims ({'x'.join(_dim_labels(value))})"
                )
        elif old is None:
            continue
        else:
            new = [d if d is not None else 0 for d in old]
            if new and new[0] == 0 and all(d for d in new[1:]):
                new[0] = batch or 1
                if batch is None:
                    _note(f"input {value.name!r} has a dynamic batch dim ({_dim_labels(value)[0]}): planned for "
                          "batch 1 (set another with --batch N)")
        if batch is not None and new:
            new[0] = batch
        if any(d == 0 for d in new):
            continue
        if old is None or tuple(new) != old:
            _set_dims(value, new)
            changed = True
    return changed


def _note(text: str) -> None:
    warnings.warn(ModelNote(text), stacklevel=3)


def infer(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnx shape inference (with data propagation); the model unchanged if inference fails."""
    for kwargs in ({"data_prop": True}, {}):
        try:
            return shape_inference.infer_shapes(model, **kwargs)
        except Exception:
            continue
    return model


def symbolic_infer(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnxruntime's symbolic shape inference when installed and it succeeds; else the model unchanged."""
    try:
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference
    except Exception:
        return model
    try:
        # On failure onnxruntime saves a debug copy (sym_shape_infer_temp.onnx) into the working
        # directory: run it from a scratch directory so nothing lands in the user's folder.
        with tempfile.TemporaryDirectory() as scratch, contextlib.chdir(scratch):
            out = SymbolicShapeInference.infer_shapes(model, auto_merge=True, guess_output_rank=False)
    except Exception:
        return model
    return out if out is not None else model


def shape_table(model: onnx.ModelProto) -> dict[str, tuple[Shape, int]]:
    """Every tensor name with known type -> (dims, ONNX element type), from value_info, I/O and initializers."""
    table: dict[str, tuple[Shape, int]] = {}
    g = model.graph
    for v in list(g.input) + list(g.value_info) + list(g.output):
        dims = dims_of(v)
        if dims is not None:
            table[v.name] = (dims, v.type.tensor_type.elem_type)
    for t in g.initializer:
        table[t.name] = (tuple(int(d) for d in t.dims), t.data_type)
    for node in g.node:
        if node.op_type == "Constant" and node.output:
            tensor = constant_node_tensor(node)
            if tensor is not None:
                table[node.output[0]] = (tuple(int(d) for d in tensor.dims), tensor.data_type)
    return table


def constant_node_tensor(node: onnx.NodeProto) -> onnx.TensorProto | None:
    """The TensorProto a Constant node produces (value, value_float(s), value_int(s)), or None."""
    for attr in node.attribute:
        if attr.name == "value":
            return attr.t
        if attr.name == "value_float":
            return numpy_helper.from_array(np.array(attr.f, dtype=np.float32))
        if attr.name == "value_floats":
            return numpy_helper.from_array(np.array(list(attr.floats), dtype=np.float32))
        if attr.name == "value_int":
            return numpy_helper.from_array(np.array(attr.i, dtype=np.int64))
        if attr.name == "value_ints":
            return numpy_helper.from_array(np.array(list(attr.ints), dtype=np.int64))
    return None


def inline_value(tensor: onnx.TensorProto, max_elements: int = 64) -> np.ndarray | None:
    """Values of a small tensor stored inline; None for external or large tensors (never read weights)."""
    if tensor.data_location == onnx.TensorProto.EXTERNAL or tensor.external_data:
        return None
    if math.prod(tensor.dims) > max_elements:
        return None
    try:
        return numpy_helper.to_array(tensor)
    except Exception:
        return None


def _numel(shape: Shape | None) -> int | None:
    if shape is None or any(d is None for d in shape):
        return None
    return math.prod(shape)  # type: ignore[arg-type]


def _reshape_fix(
    node: onnx.NodeProto, table: Mapping[str, tuple[Shape, int]], values: Mapping[str, onnx.TensorProto]
) -> list[int] | None:
    """A corrected Reshape target when the node's constant target hard-codes another batch, else None."""
    if node.op_type != "Reshape" or len(node.input) < 2 or node.input[1] not in values:
        return None
    in_shape = table.get(node.input[0], (None, 0))[0]
    in_numel = _numel(in_shape)
    target = inline_value(values[node.input[1]])
    if in_numel is None or target is None or target.ndim != 1 or len(target) == 0:
        return None
    dims = [int(d) for d in target]
    if any(d < 0 for d in dims) or dims[0] == 0:
        return None
    rest = []
    for i, d in enumerate(dims[1:], start=1):
        if d == 0:
            if in_shape is None or i >= len(in_shape) or in_shape[i] is None:
                return None
            d = int(in_shape[i])  # type: ignore[arg-type]
        rest.append(d)
    rest_numel = math.prod(rest)
    if rest_numel == 0 or math.prod(dims[:1] + rest) == in_numel or in_numel % rest_numel:
        return None
    return [in_numel // rest_numel, *dims[1:]]


def _constant_tensors(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    values = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output:
            tensor = constant_node_tensor(node)
            if tensor is not None:
                values[node.output[0]] = tensor
    return values


def fix_hardcoded_batch(model: onnx.ModelProto, max_rounds: int = 256) -> onnx.ModelProto:
    """Re-solve the leading dim of Reshape targets that hard-code the export batch, then re-infer.

    Exporters bake the traced batch into Reshape constants (e.g. ``[1, 1280]`` before the classifier, or
    MobileViT's patch reshapes). After a batch override those targets no longer match their input's
    element count; each such target gets its leading dim recomputed from the input, in graph order.
    """
    for _ in range(max_rounds):
        table = shape_table(model)
        values = _constant_tensors(model)
        for index, node in enumerate(model.graph.node):
            fixed = _reshape_fix(node, table, values)
            if fixed is None:
                continue
            name = f"{node.input[1]}__fuseplanner_{index}"
            model.graph.initializer.append(numpy_helper.from_array(np.array(fixed, dtype=np.int64), name))
            node.input[1] = name
            clear_inferred(model)
            model = infer(model)
            break
        else:
            return model
    return model


def clear_inferred(model: onnx.ModelProto) -> None:
    """Drop intermediate and output shapes in place so that inference recomputes them."""
    del model.graph.value_info[:]
    for out in model.graph.output:
        out.type.tensor_type.ClearField("shape")


def unknown_inputs(model: onnx.ModelProto) -> list[tuple[str, list[str]]]:
    """Graph inputs with unknown dims: (name, dim labels such as ['N', '3', 'H', 'W'])."""
    out = []
    for value in activation_inputs(model):
        dims = dims_of(value)
        if dims is None or any(d is None for d in dims):
            out.append((value.name, _dim_labels(value) if dims is not None else []))
    return out


def dynamic_dims_error(name: str, labels: list[str]) -> ModelError:
    """The one-line error for an input whose dims stay unknown."""
    guess = {0: "1", 1: "3"} if len(labels) == 4 else {0: "1"}
    example = "x".join(lbl if lbl.isdigit() else guess.get(i, "224") for i, lbl in enumerate(labels))
    shown = "x".join(labels) if labels else "unknown rank"
    return ModelError(
        f"input {name!r} has dynamic dims ({shown}) that stay unknown after shape inference: "
        f"pin them with --input-shape {name}={example or '1x3x224x224'}"
    )


def prepare(
    model: onnx.ModelProto,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    batch: int | None = None,
) -> onnx.ModelProto:
    """Upgrade, pin inputs, override batch and infer shapes; raise ModelError for unknown input dims."""
    if batch is not None and int(batch) <= 0:
        raise ModelError(f"batch must be a positive integer, got {batch}")
    from fuseplanner.frontend.fold import fold_and_infer
    from fuseplanner.frontend.rebatch import export_batch, rebatch_reshapes, reshape_shapes
    from fuseplanner.frontend.shape_errors import check_input_channels

    check_versions(model)
    model = copy.deepcopy(model)
    model = upgrade_opset(model)
    b0 = export_batch(model, activation_inputs(model))
    exported = None
    if b0 is not None and (batch is not None or input_shapes):
        exported = reshape_shapes(fold_and_infer(infer(copy.deepcopy(model)), infer))
    changed = pin_inputs(model, input_shapes, batch)
    check_input_channels(model, input_shapes)
    for name, labels in unknown_inputs(model):
        raise dynamic_dims_error(name, labels)
    if changed:  # stale shapes recorded by the exporter would contradict the new ones
        clear_inferred(model)
    model = fold_and_infer(infer(model), infer)
    if changed and exported:
        b = export_batch(model, activation_inputs(model))
        if b is not None:
            model = rebatch_reshapes(model, exported, b0, b, lambda m: fold_and_infer(infer(m), infer))
    if changed:
        model = fix_hardcoded_batch(model)
    if _has_unknown(model):
        model = symbolic_infer(model)
    return model


def _has_unknown(model: onnx.ModelProto) -> bool:
    """True when some node output has no shape or an unknown dim."""
    table = shape_table(model)
    for node in model.graph.node:
        if node.op_type in _SHAPE_ONLY_OPS or node.op_type == "Constant":
            continue
        for out in node.output:
            if out and (out not in table or any(d is None for d in table[out][0])):
                return True
    return False
