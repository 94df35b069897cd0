"""Fit the graph-context terms of the executor's operator-library steps (`fuseplanner.cost.library`):
`library_stream_bw_fraction`, `library_gemm_slice_cycles`, `library_row_iter_cycles`,
`library_direct_terms_per_cycle` of a spec's fit.

    python scripts/fit_library_costs.py --gpu h100 data/records/h100/whole/*/mobilenet_v1.json.gz ...

Each whole.json (`fuseplanner validate --whole`) is re-planned as it was measured, its step times net
of the replay's once cost where one replay timed them (`whole.net_of_replay`); its library steps
(the steps `cost.library.launches` costs: not fuseplanner's kernels) are
fitted by least squares on log(predicted / measured) time, and the values printed with each step
class's median error before and after. Only pass the models the fit may see (never the held-out list,
`models/holdout.toml`).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections import defaultdict

import numpy as np
from scipy.optimize import least_squares

from fuseplanner.cost.execution import launch_terms
from fuseplanner.cost.library import graph_seconds
from fuseplanner.frontend.holdout import holdout_models
from fuseplanner.frontend.load import load_model
from fuseplanner.hw.spec import gpu
from fuseplanner.planning.search import plan as make_plan
from fuseplanner.planning.whole import steps as whole_steps
from fuseplanner.validation.whole import net_of_replay, read

FIELDS = ("library_stream_bw_fraction", "library_gemm_slice_cycles", "library_row_iter_cycles",
          "library_direct_terms_per_cycle")


def library_steps(path: str, spec):
    """(op type, launches, measured seconds) of each measured library step of one whole.json."""
    out = []
    for r in (net_of_replay(x, spec) for x in read(path)):
        if r.model in {m.name for m in holdout_models()}:
            raise SystemExit(f"{path}: {r.model} is a held-out model: no fit may see it")
        graph = load_model(r.model, None, r.batch)
        plan = make_plan(graph, spec, dtype=r.dtype, precision=r.precision, context="isolated")
        measured = {s.label: s.measured_s for s in r.steps}
        for s in whole_steps(graph, plan, spec):
            if s.library and s.label in measured:
                out.append((s.op_type, s.library, measured[s.label]))
    return out


def predict(rows, spec, x):
    hw = dataclasses.replace(spec.hw, **dict(zip(FIELDS, x, strict=True)))
    terms = launch_terms(spec)
    return np.array([graph_seconds(k, terms, hw) for _, k, _ in rows])


def report(rows, pred):
    by = defaultdict(list)
    for (op, _, m), p in zip(rows, pred, strict=True):
        by[op].append(p / m - 1)
    errs = np.abs([p / m - 1 for (_, _, m), p in zip(rows, pred, strict=True)])
    parts = [f"{op} {100 * np.median(v):+.1f}% ({len(v)})" for op, v in sorted(by.items())]
    return f"|error| median {100 * np.median(errs):.1f}% p90 {100 * np.percentile(errs, 90):.1f}%; " + ", ".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("results", nargs="+")
    args = ap.parse_args()
    spec = gpu(args.gpu)
    rows = [row for path in args.results for row in library_steps(path, spec)]
    meas = np.array([m for _, _, m in rows])
    start = np.array([getattr(spec.hw, f) for f in FIELDS])
    print(f"{len(rows)} library steps; current: {report(rows, predict(rows, spec, start))}")
    fit = least_squares(lambda x: np.log(predict(rows, spec, x) / meas), np.array([0.5, 2000.0, 200.0, 8.0]),
                        bounds=([0.05, 0.0, 0.0, 0.1], [2.0, 1e5, 1e4, 1e3]))
    print("fitted: " + ", ".join(f"{f} = {v:.4g}" for f, v in zip(FIELDS, fit.x, strict=True)))
    print(f"after: {report(rows, predict(rows, spec, fit.x))}")


if __name__ == "__main__":
    main()
