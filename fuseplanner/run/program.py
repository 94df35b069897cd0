"""(ONNX model, ModelGraph, Plan) -> the ordered steps that run the whole model.

A `KernelStep` is one of fuseplanner's kernels (a plan group, or a planned dw/pw/linear layer with a
tile): it covers its member nodes, their epilogue nodes (BN, bias, activation) and an absorbed
residual Add, whose other operand it reads as `residual`. A `LibraryStep` runs one other ONNX node
through the operator library (`fuseplanner.run.ops`). Constant nodes are folded at load and never
become steps. A dw/pw/linear/conv op that runs in the library gets its BN and bias folded into one
synthesized Conv (or MatMul + Add) node; its activation nodes stay library steps. Chains of
elementwise library steps then merge into one step each (`fuseplanner.run.chains`).

A planned kernel runs only where it computes exactly what the ONNX nodes compute; otherwise its nodes
run in the library and the step says why (`LibraryStep.reason`): an activation the kernels lack
(a Clip other than ReLU/ReLU6, tanh-approximated GELU, HardSigmoid or LeakyRelu with other
constants), a depthwise channel multiplier other than 1, or a group that would skip a node between
its members.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx

from fuseplanner.core.errors import ModelError, PlanError
from fuseplanner.core.ir import ModelGraph, Op, Tile
from fuseplanner.core.kinds import LAYER_KINDS, WEIGHTED_KINDS
from fuseplanner.frontend.view import GraphView
from fuseplanner.run.constants import fold_constants
from fuseplanner.run.weights import fold

#: Op types whose output aliases their (contiguous) input's buffer.
VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"})
_PARAM_ROLES = {"Resize": (1, 2)}  # inputs that stay float32 whatever the storage dtype (roi, scales)


@dataclass(frozen=True)
class KernelStep:
    """One planned kernel: `kind` over `ops` with `tile`, reading `input` (+ `residual`), writing `output`."""

    kind: str
    ops: tuple[Op, ...]
    tile: Tile
    params: tuple[tuple[np.ndarray, np.ndarray], ...]
    input: str
    output: str
    residual: str | None
    covers: tuple[str, ...]

    @property
    def label(self) -> str:
        return "+".join(op.name for op in self.ops)

    @property
    def inputs(self) -> tuple[str, ...]:
        return (self.input,) if self.residual is None else (self.input, self.residual)

    @property
    def outputs(self) -> tuple[str, ...]:
        return (self.output,)


@dataclass(frozen=True)
class LibraryStep:
    """One ONNX node (or a synthesized folded conv/linear node) run by the operator library.

    `inputs` align with the node's inputs ("" for an absent optional input); `view`: the output
    aliases input 0 (no kernel runs); `reason`: why a planned op runs here instead of a kernel."""

    node: object
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    covers: tuple[str, ...]
    view: bool = False
    reason: str = ""

    @property
    def label(self) -> str:
        return getattr(self.node, "name", self.op_type)


Step = KernelStep | LibraryStep


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


@dataclass(frozen=True)
class Program:
    """The steps of one model, its activation tensors, and the constants steps read."""

    name: str
    steps: tuple[Step, ...]
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    tensors: Mapping[str, TensorSpec]
    constants: Mapping[str, np.ndarray]
    folded: tuple[str, ...]
    dtype: str
    precision: str
    model_dtypes: Mapping[str, np.dtype] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        """Steps by kind: each kernel kind, `library`, `view` (aliases, nothing runs)."""
        out: dict[str, int] = {}
        for s in self.steps:
            key = s.kind if isinstance(s, KernelStep) else ("view" if s.view else "library")
            out[key] = out.get(key, 0) + 1
        return out


# ---- exactness of planned kernels ---------------------------------------------------------------------
def _node_issue(view: GraphView, node: onnx.NodeProto) -> str | None:
    op = node.op_type
    if op == "HardSigmoid":
        alpha, beta = float(view.attr(node, "alpha", 0.2)), float(view.attr(node, "beta", 0.5))
        if abs(alpha - 1 / 6) > 1e-6 or abs(beta - 0.5) > 1e-6:
            return f"HardSigmoid {node.name!r} has alpha {alpha:g}, beta {beta:g}; the kernels apply 1/6, 0.5"
    if op == "LeakyRelu" and abs(float(view.attr(node, "alpha", 0.01)) - 0.01) > 1e-9:
        return f"LeakyRelu {node.name!r} has a slope other than the kernels' 0.01"
    if op == "Tanh":
        return f"GELU through Tanh ({node.name!r}) is an approximation; the kernels apply the exact erf form"
    if op == "Gelu" and str(view.attr(node, "approximate", b"none")) not in ("none", "b'none'"):
        return f"Gelu {node.name!r} is tanh-approximated; the kernels apply the exact erf form"
    return None


def kernel_issue(view: GraphView, names: Mapping[str, int], ops: Sequence[Op]) -> str | None:
    """Why a planned kernel over `ops` would not compute exactly what the ONNX nodes do, or None."""
    from fuseplanner.kernels import activation

    for op in ops:
        try:
            activation(op)
        except PlanError as exc:
            return str(exc)
        if op.kind == "dw" and op.c_out != op.c_in:
            return f"depthwise {op.name!r} has channel multiplier {op.c_out // op.c_in}; the kernels take 1"
        for n in op.epilogue_nodes:
            why = _node_issue(view, view.nodes[names[n]])
            if why:
                return why
    return None


# ---- building -----------------------------------------------------------------------------------------
@dataclass
class _Builder:
    view: GraphView
    graph: ModelGraph
    values: dict[str, np.ndarray]
    ops_lib: object
    storage: np.dtype
    names: dict[str, int] = field(default_factory=dict)
    placed: list[tuple[int, int, Step]] = field(default_factory=list)
    covered: dict[int, str] = field(default_factory=dict)

    def cover(self, indices: Sequence[int], label: str) -> None:
        for i in indices:
            if i in self.covered:
                raise PlanError(f"ONNX node {self.view.node_name(i)!r} is covered by both "
                                f"{self.covered[i]!r} and {label!r}: the plan does not match this model")  # fmt: skip
            self.covered[i] = label

    def add(self, step: Step, at: int) -> None:
        self.placed.append((at, len(self.placed), step))

    def indices(self, op: Op) -> list[int]:
        return [op.index, *(self.names[n] for n in op.epilogue_nodes)]

    def dtype_of(self, name: str) -> np.dtype:
        dt = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(self.view.elem_type(name)))
        return self.storage if dt == np.float32 else dt

    def shape_of(self, name: str) -> tuple[int, ...]:
        shape = self.view.shape(name)
        if shape is None or any(d is None for d in shape):
            raise ModelError(f"tensor {name!r} has no static shape after shape inference: pin the inputs "
                             "with --input-shape NAME=DIMS")  # fmt: skip
        return tuple(int(d) for d in shape)


def _lib_node(b: _Builder, name: str, op_type: str, attrs: dict, inputs: Sequence[str], outputs: Sequence[str],
              consts: Mapping[str, np.ndarray]):  # fmt: skip
    """An op-library Node: activation inputs by shape/dtype, constants as host arrays."""
    in_shapes, in_dtypes, cvals = [], [], []
    for pos, t in enumerate(inputs):
        value = consts.get(t) if t else None
        if value is not None and value.dtype == np.float32 and pos not in _PARAM_ROLES.get(op_type, ()):
            value = value.astype(b.storage)
        cvals.append(value)
        in_shapes.append(tuple(value.shape) if value is not None else (b.shape_of(t) if t else ()))
        in_dtypes.append(value.dtype if value is not None else (b.dtype_of(t) if t else None))
    return b.ops_lib.Node(name=name, op_type=op_type, attrs=attrs, input_shapes=tuple(in_shapes),
                          input_dtypes=tuple(in_dtypes), output_shapes=tuple(b.shape_of(o) for o in outputs),
                          output_dtypes=tuple(b.dtype_of(o) for o in outputs), consts=tuple(cvals),
                          opset=b.graph.opset)  # fmt: skip


def _attrs(node: onnx.NodeProto) -> dict:
    out = {}
    for a in node.attribute:
        v = onnx.helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


def _onnx_step(b: _Builder, index: int, reason: str = "") -> None:
    """One ONNX node as a library step (a view step for contiguous view ops)."""
    node = b.view.nodes[index]
    inputs = tuple(node.input)
    outputs = tuple(o for o in node.output if o)
    live_outputs = [o for o in outputs if b.view.consumers.get(o) or o in b.view.graph_outputs]
    view = node.op_type in VIEW_OPS and len(live_outputs) <= 1 and inputs[0] not in b.values
    lib = _lib_node(b, b.view.node_name(index), node.op_type, _attrs(node), inputs, outputs, b.values)
    name = b.view.node_name(index)
    if view and math.prod(lib.input_shapes[0]) != math.prod(lib.output_shapes[0]):
        raise ModelError(f"{node.op_type} node {name!r} views {lib.input_shapes[0]} as {lib.output_shapes[0]}, "
                         "which has another number of elements: the model is inconsistent")  # fmt: skip
    b.cover([index], name)
    b.add(LibraryStep(lib, node.op_type, inputs, outputs[:1] if view else outputs, (name,), view, reason), index)


def _folded_op(b: _Builder, op: Op, reason: str) -> None:
    """A conv/linear op in the library: its node with BN and bias folded, then its activation nodes."""
    idx = b.indices(op)
    passive = sum(1 for e in op.epilogue if e in ("bias", "bn"))
    w, bias = fold(b.view, b.values, op)
    w, bias = w.astype(b.storage), bias.astype(b.storage)
    node = b.view.nodes[op.index]
    out = b.view.nodes[idx[passive]].output[0] if passive else node.output[0]
    x = op.inputs[0]
    covers = tuple(b.view.node_name(i) for i in idx[: passive + 1])
    b.cover(idx[: passive + 1], op.name)
    wname, bname = f"{op.name}::w", f"{op.name}::b"
    consts = {wname: np.ascontiguousarray(w.T) if op.kind == "linear" else w, bname: bias}
    if op.kind == "linear":
        mid = f"{op.name}::matmul"
        b.view.shapes[mid] = (b.shape_of(out), onnx.TensorProto.FLOAT)
        mm = _lib_node(b, mid, "MatMul", {}, (x, wname), (mid,), consts)
        b.add(LibraryStep(mm, "MatMul", (x, wname), (mid,), covers, reason=reason), idx[passive])
        add = _lib_node(b, f"{op.name}::bias", "Add", {}, (mid, bname), (out,), consts)
        b.add(LibraryStep(add, "Add", (mid, bname), (out,), (), reason=reason), idx[passive])
    else:
        attrs = {"kernel_shape": list(op.kernel), "strides": list(op.stride), "pads": list(op.pads),
                 "dilations": list(op.dilation), "group": op.groups}  # fmt: skip
        conv = _lib_node(b, op.name, "Conv", attrs, (x, wname, bname), (out,), consts)
        b.add(LibraryStep(conv, "Conv", (x, wname, bname), (out,), covers, reason=reason), idx[passive])
    b.values.update(consts)
    for i in idx[passive + 1:]:
        _onnx_step(b, i, reason)


def _library_op(b: _Builder, name: str, reason: str = "") -> None:
    op = b.graph.op(name)
    if op.kind in WEIGHTED_KINDS:
        _folded_op(b, op, reason)
    else:
        _onnx_step(b, op.index, reason)


def _kernel(b: _Builder, kind: str, members: Sequence[str], absorbed: Sequence[str], tile: Tile | None,
            residual: str | None) -> None:  # fmt: skip
    """A planned kernel over `members` (+ absorbed nodes), or its nodes in the library when not exact."""
    ops = tuple(b.graph.op(m) for m in members)
    extra = [b.graph.op(a) for a in absorbed]
    add = extra[-1] if residual is not None and extra and extra[-1].op_type == "Add" else None
    between = [o for o in extra if o is not add]
    why = kernel_issue(b.view, b.names, ops)
    if tile is None:
        why = why or "the plan gives this op no tile"
    odd = [o for o in between if o.op_type != "Identity"]
    if odd and not why:
        why = f"{odd[0].op_type} node {odd[0].name!r} between the group's members has no kernel epilogue"
    if why:
        for n in (*members, *absorbed):
            _library_op(b, n, why)
        return
    idx = [i for op in ops for i in b.indices(op)] + [o.index for o in extra]
    label = "+".join(members)
    b.cover(idx, label)
    params = tuple(fold(b.view, b.values, op) for op in ops)
    output = add.outputs[0] if add is not None else ops[-1].outputs[0]
    covers = tuple(b.view.node_name(i) for i in idx)
    b.add(KernelStep(kind, ops, tile, params, ops[0].inputs[0], output, residual if add is not None else None,
                     covers), max(idx))  # fmt: skip


def lib_module():
    try:
        from fuseplanner.run import ops
    except ImportError as exc:
        raise ModelError(f"the operator library fuseplanner.run.ops cannot be imported ({exc}): reinstall "
                         "fuseplanner") from None  # fmt: skip
    return ops


def check_supported(steps: Sequence[Step], supported) -> None:
    """ModelError naming each op type the library lacks and how many nodes use it."""
    missing: dict[str, int] = {}
    for s in steps:
        if isinstance(s, LibraryStep) and not s.view and s.op_type not in supported:
            missing[s.op_type] = missing.get(s.op_type, 0) + 1
    _raise_missing(missing)


def precheck_supported(model: onnx.ModelProto, graph: ModelGraph, supported) -> None:
    """Before planning or any GPU work: ModelError naming each op type the library lacks among the
    nodes no planned kernel can take (conv/linear ops and their epilogues run as kernels or folded)."""
    view = GraphView(model)
    names = {view.node_name(i): i for i in range(len(view.nodes))}
    kernel_side = set()
    for op in graph.ops():
        if op.kind in WEIGHTED_KINDS:
            kernel_side.update([op.index, *(names[n] for n in op.epilogue_nodes)])
    missing: dict[str, int] = {}
    for i in view.compute:
        t = view.nodes[i].op_type
        if i not in kernel_side and t not in VIEW_OPS and t not in supported:
            missing[t] = missing.get(t, 0) + 1
    _raise_missing(missing)


def _raise_missing(missing: dict[str, int]) -> None:
    if missing:
        listed = ", ".join(f"{k} ({v} node{'s' if v != 1 else ''})" for k, v in sorted(missing.items()))
        raise ModelError(f"unsupported operators: {listed}; fuseplanner run cannot execute this model")


def build_program(model: onnx.ModelProto, graph: ModelGraph, plan, *, dtype: str = "fp32",
                  precision: str = "fp32", ops_lib=None, chains: bool = True) -> Program:  # fmt: skip
    """The steps of `model` (shape-inferred, every weight inline) as `plan` says; see the module docstring.
    `chains`: merge elementwise chains into one step each (`fuseplanner.run.chains`) where the
    operator library runs them."""
    ops_lib = ops_lib or lib_module()
    view = GraphView(model)
    values, folded = fold_constants(view)
    storage = np.dtype(np.float16 if dtype == "fp16" else np.float32)
    b = _Builder(view, graph, values, ops_lib, storage)
    b.names = {view.node_name(i): i for i in range(len(view.nodes))}
    for g in plan.groups:
        _kernel(b, g.kind, g.nodes, g.absorbed, g.tile, g.residual_input if g.residual else None)
    for lay in plan.layers:
        if lay.tile is not None and lay.kind in LAYER_KINDS:
            _kernel(b, lay.kind, [lay.node], lay.absorbed, lay.tile, lay.residual_input if lay.residual else None)
        else:
            for n in lay.covers:
                _library_op(b, n)
    left = [view.node_name(i) for i in view.compute if i not in b.covered]
    if left:
        raise PlanError(f"the plan covers no step for ONNX node {left[0]!r} ({len(left)} nodes uncovered): "
                        "it was made for another model")  # fmt: skip
    steps = tuple(s for _, _, s in sorted(b.placed, key=lambda p: (p[0], p[1])))
    if chains:
        from fuseplanner.run.chains import CHAIN_OP, fuse_chains

        if CHAIN_OP in ops_lib.SUPPORTED:
            steps = fuse_chains(steps, {o.name for o in graph.outputs}, ops_lib.Node)
    check_supported(steps, ops_lib.SUPPORTED)
    return _program(b, graph, steps, folded, dtype, precision)


def _program(b: _Builder, graph: ModelGraph, steps, folded, dtype: str, precision: str) -> Program:
    tensors: dict[str, TensorSpec] = {}
    for s in steps:
        for t in (*s.inputs, *s.outputs):
            if t and t not in b.values and t not in tensors:
                tensors[t] = TensorSpec(t, b.shape_of(t), b.dtype_of(t))
    ios = {}
    for info in (*graph.inputs, *graph.outputs):
        if info.name not in b.values:
            tensors.setdefault(info.name, TensorSpec(info.name, b.shape_of(info.name), b.dtype_of(info.name)))
        ios[info.name] = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(b.view.elem_type(info.name)))
    used = {t for s in steps for t in s.inputs if t in b.values}
    used |= {o.name for o in graph.outputs if o.name in b.values}
    return Program(
        name=graph.name, steps=steps,
        inputs=tuple(tensors[i.name] for i in graph.inputs),
        outputs=tuple(tensors.get(o.name) or TensorSpec(o.name, tuple(b.values[o.name].shape),
                                                        b.values[o.name].dtype) for o in graph.outputs),
        tensors=tensors, constants={k: b.values[k] for k in used},
        folded=tuple(b.view.node_name(i) for i in folded), dtype=dtype, precision=precision, model_dtypes=ios,
    )  # fmt: skip
