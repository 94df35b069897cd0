"""Measured time of whole plans: the planned layers and groups of validation runs, summed.

`fuseplanner validate` measures every item of a plan alone (each planned layer and fused group, L2
flushed before each for the cold time); their sum is the plan's measured time, launch by launch, and the
sum of their predictions what the planner expected. Two specs' plans of one model, each validated on the
same GPU, compare here as the plans themselves do: what one spec's choices gain over the other's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fuseplanner.analysis.runs import Run
from fuseplanner.analysis.tables import Table


@dataclass(frozen=True)
class PlanTotal:
    """A run's planned, correctly measured items: their count, how many failed, summed seconds."""

    run: str
    spec: str
    items: int
    failed: int
    predicted_s: float
    cold_s: float
    warm_s: float


def plan_total(run: Run) -> PlanTotal:
    planned = [r for r in run.records if r.planned]
    ok = [r for r in planned if r.ok]
    gpu = run.data.meta.gpu
    return PlanTotal(
        run=run.label, spec="?" if gpu is None else gpu, items=len(ok), failed=len(planned) - len(ok),
        predicted_s=sum(r.predicted["ours"].time_s for r in ok),
        cold_s=sum(r.measured.time_cold_s for r in ok), warm_s=sum(r.measured.time_warm_s for r in ok),
    )  # fmt: skip


def totals_table(totals: Sequence[PlanTotal]) -> Table:
    """Each run's totals, and its measured cold time over the first run of the same model, dtype and batch."""
    first: dict[str, float] = {}
    cells = []
    for t in totals:
        ref = first.setdefault(t.run, t.cold_s)
        items = f"{t.items}" + (f" ({t.failed} failed)" if t.failed else "")
        rel = f"{t.cold_s / ref:.3f}" if ref else "-"
        cells.append((t.run, t.spec, items, f"{t.predicted_s * 1e6:.1f}", f"{t.cold_s * 1e6:.1f}",
                      f"{t.warm_s * 1e6:.1f}", rel))  # fmt: skip
    return Table(
        title="Whole plans, summed item by item",
        columns=("run", "spec", "items", "predicted us", "measured cold us", "warm us", "cold / first"),
        rows=tuple(cells), numeric=(False, False, True, True, True, True, True),
        note="spec: the GPU spec the run planned with; cold / first: over the first run of the same model, "
        "dtype and batch.",
    )  # fmt: skip
