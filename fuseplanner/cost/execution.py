"""Execution context of a prediction: how a launch and its DRAM reads are charged over a whole model.

- `isolated` (what every cost model in `fuseplanner.cost` predicts, and what `validate` measures per
  kernel): one launch alone after an L2 flush. A kernel takes `launch_overhead_s` (the empty timed
  region) plus its body; every operand comes from DRAM.
- `graph`: the model's kernels replayed back to back in a CUDA graph (what `fuseplanner run`
  measures). A kernel takes

      max(graph_launch_interval_s, body + graph_kernel_tail_s + class),  body = isolated time - launch_overhead_s

  (class: what a launch of that class (`core.kinds.LAUNCH_CLASSES`: `fused` for a launch that takes
  `fused_kernel_fixed_s` isolated, else its first op's kind, dw, pw or linear;
  `KernelModel.launch_class`) takes among back-to-back graph kernels beyond the graph terms, spec
  `graph_dw_kernel_s`, `graph_pw_kernel_s`, `graph_linear_kernel_s`, `graph_fused_kernel_s`: their
  graph counterpart of `kernel_fixed_s` / `fused_kernel_fixed_s`, fitted on the graph-mode step times
  of the bundled models)

  (an opaque operator at least `opaque_op_floor_s`, a reduction (`core.kinds.REDUCE_OP_TYPES`) at least
  `reduce_op_floor_s`; a step that lists the kernels the executor's operator library launches for it,
  `Step.library`, is charged by `cost.library.graph_seconds` instead), and its activation reads come
  from L2 when the
  residency rule below says they are still there. Spec facts left unset fall back so that a GPU
  without graph measurements predicts no launch saving: the tail defaults to `launch_overhead_s`,
  the interval to none, the opaque floor to the interval, the reduction floor to the opaque floor.
  A whole replay adds `graph_replay_s` once (what the replay costs beyond its kernels' spacings, as
  CUDA events around it measure it; unset: 0). The isolated context's `launch_overlap_s` (what each
  launch of a timed back-to-back sequence saves) does not apply: the tail already is a back-to-back
  launch's floor (`sequence_time`).

Residency rule (graph context, `resident_reads`). Walk the steps in executed order with a running
count of the bytes each step moves through L2 to or from DRAM: its isolated DRAM reads (activations,
weights and re-reads) plus the bytes of the tensors it writes. A step reads tensor t from L2, not
DRAM, when t's producer finished within the last L2 capacity of that traffic:

    traffic since the producer finished + bytes(t) <= l2_bytes x l2_usable_fraction

(least-recently-used eviction of a cache that holds `l2_usable_fraction` of its size). Tensors no
step produced (model inputs) and weights are read from DRAM: the rule predicts one inference that
starts with a cold L2. A view (a step with no launch) passes its input's residency to its output.
DRAM writes are not saved: L2 writes dirty lines back whether or not the tensor is read again.

A step's saved read bytes are at most its isolated DRAM reads; its time falls by its memory time
with the full reads less its memory time with the remaining reads, where memory time is the larger
of its L2-level bytes at `l2_bw` and its DRAM bytes at `dram_bw` (`kernel_time`'s memory term), so a
step bound by L2 bandwidth, latency or compute saves nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from fuseplanner.core.errors import PlanError
from fuseplanner.core.ir import Cost
from fuseplanner.core.kinds import CONTEXTS, KERNEL_KINDS, LAUNCH_CLASSES, REDUCE_OP_TYPES
from fuseplanner.cost.library import Launch, graph_seconds
from fuseplanner.hw.spec import GpuSpec


@dataclass(frozen=True)
class LaunchTerms:
    """Seconds of the launch terms of a context: the isolated floor a cost's time includes per launch,
    the tail a graph kernel adds to its body in its place, the least spacing of graph kernels and the
    least time of an opaque operator (and of a reduction) in a graph."""

    floor_s: float
    tail_s: float
    interval_s: float
    opaque_floor_s: float
    reduce_floor_s: float = 0.0
    class_kernel_s: Mapping[str, float] = field(default_factory=dict)

    def class_s(self, cost: Cost) -> float:
        """What `cost`'s launches add in a graph by launch class: `class_kernel_s[name]` per launch of
        class `name` (`KernelResources.graph_class`; spec `graph_<name>_kernel_s`), 0 for a class it
        does not name."""
        return sum(self.class_kernel_s.get(k.graph_class, 0.0) for k in cost.kernels if k.kind in KERNEL_KINDS)

    def least_s(self, kind: str, op_type: str = "") -> float:
        """The least graph time of one launch of a step of `kind` and ONNX `op_type`."""
        if kind != "opaque":
            return self.interval_s
        return max(self.opaque_floor_s, self.reduce_floor_s) if op_type in REDUCE_OP_TYPES else self.opaque_floor_s


@dataclass(frozen=True)
class Access:
    """One activation tensor a step reads or writes, and its bytes."""

    tensor: str
    bytes: float


@dataclass(frozen=True)
class Step:
    """One step of an executed model: its label, kind (kernel kind or op kind), ONNX op type, isolated
    `Cost`, and the activation tensors it reads and writes."""

    label: str
    kind: str
    op_type: str
    cost: Cost
    reads: tuple[Access, ...] = ()
    writes: tuple[Access, ...] = ()
    library: tuple[Launch, ...] = ()


@dataclass(frozen=True)
class StepPrediction:
    """One step's predicted seconds and DRAM bytes in a context; `saved_read_bytes`: DRAM reads the
    residency rule served from L2; `l2_*_bytes`: what its kernels request from L2 (the cost's GMA bytes,
    the same in every context)."""

    label: str
    kind: str
    op_type: str
    time_s: float
    dram_read_bytes: float
    dram_write_bytes: float
    saved_read_bytes: float = 0.0
    l2_read_bytes: float = 0.0
    l2_write_bytes: float = 0.0


@dataclass(frozen=True)
class WholePrediction:
    """A whole inference in one context: every step in executed order, and what its replay costs once
    (`replay_s`, graph context: spec `graph_replay_s`)."""

    context: str
    steps: tuple[StepPrediction, ...]
    replay_s: float = 0.0

    @property
    def time_s(self) -> float:
        return sum(s.time_s for s in self.steps) + self.replay_s

    @property
    def dram_bytes(self) -> float:
        return sum(s.dram_read_bytes + s.dram_write_bytes for s in self.steps)

    @property
    def saved_read_bytes(self) -> float:
        return sum(s.saved_read_bytes for s in self.steps)


def check_context(context: str) -> str:
    if context not in CONTEXTS:
        raise PlanError(f"unknown execution context {context!r}: use one of {', '.join(CONTEXTS)}")
    return context


def class_field(name: str) -> str:
    """The spec field of the graph launch term of launch class `name` (`core.kinds.LAUNCH_CLASSES`)."""
    return f"graph_{name}_kernel_s"


def launch_terms(spec: GpuSpec) -> LaunchTerms:
    """The spec's launch terms, unset graph facts falling back as the module docstring says."""
    floor = float(spec.eff("launch_overhead_s"))
    tail = spec.eff("graph_kernel_tail_s")
    interval = spec.eff("graph_launch_interval_s")
    opaque = spec.eff("opaque_op_floor_s")
    reduce = spec.eff("reduce_op_floor_s")
    interval = float(interval) if interval is not None else 0.0
    opaque = float(opaque) if opaque is not None else interval
    return LaunchTerms(floor_s=floor, tail_s=float(tail) if tail is not None else floor, interval_s=interval,
                       opaque_floor_s=opaque, reduce_floor_s=float(reduce) if reduce is not None else opaque,
                       class_kernel_s={c: getattr(spec.hw, class_field(c)) for c in LAUNCH_CLASSES})  # fmt: skip


def context_time(cost: Cost, terms: LaunchTerms, context: str, opaque: bool = False, op_type: str = "") -> float:
    """Seconds of `cost`'s launches in `context`, without the residency rule. A cost of several
    launches (a group and its orphaned Add, a plan total) is charged per launch on average: each
    launch's isolated floor becomes the graph tail plus its class's term (`LaunchTerms.class_s`), and
    the whole takes at least one interval (or opaque floor) per launch."""
    n = cost.launches
    if context == "isolated" or n == 0:
        return cost.time_s
    floor = terms.least_s("opaque" if opaque else "", op_type)
    return max(n * floor, cost.time_s - n * (terms.floor_s - terms.tail_s) + terms.class_s(cost))


def sequence_time(cost: Cost, terms: LaunchTerms | None, context: str, overlap: float) -> float:
    """Seconds of `cost`'s launches run back to back in `context` (`cost` sums them as if each ran
    alone): isolated, each launch after the first saves `overlap` (the spec's `launch_overlap_s`, fitted
    on timed isolated sequences); graph, `context_time` alone, whose graph tail already is a
    back-to-back launch's floor, so the overlap would count twice (`terms` may be None in isolated)."""
    if context == "isolated":
        return cost.overlapped(overlap).time_s
    return context_time(cost, terms, context)


def resident_reads(steps: Sequence[Step], capacity: float) -> tuple[float, ...]:
    """Bytes of each step's activation reads that the residency rule (module docstring) serves from L2."""
    done: dict[str, float] = {}  # tensor -> traffic count when its producer finished
    traffic = 0.0
    out = []
    for s in steps:
        hit = sum(a.bytes for a in s.reads if a.tensor in done and traffic - done[a.tensor] + a.bytes <= capacity)
        out.append(hit)
        if s.cost.launches == 0:  # a view: its outputs are its first input, wherever that is
            first = s.reads[0].tensor if s.reads else None
            for w in s.writes:
                if first in done:
                    done[w.tensor] = done[first]
            continue
        traffic += s.cost.dram_read_bytes + sum(w.bytes for w in s.writes)
        for w in s.writes:
            done[w.tensor] = traffic
    return tuple(out)


def _memory_s(gma: float, dram: float, spec_bw: tuple[float, float]) -> float:
    return max(gma / spec_bw[0], dram / spec_bw[1])


def predict(steps: Sequence[Step], spec: GpuSpec, context: str) -> WholePrediction:
    """Every step of a whole inference in `context` (see the module docstring)."""
    check_context(context)
    hw = spec.hw
    if context == "isolated":
        return WholePrediction(context, tuple(
            StepPrediction(s.label, s.kind, s.op_type, s.cost.time_s, s.cost.dram_read_bytes, s.cost.dram_write_bytes,
                           l2_read_bytes=s.cost.gma_read_bytes, l2_write_bytes=s.cost.gma_write_bytes)
            for s in steps))  # fmt: skip
    terms = launch_terms(spec)
    hits = resident_reads(steps, hw.l2_bytes * hw.l2_usable_fraction)
    out = []
    for s, hit in zip(steps, hits, strict=True):
        c = s.cost
        saved = min(hit, c.dram_read_bytes) if c.launches else 0.0
        bw = (hw.l2_bw, hw.dram_bw)
        gain = _memory_s(c.gma_bytes, c.dram_bytes, bw) - _memory_s(c.gma_bytes, c.dram_bytes - saved, bw)
        if s.library:
            t = graph_seconds(s.library, terms, hw)
        else:
            t = context_time(c, terms, context, opaque=s.kind == "opaque", op_type=s.op_type)
            if c.launches:
                t = max(c.launches * terms.least_s(s.kind, s.op_type), t - gain)
        out.append(StepPrediction(s.label, s.kind, s.op_type, t, c.dram_read_bytes - saved, c.dram_write_bytes, saved,
                                  l2_read_bytes=c.gma_read_bytes, l2_write_bytes=c.gma_write_bytes))  # fmt: skip
    return WholePrediction(context, tuple(out), float(spec.eff("graph_replay_s") or 0.0))
