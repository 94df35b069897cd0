"""Fit the graph-context terms of the executor's operator-library steps (`fuseplanner.cost.library`):
`library_stream_bw_fraction`, `library_gemm_slice_cycles`, `library_row_iter_cycles`,
`library_direct_terms_per_cycle` of a spec's fit.

    python scripts/fit_library_costs.py --gpu h100 data/records/h100/whole/*/mobilenet_v1.json.gz ...

The fit is step 1 of `fuseplanner calibrate --from-whole` (`fuseplanner.validation.fit_whole`), alone:
least squares on log(predicted / measured) over the measured operator-library steps of the planned runs
(the steps `cost.library` costs: not fuseplanner's kernels), printed with each op type's median error
before and after. Held-out models (`models/holdout.toml`) are refused.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fuseplanner.core.errors import FusePlannerError  # noqa: E402
from fuseplanner.hw.spec import gpu  # noqa: E402
from fuseplanner.validation.fit_whole import LIBRARY_FIELDS, fit_library, library_seconds, library_steps, runs  # noqa: E402


def report(steps, pred) -> str:
    by = defaultdict(list)
    for s, p in zip(steps, pred, strict=True):
        by[s.op_type].append(p / s.measured_s - 1)
    errs = np.abs([p / s.measured_s - 1 for s, p in zip(steps, pred, strict=True)])
    parts = [f"{op} {100 * np.median(v):+.1f}% ({len(v)})" for op, v in sorted(by.items())]
    return f"|error| median {100 * np.median(errs):.1f}% p90 {100 * np.percentile(errs, 90):.1f}%; " + ", ".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("results", nargs="+")
    args = ap.parse_args()
    spec = gpu(args.gpu)
    try:
        steps = library_steps(runs(args.results, spec), spec)
    except FusePlannerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    now = [getattr(spec.hw, f) for f in LIBRARY_FIELDS]
    print(f"{len(steps)} library steps; current: {report(steps, library_seconds(steps, spec, now))}")
    got = fit_library(steps, spec)
    print("fitted: " + ", ".join(f"{f} = {v:.4g}" for f, v in got.items()))
    after = [got.get(f, v) for f, v in zip(LIBRARY_FIELDS, now, strict=True)]
    print(f"after: {report(steps, library_seconds(steps, spec, after))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
