"""Fuse decisions of saved runs against measurement: how many agree at each `fuse_min_speedup`, how
well the predicted unfused/fused ratios rank the measured ones, and the groups that disagree.

A group measured both fused and unfused counts: its predicted ratio is the predicted unfused time over
the predicted time at the planned tile (the records' `ours` predictions, as `fuseplanner validate
--from-results --repredict` recomputes them), its measured ratio the measured unfused time over the
best measured fused time (what the validation report's decisions count). Fusing agrees when the
predicted ratio reaches the threshold exactly when the best fused time beats the unfused one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fuseplanner.analysis.runs import Run
from fuseplanner.analysis.tables import Table
from fuseplanner.core.errors import AnalysisError
from fuseplanner.validation import fit, report
from fuseplanner.validation.records import Record


@dataclass(frozen=True)
class GroupDecision:
    """One group measured both ways. Times in seconds; `planned_s` is the measured time of the planned
    tile, `best_fused_s` of the fastest measured fused tile."""

    run: str
    group: str
    kind: str
    layers: tuple[str, ...]
    tile: str
    predicted_fused_s: float
    predicted_unfused_s: float
    planned_s: float
    best_fused_s: float
    unfused_s: float

    @property
    def predicted(self) -> float:
        """Predicted unfused / fused time."""
        return self.predicted_unfused_s / self.predicted_fused_s

    @property
    def measured(self) -> float:
        """Measured unfused / best fused time."""
        return self.unfused_s / self.best_fused_s

    @property
    def fusion_wins(self) -> bool:
        return self.best_fused_s < self.unfused_s

    def agrees(self, threshold: float) -> bool:
        """Whether fusing exactly when the predicted ratio reaches `threshold` matches the measurement."""
        return (self.predicted >= threshold) == self.fusion_wins


def _planned_record(records: Sequence[Record], group: str) -> Record | None:
    for r in records:
        if r.group == group and r.planned and r.role in ("group", "tile") and r.ok:
            return r
    return None


def group_decisions(run: Run) -> list[GroupDecision]:
    """The groups of a run measured both fused and unfused, with a prediction for both."""
    pred = fit.planned_times(run.records)
    out = []
    for g, e in report.decisions(run.data)["groups"].items():
        planned = _planned_record(run.records, g)
        if planned is None or (g, "group") not in pred or (g, "unfused") not in pred:
            continue
        info = run.data.groups[g]
        out.append(GroupDecision(
            run=run.label, group=g, kind=info.kind, layers=info.nodes,
            tile=report.tile_str(planned.tiles[0]) if len(planned.tiles) == 1 else "-",
            predicted_fused_s=pred[(g, "group")], predicted_unfused_s=pred[(g, "unfused")],
            planned_s=planned.cold_s, best_fused_s=e["best_fused_s"], unfused_s=e["unfused_s"],
        ))  # fmt: skip
    return out


@dataclass(frozen=True)
class ThresholdRow:
    threshold: float
    agreeing: int
    groups: int


def threshold_scan(groups: Sequence[GroupDecision], lo: float, hi: float, step: float) -> list[ThresholdRow]:
    """Agreeing decisions at each threshold from `lo` to `hi` (inclusive) in steps of `step`."""
    values = np.arange(lo, hi + 1e-9, step)
    return [ThresholdRow(float(t), sum(g.agrees(t) for g in groups), len(groups)) for t in values]


def ranking(groups: Sequence[GroupDecision]) -> tuple[float | None, float | None]:
    """(Spearman rho of predicted vs measured ratios, median |log(predicted / measured)|); None where
    there are too few groups."""
    if not groups:
        return None, None
    from scipy.stats import spearmanr

    p = np.array([g.predicted for g in groups])
    m = np.array([g.measured for g in groups])
    rho = spearmanr(p, m).statistic if len(groups) >= 3 else None
    return (None if rho is None or not np.isfinite(rho) else float(rho)), float(np.median(np.abs(np.log(p / m))))


def scan_table(rows: Sequence[ThresholdRow], threshold: float) -> Table:
    """Agreeing decisions per threshold; the spec's own threshold is starred."""
    cells = tuple((f"{r.threshold:.2f}{' *' if abs(r.threshold - threshold) < 1e-9 else ''}", str(r.agreeing),
                   f"{100 * r.agreeing / r.groups:.1f}") for r in rows if r.groups)  # fmt: skip
    return Table("Fuse decisions agreeing by threshold", ("fuse_min_speedup", "agreeing", "%"), cells,
                 (True, True, True), note=f"* the spec's fuse_min_speedup ({threshold:g}).")


def misses_table(groups: Sequence[GroupDecision], threshold: float, rho: float | None, log_err: float | None) -> Table:
    """The groups that disagree at `threshold`, with their predicted and measured times."""
    us = 1e6
    cells = tuple(
        (g.run, g.group, g.kind, ", ".join(g.layers), g.tile, f"{g.predicted:.2f}", f"{g.measured:.2f}",
         f"{g.predicted_fused_s * us:.1f} / {g.planned_s * us:.1f}", f"{g.predicted_unfused_s * us:.1f} / {g.unfused_s * us:.1f}")
        for g in groups if not g.agrees(threshold)
    )  # fmt: skip
    rank = "-" if rho is None else f"{rho:.3f}"
    spread = "-" if log_err is None else f"{log_err:.3f}"
    return Table(
        title=f"Groups disagreeing at fuse_min_speedup {threshold:g}",
        columns=("run", "group", "kind", "layers", "planned tile", "predicted unfused / fused",
                 "measured unfused / best fused", "fused us, predicted / measured", "unfused us, predicted / measured"),
        rows=cells, numeric=(False, False, False, False, False, True, True, True, True),
        note=f"{len(cells)} of {len(groups)} groups disagree. Spearman rho of predicted vs measured unfused/fused "
        f"over all groups: {rank}; median |log(predicted / measured)|: {spread}.",
    )  # fmt: skip


def decision_tables(runs: Sequence[Run], threshold: float, lo: float = 0.8, hi: float = 2.0,
                    step: float = 0.05) -> list[Table]:
    """The threshold scan from `lo` to `hi` and the groups disagreeing at `threshold` (the spec's)."""
    if step <= 0 or hi < lo:
        raise AnalysisError("--from must not exceed --to, and --step must be positive")
    groups = [g for run in runs for g in group_decisions(run)]
    if not groups:
        raise AnalysisError("no group of these runs was measured both fused and unfused")
    rho, spread = ranking(groups)
    return [scan_table(threshold_scan(groups, lo, hi, step), threshold), misses_table(groups, threshold, rho, spread)]
