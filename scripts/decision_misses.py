"""The fuse/no-fuse decisions of saved validation runs that disagree with measurement, re-predicted
with a spec (no GPU): per group its kind, its layers, the planner's predicted and the measured time
fused (the tile the planner would take) and unfused, and the measured gap.

    python3 scripts/decision_misses.py --gpu h100 data/records/h100/holdout/*.json.gz
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import saved_runs  # noqa: E402

from fuseplanner import fit, report  # noqa: E402


def _us(r, side: str) -> float:
    return 1e6 * (r["predicted"]["ours"]["time_s"] if side == "pred" else r["measured"]["time_cold_s"])


def misses(data) -> list[str]:
    """One markdown row per group whose planned decision disagrees with the measured outcome."""
    rows = []
    for g, entry in report.decisions(data)["groups"].items():
        if entry["fuse_agrees"]:
            continue
        recs = [r for r in data["records"] if r["group"] == g and r.get("measured") and "time_cold_s" in r["measured"]]
        fused = [r for r in recs if r["role"] in ("group", "tile") and r["predicted"].get("ours")]
        unfused = [r for r in recs if r["role"] == "unfused"]
        if not fused or not unfused:
            continue
        f = min(fused, key=lambda r: _us(r, "pred"))  # the tile the planner would run
        u = unfused[0]
        gap = _us(u, "meas") / _us(f, "meas")
        info = data["groups"][g]
        t = f["tiles"][0]
        rows.append(f"| {g} | {info['kind']} | {', '.join(info['nodes'])} | {t['th']}x{t['tw']}/f{t['tf']}/c{t['tc']}/t{t['threads']} "
                    f"| {_us(f, 'pred'):.1f} / {_us(f, 'meas'):.1f} | {_us(u, 'pred'):.1f} / {_us(u, 'meas'):.1f} | {gap:.2f} |")
    return rows


def main(argv=None) -> int:
    spec, results = saved_runs.parse(__doc__, argv)
    for path in results:
        data = fit.repredict(report.load_results(path), spec)
        m = data["meta"]
        print(f"\n{m['model']} {m['dtype']} batch {m['batch']}\n")
        print("| group | kind | layers | fused tile | fused us, predicted / measured | unfused | measured unfused / fused |")
        print("|---|---|---|---|---|---|---|")
        print("\n".join(misses(data)) or "| (none) | | | | | | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
