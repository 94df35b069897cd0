"""Fit the graph context's per-class launch terms (`graph_dw_kernel_s`, `graph_pw_kernel_s`,
`graph_linear_kernel_s`, `graph_fused_kernel_s` of a spec's fit) to the step times measured in graph mode.

    python scripts/fit_graph_kernels.py --gpu h100 \
        data/records/h100/whole/*/{mobilenet_v1,mobilenet_v2,mobilenet_v3_large,mnasnet1_0,efficientnet_b0,mobilevit_xxs}.json.gz

(the bundled spec's values: the six bundled models in all six configurations)

The fit is step 2 of `fuseplanner calibrate --from-whole` (`fuseplanner.validation.fit_whole`, whose
docstring says how), alone and with the spec's other values as they are: it prints the step and
whole-replay errors before and after, and each term's bootstrap interval over the runs (`--resamples`).
Held-out models (`models/holdout.toml`) are refused.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fuseplanner.core.errors import FusePlannerError  # noqa: E402
from fuseplanner.hw.spec import gpu  # noqa: E402
from fuseplanner.validation.fit_whole import (  # noqa: E402
    TERM_FIELDS,
    arrays,
    fit_terms,
    intervals,
    replay_errors,
    runs,
    samples,
    step_residuals,
    term_values,
)
from fuseplanner.validation.microbench import apply_measured  # noqa: E402


def _report(label: str, rows, data, spec, x: np.ndarray) -> None:
    e = np.abs(np.expm1(step_residuals(data, x)))
    r = replay_errors(rows, apply_measured(spec, term_values(x)))
    print(f"{label}: {len(e)} steps |error| median {100 * np.median(e):.1f}% p90 {100 * np.percentile(e, 90):.1f}%; "
          f"{len(r)} replays median {100 * np.median(r):.1f}% p90 {100 * np.percentile(r, 90):.1f}%")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", help="whole.json files (plain or .gz) of models the fit may see")
    ap.add_argument("--gpu", default="h100", help="the spec the runs were predicted with (default h100)")
    ap.add_argument("--resamples", type=int, default=200, help="bootstrap refits for the intervals (default 200)")
    args = ap.parse_args()
    spec = gpu(args.gpu)
    try:
        rows = runs(args.results, spec)
    except FusePlannerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    s = samples(rows, spec)
    data = arrays(s)
    _report("current", rows, data, spec, np.array([getattr(spec.fit, f) for f in TERM_FIELDS]))
    x = fit_terms(data)
    ci = intervals(s, args.resamples) if args.resamples else None
    for i, f in enumerate(TERM_FIELDS):
        band = f" (5-95%: {ci[i, 0]:.4g} .. {ci[i, 1]:.4g})" if ci is not None else ""
        print(f"fitted: {f} = {x[i]:.4g}{band}")
    _report("fitted", rows, data, spec, x)
    return 0


if __name__ == "__main__":
    sys.exit(main())
