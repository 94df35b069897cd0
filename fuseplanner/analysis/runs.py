"""Saved validation runs as the analyses read them: loaded, labelled, and re-predicted with a spec."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fuseplanner.core.errors import AnalysisError
from fuseplanner.validation import fit, report
from fuseplanner.validation.records import Record, RunLike, RunMeta, ValidationRun, as_run


@dataclass(frozen=True)
class Run:
    """One validation run: where it came from, its label, and its (re-predicted) records; `data`
    may be given as a results document dict (converted by `records.as_run`)."""

    path: str
    label: str
    data: ValidationRun

    def __init__(self, path: str, label: str, data: RunLike) -> None:
        object.__setattr__(self, "path", path)
        object.__setattr__(self, "label", label)
        object.__setattr__(self, "data", as_run(data, path))

    @property
    def records(self) -> tuple[Record, ...]:
        return self.data.records

    @property
    def dtype(self) -> str | None:
        return self.data.meta.dtype


def run_label(meta: RunMeta) -> str:
    """"model dtype bBATCH", e.g. "mobilenet_v2 fp32 b1"."""
    q = ["?" if v is None else v for v in (meta.model, meta.dtype, meta.batch)]
    return f"{q[0]} {q[1]} b{q[2]}"


def load_runs(paths: Sequence[str | Path], spec: Any = None, model: str | None = None) -> list[Run]:
    """The results files at `paths` (plain or .gz). With `spec`, each run's `ours` predictions and
    fuse decisions are recomputed with it (`fit.repredict`; `model` names the ONNX file when not the
    bundled model the run names); without, the predictions recorded at validation are kept."""
    if not paths:
        raise AnalysisError("give at least one records file (records.jsonl or results.json) of a validation run")
    runs = []
    for path in paths:
        if not Path(path).is_file():  # an unmatched shell glob arrives as its pattern
            raise AnalysisError(f"no such results file: {path}")
        data = report.load_results(path)
        if spec is not None:
            data = fit.repredict(data, spec, model)
        runs.append(Run(str(path), run_label(data.meta), data))
    return runs


def fuse_threshold(spec: Any) -> float:
    """The spec's `fuse_min_speedup`: the predicted unfused/fused ratio from which the planner fuses."""
    return float(spec.eff(fit.THRESHOLD_FIELD))
