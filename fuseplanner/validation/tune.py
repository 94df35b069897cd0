"""Tune a plan on the GPU: keep the fused groups that measure faster than their unfused layers.

The cost model proposes, the hardware decides (as an autotuner prunes configurations with a model and
measures the rest). `tune` compiles the planned model and the unfused one, times every step of both
in graph mode (`run.device.time_nodes(mode="graph")`: each step replayed alone in a CUDA graph, warm
L2, as the whole model runs), and scores each fused group as `validation.whole_decisions` does: its
measured saving is the unfused steps covering its ONNX nodes less the planned steps covering them.
Groups whose saving is not positive are excluded from the planning (every tile of the same kind over
the same member shapes: `planning.search.kernel_key` with tile None) and the model is planned,
compiled and measured again, at most `rounds` times: a round can fuse other groups over the nodes it
gave up, which the next round measures. A group with no kernel step of its own (run in the operator
library) is not measured and stays.

Step times do not see every interaction between steps (on the H100, MobileNetV3-Large's tuned plan
dropped 10 groups that each measured slower alone and ran 5% slower as a whole), so `tune_model`
ends with the whole model: the tuned, the first-planned and the unfused model are replayed as CUDA
graphs (warm L2), interleaved (`LATENCY_ROUNDS` rounds of `replays` each, so that clock drift between
them cancels), and the fastest by median is the one returned. It does not try another tile of a
losing group: the group is dropped whatever its tile.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from fuseplanner.core.errors import PlanError
from fuseplanner.core.kinds import DEFAULT_CONTEXT, GROUP_KINDS
from fuseplanner.validation.whole import with_covers
from fuseplanner.validation.whole_decisions import MeasuredStep, measure_candidate

#: Rounds of plan, compile, measure at most (each re-plans without the groups measured slower).
MAX_ROUNDS = 3
#: Graph-mode repeats per step (medians).
REPEATS = 30
#: Interleaved rounds of whole-model replays when `tune_model` picks the fastest model.
LATENCY_ROUNDS = 3


@dataclass(frozen=True)
class Verdict:
    """One fused group of one round: its measured seconds fused (the planned steps covering its nodes)
    and unfused, and whether it stays. `measured` False: no kernel step of its own was timed."""

    round: int
    label: str
    kind: str
    tile: str
    fused_s: float = 0.0
    unfused_s: float = 0.0
    measured: bool = True

    @property
    def saving_s(self) -> float:
        return self.unfused_s - self.fused_s

    @property
    def kept(self) -> bool:
        return not self.measured or self.saving_s > 0.0


@dataclass
class Tuning:
    """What `tune` did: each round's verdicts and the kernel keys it excluded from the planning."""

    verdicts: list[Verdict] = field(default_factory=list)
    excluded: set = field(default_factory=set)
    rounds: int = 0
    unmeasured: list[str] = field(default_factory=list)  # groups of the final plan no round measured

    @property
    def dropped(self) -> list[Verdict]:
        return [v for v in self.verdicts if not v.kept]


def timed_steps(compiled, repeats: int) -> list[MeasuredStep]:
    """Every non-view step of `compiled` timed in graph mode, with the ONNX nodes it covers."""
    return with_covers(compiled, compiled.time_nodes(repeats=repeats, mode="graph"))


def judge(compiled, steps: Sequence[MeasuredStep], unfused: Sequence[MeasuredStep], rnd: int) -> list[Verdict]:
    """A verdict on every fused group of `compiled`'s plan from its timed steps (`steps`) and the
    unfused model's (`unfused`)."""
    tiles = {s.label: s.tile for s in compiled.steps}
    out = []
    for g in compiled.plan.groups:
        label = "+".join(g.nodes)
        m = measure_candidate(label, steps, unfused)
        tile = tiles.get(label, str(g.tile))
        if m is None:
            out.append(Verdict(rnd, label, g.kind, tile, measured=False))
        else:
            out.append(Verdict(rnd, label, g.kind, tile, m.planned_s, m.unfused_s))
    return out


def group_keys(compiled, losers: Sequence[Verdict]) -> set:
    """The kernel keys (every tile: `kernel_key(kind, ops, None)`) of the losing groups' kernel steps."""
    from fuseplanner.planning.search import kernel_key

    names = {v.label for v in losers}
    return {kernel_key(s.kind, s.ops, None) for s in compiled.program.steps
            if getattr(s, "kind", None) in GROUP_KINDS and s.label in names}  # fmt: skip


def tune(first, unfused, rebuild: Callable[[frozenset], object], *, rounds: int = MAX_ROUNDS,
         repeats: int = REPEATS, say: Callable[[str], None] = lambda _: None) -> tuple[object, Tuning]:  # fmt: skip
    """(the tuned compiled model, what was done): `first` is the planned model, `unfused` the model with
    no fusion, `rebuild(excluded)` plans and compiles the model without the excluded kernel keys (see
    the module docstring)."""
    if rounds < 1 or repeats < 1:
        raise PlanError(f"tuning needs at least one round and one repeat (got {rounds} and {repeats})")
    base = timed_steps(unfused, repeats)
    compiled, tuning = first, Tuning()
    for rnd in range(1, rounds + 1):
        tuning.rounds = rnd
        verdicts = judge(compiled, timed_steps(compiled, repeats), base, rnd)
        tuning.verdicts += verdicts
        losers = [v for v in verdicts if not v.kept]
        say(f"round {rnd}: {len(verdicts)} groups, {len(losers)} measured no faster fused")
        new = group_keys(compiled, losers) - tuning.excluded
        if not new:
            break
        tuning.excluded |= new
        compiled = rebuild(frozenset(tuning.excluded))
    seen = {v.label for v in tuning.verdicts if v.measured}
    tuning.unmeasured = ["+".join(g.nodes) for g in compiled.plan.groups if "+".join(g.nodes) not in seen]
    return compiled, tuning


def fastest(models: dict[str, object], replays: int, rounds: int = LATENCY_ROUNDS) -> dict[str, float]:
    """Median warm-L2 CUDA-graph latency of each distinct compiled model in `models`, replayed in
    interleaved rounds (each round benches every model once, `replays` replays); the median over rounds."""
    import numpy as np

    first_name: dict[int, str] = {}  # a model under two names (the tuning changed nothing) is benched once
    for name, m in models.items():
        first_name.setdefault(id(m), name)
    runs: dict[str, list[float]] = {name: [] for name in first_name.values()}
    for _ in range(rounds):
        for name in runs:
            runs[name].append(models[name].bench(replays, cold_l2=False).median_s)
    return {name: float(np.median(runs[first_name[id(m)]])) for name, m in models.items()}


@dataclass(frozen=True)
class Tuned:
    """A model tuned on this GPU: the model to run (`compiled`, the fastest of the three by whole-model
    latency: `chosen` names it), the tuned, first-planned and unfused compiled models, the tuning and
    each one's latency (seconds, `fastest`)."""

    compiled: object
    chosen: str
    tuned: object
    first: object
    unfused: object
    tuning: Tuning
    latency: dict[str, float]


def tune_model(model, spec="auto", *, dtype: str = "fp32", precision: str = "fp32", batch: int | None = None,
               seed: int = 0, input_shapes=None, rounds: int = MAX_ROUNDS, repeats: int = REPEATS,
               replays: int = 100, context: str = DEFAULT_CONTEXT, say: Callable[[str], None] = lambda _: None) -> Tuned:  # fmt: skip
    """Plan `model` on `spec` ("auto": this GPU; deciding in `context`), compile it and the unfused model, `tune` the plan on
    the GPU, and pick the fastest of the tuned, first and unfused models by whole-model latency
    (`fastest`, `replays` per round; module docstring)."""
    import fuseplanner

    def build(**kw):
        return fuseplanner.compile(model, spec, dtype=dtype, precision=precision, batch=batch, seed=seed,
                                   input_shapes=input_shapes, context=context, **kw)  # fmt: skip

    first, unfused = build(), build(fuse=False)
    tuned, tuning = tune(first, unfused, lambda ex: build(exclude=ex), rounds=rounds, repeats=repeats, say=say)
    models = {"tuned": tuned, "first plan": first, "unfused": unfused}
    latency = fastest(models, replays)
    chosen = min(models, key=lambda n: latency[n])  # ties: the tuned model first
    return Tuned(models[chosen], chosen, tuned, first, unfused, tuning, latency)
