"""Saved validation runs as the analyses read them: loaded, labelled, and re-predicted with a spec."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fuseplanner.core.errors import AnalysisError
from fuseplanner.validation import fit, report


@dataclass(frozen=True)
class Run:
    """One validation results document: where it came from, its label, and its (re-predicted) data."""

    path: str
    label: str
    data: Mapping[str, Any]

    @property
    def records(self) -> list[dict]:
        return self.data["records"]

    @property
    def dtype(self) -> str:
        return self.data["meta"]["dtype"]


def run_label(meta: Mapping[str, Any]) -> str:
    """"model dtype bBATCH", e.g. "mobilenet_v2 fp32 b1"."""
    return f"{meta.get('model', '?')} {meta.get('dtype', '?')} b{meta.get('batch', '?')}"


def load_runs(paths: Sequence[str | Path], spec: Any = None, model: str | None = None) -> list[Run]:
    """The results files at `paths` (plain or .gz). With `spec`, each run's `ours` predictions and
    fuse decisions are recomputed with it (`fit.repredict`; `model` names the ONNX file when not the
    bundled model the run names); without, the predictions recorded at validation are kept."""
    if not paths:
        raise AnalysisError("give at least one results.json of a validation run")
    runs = []
    for path in paths:
        if not Path(path).is_file():  # an unmatched shell glob arrives as its pattern
            raise AnalysisError(f"no such results file: {path}")
        data = report.load_results(path)
        if spec is not None:
            data = fit.repredict(data, spec, model)
        runs.append(Run(str(path), run_label(data["meta"]), data))
    return runs


def fuse_threshold(spec: Any) -> float:
    """The spec's `fuse_min_speedup`: the predicted unfused/fused ratio from which the planner fuses."""
    return float(spec.eff(fit.THRESHOLD_FIELD))
