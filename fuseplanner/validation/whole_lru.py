"""Diagnostic: a least-recently-used L2 over the executor's addresses, for one cold inference.

Not a cost model (the planner never reads it): it asks how much of the measured whole-inference DRAM
traffic (`validation.whole_traffic`) an address-level cache model explains, write-backs of dirty
lines included, which the graph context (`cost.execution`, per tensor, no addresses) does not model.

`lru_traffic(compiled, spec)` replays a `CompiledModel`'s program in executed order over one L2 of
`l2_bytes x l2_usable_fraction` bytes, kept in lines of `line_bytes` (default 4 KiB, far coarser than
the hardware's 128-byte lines, so it runs in well under a second). Each step

1. reads its activation inputs: their byte ranges in the arena (`CompiledModel.memory_plan`, views
   aliasing their buffer);
2. reads its weights: each weight tensor has its own address range after the arena (packed in order
   of first use, 256-byte aligned), read whole once per step that uses it. Planned kernels: their
   folded (weight, bias) pairs, PW/linear weights in the storage dtype, DW filters and biases in fp32
   (`cost._weight_bytes`); library steps: their node's constants as the executor uploads them;
3. writes its outputs (lines allocated without a fetch, marked dirty).

A read of a line not in L2 reads from DRAM the bytes of the range that fall in that line; evicting a
dirty line writes back the bytes written into it (capped at the line). The L2 starts empty (the model
inputs and weights are in DRAM); dirty lines left at the end are not counted, as the measurement
ends with the replay. View steps run nothing. Approximate: library steps count only their input and
output tensors (internal workspaces, e.g. of attention GEMMs, and re-reads of GEMM tiles are
ignored); a line already in L2 serves any bytes of it; replacement is exact LRU over one pool (the
hardware's is set-associative over two partitions).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from fuseplanner.core.errors import PlanError
from fuseplanner.core.kinds import GROUP_KINDS

#: Default L2 line of the simulation (bytes).
LINE_BYTES = 4096
#: Alignment of each weight tensor's range (as the activation arena's buffers).
WEIGHT_ALIGNMENT = 256
#: Bytes of an fp32 DW filter or bias element (the kernels keep them fp32).
PARAM_BYTES = 4


@dataclass(frozen=True)
class Access:
    """One byte range [start, start + nbytes) a step reads or writes."""

    start: int
    nbytes: int
    write: bool = False


@dataclass(frozen=True)
class LruResult:
    """DRAM bytes of one simulated inference."""

    dram_read_bytes: int
    dram_write_bytes: int


class LruL2:
    """An LRU cache of `capacity_lines` lines of `line_bytes`, counting DRAM bytes read and written back."""

    def __init__(self, capacity_bytes: float, line_bytes: int = LINE_BYTES) -> None:
        if line_bytes <= 0 or capacity_bytes < line_bytes:
            raise PlanError(f"L2 of {capacity_bytes:g} bytes cannot hold one line of {line_bytes} bytes")
        self.line = line_bytes
        self.capacity = int(capacity_bytes // line_bytes)
        self.lines: OrderedDict[int, int] = OrderedDict()  # line -> dirty bytes, least recently used first
        self.read_bytes = 0
        self.write_bytes = 0

    def access(self, a: Access) -> None:
        """Touch every line of `a`'s range, in address order."""
        end = a.start + a.nbytes
        for line in range(a.start // self.line, -(-end // self.line)):
            lo, hi = max(a.start, line * self.line), min(end, (line + 1) * self.line)
            self._touch(line, hi - lo, a.write)

    def _touch(self, line: int, nbytes: int, write: bool) -> None:
        dirty = self.lines.pop(line, None)
        if dirty is None:
            if not write:
                self.read_bytes += nbytes
            dirty = 0
        self.lines[line] = min(self.line, dirty + nbytes) if write else dirty
        if len(self.lines) > self.capacity:
            self.write_bytes += self.lines.popitem(last=False)[1]


def simulate(steps: Iterable[Sequence[Access]], capacity_bytes: float, line_bytes: int = LINE_BYTES) -> LruResult:
    """DRAM bytes of running `steps` (each a sequence of accesses, in order) from an empty L2."""
    cache = LruL2(capacity_bytes, line_bytes)
    for accesses in steps:
        for a in accesses:
            cache.access(a)
    return LruResult(cache.read_bytes, cache.write_bytes)


# ---- a compiled program as accesses -------------------------------------------------------------------
def _kernel_weights(step, storage_bytes: int) -> list[tuple[str, int]]:
    out = []
    for i, (op, (w, b)) in enumerate(zip(step.ops, step.params, strict=True)):
        per = PARAM_BYTES if op.kind == "dw" else storage_bytes
        out.append((f"{step.label}::param{i}", int(np.size(w)) * per + int(np.size(b)) * PARAM_BYTES))
    return out


def _library_io(step, tensors) -> tuple[list[str], list[tuple[str, int]]]:
    """(activation inputs, (constant name, bytes) weights) of a library step."""
    consts = getattr(step.node, "consts", ())
    acts, weights = [], []
    for pos, t in enumerate(step.inputs):
        c = consts[pos] if pos < len(consts) else None
        if c is not None:
            weights.append((t, int(np.asarray(c).nbytes)))
        elif t in tensors:
            acts.append(t)
    return acts, weights


class _Weights:
    """Each weight tensor's own address range, handed out from `base` on first use."""

    def __init__(self, base: int) -> None:
        self.top, self.at = base, {}

    def access(self, name: str, nbytes: int) -> Access:
        if name not in self.at:
            self.at[name] = self.top
            self.top += -(-max(nbytes, 1) // WEIGHT_ALIGNMENT) * WEIGHT_ALIGNMENT
        return Access(self.at[name], nbytes)


def program_accesses(program, memory) -> list[list[Access]]:
    """Per step of `program` (a `run.program.Program` bound with the memory plan `memory`), its
    accesses: activation reads, weight reads, output writes (see the module docstring); view steps
    have none."""
    tensors = program.tensors
    storage = np.dtype(np.float16 if program.dtype == "fp16" else np.float32).itemsize
    weights = _Weights(-(-memory.arena_bytes // WEIGHT_ALIGNMENT) * WEIGHT_ALIGNMENT)

    def act(name: str, write: bool = False) -> Access:
        return Access(memory.offsets[name], tensors[name].nbytes, write)

    out = []
    for s in program.steps:
        if hasattr(s, "params"):  # a planned kernel (`run.program.KernelStep`)
            acts, wts = [t for t in s.inputs if t in tensors], _kernel_weights(s, storage)
        elif s.view:
            out.append([])
            continue
        else:
            acts, wts = _library_io(s, tensors)
        outs = [act(t, True) for t in s.outputs if t in tensors]
        out.append([*(act(t) for t in acts), *(weights.access(n, b) for n, b in wts), *outs])
    return out


def lru_traffic(compiled, spec, line_bytes: int = LINE_BYTES, capacity_bytes: float | None = None) -> tuple[int, int]:
    """(DRAM bytes read, DRAM bytes written) of one cold inference of `compiled` (a `CompiledModel`,
    CPU or GPU) on `spec`'s L2 (`l2_bytes x l2_usable_fraction`, or `capacity_bytes`), simulated as
    the module docstring says."""
    capacity = capacity_bytes or spec.hw.l2_bytes * spec.hw.l2_usable_fraction
    r = simulate(program_accesses(compiled.program, compiled.memory_plan), capacity, line_bytes)
    return r.dram_read_bytes, r.dram_write_bytes


# ---- against a measured record ------------------------------------------------------------------------
@dataclass(frozen=True)
class LruRow:
    """One `validation.whole.WholeResult` with counters: measured cold, graph-context predicted and
    LRU-simulated DRAM bytes, per variant ("planned", "unfused"), each (read, write)."""

    model: str
    dtype: str
    precision: str
    batch: int
    measured: dict[str, tuple[float, float]]
    predicted: dict[str, tuple[float, float]]
    lru: dict[str, tuple[int, int]]
    arena_bytes: dict[str, int]


def compile_variants(result, spec, model=None) -> dict:
    """The planned (planned again as `validation.whole.repredict` plans it, isolated context) and
    unfused programs of `result`'s model, compiled on the CPU; PlanError when the plan differs from
    the measured one (a measured fused group the planned program lacks; other steps' labels follow
    the prediction's steps, not the executor's)."""
    import fuseplanner
    from fuseplanner.frontend.load import load_model
    from fuseplanner.planning.search import plan as make_plan

    kw = dict(dtype=result.dtype, precision=result.precision, batch=result.batch, device="cpu")
    graph = load_model(model or result.model, None, result.batch)
    plan = make_plan(graph, spec, dtype=result.dtype, precision=result.precision, context="isolated")
    planned = fuseplanner.compile(model or result.model, spec, plan, **kw)
    labels = {s.label for s in planned.steps}
    missing = [s.label for s in result.steps if s.kind in GROUP_KINDS and s.label not in labels]
    if missing:
        raise PlanError(f"{result.model}: spec {spec.name} plans differently from the measured run (no step "
                        f"{missing[0]!r}): simulating needs the measured plan")  # fmt: skip
    return {"planned": planned, "unfused": fuseplanner.compile(model or result.model, spec, None, fuse=False, avoid_spills=False, **kw)}


def evaluate(result, spec, model=None, line_bytes: int = LINE_BYTES, capacity_bytes: float | None = None) -> LruRow:
    """`result`'s cold counters beside the graph context's prediction and the LRU simulation."""
    if result.traffic is None or result.traffic.cold is None:
        raise PlanError(f"{result.model}: the record has no whole-inference counters (validate --whole with ncu)")
    compiled = compile_variants(result, spec, model)
    t = result.traffic

    def pair(b) -> tuple[float, float]:
        return b.dram_read_bytes, b.dram_write_bytes

    return LruRow(result.model, result.dtype, result.precision, result.batch,
                  measured={v: pair(getattr(t.cold, v)) for v in compiled},
                  predicted={v: pair(getattr(t, f"predicted_{v}")) for v in compiled},
                  lru={v: lru_traffic(c, spec, line_bytes, capacity_bytes) for v, c in compiled.items()},
                  arena_bytes={v: c.memory for v, c in compiled.items()})  # fmt: skip


# ---- tables -------------------------------------------------------------------------------------------
def _mb(pair) -> str:
    return f"{pair[0] / 1e6:.2f} / {pair[1] / 1e6:.2f}"


def table(rows: Sequence[LruRow]) -> list[str]:
    """Markdown: per record and variant, DRAM read / write (MB) measured, LRU-simulated and predicted."""
    out = ["| model | dtype | batch | variant | arena MiB | measured R / W | LRU R / W | LRU total err | "
           "graph context R / W | graph total err |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        for v in r.lru:
            m = sum(r.measured[v])
            out.append(f"| {r.model} | {r.dtype}/{r.precision} | {r.batch} | {v} | {r.arena_bytes[v] / 2**20:.1f} | "
                       f"{_mb(r.measured[v])} | {_mb(r.lru[v])} | {100 * (sum(r.lru[v]) / m - 1):+.1f}% | "
                       f"{_mb(r.predicted[v])} | {100 * (sum(r.predicted[v]) / m - 1):+.1f}% |")  # fmt: skip
    return out


def _errors(rows: Sequence[LruRow], which: str) -> list[float]:
    return [sum(getattr(r, which)[v]) / sum(r.measured[v]) - 1 for r in rows for v in r.lru if sum(r.measured[v])]


def summary(rows: Sequence[LruRow], held_out: frozenset[str]) -> list[str]:
    """Markdown: |error| median / p90 (%) of total cold DRAM bytes, planned and unfused pooled, per model
    set, dtype/precision and batch: the LRU simulation beside the graph context."""
    from fuseplanner.validation.whole_summary import abs_stats, by_set

    out = ["| set | dtype/precision | batch | models | DRAM, LRU | DRAM, graph context |", "|---|---|---|---|---|---|"]
    for name, mode, batch, mine in by_set(rows, held_out):
        out.append(f"| {name} | {mode} | {batch} | {len(mine)} | {abs_stats(_errors(mine, 'lru'))} | "
                   f"{abs_stats(_errors(mine, 'predicted'))} |")  # fmt: skip
    return out
