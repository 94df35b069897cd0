"""Accuracy of the cost model over saved runs, per run and pooled: the absolute percentage errors
(APE) of GMA, DRAM and time, the fuse decisions agreeing with measurement, and what the plan's choices
(fuse or not, planned tile) cost over the best measured option of each group.

With runs re-predicted by a spec (`runs.load_runs`) this is the accuracy of that spec; the table is
the one docs/validation.md shows (`fuseplanner analyze accuracy --markdown`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fuseplanner.analysis.runs import Run
from fuseplanner.analysis.tables import Table, cell_mp
from fuseplanner.validation import report
from fuseplanner.validation.records import Record

METRICS = ("gma", "dram", "time")


@dataclass(frozen=True)
class Errors:
    """Median and 90th percentile APE (%) of one metric over `n` records (None when n is 0)."""

    n: int
    median: float | None
    p90: float | None

    @classmethod
    def of(cls, apes: Sequence[float]) -> Errors:
        e = report.error_summary(apes)
        return cls(int(e["n"]), e["median"], e["p90"])


@dataclass(frozen=True)
class AccuracyRow:
    """One run's (or all runs') errors and decisions. `chosen_s` / `best_s`: the summed measured time
    of the plan's choice and of the best measured option over the groups measured both ways;
    `over_5pct`: groups whose choice takes more than 5% over their best."""

    run: str
    gma: Errors
    dram: Errors
    time: Errors
    agreeing: int
    groups: int
    chosen_s: float
    best_s: float
    over_5pct: int

    @property
    def agreeing_percent(self) -> float | None:
        return 100.0 * self.agreeing / self.groups if self.groups else None

    @property
    def time_lost_percent(self) -> float | None:
        return 100.0 * (self.chosen_s - self.best_s) / self.best_s if self.best_s else None


def metric_apes(records: Sequence[dict], metric: str) -> list[float]:
    """APE of `ours` for one metric ("gma", "dram", "time") over the measured records."""
    return [report.ape(p, m) for p, m in report.pairs(records, "ours", metric)]


def _row(name: str, apes: dict[str, list[float]], groups: Sequence[dict]) -> AccuracyRow:
    return AccuracyRow(
        run=name, gma=Errors.of(apes["gma"]), dram=Errors.of(apes["dram"]), time=Errors.of(apes["time"]),
        agreeing=sum(1 for g in groups if g["fuse_agrees"]), groups=len(groups),
        chosen_s=sum(g["chosen_s"] for g in groups), best_s=sum(g["best_s"] for g in groups),
        over_5pct=sum(1 for g in groups if g["chosen_s"] > 1.05 * g["best_s"]),
    )  # fmt: skip


def accuracy(runs: Sequence[Run]) -> list[AccuracyRow]:
    """One row per run, then the pooled row "all" (errors over every record, decisions over every group)."""
    rows = []
    pooled: dict[str, list[float]] = {m: [] for m in METRICS}
    pooled_groups: list[dict] = []
    for run in runs:
        apes = {m: metric_apes(run.records, m) for m in METRICS}
        groups = list(report.decisions(run.data)["groups"].values())
        rows.append(_row(run.label, apes, groups))
        for m in METRICS:
            pooled[m] += apes[m]
        pooled_groups += groups
    rows.append(_row("all", pooled, pooled_groups))
    return rows


def _decisions_cell(row: AccuracyRow, pooled: bool) -> str:
    share = f" ({row.agreeing_percent:.1f}%)" if pooled and row.groups else ""
    return f"{row.agreeing} of {row.groups}{share}"


def _lost_cell(row: AccuracyRow) -> str:
    lost = row.time_lost_percent
    return "-" if lost is None else f"{lost:.1f}% ({row.over_5pct})"


def accuracy_table(rows: Sequence[AccuracyRow], spec_name: str | None = None) -> Table:
    """The accuracy rows as a table; the last row is taken as the pooled one."""
    cells = tuple(
        (r.run, str(r.time.n), cell_mp(r.gma.median, r.gma.p90), cell_mp(r.dram.median, r.dram.p90),
         cell_mp(r.time.median, r.time.p90), _decisions_cell(r, i == len(rows) - 1), _lost_cell(r))
        for i, r in enumerate(rows)
    )  # fmt: skip
    source = f"predictions recomputed with spec {spec_name}" if spec_name else "predictions as recorded"
    return Table(
        title="Accuracy per run and pooled",
        columns=("run", "n", "GMA", "DRAM", "time", "fuse decisions", "plan's extra time (groups > 5%)"),
        rows=cells, numeric=(False, True),
        note=f"GMA, DRAM, time: median / 90th percentile absolute percentage error ({source}); n: records "
        "with a measured time; plan's extra time: the plan's choices over the best measured option of each "
        "group measured fused and unfused.",
    )  # fmt: skip


#: FLOP bands of `work_bias` (upper bounds; the last band is open).
WORK_BANDS = (1e7, 1e8, 3e8, 1e9)
#: Outputs-per-thread bands of `block_bias` (upper bounds; the last band is open).
BLOCK_BANDS = (8.0, 32.0)


@dataclass(frozen=True)
class WorkBand:
    """Predicted / measured time of the single-launch layer records whose measure (work in FLOPs for
    `work_bias`, outputs per thread for `block_bias`) falls in [lo, hi)."""

    lo: float
    hi: float | None
    ratios: tuple[float, ...]

    def quantile(self, q: float) -> float | None:
        return _quantile(self.ratios, q)


def _quantile(ratios: Sequence[float], q: float) -> float | None:
    """The `q` quantile of `ratios` (None for none)."""
    import numpy as np

    return float(np.quantile(ratios, q)) if len(ratios) else None


def _single_launches(runs: Sequence[Run], kinds: Sequence[str]) -> list[tuple[Record, float]]:
    """(record, predicted / measured cold time) of every measured record that is one launch of a kind
    in `kinds`."""
    out = []
    for run in runs:
        for r in run.records:
            pred, steps = r.prediction("ours"), r.step_kinds or (r.kind,)
            if (r.ok and pred is not None and pred.time_s and r.measured.time_cold_s
                    and len(steps) == 1 and steps[0] in kinds):  # fmt: skip
                out.append((r, pred.time_s / r.measured.time_cold_s))
    return out


def _single_layer_launches(runs: Sequence[Run]) -> list[tuple[Record, float]]:
    """(record, predicted / measured time) of every measured record that is one layer-by-layer launch."""
    from fuseplanner.core.kinds import LAYER_KINDS

    return _single_launches(runs, LAYER_KINDS)


def _banded(pairs: Sequence[tuple[float, float]], bands: Sequence[float]) -> list[WorkBand]:
    edges = (0.0, *bands, None)
    return [WorkBand(lo, hi, tuple(r for x, r in pairs if x >= lo and (hi is None or x < hi)))
            for lo, hi in zip(edges[:-1], edges[1:], strict=True)]  # fmt: skip


def work_bias(runs: Sequence[Run], bands: Sequence[float] = WORK_BANDS) -> list[WorkBand]:
    """The layer-by-layer launches of `runs` by work: where the time model runs fast or slow with size
    (a ratio over 1 is a launch predicted slower than it ran)."""
    return _banded([(float(r.flops), q) for r, q in _single_layer_launches(runs) if r.flops is not None], bands)


def block_bias(runs: Sequence[Run], bands: Sequence[float] = BLOCK_BANDS) -> list[WorkBand]:
    """The layer-by-layer PW and linear launches of `runs` by the outputs each thread accumulates (its
    register block, `registers.outputs_per_thread` of the tile): where the time model misjudges the
    kernel's register blocking (a ratio over 1 is a launch predicted slower than it ran)."""
    from fuseplanner.kernels.registers import outputs_per_thread

    return _banded([(outputs_per_thread(r.tiles[0]), q) for r, q in _single_layer_launches(runs)
                     if r.tiles and (r.step_kinds or (r.kind,))[0] in ("pw", "linear")], bands)  # fmt: skip


def _flops(x: float) -> str:
    return f"{x / 1e9:g} GFLOP" if x >= 1e8 else f"{x / 1e6:g} MFLOP"


def _ratio_table(rows: Sequence[tuple[str, Sequence[float]]], title: str, column: str, what: str,
                 spec_name: str | None) -> Table:
    """Named predicted / measured ratios as a table of their count and 10th, 50th, 90th percentiles."""
    def cell(ratios: Sequence[float], q: float) -> str:
        v = _quantile(ratios, q)
        return "-" if v is None else f"{v:.2f}"

    cells = tuple((name, str(len(r)), cell(r, 0.1), cell(r, 0.5), cell(r, 0.9)) for name, r in rows)
    source = f"predictions recomputed with spec {spec_name}" if spec_name else "predictions as recorded"
    return Table(title=title, columns=(column, "n", "p10", "median", "p90"), rows=cells,
                 numeric=(False, True, True, True, True),
                 note=f"{what}, cold-L2 time; over 1: predicted slower than measured ({source}).")  # fmt: skip


def _bias_table(bands: Sequence[WorkBand], label, title: str, column: str, what: str,
                spec_name: str | None) -> Table:
    """The banded predicted / measured quantiles as a table; `label(x)` writes a band edge."""
    def band(b: WorkBand) -> str:
        return f">= {label(b.lo)}" if b.hi is None else f"< {label(b.hi)}" if not b.lo else f"{label(b.lo)} - {label(b.hi)}"

    return _ratio_table([(band(b), b.ratios) for b in bands], title, column, what, spec_name)


def kind_bias(runs: Sequence[Run]) -> list[tuple[str, tuple[float, ...]]]:
    """(kernel kind, predicted / measured time of each one-launch record of that kind) for every kind
    `runs` measured, in `KERNEL_KINDS` order: where a kind's time model runs fast or slow (a ratio over
    1 is a launch predicted slower than it ran)."""
    from fuseplanner.core.kinds import KERNEL_KINDS

    by_kind: dict[str, list[float]] = {k: [] for k in KERNEL_KINDS}
    for r, q in _single_launches(runs, KERNEL_KINDS):  # one pass over the records
        by_kind[(r.step_kinds or (r.kind,))[0]].append(q)
    return [(k, tuple(ratios)) for k, ratios in by_kind.items() if ratios]


def kind_bias_table(rows: Sequence[tuple[str, Sequence[float]]], spec_name: str | None = None) -> Table:
    return _ratio_table(rows, "One-launch records by kernel kind: predicted / measured time", "kind",
                        "Records of one launch (layers, fused groups, layer and group tiles)", spec_name)


def block_bias_table(bands: Sequence[WorkBand], spec_name: str | None = None) -> Table:
    return _bias_table(bands, lambda x: f"{x:g}",
                       "Layer-by-layer PW and linear launches by outputs per thread: predicted / measured time",
                       "outputs per thread", "Single pw/linear launches; outputs per thread: tile filters x pixels / "
                       "threads, the register block a thread accumulates", spec_name)  # fmt: skip


def work_bias_table(bands: Sequence[WorkBand], spec_name: str | None = None) -> Table:
    return _bias_table(bands, _flops, "Layer-by-layer launches by work: predicted / measured time", "work",
                       "Single dw/pw/linear launches (layers, layer tiles, group members alone)", spec_name)
