"""Measured minus predicted time by launches per record (no GPU needed): whether a kernel timed alone and
the same kernels timed back to back are predicted alike. For each (launches, layer-by-layer or fused,
dtype) and predicted-time band: records, median measured - predicted (us) and median measured /
predicted. It showed lone layer-by-layer launches predicted 1.1-1.2x short and three-launch sequences
0.9-0.95x long (docs/validation.md, known weak spots):

    python3 scripts/sequence_bias.py --gpu h100 data/records/h100/*/*.json.gz
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import saved_runs  # noqa: E402

from fuseplanner import fit, report  # noqa: E402

BANDS_US = ((0, 10), (10, 20), (20, 40), (40, float("inf")))
LBL = ("dw", "pw", "linear")


def main(argv=None) -> int:
    spec, results = saved_runs.parse(__doc__, argv)
    rows: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    for path in results:
        data = fit.repredict(report.load_results(path), spec)
        for r in data["records"]:
            kernels = (r.get("measured") or {}).get("kernels") or []
            meas = (r.get("measured") or {}).get("time_cold_s")
            pred = ((r.get("predicted") or {}).get("ours") or {}).get("time_s")
            if not kernels or not meas or not pred:
                continue
            family = "lbl" if all(k["kind"] in LBL for k in kernels) else "fused"
            rows[(len(kernels), family, data["meta"]["dtype"])].append((pred * 1e6, meas * 1e6))
    print("| launches | kernels | dtype | predicted us | n | measured - predicted (us) | measured / predicted |")
    print("|---:|---|---|---|---:|---:|---:|")
    for key in sorted(rows):
        v = np.array(rows[key])
        for lo, hi in BANDS_US:
            s = (v[:, 0] >= lo) & (v[:, 0] < hi)
            if s.any():
                d, q = v[s, 1] - v[s, 0], v[s, 1] / v[s, 0]
                print(f"| {key[0]} | {key[1]} | {key[2]} | {lo:g}-{hi:g} | {s.sum()} | {np.median(d):+.2f} | "
                      f"{np.median(q):.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
