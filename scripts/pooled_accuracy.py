"""Accuracy of a GPU spec over saved validation runs, per run and pooled (no GPU needed).

Each run's `ours` predictions and fuse decisions are recomputed with the spec (as `fuseplanner
validate --from-results --repredict` does); the measurements are the recorded ones.

    python3 scripts/pooled_accuracy.py --gpu h100 data/records/h100/holdout/*.json.gz

Prints a markdown table: median / 90th-percentile absolute percentage error of GMA, DRAM and time,
the fuse decisions agreeing with measurement, and what the plan's choices (fuse or not, planned tile)
cost over the best measured option of each group, per run and over all records. With `--pooled`,
only the pooled row.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import saved_runs  # noqa: E402

from fuseplanner import fit, report  # noqa: E402

METRICS = ("gma", "dram", "time")


@dataclass(frozen=True)
class Accuracy:
    """Our model's errors over some records: absolute percentage errors per metric and fuse decisions."""

    name: str
    errors: dict[str, tuple[float, ...]]
    agree: int
    decided: int
    chosen_s: float
    best_s: float
    over_5pct: int

    def median(self, metric: str) -> float | None:
        return report.error_summary(self.errors[metric])["median"]

    def p90(self, metric: str) -> float | None:
        return report.error_summary(self.errors[metric])["p90"]

    def row(self) -> str:
        pct = f" ({100 * self.agree / self.decided:.1f}%)" if self.decided else ""
        lost = f"{100 * (self.chosen_s - self.best_s) / self.best_s:.1f}% ({self.over_5pct})" if self.best_s else "-"
        cells = " | ".join(cell(self.errors[m]) for m in METRICS)
        return f"| {self.name} | {len(self.errors['time'])} | {cells} | {self.agree} of {self.decided}{pct} | {lost} |"


def apes(records, metric: str) -> list[float]:
    """Absolute percentage errors of `ours` for one metric (gma, dram, time) over measured records."""
    return [report.ape(p, m) for p, m in report.pairs(records, "ours", metric)]


def cell(v) -> str:
    e = report.error_summary(v)
    return f"{e['median']:.1f} / {e['p90']:.1f}" if e["n"] else "-"


def run_accuracy(spec, path) -> Accuracy:
    """One saved run re-predicted with `spec`."""
    data = fit.repredict(report.load_results(path), spec)
    fuse = report.decisions(data)["groups"].values()
    meta = data["meta"]
    mode = " tf32" if meta.get("precision") == "tf32" else ""
    return Accuracy(f"{meta['model']} {meta['dtype']}{mode} b{meta['batch']} {meta.get('tiles', '')}".strip(),
                    {m: tuple(apes(data["records"], m)) for m in METRICS},
                    sum(1 for g in fuse if g["fuse_agrees"]), len(fuse), sum(g["chosen_s"] for g in fuse),
                    sum(g["best_s"] for g in fuse), sum(1 for g in fuse if g["chosen_s"] > 1.05 * g["best_s"]))  # fmt: skip


def pooled(runs: list[Accuracy], name: str = "all") -> Accuracy:
    """All records of `runs` together (errors pooled, decisions and times summed)."""
    return Accuracy(name, {m: tuple(e for r in runs for e in r.errors[m]) for m in METRICS},
                    sum(r.agree for r in runs), sum(r.decided for r in runs), sum(r.chosen_s for r in runs),
                    sum(r.best_s for r in runs), sum(r.over_5pct for r in runs))  # fmt: skip


def main(argv=None) -> int:
    spec, results, args = saved_runs.parse_with(
        __doc__, argv, lambda ap: ap.add_argument("--pooled", action="store_true", help="print the pooled row only"))
    runs = [run_accuracy(spec, p) for p in results]
    print("| run | n | GMA | DRAM | time | fuse decisions | plan's extra time (groups > 5%) |")
    print("|---|---:|---|---|---|---|---|")
    for r in [] if args.pooled else runs:
        print(r.row())
    print(pooled(runs).row())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
