"""Fuse decisions of both execution contexts, scored against the executor's step times.

Candidates: every group of the model planned in the isolated context and in the graph context (the
union). Each candidate carries, per context, whether that context's plan fuses it and its predicted
saving there: the planner's time objective (`cost.execution.sequence_time` with the spec's launch
terms: in the isolated context back-to-back launches less `launch_overlap_s`) of the unfused kernels
less that of the fused kernel, each side summed over the plan kernels that cover the same ONNX nodes
(`closure`: a residual Add the group leaves to run alone counts on the fused side, as the planner
charges it).

Measured saving of a candidate: the graph-mode times (`run.device.time_nodes(mode="graph")`) of the
unfused model's steps less those of a planned run that has the group's kernel step, both over the
steps that cover the same ONNX nodes (an executor step's covers include its epilogue nodes: a
library conv's activation or a merged elementwise chain joins the set it touches).

A decision is right when:
- fuse (the context's plan has the group): the measured saving is positive;
- do not fuse, the context fusing overlapping groups instead: the group's measured saving is not
  above max(0, the measured savings of those overlapping groups together);
- do not fuse, nothing overlapping fused: the measured saving is not positive.
A decision whose group, or an overlapping group it is weighed against, has no measured kernel step
(not compiled, or run in the operator library) is unmeasured and left out of the score.

Time lost by a wrong decision (what it costs, not only whether it is wrong): fusing a group that
measured no saving loses -saving; not fusing one loses saving - max(0, the measured savings of the
overlapping groups fused instead). A right decision loses nothing. The pooled tables give the time
lost over a model set as a share of its runs' unfused whole-model latency (`time_lost`), beside what
fusing every measured candidate would lose (the candidates that measured no saving).

`score` is pure: it reads the records `measure` saves in `WholeResult.decisions` and
`WholeResult.unfused_steps`, so saved results are rescored without a GPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from fuseplanner.core.kinds import CONTEXTS


class MeasuredStep(BaseModel):
    """One executor step timed in graph mode, with the ONNX nodes it covers (epilogue nodes included)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str
    kind: str
    measured_s: float
    covers: list[str] = Field(default_factory=list)


class PlanRun(BaseModel):
    """The steps of the model compiled with the plan decided in `context`, timed in graph mode."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    context: str
    steps: list[MeasuredStep] = Field(default_factory=list)


class Candidate(BaseModel):
    """A group one of the contexts fuses: whether each context's plan has it and its predicted saving
    (seconds, unfused less fused) in each context."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str = Field(description="members joined with '+', as the executor labels the fused step")
    kind: str
    covers: list[str] = Field(description="graph nodes the group replaces (members, absorbed nodes)")
    fused_isolated: bool
    fused_graph: bool
    predicted_isolated_s: float
    predicted_graph_s: float

    def fused(self, context: str) -> bool:
        return self.fused_graph if context == "graph" else self.fused_isolated

    def predicted_s(self, context: str) -> float:
        return self.predicted_graph_s if context == "graph" else self.predicted_isolated_s


class DecisionData(BaseModel):
    """What `score` reads besides the unfused steps: the candidates and the planned runs measured."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    candidates: list[Candidate] = Field(default_factory=list)
    runs: list[PlanRun] = Field(default_factory=list)


def closure(seed: Iterable[str], *sides: Sequence) -> list[list[int]]:
    """Indices of the items of each side (anything with `covers`) that cover the nodes of `seed`,
    grown until both sides cover the same nodes: items touching a node another picked item covers
    join, with their own nodes."""
    nodes = set(seed)
    picked: list[set[int]] = [set() for _ in sides]
    grown = True
    while grown:
        grown = False
        for k, side in enumerate(sides):
            for i, item in enumerate(side):
                if i not in picked[k] and not nodes.isdisjoint(item.covers):
                    picked[k].add(i)
                    nodes.update(item.covers)
                    grown = True
    return [sorted(p) for p in picked]


@dataclass(frozen=True)
class Measured:
    """A candidate measured in one planned run: its fused step's seconds, the seconds of the unfused
    steps covering the same nodes, and the planned steps (the fused one included) those cover."""

    fused_s: float
    unfused_s: float
    planned_s: float
    planned_steps: tuple[str, ...]
    unfused_steps: tuple[str, ...]

    @property
    def saving_s(self) -> float:
        return self.unfused_s - self.planned_s


def measure_candidate(label: str, run: Sequence[MeasuredStep], unfused: Sequence[MeasuredStep]) -> Measured | None:
    """The candidate labelled `label` measured in `run` (None when `run` has no kernel step of that label)."""
    fused = next((s for s in run if s.label == label and s.kind not in ("library", "view")), None)
    if fused is None or not unfused:
        return None
    mine, theirs = closure(fused.covers, run, unfused)
    return Measured(fused.measured_s, sum(unfused[i].measured_s for i in theirs), sum(run[i].measured_s for i in mine),
                    tuple(run[i].label for i in mine), tuple(unfused[i].label for i in theirs))  # fmt: skip


@dataclass(frozen=True)
class Decision:
    """One context's decision on one candidate of one result. `right` None: unmeasured."""

    model: str
    dtype: str
    batch: int
    context: str
    group: str
    kind: str
    fuse: bool
    predicted_s: float
    measured: Measured | None
    instead: tuple[str, ...]
    right: bool | None
    lost_s: float | None = None  # seconds the decision costs against the measured better choice (module docstring)


def _measured(data: DecisionData, unfused: Sequence[MeasuredStep]) -> dict[str, Measured]:
    """Each candidate measured in the first run that has its kernel step (runs of the context that
    fuses it first)."""
    out: dict[str, Measured] = {}
    for c in data.candidates:
        runs = sorted(data.runs, key=lambda r: not c.fused(r.context))
        for run in runs:
            m = measure_candidate(c.label, run.steps, unfused)
            if m is not None:
                out[c.label] = m
                break
    return out


def _judged(c: Candidate, context: str, instead: Sequence[str], got: dict[str, Measured]
                ) -> tuple[bool | None, float | None]:  # fmt: skip
    """(right, lost seconds) of `context`'s decision on `c` (module docstring); (None, None) unmeasured.
    The shortfall is what the decision gives up against the other choice: fusing, the measured loss
    (-saving); not fusing, the saving less what the overlapping groups fused instead save."""
    m = got.get(c.label)
    if m is None or any(o not in got for o in instead):
        return None, None
    fused = c.fused(context)
    shortfall = -m.saving_s if fused else m.saving_s - max(0.0, sum(got[o].saving_s for o in instead))
    right = shortfall < 0 if fused else shortfall <= 0
    return right, 0.0 if right else shortfall


def score(result) -> list[Decision]:
    """Every context's decision on every candidate of a `WholeResult` (none without decision data)."""
    data = result.decisions
    if data is None:
        return []
    got = _measured(data, result.unfused_steps)
    out = []
    for context in CONTEXTS:
        chosen = [c for c in data.candidates if c.fused(context)]
        for c in data.candidates:
            instead = () if c.fused(context) else tuple(
                o.label for o in chosen if not set(o.covers).isdisjoint(c.covers))  # fmt: skip
            right, lost = _judged(c, context, instead, got)
            out.append(Decision(result.model, result.dtype, result.batch, context, c.label, c.kind, c.fused(context),
                                c.predicted_s(context), got.get(c.label), instead, right, lost))  # fmt: skip
    return out


@dataclass(frozen=True)
class ContextScore:
    """Decisions of one context over some results: right / scored, and how many were unmeasured."""

    context: str
    right: int
    scored: int
    unmeasured: int
    lost_s: float = 0.0  # time lost by the wrong decisions, summed

    @property
    def fraction(self) -> float | None:
        return self.right / self.scored if self.scored else None


def summarise(decisions: Sequence[Decision]) -> list[ContextScore]:
    """Right / scored decisions per context, in `CONTEXTS` order."""
    out = []
    for context in CONTEXTS:
        mine = [d for d in decisions if d.context == context]
        out.append(ContextScore(context, sum(d.right is True for d in mine), sum(d.right is not None for d in mine),
                                sum(d.right is None for d in mine), sum(d.lost_s or 0.0 for d in mine)))  # fmt: skip
    return out


# ---- predictions (planner side) -------------------------------------------------------------------
def _kernel_cost(kernel):
    return kernel.fused_cost if hasattr(kernel, "fused") else kernel.ir_cost


def predicted_saving(group, plan, unfused_plan, spec, context: str) -> float:
    """Seconds `group` (of `plan`) saves over `unfused_plan` in `context` by the planner's time
    objective: the unfused kernels covering its nodes less the plan's kernels covering them (module
    docstring)."""
    from fuseplanner.core.ir import Cost
    from fuseplanner.cost.execution import launch_terms, sequence_time

    kernels, base = list(plan.kernels()), list(unfused_plan.kernels())
    mine, theirs = closure(group.covers, kernels, base)
    overlap = float(spec.eff("launch_overlap_s")) if plan.cost_model == "ours" else 0.0
    terms = launch_terms(spec)

    def seconds(costs) -> float:
        return sequence_time(sum(costs, Cost()), terms, context, overlap)

    return seconds(_kernel_cost(base[i]) for i in theirs) - seconds(_kernel_cost(kernels[i]) for i in mine)


def candidates(isolated_plan, graph_plan, unfused_plan, spec) -> list[Candidate]:
    """The union of the two plans' groups, each with both contexts' decision and predicted saving
    (the isolated plan's copy of a group both plans fuse)."""
    fused = {ctx: {"+".join(g.nodes) for g in p.groups} for ctx, p in (("isolated", isolated_plan), ("graph", graph_plan))}
    out: dict[str, Candidate] = {}
    for plan in (isolated_plan, graph_plan):
        for g in plan.groups:
            label = "+".join(g.nodes)
            if label in out:
                continue
            out[label] = Candidate(
                label=label, kind=g.kind, covers=list(g.covers), fused_isolated=label in fused["isolated"],
                fused_graph=label in fused["graph"],
                predicted_isolated_s=predicted_saving(g, plan, unfused_plan, spec, "isolated"),
                predicted_graph_s=predicted_saving(g, plan, unfused_plan, spec, "graph"))  # fmt: skip
    return list(out.values())


# ---- report --------------------------------------------------------------------------------------
def _us(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 1e6:+.2f}"


def _share(s: ContextScore) -> str:
    return "n/a" if s.fraction is None else f"{s.right}/{s.scored} ({100 * s.fraction:.1f}%)"


def _summary_rows(scored: Sequence[tuple]) -> list[str]:
    rows = []
    pooled: list[Decision] = []
    for r, mine in scored:
        pooled += mine
        iso, gra = summarise(mine)
        rows.append(f"| {r.model} | {r.dtype}/{r.precision} | {r.batch} | {len(mine) // len(CONTEXTS)} | {_share(iso)} | "
                    f"{_share(gra)} | {iso.unmeasured} / {gra.unmeasured} |")  # fmt: skip
    iso, gra = summarise(pooled)
    rows.append(f"| all | | | {len(pooled) // len(CONTEXTS)} | {_share(iso)} | {_share(gra)} | "
                f"{iso.unmeasured} / {gra.unmeasured} |")  # fmt: skip
    return rows


def _unstepped(decisions: Sequence[Decision]) -> int:
    """Candidates no run has a kernel step for (one decision per context each)."""
    return sum(d.measured is None for d in decisions if d.context == CONTEXTS[0])


def _measured_candidates(decisions: Sequence[Decision]) -> list[Measured]:
    """Each measured candidate once (from the first context's decisions)."""
    return [d.measured for d in decisions if d.context == CONTEXTS[0] and d.measured is not None]


def _fuse_all(decisions: Sequence[Decision]) -> str:
    """The no-model baseline: of the measured candidates, those whose measured saving is positive (what
    fusing every candidate gets right)."""
    measured = _measured_candidates(decisions)
    won = sum(m.saving_s > 0 for m in measured)
    return f"{won}/{len(measured)} ({100 * won / len(measured):.1f}%)" if measured else "n/a"


def fuse_all_lost_s(decisions: Sequence[Decision]) -> float:
    """Seconds fusing every measured candidate loses: the candidates that measured no saving."""
    return sum(max(0.0, -m.saving_s) for m in _measured_candidates(decisions))


def time_lost(decisions: Sequence[Decision], unfused_s: float) -> str:
    """Time lost by each context's wrong decisions and by fusing all, as % of `unfused_s` (the runs'
    unfused whole-model latency): "isolated / graph / fuse all"."""
    if unfused_s <= 0:
        return "n/a"
    lost = [s.lost_s for s in summarise(decisions)] + [fuse_all_lost_s(decisions)]
    return " / ".join(f"{100 * x / unfused_s:.2f}" for x in lost)


def _pooled_rows(scored: Sequence[tuple], held_out: frozenset[str]) -> list[str]:
    """Per (model set, dtype/precision, batch), then per set over all of them; the sets: bundled,
    held-out (`held_out`) and all models."""
    from fuseplanner.validation.whole_summary import pooled

    runs = pooled([(r, [r.measured_unfused.median_s]) for r, _ in scored], held_out, all_models=True)
    rows = []
    for (kind, mode, batch, ds), (*_, unfused) in zip(pooled(scored, held_out, all_models=True), runs, strict=True):
        iso, gra = summarise(ds)
        rows.append(f"| {kind} | {mode} | {batch} | {len(ds) // len(CONTEXTS)} ({_unstepped(ds)}) | {_share(iso)} | "
                    f"{_share(gra)} | {_fuse_all(ds)} | {time_lost(ds, sum(unfused))} | "
                    f"{iso.unmeasured} / {gra.unmeasured} |")  # fmt: skip
    return rows


def _verdict(d: Decision) -> str:
    what = "fuse" if d.fuse else ("not (" + ", ".join(d.instead) + " instead)" if d.instead else "not")
    mark = "?" if d.right is None else ("right" if d.right else "WRONG")
    return f"{what}, {_us(d.predicted_s)}, {mark}"


def _table_rows(decisions: Sequence[Decision]) -> list[str]:
    by_key: dict[tuple, list[Decision]] = {}
    for d in decisions:
        by_key.setdefault((d.model, d.dtype, d.batch, d.group), []).append(d)
    rows = []
    for (model, dtype, batch, group), ds in by_key.items():
        iso = next(d for d in ds if d.context == "isolated")
        gra = next(d for d in ds if d.context == "graph")
        m = iso.measured
        cells = ("n/a", "n/a") if m is None else (_us(m.saving_s), f"{m.planned_s * 1e6:.2f} / {m.unfused_s * 1e6:.2f}")
        rows.append(f"| {model} | {dtype} | {batch} | {group} | {iso.kind} | {_verdict(iso)} | {_verdict(gra)} | "
                    f"{cells[0]} | {cells[1]} |")  # fmt: skip
    return rows


def _wrong_rows(decisions: Sequence[Decision]) -> list[str]:
    return [f"| {d.model} | {d.dtype} | {d.batch} | {d.context} | {d.group} | {'fuse' if d.fuse else 'not'} | "
            f"{_us(d.predicted_s)} | {_us(d.measured.saving_s)} |" for d in decisions if d.right is False]  # fmt: skip


def _pooled_section(scored: Sequence[tuple], held_out: frozenset[str] | None) -> list[str]:
    if held_out is None:
        return []
    return ["Pooled per model set (candidates: in brackets those no run has a kernel step for; fuse all: the "
            "measured candidates whose measured saving is positive, what fusing every one gets right; time lost: "
            "what the wrong decisions cost, as % of the runs' unfused whole-model latency):", "",
            "| set | dtype/precision | batch | candidates | isolated right | graph right | fuse all | "
            "time lost % (isolated / graph / fuse all) | unmeasured (isolated / graph) |",
            "|---|---|---|---|---|---|---|---|---|", *_pooled_rows(scored, held_out), ""]  # fmt: skip


def to_markdown(results: Sequence, note: str = "", held_out: frozenset[str] | None = None) -> str:
    """The decision summary per result and pooled (per model set too when `held_out` names the
    held-out models), then every candidate (empty without decision data). `note`: a line under the
    heading saying where the decisions come from."""
    scored = [(r, score(r)) for r in results if r.decisions is not None]
    if not scored:
        return ""
    decisions = [d for _, mine in scored for d in mine]
    lines = ["## Fuse decisions measured in the executor (graph-mode step times)", "", *([note, ""] if note else []),
             f"Right / scored decisions per context; unmeasured: decisions on a candidate no run has a kernel step "
             f"for ({_unstepped(decisions)} of {len(decisions) // len(CONTEXTS)} candidates), or weighed against one.",
             "", "| model | dtype | batch | candidates | isolated right | graph right | unmeasured (isolated / graph) |",
             "|---|---|---|---|---|---|---|", *_summary_rows(scored), "", *_pooled_section(scored, held_out),
             "Decisions the measurement contradicts (saving in us, unfused - fused):", "",
             "| model | dtype | batch | context | group | decision | predicted saving | measured saving |",
             "|---|---|---|---|---|---|---|---|", *_wrong_rows(decisions), "",
             "Per candidate: each context's decision, its predicted saving (us, unfused - fused) and verdict; the "
             "measured saving (us): the unfused steps less the planned steps that cover the same nodes (the fused "
             "step and any step it leaves to run alone).", "",
             "| model | dtype | batch | group | kind | isolated | graph | measured saving | planned / unfused us |",
             "|---|---|---|---|---|---|---|---|---|", *_table_rows(decisions)]  # fmt: skip
    return "\n".join(lines) + "\n"
