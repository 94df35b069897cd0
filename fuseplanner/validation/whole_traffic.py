"""Whole-inference traffic: Nsight Compute over one CUDA-graph replay of a compiled model, beside the
whole-inference prediction.

Measured (`profile`, GPU and ncu): a worker process compiles the model planned and unfused (as
`validation.whole.measure` does), replays each CUDA graph once to warm up, then once between two
marker kernels. ncu runs it with ``--graph-profiling graph``, so each replay is one profiled workload:
its counters are those of a whole inference whose kernels run back to back with no cache flush
between them. Two profiles:

- cold: ``--cache-control all``, the caches flushed before the replay. This is the inference the
  graph context predicts (`cost.execution`: one inference that starts with a cold L2, activations
  served from L2 by the residency rule, weights and model inputs from DRAM);
- warm: ``--cache-control none``, the replay right after another, as a served model runs: the
  weights and the last activations may still be in L2. No prediction; reported beside.

Predicted (`predicted`, pure): the graph-context `WholePrediction` summed over its steps, DRAM reads
after the residency rule plus DRAM writes, and L2 traffic as the SMs' requests (the cost models' GMA
bytes, 32-byte sectors); the isolated context's sum (every kernel after an L2 flush) beside it.
Counters (ncu's metric names): ``dram__bytes_read.sum``, ``dram__bytes_write.sum``,
``lts__t_sectors_srcunit_tex_op_read.sum`` and ``..._write.sum`` (x 32 bytes).
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from fuseplanner.core.errors import DeviceError

#: Profiles taken: (name, ncu cache-control mode).
PROFILES = (("cold", "all"), ("warm", "none"))
#: The replays the worker marks, in order.
VARIANTS = ("planned", "unfused")


class InferenceBytes(BaseModel):
    """Traffic of one whole inference: DRAM bytes read and written, L2 bytes the SMs read and wrote."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dram_read_bytes: float = Field(ge=0)
    dram_write_bytes: float = Field(ge=0)
    l2_read_bytes: float = Field(ge=0)
    l2_write_bytes: float = Field(ge=0)

    @property
    def dram_bytes(self) -> float:
        return self.dram_read_bytes + self.dram_write_bytes

    @property
    def l2_bytes(self) -> float:
        return self.l2_read_bytes + self.l2_write_bytes


class Measured(BaseModel):
    """The counters of one replay of the planned and of the unfused model, in one cache state."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    planned: InferenceBytes
    unfused: InferenceBytes


class TrafficComparison(BaseModel):
    """Whole-inference traffic predicted (graph context; isolated sum beside) and, when counters were
    read, measured cold and warm."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    predicted_planned: InferenceBytes
    predicted_unfused: InferenceBytes
    isolated_planned: InferenceBytes
    isolated_unfused: InferenceBytes
    cold: Measured | None = None
    warm: Measured | None = None
    note: str = Field(default="", description="why no counters were read, when none were")

    def with_counters(self, cold: Measured | None, warm: Measured | None, note: str = "") -> TrafficComparison:
        return self.model_copy(update={"cold": cold, "warm": warm, "note": note})


def predicted(whole) -> InferenceBytes:
    """A `cost.execution.WholePrediction`'s traffic summed over its steps."""
    s = whole.steps
    return InferenceBytes(dram_read_bytes=sum(x.dram_read_bytes for x in s), dram_write_bytes=sum(x.dram_write_bytes for x in s),
                          l2_read_bytes=sum(x.l2_read_bytes for x in s), l2_write_bytes=sum(x.l2_write_bytes for x in s))  # fmt: skip


def comparison(graph_pred, isolated_pred) -> TrafficComparison:
    """The predicted side of a comparison from `planning.whole.WholePlanPrediction`s of both contexts."""
    return TrafficComparison(predicted_planned=predicted(graph_pred.planned), predicted_unfused=predicted(graph_pred.unfused),
                             isolated_planned=predicted(isolated_pred.planned),
                             isolated_unfused=predicted(isolated_pred.unfused))  # fmt: skip


def from_counters(traffic) -> InferenceBytes:
    """An `InferenceBytes` from the `validation.ncu.Traffic` of one profiled replay; DeviceError when a
    counter is missing."""
    vals = (traffic.dram_read_bytes, traffic.dram_write_bytes, traffic.gma_read_bytes, traffic.gma_write_bytes)
    if any(v is None for v in vals):
        raise DeviceError("Nsight Compute gave no DRAM or L2 counter for the profiled graph replay")
    return InferenceBytes(dram_read_bytes=vals[0], dram_write_bytes=vals[1], l2_read_bytes=vals[2], l2_write_bytes=vals[3])


def measured_from(records: Sequence) -> Measured:
    """The planned and unfused replays of one profile (`validation.ncu.KernelRecord`s of the worker)."""
    from fuseplanner.validation import ncu

    regions = ncu.split_by_markers(records)
    if len(regions) != len(VARIANTS) or any(len(r) != 1 or r[0].kernel != "graph" for r in regions):
        shape = [[r.kernel for r in region] for region in regions]
        raise DeviceError(f"ncu profiled {shape} between the markers; expected one graph per model variant")
    planned, unfused = (from_counters(ncu.total(r)) for r in regions)
    return Measured(planned=planned, unfused=unfused)


# ---- GPU ---------------------------------------------------------------------------------------------
def profile(model, spec, plan, *, dtype: str, precision: str, batch: int | None, input_shapes=None,
            work_dir: Path, timeout_s: float = 600.0) -> tuple[Measured, Measured]:  # fmt: skip
    """(GPU, ncu) The cold and warm counters of one replay of `model` compiled with `plan` and unfused.
    Raises `validation.ncu.CountersUnavailable` where ncu may not read counters."""
    import fuseplanner
    from fuseplanner.validation import ncu

    job = Path(work_dir) / "whole_traffic_job.pkl"
    job.write_bytes(pickle.dumps({"model": model, "spec": spec, "plan": plan, "dtype": dtype, "precision": precision,
                                  "batch": batch, "input_shapes": input_shapes}))  # fmt: skip
    root = str(Path(fuseplanner.__file__).resolve().parent.parent)
    argv = ncu.python_argv(__name__, "--worker", str(job))
    out = {}
    for name, cache in PROFILES:
        out[name] = measured_from(ncu.profile(argv, cache=cache, graph=True, timeout_s=timeout_s, cwd=root))
    return out["cold"], out["warm"]


def worker(job_path: str) -> None:
    """Entry of the profiled process: each model variant's graph replayed once, then once between the
    marker kernels, on fresh random inputs (the same for both)."""
    import numpy as np

    import fuseplanner
    from fuseplanner.kernels import require_device
    from fuseplanner.validation.ncu import Markers

    cp = require_device()
    job = pickle.loads(Path(job_path).read_bytes())
    kw = {"dtype": job["dtype"], "precision": job["precision"], "batch": job["batch"], "input_shapes": job["input_shapes"]}
    models = [fuseplanner.compile(job["model"], job["spec"], job["plan"], **kw),
              fuseplanner.compile(job["model"], job["spec"], None, fuse=False, avoid_spills=False, **kw)]  # fmt: skip
    markers = Markers(cp)
    rng = np.random.default_rng(0)
    for m in models:
        for buf in m.input_buffers.values():
            buf[...] = cp.asarray(rng.standard_normal(buf.shape)).astype(buf.dtype)
        m.launch()
        markers.region(m.launch)


# ---- tables ------------------------------------------------------------------------------------------
def _mb(x: float) -> str:
    return f"{x / 1e6:.2f}"


def _err(pred: float, meas: float) -> str:
    return f"{100 * (pred / meas - 1):+.1f}%" if meas else "n/a"


def _saved(a: InferenceBytes, b: InferenceBytes) -> float:
    return 100 * (b.dram_bytes - a.dram_bytes) / b.dram_bytes if b.dram_bytes else 0.0


def rows(results: Sequence) -> list[str]:
    """One table row per `validation.whole.WholeResult` with measured counters (see `to_markdown`)."""
    out = []
    for r in results:
        t = r.traffic
        if t is None or t.cold is None:
            continue
        c, w = t.cold, t.warm
        out.append(
            f"| {r.model} | {r.dtype}/{r.precision} | {r.batch} | {_mb(c.planned.dram_bytes)} | "
            f"{_mb(t.predicted_planned.dram_bytes)} ({_err(t.predicted_planned.dram_bytes, c.planned.dram_bytes)}) | "
            f"{_mb(t.isolated_planned.dram_bytes)} | {_mb(c.unfused.dram_bytes)} | "
            f"{_mb(t.predicted_unfused.dram_bytes)} ({_err(t.predicted_unfused.dram_bytes, c.unfused.dram_bytes)}) | "
            f"{_saved(c.planned, c.unfused):.1f}% | {_saved(t.predicted_planned, t.predicted_unfused):.1f}% | "
            f"{_mb(c.planned.dram_write_bytes)} / {_mb(c.unfused.dram_write_bytes)} | "
            f"{_mb(t.predicted_planned.dram_write_bytes)} / {_mb(t.predicted_unfused.dram_write_bytes)} | "
            f"{_mb(c.planned.l2_bytes)} | {_mb(t.predicted_planned.l2_bytes)} "
            f"({_err(t.predicted_planned.l2_bytes, c.planned.l2_bytes)}) | "
            f"{_mb(w.planned.dram_bytes) if w else 'n/a'} |")  # fmt: skip
    return out


def _errors(pairs) -> list[float]:
    return [p / m - 1 for p, m in pairs if m]


def summary(results: Sequence, held_out: frozenset[str]) -> list[str]:
    """Rows per model set, dtype/precision and batch: |error| median / p90 (%) of the cold whole-inference DRAM bytes
    (planned and unfused pooled) predicted in the graph context, of its DRAM reads alone, of the
    isolated per-kernel sum, and of the L2 bytes."""
    from fuseplanner.validation.whole_summary import abs_stats, by_set

    out = []
    measured = [r for r in results if r.traffic is not None and r.traffic.cold is not None]
    for name, mode, batch, mine in by_set(measured, held_out):
        pairs = [(getattr(r.traffic, f"predicted_{v}"), getattr(r.traffic.cold, v)) for r in mine for v in VARIANTS]
        iso = [(getattr(r.traffic, f"isolated_{v}").dram_bytes, getattr(r.traffic.cold, v).dram_bytes)
               for r in mine for v in VARIANTS]  # fmt: skip
        out.append(f"| {name} | {mode} | {batch} | {len(mine)} | "
                   f"{abs_stats(_errors((p.dram_bytes, m.dram_bytes) for p, m in pairs))} | "
                   f"{abs_stats(_errors((p.dram_read_bytes, m.dram_read_bytes) for p, m in pairs))} | "
                   f"{abs_stats(_errors(iso))} | {abs_stats(_errors((p.l2_bytes, m.l2_bytes) for p, m in pairs))} |")  # fmt: skip
    return out


def to_markdown(results: Sequence, held_out: frozenset[str] = frozenset()) -> str:
    """The whole-inference traffic tables: per set and batch, then per result (empty when no result
    has counters)."""
    body = rows(results)
    if not body:
        return ""
    return "\n".join([
        "## Whole-inference traffic, |error| median / p90 % (cold replay, planned and unfused pooled)", "",
        "| set | dtype/precision | batch | models | DRAM, graph context | DRAM reads only | DRAM, isolated sum | L2 |",
        "|---|---|---|---|---|---|---|---|", *summary(results, held_out), "",
        "## Whole-inference traffic (Nsight Compute over one CUDA-graph replay, MB)", "",
        "Cold: caches flushed before the replay, none between its kernels (what the graph context predicts); "
        "isolated: the per-kernel predictions summed (an L2 flush before every kernel); warm: the replay after "
        "another. L2: bytes the SMs read and wrote.", "",
        "| model | dtype | batch | DRAM planned, cold | predicted (graph) | isolated sum | DRAM unfused, cold | "
        "predicted (graph) | DRAM saved, measured | predicted | of which writes, planned / unfused | predicted | "
        "L2 planned | predicted | DRAM planned, warm |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|", *body]) + "\n"  # fmt: skip


def _main(argv: Sequence[str]) -> int:
    if len(argv) == 2 and argv[0] == "--worker":
        worker(argv[1])
        return 0
    sys.stderr.write(f"usage: python -m {__name__} --worker JOB (internal)\n")
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
