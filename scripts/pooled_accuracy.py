"""Accuracy of a GPU spec over saved validation runs, per run and pooled (no GPU needed).

Each run's `ours` predictions and fuse decisions are recomputed with the spec (as `fuseplanner
validate --from-results --repredict` does); the measurements are the recorded ones.

    python3 scripts/pooled_accuracy.py --gpu h100 docs/validation/ring-2026-11-23/*/results.json.gz

Prints a markdown table: median / 90th-percentile absolute percentage error of GMA, DRAM and time,
the fuse decisions agreeing with measurement, and what the plan's choices (fuse or not, planned tile)
cost over the best measured option of each group, per run and over all records.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import saved_runs  # noqa: E402

from fuseplanner import fit, report  # noqa: E402


def apes(records, metric: str) -> list[float]:
    """Absolute percentage errors of `ours` for one metric (gma, dram, time) over measured records."""
    return [report.ape(p, m) for p, m in report.pairs(records, "ours", metric)]


def cell(v: list[float]) -> str:
    e = report.error_summary(v)
    return f"{e['median']:.1f} / {e['p90']:.1f}" if e["n"] else "-"


def main(argv=None) -> int:
    spec, results = saved_runs.parse(__doc__, argv)
    pooled: dict[str, list[float]] = {"gma": [], "dram": [], "time": []}
    agree = total = lost5 = 0
    chosen = best = 0.0
    print("| run | n | GMA | DRAM | time | fuse decisions | plan's extra time (groups > 5%) |")
    print("|---|---:|---|---|---|---|---|")
    for path in results:
        data = fit.repredict(report.load_results(path), spec)
        per = {m: apes(data["records"], m) for m in pooled}
        dec = report.decisions(data)
        fuse = dec["groups"].values()
        ok = sum(1 for g in fuse if g["fuse_agrees"])
        n = len(fuse)
        agree, total = agree + ok, total + n
        chosen += sum(g["chosen_s"] for g in fuse)
        best += sum(g["best_s"] for g in fuse)
        lost5 += dec["regret"]["over_5pct"]
        rg = dec["regret"]
        lost = f"{rg['time_lost_percent']:.1f}% ({rg['over_5pct']})" if rg["n"] else "-"
        for m in pooled:
            pooled[m] += per[m]
        meta = data["meta"]
        name = f"{meta['model']} {meta['dtype']} b{meta['batch']}"
        print(f"| {name} | {len(per['time'])} | {cell(per['gma'])} | {cell(per['dram'])} | {cell(per['time'])} "
              f"| {ok} of {n} | {lost} |")
    pct = f" ({100 * agree / total:.1f}%)" if total else ""
    lost = f"{100 * (chosen - best) / best:.1f}% ({lost5})" if best else "-"
    print(f"| all | {len(pooled['time'])} | {cell(pooled['gma'])} | {cell(pooled['dram'])} | {cell(pooled['time'])} "
          f"| {agree} of {total}{pct} | {lost} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
