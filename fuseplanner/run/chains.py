"""Elementwise chains: consecutive elementwise library steps merged into one `FusedElementwise` step.

A chain is a run of library steps, each a float activation, Add/Sub/Mul/Div or Clip with constant
bounds, where every step but the last writes one tensor that only the next member reads (not a graph
output), and every member's output has the chain's output shape. The others inputs of the members
(the chain's external inputs: activations, constants) broadcast onto it, so x * sigmoid(x),
Add -> Relu or the five nodes of an exported erf GELU each become one step, run by the operator
library as one generated elementwise kernel on the GPU (a composition of the members' kernels on the
CPU, which computes exactly what the separate steps compute). The fused step runs where its last member
ran; its intermediate tensors leave the program, so the memory plan never allocates them.

The fused node's `attrs["chain"]` holds one `ChainOp` per member, in order. A member's operands index
the chain's values: the fused node's inputs first, then the members' results (input count + member
index); None stands for an absent optional input. A Clip with constant bounds that joins no chain
still becomes a one-member chain: one generated kernel instead of the library's copy, max and min.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fuseplanner.run.program import LibraryStep, Step

#: The op type of a merged chain in the operator library.
CHAIN_OP = "FusedElementwise"
UNARY = frozenset({"Sqrt", "Exp", "Tanh", "Neg", "Abs", "Reciprocal", "Relu", "Erf", "Sigmoid", "HardSigmoid",
                   "HardSwish", "LeakyRelu", "Gelu"})  # fmt: skip
BINARY = frozenset({"Add", "Sub", "Mul", "Div"})


@dataclass(frozen=True)
class ChainOp:
    """One member of a chain: its op-library node and, per node input, the chain value it reads."""

    node: object
    operands: tuple[int | None, ...]


def _float(dtype) -> bool:
    return dtype is not None and np.dtype(dtype).kind == "f"


def fusible(step: Step) -> bool:
    """A library step that can join an elementwise chain (see the module docstring)."""
    if not isinstance(step, LibraryStep) or step.view or len(step.outputs) != 1:
        return False
    node = step.node
    op = step.op_type
    if op == "Clip":
        dynamic = [i for i in (1, 2) if i < len(step.inputs) and step.inputs[i] and node.consts[i] is None]
        ok = not dynamic
    else:
        ok = op in UNARY or op in BINARY
    dtypes = [d for d, t in zip(node.input_dtypes, step.inputs, strict=False) if t]
    return ok and all(_float(d) for d in (*dtypes, *node.output_dtypes))


def _consumers(steps: Sequence[Step]) -> dict[str, int]:
    """How many reads each tensor has over all steps (a step reading it twice counts once)."""
    out: dict[str, int] = {}
    for s in steps:
        for t in set(s.inputs):
            if t:
                out[t] = out.get(t, 0) + 1
    return out


def find_chains(steps: Sequence[Step], graph_outputs: set[str]) -> list[list[int]]:
    """Indices of the steps of each chain of two or more members, in step order."""
    reads = _consumers(steps)
    open_by_tail: dict[str, list[int]] = {}  # a chain's last output -> its member indices
    chains: list[list[int]] = []
    for i, s in enumerate(steps):
        if not fusible(s):
            continue
        shape = s.node.output_shapes[0]
        joined = None
        for t in s.inputs:
            chain = open_by_tail.get(t)
            if chain is None or reads.get(t) != 1 or t in graph_outputs:
                continue
            if steps[chain[-1]].node.output_shapes[0] == shape:
                joined = open_by_tail.pop(t)
                break
        if joined is None:
            joined = []
            chains.append(joined)
        joined.append(i)
        open_by_tail[s.outputs[0]] = joined
    return [c for c in chains if len(c) > 1 or steps[c[0]].op_type == "Clip"]  # a lone Clip: one kernel, not three


def _merged(members: Sequence[LibraryStep], node_cls) -> LibraryStep:
    """One FusedElementwise step for `members` (a chain found by `find_chains`)."""
    produced = {m.outputs[0]: k for k, m in enumerate(members)}
    ext: list[str] = []
    shapes, dtypes, consts = [], [], []
    for m in members:
        for pos, t in enumerate(m.inputs):
            if t and t not in produced and t not in ext:
                ext.append(t)
                shapes.append(m.node.input_shapes[pos])
                dtypes.append(m.node.input_dtypes[pos])
                consts.append(m.node.consts[pos] if pos < len(m.node.consts) else None)
    chain = tuple(ChainOp(m.node, tuple(None if not t else (len(ext) + produced[t] if t in produced else ext.index(t))
                                        for t in m.inputs)) for m in members)  # fmt: skip
    last = members[-1].node
    node = node_cls(name="+".join(m.label for m in members), op_type=CHAIN_OP, attrs={"chain": chain},
                    input_shapes=tuple(shapes), input_dtypes=tuple(dtypes), output_shapes=last.output_shapes,
                    output_dtypes=last.output_dtypes, consts=tuple(consts), opset=last.opset)  # fmt: skip
    reason = next((m.reason for m in members if m.reason), "")
    covers = tuple(n for m in members for n in m.covers)
    return LibraryStep(node, CHAIN_OP, tuple(ext), members[-1].outputs, covers, reason=reason)


def fuse_chains(steps: Sequence[Step], graph_outputs: set[str], node_cls) -> tuple[Step, ...]:
    """`steps` with every elementwise chain merged into one step at its last member's place."""
    chains = find_chains(steps, graph_outputs)
    if not chains:
        return tuple(steps)
    replace = {c[-1]: _merged([steps[i] for i in c], node_cls) for c in chains}
    dropped = {i for c in chains for i in c[:-1]}
    return tuple(replace.get(i, s) for i, s in enumerate(steps) if i not in dropped)
