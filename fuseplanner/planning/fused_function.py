"""Self-describing ``ai.fuseplanner::FusedConv`` nodes, each with an ONNX function of its own.

Every fused node carries, per member (in execution order), parallel list attributes:

    member_kinds            "pw" / "dw"
    member_kernel_shapes    2 ints per member (kh, kw)
    member_strides          2 ints per member
    member_pads             4 ints per member (top, left, bottom, right)
    member_dilations        2 ints per member
    member_groups           1 int per member
    member_epilogues        canonical epilogue ops joined by "+" ("bn+relu6", "bias", "" for none)
    member_weights          index of the member's weight among the node's inputs
    member_biases           index of its bias among the node's inputs, -1 when it has none

plus ``tile`` (th, tw, tf, tc, threads). The file carries one `FunctionProto` per fused node
(domain ``ai.fuseplanner``, name ``FusedConv``, overload = the node's name) whose body is the
original subgraph, so any ONNX runtime that inlines functions runs the rewritten model unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx
from onnx import helper

#: ONNX IR version that introduced function overloads (FunctionProto.overload, NodeProto.overload).
IR_WITH_OVERLOADS = 10


def member_attributes(members: Sequence, node_inputs: Sequence[str]) -> dict[str, list]:
    """The per-member attribute lists of a fused node (`members`: the `ir.Op` of each member)."""
    position = {name: i for i, name in enumerate(node_inputs)}
    out: dict[str, list] = {k: [] for k in (
        "member_kinds", "member_kernel_shapes", "member_strides", "member_pads", "member_dilations",
        "member_groups", "member_epilogues", "member_weights", "member_biases")}  # fmt: skip
    for op, (weight, bias) in members:
        out["member_kinds"].append(op.kind)
        out["member_kernel_shapes"].extend(int(k) for k in op.kernel)
        out["member_strides"].extend(int(s) for s in op.stride)
        out["member_pads"].extend(int(p) for p in op.pads)
        out["member_dilations"].extend(int(d) for d in op.dilation)
        out["member_groups"].append(int(op.groups))
        out["member_epilogues"].append("+".join(op.epilogue))
        out["member_weights"].append(position.get(weight, -1))
        out["member_biases"].append(position.get(bias, -1) if bias else -1)
    return out


def conv_operands(node: onnx.NodeProto) -> tuple[str, str]:
    """(weight, bias) input names of a Conv node (bias "" when absent)."""
    weight = node.input[1] if len(node.input) > 1 else ""
    bias = node.input[2] if len(node.input) > 2 else ""
    return weight, bias


def function_for(node: onnx.NodeProto, body: Sequence[onnx.NodeProto], opsets: Sequence[onnx.OperatorSetIdProto]) -> onnx.FunctionProto:
    """The function a fused node calls: its inputs and outputs, the replaced nodes as body."""
    imports = [helper.make_opsetid(o.domain, o.version) for o in opsets if o.domain in ("", "ai.onnx")]
    formal: list[str] = []
    for name in node.input:  # a residual Add of the group's own input passes one tensor twice
        formal.append(name if name not in formal else f"{name}__fuseplanner_repeat{len(formal)}")
    fn = helper.make_function(
        node.domain, node.op_type, formal, list(node.output), [_copy(n) for n in body], imports,
        attributes=[a.name for a in node.attribute],
    )
    fn.overload = node.name
    node.overload = node.name
    return fn


def _copy(node: onnx.NodeProto) -> onnx.NodeProto:
    out = onnx.NodeProto()
    out.CopyFrom(node)
    return out


def attach(model: onnx.ModelProto, functions: Sequence[onnx.FunctionProto]) -> None:
    """Add the functions to the model in place (raising its IR version to one with overloads)."""
    model.functions.extend(functions)
    model.ir_version = max(model.ir_version, IR_WITH_OVERLOADS)
