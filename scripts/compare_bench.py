"""Our kernels' time in two benchmarks/bench_kernels.py runs of the same layers and tiles (no GPU).

Matches rows by layer, batch and mode, refuses a pair whose tiles differ (not the same launch), and
prints per row old -> new cold time and, per mode and batch, the geometric mean, smallest and largest
new/old ratio. The ab task of scripts/gpu_run.py writes such a pair and runs this.

    python3 scripts/compare_bench.py OLD/bench_kernels.json NEW/bench_kernels.json [--rows]
"""

from __future__ import annotations

import argparse
import json
import math
import sys


def rows(path: str) -> dict[tuple, dict]:
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        raise SystemExit(f"error: cannot read {path}: {exc}") from None
    if not isinstance(data, dict) or "rows" not in data:
        raise SystemExit(f"error: {path} is not a bench_kernels.json (no 'rows')")
    out = {}
    for r in data["rows"]:
        mode = "fp16" if r["dtype"] == "fp16" else r["precision"]
        out[(r["layer"], r["batch"], mode)] = r
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rows", action="store_true", help="print every row, not only the summary")
    args = ap.parse_args()
    old, new = rows(args.old), rows(args.new)
    groups: dict[tuple, list[float]] = {}
    for key, n in new.items():
        o = old.get(key)
        if o is None:
            continue
        if o["tile"] != n["tile"]:
            print(f"error: {key} ran tile {o['tile']} before and {n['tile']} after: not the same launch", file=sys.stderr)
            return 2
        ratio = n["ours_cold_us"] / o["ours_cold_us"]
        groups.setdefault(key[1:], []).append(ratio)
        if args.rows:
            print(f"| {key[0]} | {key[1]} | {key[2]} | {n['tile']} | {o['ours_cold_us']:.2f} | {n['ours_cold_us']:.2f} | {ratio:.3f} |")
    print("| batch | mode | rows | new / old, geomean | smallest | largest |")
    print("|---|---|---|---|---|---|")
    for (batch, mode), v in sorted(groups.items()):
        geo = math.exp(sum(math.log(x) for x in v) / len(v))
        print(f"| {batch} | {mode} | {len(v)} | {geo:.3f} | {min(v):.3f} | {max(v):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
