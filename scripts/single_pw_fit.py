"""Fit GPU-spec fields on the single layer-by-layer pw/linear launches of saved validation runs (no GPU).

`fuseplanner calibrate --from-results --fit` fits on every record; this keeps the records that are one pw
or linear launch (planned layers, group members alone, layer tile alternatives), so that the
layer-by-layer PW fields are fitted on what they alone predict, and prints the median / p90 of
|log(predicted / measured)| before and after, overall and per storage dtype. How the layer-by-layer
start values of a trial refit were fitted:

    python3 scripts/single_pw_fit.py --gpu h100 \\
        --start '{"pw_shared_load_weight": 2, "pw_mma_load_weight": 2, "sm_issue_warps": 4, "pw_warp_flops_per_cycle_fp32": 17, "pw_warp_flops_per_cycle_fp16": 30}' \\
        --fit pw_warp_flops_per_cycle_fp32,pw_warp_flops_per_cycle_fp16,pw_warp_flops_per_cycle_tf32,pw_shared_load_weight,pw_mma_load_weight,sm_issue_warps \\
        data/records/h100/*/*.json.gz

--start sets fields before the fit (as [measured] values); the fitted values print as JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import saved_runs  # noqa: E402

from fuseplanner import fit  # noqa: E402
from fuseplanner.calibrate import apply_measured  # noqa: E402
from fuseplanner.errors import FusePlannerError  # noqa: E402


def spread(spec, samples) -> str:
    """Median / p90 of |log(predicted / measured)| time."""
    pred = fit._predictions(spec, samples)[:, 0]
    r = np.abs(np.log(pred / np.array([s.time_s for s in samples])))
    return f"{np.median(r):.3f} / {np.percentile(r, 90):.3f} ({len(samples)})"


def options(ap) -> None:
    ap.add_argument("--start", default="{}", help="JSON object of field values set before the fit")
    ap.add_argument("--fit", required=True, help="comma-separated fields to fit")
    ap.add_argument("--max-iter", type=int, default=300)


def main(argv=None) -> int:
    base, paths, a = saved_runs.parse_with(__doc__, argv, options)
    try:
        start = apply_measured(base, json.loads(a.start))
        samples = [s for s in fit.feasible(start, fit.load_samples(paths))[0]
                   if len(s.steps) == 1 and s.steps[0].kind in ("pw", "linear")]  # fmt: skip
        result = fit.fit_spec(start, samples, max_iter=a.max_iter, only=a.fit.split(","))
    except (ValueError, FusePlannerError) as exc:  # bad --start JSON or field, unknown --fit field, no samples
        print(f"error: {exc}", file=sys.stderr)
        return 2
    after = apply_measured(start, result.values)
    print(json.dumps(result.values))
    print(f"all: spec {spread(base, samples)}, start {spread(start, samples)}, fitted {spread(after, samples)}")
    for dtype in sorted({s.dtype for s in samples}):
        part = [s for s in samples if s.dtype == dtype]
        print(f"{dtype}: spec {spread(base, part)}, fitted {spread(after, part)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
