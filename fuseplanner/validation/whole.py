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

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fuseplanner.core.errors import PlanError, RecordsError
from fuseplanner.planning.whole import WholePlanPrediction

SCHEMA = "fuseplanner.whole/1"


class Latency(BaseModel):
    """Measured end-to-end latency of CUDA-graph replays (`fuseplanner.run` BenchRecord)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    median_s: float = Field(gt=0)
    p10_s: float = Field(gt=0)
    p90_s: float = Field(gt=0)
    mode: str = "warm-L2"


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
        step_mode=step_mode,
    )  # fmt: skip


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:+.1f}%"


def to_markdown(results: Sequence[WholeResult]) -> str:
    """Tables: end-to-end latency, plan saving, per-step error; one row per result."""
    lines = ["## End-to-end latency (CUDA-graph replay, median)", "",
             "| model | dtype | batch | measured planned us | predicted (graph) | error | isolated prediction | "
             "measured unfused us | predicted (graph) | error |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in results:
        lines.append(f"| {r.model} | {r.dtype}/{r.precision} | {r.batch} | {r.measured_planned.median_s * 1e6:.1f} | "
                     f"{r.predicted_planned_s * 1e6:.1f} | {_pct(r.error_planned)} | {r.isolated_planned_s * 1e6:.1f} | "
                     f"{r.measured_unfused.median_s * 1e6:.1f} | {r.predicted_unfused_s * 1e6:.1f} | "
                     f"{_pct(r.error_unfused)} |")  # fmt: skip
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
    return "\n".join(lines) + "\n"


def write(results: Sequence[WholeResult], out: Path) -> tuple[Path, Path]:
    """whole.json (a list of results) and whole.md in folder `out`."""
    out.mkdir(parents=True, exist_ok=True)
    js, md = out / "whole.json", out / "whole.md"
    js.write_text("[\n" + ",\n".join(r.model_dump_json(indent=1) for r in results) + "\n]\n", encoding="utf-8")
    md.write_text(to_markdown(results), encoding="utf-8")
    return js, md


def _latency(rec) -> Latency:
    return Latency(median_s=rec.median_s, p10_s=rec.p10_s, p90_s=rec.p90_s, mode=rec.mode)


def measure(model, spec, *, dtype: str = "fp32", precision: str = "fp32", batch: int | None = None,
            replays: int = 200, context: str = "isolated", input_shapes=None,
            step_mode: str = "graph") -> WholeResult:  # fmt: skip
    """(GPU) Compile `model` planned (the time objective decided in `context`) and unfused, bench both
    as CUDA-graph replays with a warm L2, time the planned steps in stream mode, and compare with the
    whole-inference predictions."""
    import fuseplanner
    from fuseplanner.frontend.load import load_model
    from fuseplanner.planning.search import plan as make_plan
    from fuseplanner.planning.whole import predict_whole

    graph = load_model(model, input_shapes, batch)
    plan = make_plan(graph, spec, dtype=dtype, precision=precision, context=context)
    fused = fuseplanner.compile(model, spec, plan, dtype=dtype, precision=precision, batch=batch, input_shapes=input_shapes)
    bare = fuseplanner.compile(model, spec, dtype=dtype, precision=precision, batch=batch, fuse=False,
                               input_shapes=input_shapes)  # fmt: skip
    rec_p, rec_u = fused.bench(replays=replays), bare.bench(replays=replays)
    times = fused.time_nodes(mode=step_mode)
    graph_pred = predict_whole(graph, spec, plan, "graph", unfused_plan=bare.plan)
    iso_pred = predict_whole(graph, spec, plan, "isolated", unfused_plan=bare.plan)
    return compare(graph_pred, iso_pred, _latency(rec_p), _latency(rec_u), times, gpu=spec.name, dtype=dtype,
                   precision=precision, batch=plan.batch, device=_device_name(), owner=owners(plan, graph), step_mode=step_mode)  # fmt: skip


@dataclass(frozen=True)
class _Measured:  # a saved step as `compare` reads a measured one
    label: str
    kind: str
    seconds: float


def read(path: str | Path) -> list[WholeResult]:
    """The results of a whole.json (`write`); RecordsError for a file that is not one."""
    import json

    from pydantic import ValidationError

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return [WholeResult.model_validate(d) for d in (data if isinstance(data, list) else [data])]
    except (OSError, ValueError, ValidationError) as exc:
        raise RecordsError(f"{path}: not a whole.json of `validate --whole` ({str(exc).splitlines()[0]})") from None


def repredict(result: WholeResult, spec, model=None, context: str = "isolated") -> WholeResult:
    """`result`'s measurements against the predictions of `spec` and the current cost model, without a
    GPU: the model planned again as `measure` plans it (`context`), which must give the plan that was
    measured (every measured step label is a planned step's), then predicted whole in both contexts."""
    from fuseplanner.frontend.load import load_model
    from fuseplanner.planning.search import plan as make_plan
    from fuseplanner.planning.whole import predict_whole

    graph = load_model(model or result.model, None, result.batch)
    plan = make_plan(graph, spec, dtype=result.dtype, precision=result.precision, context=context)
    unfused = make_plan(graph, spec, dtype=result.dtype, batch=plan.batch, kinds=[], precision=result.precision,
                        workers=1)  # fmt: skip
    graph_pred = predict_whole(graph, spec, plan, "graph", unfused_plan=unfused)
    labels = {s.label for s in graph_pred.planned.steps}
    missing = [s.label for s in result.steps if s.label not in labels]
    if missing:
        raise PlanError(f"{result.model}: spec {spec.name} plans differently from the measured run (no step "
                        f"{missing[0]!r}): re-predicting needs the measured plan; measure again with this spec")
    iso_pred = predict_whole(graph, spec, plan, "isolated", unfused_plan=unfused)
    steps = [_Measured(s.label, s.kind, s.measured_s) for s in result.steps]
    return compare(graph_pred, iso_pred, result.measured_planned, result.measured_unfused, steps, gpu=spec.name,
                   dtype=result.dtype, precision=result.precision, batch=result.batch, device=result.device,
                   step_mode=result.step_mode)  # fmt: skip


def _device_name() -> str:
    try:
        import cupy

        name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # the name is a label only
        return ""
