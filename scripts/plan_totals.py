"""Measured time of whole plans: the planned layers and groups of validation runs, summed (no GPU needed).

`fuseplanner validate` measures every item of a plan alone (each planned layer and fused group, L2
flushed before each for the cold time); their sum is the plan's measured time, launch by launch, and the
sum of their predictions what the planner expected. Two specs' plans of one model, each validated on the
same GPU, compare here as the plans themselves do: what one spec's choices gain over the other's.

    python3 scripts/plan_totals.py RUN/results.json [RUN2/results.json ...]

Prints, per run: the spec it planned with, the planned items, their summed predicted and measured
(cold, warm) time, and the measured time over the first run of the same model, dtype and batch.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fuseplanner import report  # noqa: E402
from fuseplanner.errors import FusePlannerError  # noqa: E402


def totals(data: dict) -> dict[str, float]:
    """Summed predicted and measured seconds of a run's planned, correctly measured records."""
    recs = [r for r in data["records"] if r.get("planned") and report._ok(r)]
    missing = sum(1 for r in data["records"] if r.get("planned") and not report._ok(r))
    return {"items": len(recs), "missing": missing,
            "pred": sum(r["predicted"]["ours"]["time_s"] for r in recs),
            "cold": sum(r["measured"]["time_cold_s"] for r in recs),
            "warm": sum(r["measured"]["time_warm_s"] for r in recs)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    paths = sys.argv[1:] if argv is None else argv
    if not paths:
        print(__doc__.strip().splitlines()[3].strip(), file=sys.stderr)
        return 2
    print("| run | spec | items | predicted us | measured cold us | warm us | cold / first |")
    print("|---|---|---:|---:|---:|---:|---:|")
    first: dict[tuple, float] = {}
    for path in paths:
        try:
            data = report.load_results(path)
        except FusePlannerError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        m, t = data["meta"], totals(data)
        key = (m["model"], m["dtype"], m["batch"])
        ref = first.setdefault(key, t["cold"])
        items = f"{t['items']}" + (f" ({t['missing']} failed)" if t["missing"] else "")
        print(f"| {m['model']} {m['dtype']} b{m['batch']} | {m['gpu']} | {items} | {t['pred'] * 1e6:.1f} | "
              f"{t['cold'] * 1e6:.1f} | {t['warm'] * 1e6:.1f} | {t['cold'] / ref:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
