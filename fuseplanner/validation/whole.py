"""Whole-model validation: the executor's measured latency against the whole-inference prediction.

`measure(...)` (GPU) compiles a model planned and unfused with `fuseplanner.compile`, replays each as a
CUDA graph (`bench`) and times the planned program's steps (`time_nodes`, graph mode: each step
replayed back to back in a CUDA graph of its own; stream mode adds the host's launch time). `compare`
(pure) sets those measurements beside `fuseplanner.planning.whole.predict_whole` in the graph context
(and the isolated context for reference): end-to-end latency of both, the plan's saving over no
fusion, and each step's measured time against its graph-context prediction. `to_markdown` renders
results as tables. Errors are signed fractions, predicted / measured - 1; savings are fractions of the
unfused time; the saving gap is in percentage points (predicted - measured).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fuseplanner.core.errors import PlanError, RecordsError
from fuseplanner.core.kinds import DEFAULT_CONTEXT
from fuseplanner.planning.result import Plan
from fuseplanner.planning.whole import WholePlanPrediction
from fuseplanner.validation.whole_decisions import DecisionData, MeasuredStep, PlanRun, candidates
from fuseplanner.validation.whole_decisions import to_markdown as decisions_markdown
from fuseplanner.validation.whole_summary import signed_pct
from fuseplanner.validation.whole_summary import to_markdown as summary_markdown
from fuseplanner.validation.whole_traffic import TrafficComparison, comparison
from fuseplanner.validation.whole_traffic import to_markdown as traffic_markdown

SCHEMA = "fuseplanner.whole/1"


class Latency(BaseModel):
    """Measured end-to-end latency of CUDA-graph replays (`fuseplanner.run` BenchRecord)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    median_s: float = Field(gt=0)
    p10_s: float = Field(gt=0)
    p90_s: float = Field(gt=0)
    mode: str = "warm-L2"


class SpilledKernel(BaseModel):
    """A kernel step of a measured model whose compiled kernel uses local memory per thread (register
    spills, `run.runtime.Spill`): the cost model does not price it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    plan: str = Field(description="the model it was compiled in: planned or unfused")
    label: str
    kind: str
    tile: str
    regs: int
    local_bytes: int


def spilled(compiled, plan: str) -> list[SpilledKernel]:
    """The spilled kernel steps of a compiled model (`CompiledModel.spills`)."""
    return [SpilledKernel(plan=plan, label=s.label, kind=s.kind, tile=s.tile, regs=s.regs, local_bytes=s.local_bytes)
            for s in compiled.spills]  # fmt: skip


class StepTiming(BaseModel):
    """One executor step's measured time (`WholeResult.step_mode`) beside its graph-context prediction."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str
    kind: str
    measured_s: float
    predicted_s: float
    error: float | None = Field(description="predicted / measured - 1; None when either is zero")


class WholeResult(BaseModel):
    """One model, one dtype/precision/batch: predicted against measured, whole inference."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_id: str = SCHEMA
    model: str
    gpu: str
    device: str = ""
    dtype: str
    precision: str
    batch: int
    context: str = Field(description="execution context of the predictions compared (graph)")
    launches_planned: int
    launches_unfused: int
    measured_planned: Latency
    measured_unfused: Latency
    predicted_planned_s: float
    predicted_unfused_s: float
    isolated_planned_s: float
    isolated_unfused_s: float
    error_planned: float
    error_unfused: float
    predicted_saving: float
    measured_saving: float
    isolated_saving: float
    saving_gap_points: float
    steps: list[StepTiming] = Field(default_factory=list)
    step_error_median: float | None = None
    step_error_p90: float | None = None
    unmatched_steps: list[str] = Field(default_factory=list, description="measured steps with no predicted step")
    step_mode: str = Field(default="stream", description="how steps were timed: run.device.STEP_MODES")
    graph_step_timing: Literal["spacing", "replay", "replay-net"] = Field(
        default="replay", description="how the graph-mode step times were taken: 'spacing', (t_2n - t_n) / n of "
        "graphs of n and 2n copies of the step (run.device.time_nodes); 'replay', results saved before it: one "
        "replay of n copies / n, each step time holding 1/n of what a replay costs once; 'replay-net', such "
        "times less that share (`net_of_replay`)")
    unfused_steps: list[MeasuredStep] = Field(default_factory=list,
                                              description="the unfused model's steps timed in graph mode")  # fmt: skip
    decisions: DecisionData | None = Field(default=None, description="fuse decision candidates and the planned "
                                           "runs measured for them (validation.whole_decisions)")  # fmt: skip
    traffic: TrafficComparison | None = Field(default=None, description="whole-inference DRAM and L2 bytes, "
                                              "predicted and measured (validation.whole_traffic)")  # fmt: skip
    spills: list[SpilledKernel] = Field(default_factory=list, description="kernel steps whose compiled kernels "
                                        "spill registers to local memory, in the planned and the unfused model")  # fmt: skip
    plan: Plan | None = Field(default=None, description="the plan measured (groups, tiles, layers; its rejected "
                              "candidates left out): `repredict` costs it with the spec it is given")  # fmt: skip


def owners(plan, graph) -> dict[str, str]:
    """Each ONNX node the plan covers, its ops' epilogue nodes included -> the label of the predicted
    step that covers it (the executor runs a library conv's epilogue as a step of its own)."""
    ops = {op.name: op for op in graph.ops()}
    out: dict[str, str] = {}
    for covers, label in [*((g.covers, "+".join(g.nodes)) for g in plan.groups),
                          *((lay.covers, lay.node) for lay in plan.layers)]:  # fmt: skip
        for node in covers:
            out[node] = label
            out.update(dict.fromkeys(getattr(ops.get(node), "epilogue_nodes", ()), label))
    return out


def _owner(label: str, by_label: dict, owner: Mapping[str, str]) -> str | None:
    if label in by_label:
        return label
    for node in label.split("+"):  # a merged elementwise chain is labelled by its members
        if owner.get(node) in by_label:
            return owner[node]
    return None


def _steps(prediction: WholePlanPrediction, measured: Sequence,
           owner: Mapping[str, str] | None = None) -> tuple[list[StepTiming], list[str]]:  # fmt: skip
    """Measured stream-mode steps (records with label, kind, seconds) matched to predicted steps by label,
    or through `owner` (`owners(plan)`) to the predicted step covering them; the measured seconds of
    every step matched to one predicted step add up."""
    by_label = {s.label: s for s in prediction.planned.steps}
    seconds: dict[str, float] = {}
    unmatched = []
    for m in measured:
        label = _owner(m.label, by_label, owner or {})
        if label is None:
            if m.kind != "view":
                unmatched.append(m.label)
            continue
        seconds[label] = seconds.get(label, 0.0) + m.seconds
    out = []
    for label, sec in seconds.items():
        p = by_label[label]
        err = p.time_s / sec - 1 if p.time_s > 0 and sec > 0 else None
        out.append(StepTiming(label=label, kind=p.kind, measured_s=sec, predicted_s=p.time_s, error=err))
    return out, unmatched


def _launches(w) -> int:
    return sum(1 for s in w.steps if s.time_s > 0)


def compare(graph_pred: WholePlanPrediction, isolated_pred: WholePlanPrediction, planned: Latency,
            unfused: Latency, step_times: Sequence, *, gpu: str, dtype: str, precision: str, batch: int,
            device: str = "", owner: Mapping[str, str] | None = None, step_mode: str = "stream") -> WholeResult:  # fmt: skip
    """A `WholeResult` from predictions in the graph and isolated contexts and the measurements."""
    pp, pu = graph_pred.planned.time_s, graph_pred.unfused.time_s
    measured_saving = (unfused.median_s - planned.median_s) / unfused.median_s
    steps, unmatched = _steps(graph_pred, step_times, owner)
    errs = np.abs([s.error for s in steps if s.error is not None])
    return WholeResult(
        model=graph_pred.model, gpu=gpu, device=device, dtype=dtype, precision=precision, batch=batch,
        context=graph_pred.context, launches_planned=_launches(graph_pred.planned),
        launches_unfused=_launches(graph_pred.unfused), measured_planned=planned, measured_unfused=unfused,
        predicted_planned_s=pp, predicted_unfused_s=pu, isolated_planned_s=isolated_pred.planned.time_s,
        isolated_unfused_s=isolated_pred.unfused.time_s, error_planned=pp / planned.median_s - 1,
        error_unfused=pu / unfused.median_s - 1, predicted_saving=graph_pred.saving, measured_saving=measured_saving,
        isolated_saving=isolated_pred.saving, saving_gap_points=100 * (graph_pred.saving - measured_saving),
        steps=steps, step_error_median=float(np.median(errs)) if errs.size else None,
        step_error_p90=float(np.percentile(errs, 90)) if errs.size else None, unmatched_steps=unmatched,
        step_mode=step_mode, traffic=comparison(graph_pred, isolated_pred),
    )  # fmt: skip


def to_markdown(results: Sequence[WholeResult]) -> str:
    """Tables: end-to-end latency, plan saving, per-step error; one row per result."""
    lines = ["## End-to-end latency (CUDA-graph replay, median)", "",
             "| model | dtype | batch | measured planned us | predicted (graph) | error | isolated prediction | "
             "measured unfused us | predicted (graph) | error |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in results:
        lines.append(f"| {r.model} | {r.dtype}/{r.precision} | {r.batch} | {r.measured_planned.median_s * 1e6:.1f} | "
                     f"{r.predicted_planned_s * 1e6:.1f} | {signed_pct(r.error_planned)} | {r.isolated_planned_s * 1e6:.1f} | "
                     f"{r.measured_unfused.median_s * 1e6:.1f} | {r.predicted_unfused_s * 1e6:.1f} | "
                     f"{signed_pct(r.error_unfused)} |")  # fmt: skip
    lines += ["", "## Saving of the plan over no fusion (% of the unfused run)", "",
              "| model | dtype | batch | measured | predicted (graph) | gap (points) | predicted (isolated) |",
              "|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in results:
        lines.append(f"| {r.model} | {r.dtype}/{r.precision} | {r.batch} | {100 * r.measured_saving:.1f}% | "
                     f"{100 * r.predicted_saving:.1f}% | {r.saving_gap_points:+.1f} | {100 * r.isolated_saving:.1f}% |")
    lines += ["", "## Per-step time vs graph-context prediction (|error|)", "",
              "| model | dtype | batch | timed | steps | median | p90 | unmatched |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        med = "n/a" if r.step_error_median is None else f"{100 * r.step_error_median:.1f}%"
        p90 = "n/a" if r.step_error_p90 is None else f"{100 * r.step_error_p90:.1f}%"
        lines.append(f"| {r.model} | {r.dtype}/{r.precision} | {r.batch} | {r.step_mode} | {len(r.steps)} | {med} | {p90} | "
                     f"{len(r.unmatched_steps)} |")
    return "\n".join(lines + _spill_lines(results)) + "\n"


def _spill_lines(results: Sequence[WholeResult]) -> list[str]:
    """A table of the kernels that spill (none: no table): their times are not what the model predicts."""
    rows = [(r, s) for r in results for s in r.spills]
    if not rows:
        return []
    lines = ["", "## Kernels that spill registers (local memory per thread; not in the cost model)", "",
             "| model | dtype | batch | plan | step | kind | tile | registers | local bytes |",
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    return lines + [f"| {r.model} | {r.dtype}/{r.precision} | {r.batch} | {s.plan} | {s.label} | {s.kind} | {s.tile} | "
                    f"{s.regs} | {s.local_bytes} |" for r, s in rows]  # fmt: skip


def to_json(results: Sequence[WholeResult]) -> str:
    """The text of a whole.json: a list of results."""
    return "[\n" + ",\n".join(r.model_dump_json(indent=1) for r in results) + "\n]\n"


def write(results: Sequence[WholeResult], out: Path) -> tuple[Path, Path]:
    """whole.json (a list of results) and whole.md in folder `out`."""
    out.mkdir(parents=True, exist_ok=True)
    js, md = out / "whole.json", out / "whole.md"
    js.write_text(to_json(results), encoding="utf-8")
    from fuseplanner.frontend.holdout import holdout_models

    held_out = frozenset(m.name for m in holdout_models())
    traffic = traffic_markdown(results, held_out)
    md.write_text(summary_markdown(results, held_out) + "\n" + to_markdown(results) + ("\n" + traffic if traffic else "")
                  + _decisions_section(results), encoding="utf-8")  # fmt: skip
    return js, md


def _decisions_section(results: Sequence[WholeResult]) -> str:
    text = decisions_markdown(results)
    return "\n" + text if text else ""


def _latency(rec) -> Latency:
    return Latency(median_s=rec.median_s, p10_s=rec.p10_s, p90_s=rec.p90_s, mode=rec.mode)


def measure(model, spec, *, dtype: str = "fp32", precision: str = "fp32", batch: int | None = None,
            replays: int = 200, context: str = DEFAULT_CONTEXT, input_shapes=None, step_mode: str = "graph",
            decisions: bool = False, step_repeats: int = 20, counters: bool = False, require_counters: bool = False,
            progress=None) -> WholeResult:  # fmt: skip
    """(GPU) Compile `model` planned (the time objective decided in `context`) and unfused, bench both
    as CUDA-graph replays with a warm L2, time the planned steps (`step_mode`) and the unfused steps
    (graph mode), and compare with the whole-inference predictions. The result carries the fuse
    decisions of both contexts (`validation.whole_decisions`); `decisions` also compiles and times the
    model planned in the other context, so that every group either context fuses is measured.
    `counters` also reads the whole-inference traffic of one replay of each with Nsight Compute
    (`validation.whole_traffic`; where ncu may not, the result says why, or with `require_counters`
    the error is raised). `progress` (a callable taking one line) hears what runs."""
    import fuseplanner
    from fuseplanner.frontend.load import load_model
    from fuseplanner.planning.whole import predict_whole

    say = progress or (lambda _line: None)
    graph = load_model(model, input_shapes, batch)
    plans = _both_plans(graph, spec, dtype, precision, say)
    plan = plans[context]

    def build(p, what: str, **kw):
        say(f"{graph.name}: compiling {what}")
        return fuseplanner.compile(model, spec, p, dtype=dtype, precision=precision, batch=batch,
                                   input_shapes=input_shapes, avoid_spills=False, **kw)  # fmt: skip

    fused = build(plan, f"the {context}-context plan ({len(plan.groups)} groups)")
    bare = build(None, "the unfused model", fuse=False)
    spills = spilled(fused, "planned") + spilled(bare, "unfused")
    for sp in spills:
        say(f"{graph.name}: {sp.plan} {sp.label} ({sp.kind} {sp.tile}) spills: {sp.regs} registers, "
            f"{sp.local_bytes} bytes of local memory per thread")  # fmt: skip
    say(f"{graph.name}: benching planned and unfused, {replays} CUDA-graph replays each")
    rec_p, rec_u = fused.bench(replays=replays), bare.bench(replays=replays)
    times = _time_steps(fused, "planned", step_mode, step_repeats, say)
    runs = [PlanRun(context=context, steps=with_covers(fused, times if step_mode == "graph" else
                                                        _time_steps(fused, "planned", "graph", step_repeats, say)))]  # fmt: skip
    unfused_steps = with_covers(bare, _time_steps(bare, "unfused", "graph", step_repeats, say))
    if decisions:
        runs.append(_other_run(plans, context, runs[0], build, step_repeats, say))
    graph_pred = predict_whole(graph, spec, plan, "graph", unfused_plan=bare.plan)
    iso_pred = predict_whole(graph, spec, plan, "isolated", unfused_plan=bare.plan)
    result = compare(graph_pred, iso_pred, _latency(rec_p), _latency(rec_u), times, gpu=spec.name, dtype=dtype,
                     precision=precision, batch=plan.batch, device=_device_name(), owner=owners(plan, graph),
                     step_mode=step_mode)  # fmt: skip
    data = DecisionData(candidates=candidates(plans["isolated"], plans["graph"], bare.plan, spec), runs=runs)
    if counters:
        say(f"{graph.name}: reading whole-inference counters with Nsight Compute (cold and warm replays)")
        traffic = _counters(result.traffic, model, spec, plan, dict(dtype=dtype, precision=precision, batch=batch,
                                                                    input_shapes=input_shapes), require_counters)  # fmt: skip
        result = result.model_copy(update={"traffic": traffic})
    return result.model_copy(update={"unfused_steps": unfused_steps, "decisions": data, "spills": spills,
                                     "plan": stored(plan), "graph_step_timing": "spacing"})  # fmt: skip


def stored(plan) -> Plan:
    """The plan as a whole result keeps it: without its rejected candidates."""
    return plan.model_copy(update={"rejected": []})


def _counters(traffic: TrafficComparison, model, spec, plan, kw: dict, require: bool) -> TrafficComparison:
    """`traffic` with the counters `whole_traffic.profile` reads, or with the reason none were read."""
    import tempfile

    from fuseplanner.validation.ncu import CountersUnavailable
    from fuseplanner.validation.whole_traffic import profile

    try:
        with tempfile.TemporaryDirectory(prefix="fuseplanner-whole-") as tmp:
            cold, warm = profile(model, spec, plan, work_dir=Path(tmp), **kw)
    except CountersUnavailable as exc:
        if require:
            raise
        return traffic.with_counters(None, None, note=str(exc))
    return traffic.with_counters(cold, warm)


def _both_plans(graph, spec, dtype: str, precision: str, say) -> dict:
    """The model planned with the time objective decided in each context, by context."""
    from fuseplanner.core.kinds import CONTEXTS
    from fuseplanner.planning.search import plan as make_plan

    say(f"{graph.name}: planning in the {' and '.join(CONTEXTS)} contexts")
    return {c: make_plan(graph, spec, dtype=dtype, precision=precision, context=c) for c in CONTEXTS}


def _time_steps(compiled, what: str, mode: str, repeats: int, say) -> list:
    n = sum(1 for s in compiled.steps if s.kind != "view")
    say(f"{compiled.program.name}: timing the {n} steps of the {what} model ({mode} mode, {repeats} repeats)")
    return compiled.time_nodes(repeats=repeats, mode=mode)


def with_covers(compiled, times) -> list[MeasuredStep]:
    """Timed steps (`time_nodes`: every step but views, in order) with the ONNX nodes each covers."""
    infos = [s for s in compiled.steps if s.kind != "view"]
    return [MeasuredStep(label=t.label, kind=t.kind, measured_s=t.seconds, covers=list(i.covers))
            for i, t in zip(infos, times, strict=True)]  # fmt: skip


def _other_run(plans: dict, context: str, measured: PlanRun, build, repeats: int, say) -> PlanRun:
    """The model planned in the context other than `context`, compiled and its steps timed in graph
    mode; the measured run's steps again when both plans have the same kernels and tiles."""
    other = next(c for c in plans if c != context)
    if plans[other].tiles() == plans[context].tiles():
        say(f"the {other}-context plan has the same kernels as the {context}-context plan: measured once")
        return PlanRun(context=other, steps=measured.steps)
    m = build(plans[other], f"the {other}-context plan ({len(plans[other].groups)} groups)")
    return PlanRun(context=other, steps=with_covers(m, _time_steps(m, f"{other}-context planned", "graph", repeats, say)))


@dataclass(frozen=True)
class _Measured:  # a saved step as `compare` reads a measured one
    label: str
    kind: str
    seconds: float


def read(path: str | Path) -> list[WholeResult]:
    """The results of a whole.json (`write`; gzip-compressed when its name ends in .gz); RecordsError for
    a file that is not one."""
    import gzip
    import json

    from pydantic import ValidationError

    try:
        raw = Path(path).read_bytes()
        data = json.loads(gzip.decompress(raw) if str(path).endswith(".gz") else raw)
        return [WholeResult.model_validate(d) for d in (data if isinstance(data, list) else [data])]
    except (OSError, ValueError, ValidationError) as exc:
        raise RecordsError(f"{path}: not a whole.json of `validate --whole` ({str(exc).splitlines()[0]})") from None


#: Copies of a step in the one replay that timed it in results whose `graph_step_timing` is "replay".
REPLAY_COPIES = 10


def net_of_replay(result: WholeResult, spec) -> WholeResult:
    """`result` with its graph-mode step times net of what their replay cost once: for a result timed
    "replay" (one replay of `REPLAY_COPIES` copies of the step / `REPLAY_COPIES`), every graph-mode step
    time (the planned steps in graph step mode, the unfused steps, the decision runs' steps) less
    spec `graph_replay_s` / `REPLAY_COPIES`, as times by spacing are; any other result as it is."""
    once = float(spec.eff("graph_replay_s") or 0.0) / REPLAY_COPIES
    if result.graph_step_timing != "replay" or once <= 0:
        return result

    def net(steps: list) -> list:
        return [s.model_copy(update={"measured_s": max(s.measured_s - once, 0.0)}) for s in steps]

    update = {"unfused_steps": net(result.unfused_steps), "graph_step_timing": "replay-net"}
    if result.step_mode == "graph":
        update["steps"] = net(result.steps)
    if result.decisions is not None:
        runs = [r.model_copy(update={"steps": net(r.steps)}) for r in result.decisions.runs]
        update["decisions"] = result.decisions.model_copy(update={"runs": runs})
    return result.model_copy(update=update)


def repredict(result: WholeResult, spec, model=None, context: str = "isolated") -> WholeResult:
    """`result`'s measurements against the predictions of `spec` and the current cost model, without a
    GPU: the plan measured (`result.plan`) costed with `spec` (`planning.recost`), or for a result saved
    without its plan, the model planned again as `measure` plans it (`context`), which must then give
    the plan that was measured (every measured step label is a planned step's); then predicted whole in
    both contexts. The result carries the plan it was predicted from (the measured plan either way)."""
    from fuseplanner.frontend.load import load_model
    from fuseplanner.planning.recost import recost
    from fuseplanner.planning.search import plan as make_plan
    from fuseplanner.planning.whole import predict_whole

    result = net_of_replay(result, spec)
    graph = load_model(model or result.model, None, result.batch)
    unfused = unfused_plan(graph, spec, result.dtype, result.precision, result.batch)
    if result.plan is not None:
        plan = recost(graph, result.plan, spec, unfused)
    else:
        plan = make_plan(graph, spec, dtype=result.dtype, precision=result.precision, context=context)
    graph_pred = predict_whole(graph, spec, plan, "graph", unfused_plan=unfused)
    labels = {s.label for s in graph_pred.planned.steps}
    missing = [s.label for s in result.steps if s.label not in labels]
    if missing:
        raise PlanError(f"{result.model}: spec {spec.name} plans differently from the measured run (no step "
                        f"{missing[0]!r}): re-predicting needs the measured plan; measure again with this spec")
    iso_pred = predict_whole(graph, spec, plan, "isolated", unfused_plan=unfused)
    steps = [_Measured(s.label, s.kind, s.measured_s) for s in result.steps]
    again = compare(graph_pred, iso_pred, result.measured_planned, result.measured_unfused, steps, gpu=spec.name,
                    dtype=result.dtype, precision=result.precision, batch=result.batch, device=result.device,
                    step_mode=result.step_mode)  # fmt: skip
    traffic = again.traffic
    if result.traffic is not None and traffic is not None:
        traffic = traffic.with_counters(result.traffic.cold, result.traffic.warm, result.traffic.note)
    return again.model_copy(update={"unfused_steps": result.unfused_steps, "decisions": result.decisions,
                                    "traffic": traffic, "spills": result.spills,
                                    "plan": result.plan if result.plan is not None else stored(plan),
                                    "graph_step_timing": result.graph_step_timing})  # fmt: skip


def unfused_plan(graph, spec, dtype: str, precision: str, batch: int):
    """The model planned with no fused kind: every layer run alone (the baseline of the predictions)."""
    from fuseplanner.planning.search import plan as make_plan

    return make_plan(graph, spec, dtype=dtype, batch=batch, kinds=[], precision=precision, workers=1)


def _device_name() -> str:
    try:
        import cupy

        name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # the name is a label only
        return ""
