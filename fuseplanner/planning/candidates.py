"""Legal fusion groups, found from the model graph (never from the layer list).

A candidate group is a chain of DW/PW (or linear) ops whose kinds spell a fused kernel kind
(``pw_dw``, ``dw_pw``, ``pw_pw``, ``pw_dw_pw``). It is legal when

- every intermediate tensor has exactly one consumer and is not a graph output, so it never has to
  reach global memory;
- only single-input elementwise nodes (activations the importer left as separate nodes) lie between
  members; they become part of the kernel's epilogue;
- fusing creates no cycle: no path leaves a member and comes back into the group through outside nodes.

A residual ``Add`` may end a group as its epilogue when the group's last output feeds only that Add and
its other operand is already in memory when the kernel starts (e.g. the group's own input); the group is
then marked ``residual``. Otherwise no group crosses a branch or a join.

`find_candidates` returns the legal groups and every rejected pattern match with the reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import networkx as nx

from fuseplanner.core.ir import ModelGraph, Op
from fuseplanner.core.kinds import GROUP_KINDS, GROUP_MEMBERS, MEMBER_KINDS

#: Group kind of each member-kind sequence a fused kernel implements.
PATTERNS: dict[tuple[str, ...], str] = {seq: kind for kind, seqs in GROUP_MEMBERS.items() for seq in seqs}
#: Opaque single-input elementwise ONNX ops that may sit between members (the kernel applies them).
ELEMENTWISE_OPS = frozenset(
    {
        "Relu",
        "Clip",
        "Sigmoid",
        "HardSigmoid",
        "HardSwish",
        "Gelu",
        "LeakyRelu",
        "Elu",
        "Selu",
        "Tanh",
        "Softplus",
        "Mish",
        "Identity",
    }
)


@dataclass(frozen=True)
class Candidate:
    """A legal fusion group.

    `members`: the DW/PW/linear ops the kernel computes, in execution order; `absorbed`: opaque nodes
    the kernel applies as epilogue (elementwise activations between members, the residual Add last);
    `residual`: the group ends with a residual Add whose other operand is `residual_tensor`.
    """

    kind: str
    members: tuple[str, ...]
    absorbed: tuple[str, ...] = ()
    residual: bool = False
    residual_tensor: str | None = None

    @property
    def nodes(self) -> tuple[str, ...]:
        """Every graph node the group covers (members, then absorbed nodes)."""
        return self.members + self.absorbed

    @property
    def key(self) -> tuple[str, ...]:
        """A stable identity: the covered nodes in order."""
        return self.nodes


@dataclass(frozen=True)
class Rejected:
    """A pattern match that cannot be fused (or was not chosen), with the reason."""

    kind: str
    members: tuple[str, ...]
    reason: str
    absorbed: tuple[str, ...] = ()


@dataclass(frozen=True)
class Candidates:
    """The result of `find_candidates`."""

    groups: tuple[Candidate, ...]
    rejected: tuple[Rejected, ...]


# ---- small graph helpers ------------------------------------------------------------------------


def producers(graph: ModelGraph) -> dict[str, str]:
    """Tensor name -> name of the op that produces it (graph inputs and constants are absent)."""
    out: dict[str, str] = {}
    for name in graph.order:
        for t in graph.op(name).outputs:
            out[t] = name
    return out


def consumers(graph: ModelGraph) -> dict[str, list[str]]:
    """Tensor name -> names of the ops that read it, in execution order (each op once)."""
    out: dict[str, list[str]] = {}
    for name in graph.order:
        for t in dict.fromkeys(graph.op(name).inputs):
            out.setdefault(t, []).append(name)
    return out


def group_kind(member_kinds: Sequence[str]) -> str | None:
    """The fused kernel kind for a sequence of member op kinds, or None."""
    return PATTERNS.get(tuple(member_kinds))


def is_elementwise(op: Op) -> bool:
    """An opaque single-input elementwise node that a kernel can apply as its epilogue."""
    return (
        op.kind == "opaque"
        and op.op_type in ELEMENTWISE_OPS
        and len(op.inputs) == 1
        and len(op.outputs) == 1
        and op.in_shape == op.out_shape
    )


def is_residual_add(op: Op) -> bool:
    """An opaque Add of two activation tensors of the same shape (no broadcasting)."""
    return (
        op.kind == "opaque"
        and op.op_type == "Add"
        and len(op.inputs) == 2
        and len(op.outputs) == 1
        and len(op.input_shapes) == 2
        and op.input_shapes[0] == op.input_shapes[1] == op.out_shape
        and op.inputs[0] != op.inputs[1]
    )


class _Index:
    """Producer/consumer maps of one graph, computed once."""

    def __init__(self, graph: ModelGraph) -> None:
        self.graph = graph
        self.producer = producers(graph)
        self.consumers = consumers(graph)
        self.outputs = graph.graph_outputs
        self.position = {n: i for i, n in enumerate(graph.order)}

    def single_consumer(self, tensor: str) -> tuple[str | None, str]:
        """The only consumer of an intermediate tensor, or None with the reason it has not one."""
        if tensor in self.outputs:
            return None, f"tensor {tensor!r} is a graph output"
        users = self.consumers.get(tensor, [])
        if len(users) != 1:
            return None, f"tensor {tensor!r} has {len(users)} consumers ({', '.join(users[:4])})"
        return users[0], ""

    def follow(self, name: str) -> tuple[str | None, tuple[str, ...], str]:
        """From op `name`, walk its single-consumer output through elementwise nodes to the next op.

        Returns (next op, elementwise nodes passed, reason when the walk stops illegally).
        """
        passed: list[str] = []
        op = self.graph.op(name)
        while True:
            if len(op.outputs) != 1:
                return None, tuple(passed), f"{op.name!r} has {len(op.outputs)} outputs"
            nxt, why = self.single_consumer(op.outputs[0])
            if nxt is None:
                return None, tuple(passed), why
            nop = self.graph.op(nxt)
            if is_elementwise(nop):
                passed.append(nxt)
                op = nop
                continue
            return nxt, tuple(passed), ""


# ---- validation ---------------------------------------------------------------------------------


def _creates_cycle(graph: ModelGraph, names: Iterable[str]) -> str | None:
    """A path from a group node back into the group through outside nodes, described, or None."""
    inside = set(names)
    g = graph.graph
    outside_succ = {s for n in inside for s in g.successors(n) if s not in inside}
    for s in sorted(outside_succ):
        back = (nx.descendants(g, s) | {s}) & inside
        if back:
            return f"fusing would create a cycle: a path leaves the group through {s!r} and re-enters at {sorted(back)[0]!r}"
    return None


def _check_residual(ix: _Index, last_out: str, add: Op, inside: set[str]) -> str | None:
    if not is_residual_add(add):
        return f"{add.name!r} ({add.op_type}) is not a same-shape residual Add"
    other = add.inputs[1] if add.inputs[0] == last_out else add.inputs[0]
    src = ix.producer.get(other)
    if src is None:
        return None  # a graph input or constant: in memory before the kernel starts
    if src in inside:
        return f"residual operand {other!r} comes from inside the group"
    g = ix.graph.graph
    for m in inside:
        if src in nx.descendants(g, m):
            return f"residual operand {other!r} is computed after group member {m!r}"
    return None


def validate_group(graph: ModelGraph, names: Sequence[str]) -> str | None:
    """Why the nodes `names` (members and absorbed epilogue nodes, in execution order) cannot be
    fused into one kernel, or None when they can."""
    ix = _Index(graph)
    return _validate(ix, tuple(names))


def _validate(ix: _Index, names: tuple[str, ...]) -> str | None:
    graph = ix.graph
    if len(set(names)) != len(names):
        return "a node appears twice in the group"
    missing = [n for n in names if n not in ix.position]
    if missing:
        return f"no node named {missing[0]!r} in the graph"
    names = tuple(sorted(names, key=ix.position.__getitem__))
    ops = [graph.op(n) for n in names]
    members = [op for op in ops if op.kind != "opaque"]
    if not members or group_kind([m.kind for m in members]) is None:
        return f"member kinds {'->'.join(m.kind for m in members) or '(none)'} are not a fusable pattern"
    bad = [op for op in ops if op.kind == "opaque" and not (is_elementwise(op) or is_residual_add(op))]
    if bad:
        return f"{bad[0].name!r} ({bad[0].op_type}) cannot be a fused epilogue"
    cyc = _creates_cycle(graph, names)
    if cyc:
        return cyc
    inside = set(names)
    # walk from the first member: each step must be a single-consumer tensor to the next node
    for cur, nxt in zip(names, names[1:], strict=False):
        op = graph.op(cur)
        if len(op.outputs) != 1:
            return f"{cur!r} has {len(op.outputs)} outputs"
        user, why = ix.single_consumer(op.outputs[0])
        if user is None:
            return why
        if user != nxt:
            return f"{cur!r} feeds {user!r}, not {nxt!r}: members are not a chain"
        nop = graph.op(nxt)
        if is_residual_add(nop) and nop.kind == "opaque" and not is_elementwise(nop):
            if nxt != names[-1]:
                return f"residual Add {nxt!r} must be the group's last node"
            why = _check_residual(ix, op.outputs[0], nop, inside)
            if why:
                return why
        elif nop.kind != "opaque" and op.out_shape != nop.in_shape:
            return f"{cur!r} output {op.out_shape} does not match {nxt!r} input {nop.in_shape}"
    if ops[-1].kind == "opaque" and is_elementwise(ops[-1]):
        return f"elementwise {names[-1]!r} after the last member: the importer should absorb it"
    return _member_rules(members)


def _member_rules(members: Sequence[Op]) -> str | None:
    """Layout rules of the fused kernels: the PW feeding a DW and every non-leading PW has stride 1."""
    for i, m in enumerate(members):
        if m.kind == "pw" and i > 0 and (m.stride != (1, 1) or any(m.pads)):
            return f"pointwise {m.name!r} inside a group must have stride 1 and no padding"
        if m.kind == "pw" and i + 1 < len(members) and members[i + 1].kind == "dw" and m.stride != (1, 1):
            return f"pointwise {m.name!r} feeding a depthwise must have stride 1"
        if m.batch != members[0].batch:
            return "members have different batch sizes"
    return None


# ---- candidate search ---------------------------------------------------------------------------


def _chains(ix: _Index, start: str) -> list[tuple[tuple[str, ...], tuple[str, ...], str]]:
    """Pattern matches starting at `start`: (members, elementwise nodes between them, stop reason).

    Follows only legal edges; where a pattern would continue across an illegal edge the returned
    reason says why (the match is then recorded as rejected by the caller).
    """
    graph = ix.graph
    out: list[tuple[tuple[str, ...], tuple[str, ...], str]] = []
    kinds = [graph.op(start).kind]
    members, between = [start], []
    while len(members) < 3:
        nxt, passed, why = ix.follow(members[-1])
        if nxt is None:
            # a pattern might have continued through this illegal edge: report it
            for user in _raw_next_members(ix, members[-1]):
                k = group_kind([*kinds, graph.op(user).kind])
                if k:
                    out.append(((*members, user), tuple(between), why))
            return out
        nop = graph.op(nxt)
        if nop.kind not in MEMBER_KINDS or not _is_prefix([*kinds, nop.kind]):
            return out
        members.append(nxt)
        between.extend(passed)
        kinds.append(nop.kind)
        if group_kind(kinds):
            out.append((tuple(members), tuple(between), ""))
    return out


def _raw_next_members(ix: _Index, name: str) -> list[str]:
    """Member ops reached from `name` directly or through elementwise nodes, ignoring legality."""
    found: list[str] = []
    frontier = [name]
    seen = set()
    while frontier:
        cur = frontier.pop()
        for t in ix.graph.op(cur).outputs:
            for user in ix.consumers.get(t, []):
                if user in seen:
                    continue
                seen.add(user)
                uop = ix.graph.op(user)
                if uop.kind in MEMBER_KINDS:
                    found.append(user)
                elif is_elementwise(uop):
                    frontier.append(user)
    return sorted(found, key=ix.position.__getitem__)


def _is_prefix(kinds: Sequence[str]) -> bool:
    t = tuple(kinds)
    return any(p[: len(t)] == t for p in PATTERNS)


def _residual_variant(ix: _Index, members: tuple[str, ...], between: tuple[str, ...]) -> tuple[str | None, str]:
    """The Add that can end this group as a residual epilogue, or None with the reason (empty when
    the last output simply does not go to an Add)."""
    last = ix.graph.op(members[-1])
    if len(last.outputs) != 1 or last.outputs[0] in ix.outputs:
        return None, ""
    users = ix.consumers.get(last.outputs[0], [])
    adds = [u for u in users if is_residual_add(ix.graph.op(u))]
    if not adds:
        return None, ""
    if len(users) != 1:
        return None, f"tensor {last.outputs[0]!r} also feeds {', '.join(u for u in users if u != adds[0])}"
    names = (*members, *between, adds[0])
    why = _validate(ix, names)
    return (adds[0], "") if why is None else (None, why)


def find_candidates(graph: ModelGraph, kinds: Iterable[str] | None = None) -> Candidates:
    """All legal fusion groups of `graph` (restricted to group `kinds` when given) and every
    rejected pattern match with its reason. Groups come in execution order of their first member."""
    allowed = tuple(GROUP_KINDS if kinds is None else kinds)
    ix = _Index(graph)
    groups: list[Candidate] = []
    rejected: list[Rejected] = []
    for start in graph.order:
        if graph.op(start).kind not in MEMBER_KINDS:
            continue
        for members, between, why in _chains(ix, start):
            kind = group_kind([graph.op(m).kind for m in members])
            assert kind is not None
            if not why:
                why = _validate(ix, (*members, *between)) or ""
            if not why and kind not in allowed:
                why = f"kind {kind} is not enabled (kinds: {', '.join(allowed) or 'none'})"
            if why:
                rejected.append(Rejected(kind, members, why, between))
                continue
            groups.append(Candidate(kind, members, between))
            add, rwhy = _residual_variant(ix, members, between)
            if add is not None:
                last_out = graph.op(members[-1]).outputs[0]
                aop = graph.op(add)
                other = aop.inputs[1] if aop.inputs[0] == last_out else aop.inputs[0]
                groups.append(Candidate(kind, members, (*between, add), True, other))
            elif rwhy:
                rejected.append(Rejected(kind, members, f"residual Add not absorbed: {rwhy}", between))
    return Candidates(tuple(groups), tuple(rejected))


@dataclass(frozen=True)
class LayerResidual:
    """A residual Add that one layer-by-layer kernel applies as its epilogue: the Add's node name and
    its other operand (the tensor the kernel reads and adds)."""

    add: str
    tensor: str


def layer_residuals(graph: ModelGraph) -> dict[str, LayerResidual]:
    """DW/PW/linear ops whose kernel can apply the residual Add after them, run on their own.

    An op qualifies when its only output feeds nothing but a same-shape residual Add (the rule that
    lets a fused group's last member absorb it) and no other such op feeds the same Add: when both
    operands of an Add come from ops that qualify, neither absorbs it (their order would decide which
    operand is in memory first, so the Add stays a separate kernel)."""
    ix = _Index(graph)
    found: dict[str, LayerResidual] = {}
    by_add: dict[str, list[str]] = {}
    for name in graph.order:
        op = graph.op(name)
        if op.kind not in MEMBER_KINDS or len(op.outputs) != 1:
            continue
        add, _ = ix.single_consumer(op.outputs[0])
        if add is None:
            continue
        aop = graph.op(add)
        if not is_residual_add(aop) or _check_residual(ix, op.outputs[0], aop, {name}) is not None:
            continue
        other = aop.inputs[1] if aop.inputs[0] == op.outputs[0] else aop.inputs[0]
        found[name] = LayerResidual(add, other)
        by_add.setdefault(add, []).append(name)
    return {n: r for n, r in found.items() if len(by_add[r.add]) == 1}


def epilogue_names(graph: ModelGraph, cand: Candidate) -> tuple[str, ...]:
    """ONNX node names the fused kernel applies as epilogue: each member's absorbed nodes, the
    elementwise nodes between members and the residual Add, in execution order."""
    names: list[str] = []
    for m in cand.members:
        names.extend(graph.op(m).epilogue_nodes)
    names.extend(cand.absorbed)
    return tuple(dict.fromkeys(names))


def check_partition(graph: ModelGraph, groups: Sequence[Sequence[str]]) -> str | None:
    """Why a set of groups (each a list of covered node names) is not a legal plan, or None.

    Legal: no node in two groups, each group valid on its own, and contracting every group into one
    node leaves the graph acyclic.
    """
    seen: dict[str, int] = {}
    ix = _Index(graph)
    for i, names in enumerate(groups):
        for n in names:
            if n in seen:
                return f"node {n!r} is in two groups"
            seen[n] = i
        why = _validate(ix, tuple(names))
        if why:
            return f"group {list(names)}: {why}"
    q = nx.DiGraph()
    q.add_nodes_from(seen.get(n, n) for n in graph.order)
    for u, v in graph.graph.edges:
        a, b = seen.get(u, u), seen.get(v, v)
        if a != b:
            q.add_edge(a, b)
    if not nx.is_directed_acyclic_graph(q):
        return "contracting the groups creates a cycle"
    return None
