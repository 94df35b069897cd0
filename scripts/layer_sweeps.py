"""Layer tile sweeps (`fuseplanner validate --tiles layers`) of saved validation runs, re-predicted with a
spec (no GPU): per run, whether the tile the planner gives each layer alone is within 5% of the layer's
best measured tile, what those choices cost, the same for the tile the spec predicts fastest among the
measured ones (the choice it would make there), the median rank correlation over the layers' tiles, and
predicted / measured time of the layers' planned tiles and of their alternatives, by kernel kind.

    python3 scripts/layer_sweeps.py --gpu h100 data/records/h100/holdout/*-layers.json.gz
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import saved_runs  # noqa: E402

from fuseplanner import fit, report  # noqa: E402


def _ratios(records) -> dict[tuple[str, str], list[float]]:
    """predicted / measured cold time of each layer-sweep record, by (kind, "chosen" | "alternative")."""
    out: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in records:
        ours = (r.get("predicted") or {}).get("ours")
        if r["role"] not in report.LAYER_ROLES or not ours or not report._ok(r):
            continue
        side = "alternative" if r["role"] == "layer_tile" else "chosen"
        out[(r["kind"], side)].append(ours["time_s"] / r["measured"]["time_cold_s"])
    return out


def _cell(v: list[float]) -> str:
    return f"{np.median(v):.2f} / {np.percentile(v, 10):.2f} / {np.percentile(v, 90):.2f} ({len(v)})" if v else "-"


def main(argv=None) -> int:
    spec, results = saved_runs.parse(__doc__, argv)
    print("| run | layers | chosen tile within 5% of best | time lost | spec's pick within 5% | time lost | "
          "rank rho (median) | kind | pred / meas, chosen tiles: median / p10 / p90 (n) | alternatives |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    pooled: dict[tuple[str, str], list[float]] = defaultdict(list)
    for path in results:
        data = fit.repredict(report.load_results(path), spec)
        m, recs = data["meta"], data["records"]
        lt = report.layer_tile_choices(recs)
        pick = report.layer_tile_choices(recs, "ours")
        layer_groups = set(lt["layers"])
        rho = [e["ours"] for g, e in report.rank_correlation(recs)["groups"].items()
               if g in layer_groups and e.get("ours") is not None]  # fmt: skip
        ratios = _ratios(recs)
        for k, v in ratios.items():
            pooled[k] += v
        head = (f"| {m['model']} {m['dtype']} b{m['batch']} | {lt['n']} | {report._pct(lt['percent'])} | "
                f"{report._pct(lt['time_lost_percent'])} | {report._pct(pick['percent'])} | "
                f"{report._pct(pick['time_lost_percent'])} | {f'{np.median(rho):.2f}' if rho else '-'} |")
        for i, kind in enumerate(sorted({k for k, _ in ratios})):
            lead = head if i == 0 else "| | | | | | | |"
            print(f"{lead} {kind} | {_cell(ratios[(kind, 'chosen')])} | {_cell(ratios[(kind, 'alternative')])} |")
    for kind in sorted({k for k, _ in pooled}):
        print(f"| all | | | | | | | {kind} | {_cell(pooled[(kind, 'chosen')])} | {_cell(pooled[(kind, 'alternative')])} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
