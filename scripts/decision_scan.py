"""How fuse decisions depend on the threshold, over saved validation runs (no GPU needed).

For every group measured both fused and unfused, the spec's predicted unfused / fused time (fused at
the planned tile, as `fuseplanner validate --from-results --repredict` computes it) is set against the
measured unfused / best-swept-fused time (what the report's decisions count). Prints the agreeing
decisions at each `fuse_min_speedup` in a range, the Spearman correlation of predicted and measured
ratios, and the groups that disagree at the spec's own threshold.

    python3 scripts/decision_scan.py --gpu h100 data/records/h100/holdout/*.json.gz
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fuseplanner import fit, report, specs  # noqa: E402


def group_ratios(data: dict) -> list[dict]:
    """(predicted, measured) unfused/fused ratios of each group of a re-predicted results document."""
    pred = fit.planned_times(data["records"])
    rows = []
    for g, e in report.decisions(data)["groups"].items():
        if (g, "group") in pred and (g, "unfused") in pred:
            rows.append({"group": g, "predicted": pred[(g, "unfused")] / pred[(g, "group")],
                         "measured": e["unfused_s"] / e["best_fused_s"], "fusion_wins": e["fusion_wins"]})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h100", help="spec name or TOML path")
    ap.add_argument("--from", dest="lo", type=float, default=0.8, help="lowest threshold")
    ap.add_argument("--to", dest="hi", type=float, default=2.0, help="highest threshold")
    ap.add_argument("--step", type=float, default=0.05)
    ap.add_argument("results", nargs="+", help="results.json files of validation runs")
    args = ap.parse_args(argv)
    spec = specs.gpu(args.gpu)
    rows = []
    for path in args.results:
        data = fit.repredict(report.load_results(path), spec)
        name = f"{data['meta']['model']} {data['meta']['dtype']} b{data['meta']['batch']}"
        rows += [{**r, "run": name} for r in group_ratios(data)]
    if not rows:
        print("no group was measured both fused and unfused")
        return 1
    tau = float(spec.eff(fit.THRESHOLD_FIELD))
    print(f"{len(rows)} groups; spec {spec.name}, fuse_min_speedup {tau:g}\n")
    print("| fuse_min_speedup | agreeing | % |\n|---:|---:|---:|")
    for t in np.arange(args.lo, args.hi + 1e-9, args.step):
        ok = sum((r["predicted"] >= t) == r["fusion_wins"] for r in rows)
        print(f"| {t:.2f}{' *' if abs(t - tau) < 1e-9 else ''} | {ok} | {100 * ok / len(rows):.1f} |")
    p = np.array([r["predicted"] for r in rows])
    m = np.array([r["measured"] for r in rows])
    print(f"\nSpearman rho of predicted vs measured unfused/fused: {spearmanr(p, m).statistic:.3f}; "
          f"median |log(predicted / measured)|: {np.median(np.abs(np.log(p / m))):.3f}")
    print(f"\nDisagreeing at {tau:g}:\n\n| run | group | predicted | measured |\n|---|---|---:|---:|")
    for r in rows:
        if (r["predicted"] >= tau) != r["fusion_wins"]:
            print(f"| {r['run']} | {r['group']} | {r['predicted']:.2f} | {r['measured']:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
