"""Recognise elementwise epilogues (bias, BN, activations) that follow a convolution or linear layer.

An epilogue is absorbed into the op before it only when that op's output feeds nothing but the
epilogue, so no other consumer needs the pre-activation tensor. Single ops (Relu, Clip, HardSwish,
BatchNormalization, bias Add, ...) and small single-exit patterns (SiLU = x * Sigmoid(x), HardSwish =
x * HardSigmoid(x), GELU through Erf or Tanh) are recognised. Kernels apply per-channel bias (BN is
folded into weights and bias), then one activation, so a bias or BN after an activation, or a second
activation, is not absorbed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from fuseplanner.frontend.view import GraphView

#: Canonical activation names (the kernels apply at most one, after bias/BN).
ACTIVATIONS = ("relu", "relu6", "clip", "hardswish", "hardsigmoid", "sigmoid", "silu", "gelu", "leakyrelu")
#: Single ONNX ops that are activations, with their canonical names.
_UNARY = {
    "Relu": "relu",
    "HardSwish": "hardswish",
    "HardSigmoid": "hardsigmoid",
    "Sigmoid": "sigmoid",
    "LeakyRelu": "leakyrelu",
    "Gelu": "gelu",
    "FastGelu": "gelu",
}
#: Ops that may appear inside a multi-node activation pattern.
_PATTERN_OPS = {"Sigmoid", "HardSigmoid", "Mul", "Div", "Add", "Sub", "Erf", "Tanh", "Pow", "Sqrt"}
_MAX_PATTERN = 9


@dataclass(frozen=True)
class Epilogue:
    """One absorbed epilogue: canonical name, node indices absorbed, tensor after it, parameters."""

    name: str
    nodes: tuple[int, ...]
    output: str
    params: int = 0


def _clip_name(view: GraphView, index: int) -> str:
    node = view.nodes[index]
    lo = hi = None
    if len(node.input) > 1 and node.input[1]:
        v = view.value(node.input[1])
        lo = None if v is None or v.size != 1 else float(v.reshape(-1)[0])
    if len(node.input) > 2 and node.input[2]:
        v = view.value(node.input[2])
        hi = None if v is None or v.size != 1 else float(v.reshape(-1)[0])
    lo = view.attr(node, "min", lo)
    hi = view.attr(node, "max", hi)
    if lo == 0.0 and hi == 6.0:
        return "relu6"
    if lo == 0.0 and (hi is None or np.isinf(hi)):
        return "relu"
    return "clip"


def _channel_const(view: GraphView, name: str, channels: int, rank: int, channel_axis: int) -> bool:
    """True when constant `name` broadcasts as one value per channel (or one value) onto the output."""
    shape = view.shape(name)
    if shape is None or any(d is None for d in shape) or len(shape) > rank:
        return False
    full = (1,) * (rank - len(shape)) + tuple(shape)  # numpy broadcasting aligns trailing dims
    others = [d for i, d in enumerate(full) if i != channel_axis % rank]
    return all(d == 1 for d in others) and full[channel_axis % rank] in (1, channels)


def _single(view: GraphView, x: str, index: int, channels: int, rank: int, channel_axis: int) -> Epilogue | None:
    node = view.nodes[index]
    op = node.op_type
    acts = view.activations(node)
    if acts != [x]:
        return None
    out = node.output[0]
    if op in _UNARY:
        return Epilogue(_UNARY[op], (index,), out)
    if op == "Clip":
        return Epilogue(_clip_name(view, index), (index,), out)
    if op == "BatchNormalization" and channel_axis % rank == 1 % rank:
        params = sum(view.numel(i) for i in node.input[1:5] if i)
        return Epilogue("bn", (index,), out, params)
    if op == "Add" and len(node.input) == 2:
        other = node.input[1] if node.input[0] == x else node.input[0]
        if view.is_const(other) and _channel_const(view, other, channels, rank, channel_axis):
            return Epilogue("bias", (index,), out, view.numel(other))
    return None


def _classify(view: GraphView, members: list[int], x: str) -> str | None:
    ops = Counter(view.nodes[i].op_type for i in members)
    if ops == Counter({"Sigmoid": 1, "Mul": 1}):
        mul = next(view.nodes[i] for i in members if view.nodes[i].op_type == "Mul")
        return "silu" if x in mul.input else None
    if ops == Counter({"HardSigmoid": 1, "Mul": 1}):
        mul = next(view.nodes[i] for i in members if view.nodes[i].op_type == "Mul")
        return "hardswish" if x in mul.input else None
    if ops.get("Erf") == 1 and set(ops) <= {"Div", "Mul", "Add", "Erf"} and len(members) <= 5:
        return "gelu"
    if ops.get("Tanh") == 1 and set(ops) <= {"Mul", "Add", "Pow", "Tanh", "Div"} and 5 <= len(members) <= 9:
        return "gelu"
    return None


def _pattern(view: GraphView, x: str) -> Epilogue | None:
    """The longest single-exit elementwise region starting at `x` that is a known activation."""
    members: list[int] = []
    produced = {x}
    best: Epilogue | None = None
    x_consumers = set(view.only_consumers(x))
    while len(members) < _MAX_PATTERN:
        candidates = sorted(
            i
            for t in produced
            for i in view.consumers.get(t, ())
            if i not in members
            and view.nodes[i].op_type in _PATTERN_OPS
            and all(a in produced for a in view.activations(view.nodes[i]))
        )
        if not candidates:
            break
        members.append(candidates[0])
        produced.update(o for o in view.nodes[candidates[0]].output if o)
        if not x_consumers <= set(members):
            continue
        escaping = [
            t
            for t in produced - {x}
            if t in view.graph_outputs or any(c not in members for c in view.consumers.get(t, ()))
        ]
        if len(escaping) != 1:
            continue
        name = _classify(view, members, x)
        if name:
            best = Epilogue(name, tuple(sorted(members)), escaping[0])
    return best


def match(view: GraphView, x: str, channels: int, rank: int, channel_axis: int = 1) -> Epilogue | None:
    """The epilogue that directly follows tensor `x` (a conv/linear output), or None.

    `channels` is the op's output channel count and `channel_axis` where channels sit in `x`
    (1 for NCHW convs, -1 for token-wise linear layers); they decide whether an Add is a bias.
    """
    consumers = view.only_consumers(x)
    if not consumers:
        return None
    if len(consumers) == 1:
        single = _single(view, x, consumers[0], channels, rank, channel_axis)
        if single is not None:
            return single
    return _pattern(view, x)


def absorb(view: GraphView, x: str, channels: int, rank: int, channel_axis: int = 1) -> list[Epilogue]:
    """Every epilogue absorbed after `x`, in order, respecting bias/BN-then-one-activation."""
    chain: list[Epilogue] = []
    while True:
        ep = match(view, x, channels, rank, channel_axis)
        if ep is None:
            return chain
        has_act = any(e.name in ACTIVATIONS for e in chain)
        if has_act:  # bias/BN after an activation, or a second activation, is its own op
            return chain
        chain.append(ep)
        x = ep.output
