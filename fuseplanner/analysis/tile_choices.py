"""Layer tile sweeps (`fuseplanner validate --tiles layers`) of saved runs: whether the tile the
planner gives each layer alone is within `report.TILE_SLACK` of the layer's best measured tile and what
those choices cost, the same for the tile the spec predicts fastest among the measured ones (the choice
it would make there), the median rank correlation over each layer's tiles, and predicted / measured
time of the planned tiles and of their alternatives, by kernel kind.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fuseplanner.analysis.runs import Run
from fuseplanner.analysis.tables import Table
from fuseplanner.core.errors import AnalysisError
from fuseplanner.validation import report
from fuseplanner.validation.records import Record


@dataclass(frozen=True)
class LayerChoices:
    """One run's layers swept alone. `*_percent`: layers whose chosen tile is within the slack of the
    best; `*_lost_percent`: time those tiles take over the best ones; `rho`: median Spearman rho."""

    run: str
    layers: int
    planner_percent: float | None
    planner_lost_percent: float | None
    spec_percent: float | None
    spec_lost_percent: float | None
    rho: float | None


def layer_choices(run: Run) -> LayerChoices:
    recs = run.records
    planner = report.layer_tile_choices(recs)
    pick = report.layer_tile_choices(recs, "ours")
    swept = set(planner["layers"])
    rho = [e["ours"] for g, e in report.rank_correlation(recs)["groups"].items()
           if g in swept and e.get("ours") is not None]  # fmt: skip
    return LayerChoices(run.label, planner["n"], planner["percent"], planner["time_lost_percent"], pick["percent"],
                        pick["time_lost_percent"], float(np.median(rho)) if rho else None)  # fmt: skip


def time_ratios(records: Sequence[Record]) -> dict[tuple[str, str], list[float]]:
    """Predicted / measured cold time of each layer-sweep record, by (kind, "chosen" | "alternative")."""
    out: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in records:
        ours = r.prediction("ours")
        if r.role not in report.LAYER_ROLES or not ours or not r.ok:
            continue
        side = "alternative" if r.role == "layer_tile" else "chosen"
        out[(r.kind, side)].append(ours.time_s / r.cold_s)
    return out


def choices_table(rows: Sequence[LayerChoices]) -> Table:
    cells = tuple((r.run, str(r.layers), report.pct(r.planner_percent), report.pct(r.planner_lost_percent),
                   report.pct(r.spec_percent), report.pct(r.spec_lost_percent),
                   "-" if r.rho is None else f"{r.rho:.2f}") for r in rows)  # fmt: skip
    slack = f"{report.TILE_SLACK - 1:.0%}"
    return Table(
        title="Tiles of layers swept alone",
        columns=("run", "layers", f"planner's tile within {slack} of best", "time lost",
                 f"spec's pick within {slack}", "time lost", "rank rho (median)"),
        rows=cells, numeric=(False, True, True, True, True, True, True),
        note="planner's tile: the tile the plan gives the layer; spec's pick: the measured tile the spec "
        "predicts fastest; time lost: those tiles' time over the best measured ones.",
    )  # fmt: skip


def _ratio_cell(v: Sequence[float]) -> str:
    if not v:
        return "-"
    return f"{np.median(v):.2f} / {np.percentile(v, 10):.2f} / {np.percentile(v, 90):.2f} ({len(v)})"


def ratios_table(runs: Sequence[Run]) -> Table:
    """Predicted / measured time of the layers' planned tiles and of their alternatives, by run and
    kind, then pooled ("all")."""
    cells = []
    pooled: dict[tuple[str, str], list[float]] = defaultdict(list)
    for run in runs:
        ratios = time_ratios(run.records)
        for key, v in ratios.items():
            pooled[key] += v
        cells += _kind_rows(run.label, ratios)
    cells += _kind_rows("all", pooled)
    return Table(
        title="Predicted / measured time of swept layers",
        columns=("run", "kind", "planned tiles: median / p10 / p90 (n)", "alternatives"),
        rows=tuple(cells), numeric=(False, False, True, True),
    )  # fmt: skip


def _kind_rows(label: str, ratios: dict[tuple[str, str], list[float]]) -> list[tuple[str, ...]]:
    return [(label, kind, _ratio_cell(ratios.get((kind, "chosen"), [])), _ratio_cell(ratios.get((kind, "alternative"), [])))
            for kind in sorted({k for k, _ in ratios})]  # fmt: skip


def tile_tables(runs: Sequence[Run]) -> list[Table]:
    """The layer-choice table and the predicted / measured ratios of the runs' layer sweeps."""
    rows = [layer_choices(run) for run in runs]
    if not any(r.layers for r in rows):
        raise AnalysisError("no layer of these runs was swept alone: validate with --tiles layers")
    return [choices_table(rows), ratios_table(runs)]
