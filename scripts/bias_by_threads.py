"""Median predicted/measured time of validation records by batch, kernel kind and threads per block.

    python3 scripts/bias_by_threads.py data/records/h100/*/*.json.gz

Uses the predictions stored in the records (the spec they were validated with) and the cold measured
times; single-launch records only.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fuseplanner import report  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", help="results.json files of validation runs")
    args = ap.parse_args(argv)
    logs: dict[tuple, list[float]] = defaultdict(list)
    for path in args.results:
        data = report.load_results(path)
        batch = data["meta"]["batch"]
        for rec in data["records"]:
            meas = (rec.get("measured") or {}).get("time_cold_s")
            pred = ((rec.get("predicted") or {}).get("ours") or {}).get("time_s")
            if not meas or not pred or len(rec["tiles"]) != 1:
                continue
            logs[(batch, rec["kind"], rec["tiles"][0]["threads"])].append(math.log(pred / meas))
    print("| batch | kind | threads | n | median predicted / measured |")
    print("|---:|---|---:|---:|---:|")
    for (batch, kind, threads), v in sorted(logs.items()):
        print(f"| {batch} | {kind} | {threads} | {len(v)} | {math.exp(statistics.median(v)):.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
