"""Measured time of the same kernel sequences in two validation runs (no GPU needed).

Matches the records of an old and a new `results.json` by role, nodes, tiles and launch kinds (the same
launch, e.g. before and after a kernel change, planned by the same cost model) and prints, for fused and
layer-by-layer sequences apart, the median, smallest and largest new/old ratio of the cold event times.

    python3 scripts/compare_runs.py OLD/results.json NEW/results.json [OLD2 NEW2 ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fuseplanner.core.errors import FusePlannerError  # noqa: E402
from fuseplanner.kernels.tiles import LBL_KINDS  # noqa: E402
from fuseplanner.validation import report  # noqa: E402


def timed(path: str) -> dict[tuple, float]:
    """Cold event time of every correctly measured record, keyed by what was launched."""
    out = {}
    for r in report.load_results(path).records:
        t = r.cold_s
        if t and r.check is not None and r.check.ok:
            out[(r.role, r.nodes, json.dumps([x.as_dict() for x in r.tiles], sort_keys=True), r.step_kinds)] = t
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="pairs of results.json: OLD NEW [OLD NEW ...]")
    args = ap.parse_args()
    if len(args.runs) % 2:
        print("error: give results.json files in OLD NEW pairs", file=sys.stderr)
        return 2
    try:
        pairs = zip(args.runs[::2], args.runs[1::2], strict=True)
        runs = [(new_path, timed(old_path), timed(new_path)) for old_path, new_path in pairs]
    except FusePlannerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("| new run | matched | fused: n, new/old median (min - max) | layer-by-layer: n, new/old median (min - max) |")
    print("|---|---|---|---|")
    for new_path, old, new in runs:
        common = [k for k in old if k in new]
        cells = []
        for fused in (True, False):
            r = [new[k] / old[k] for k in common if any(s not in LBL_KINDS for s in k[3]) == fused]
            cells.append(f"{len(r)}, {np.median(r):.3f} ({min(r):.2f} - {max(r):.2f})" if r else "-")
        print(f"| {new_path} | {len(common)} of {len(new)} | {cells[0]} | {cells[1]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
