"""Measured / predicted L2 writes and reads of saved counter records, per kernel kind and storage dtype
(no GPU): how far each side of the GMA prediction is off, and where.

Each run's `ours` predictions are recomputed with the spec; only single-kernel records that Nsight
Compute counted are used. Per kind and dtype: the records, the 10th percentile, median and 90th
percentile of measured / predicted bytes, and how many are off by more than 10%; then per kind the
GMA (reads + writes) absolute percentage error: median, 90th percentile, records above 25%.

    python3 scripts/traffic_ratios.py --gpu h100 data/records/h100/fit/*.json.gz
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import saved_runs  # noqa: E402

from fuseplanner import fit, report  # noqa: E402


def ratios(spec, paths) -> dict[tuple[str, str, str], list[float]]:
    """{(side, kind, dtype): measured / predicted bytes} over the counted single-kernel records, and
    {("gma", kind, ""): absolute percentage errors of GMA}."""
    out: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for path in paths:
        data = fit.repredict(report.load_results(path), spec)
        dtype = data["meta"]["dtype"]
        for r in data["records"]:
            me = r.get("measured") or {}
            if me.get("traffic") != "ncu" or len(r["step_kinds"]) != 1:
                continue
            p = r["predicted"]["ours"]
            if p is None:  # a launch the current model refuses
                continue
            out["gma", r["kind"], ""].append(report.ape(p["gma_bytes"], me["gma_bytes"]))
            for side in ("write", "read"):
                if p[f"gma_{side}_bytes"] > 0:
                    out[side, r["kind"], dtype].append(me[f"gma_{side}_bytes"] / p[f"gma_{side}_bytes"])
    return out


def main(argv=None) -> int:
    spec, paths = saved_runs.parse(__doc__, argv)
    got = ratios(spec, paths)
    print("| side | kind | dtype | n | p10 | median | p90 | off > 10% |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for (side, kind, dtype), v in sorted(got.items()):
        if side == "gma":
            continue
        v = sorted(v)
        n = len(v)
        off = sum(abs(x - 1.0) > 0.1 for x in v)
        print(f"| {side} | {kind} | {dtype} | {n} | {v[n // 10]:.2f} | {v[n // 2]:.2f} | {v[9 * n // 10]:.2f} | {off} |")
    print()
    print("| kind | n | GMA median APE | p90 | over 25% |")
    print("|---|---:|---:|---:|---:|")
    for (side, kind, _), v in sorted(got.items()):
        if side == "gma":
            e = report.error_summary(v)
            print(f"| {kind} | {e['n']} | {e['median']:.1f} | {e['p90']:.1f} | {sum(x > 25 for x in v)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
