"""Fit the graph context's per-family launch terms (`graph_lbl_kernel_s`, `graph_fused_kernel_s` of a
spec's fit) to whole CUDA-graph replays.

    python scripts/fit_graph_kernels.py --gpu h100 \
        data/records/h100/whole/{fp32fp32_b1,fp32fp32_b8,fp16fp32_b1,fp32tf32_b1}/mobilenet_v1.json.gz ...

(the bundled spec's values: the six bundled models in those four configurations; the fp16 batch-8
runs came later and are not in the fit)

Each whole.json (`fuseplanner validate --whole`) is planned again as it was measured (isolated
context) and unfused; both are predicted whole in the graph context, and the two values are fitted by
least squares on log(predicted / measured) of the planned and the unfused replay medians. Only pass
the models the fit may see (never the held-out list, `models/holdout.toml`).
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy.optimize import least_squares

from fuseplanner.frontend.holdout import holdout_models
from fuseplanner.frontend.load import load_model
from fuseplanner.hw.spec import gpu
from fuseplanner.planning.search import plan as make_plan
from fuseplanner.planning.whole import predict_whole
from fuseplanner.validation.microbench import apply_measured
from fuseplanner.validation.whole import read

FIELDS = ("graph_lbl_kernel_s", "graph_fused_kernel_s")


def runs(paths: list[str], spec):
    """(graph, plan, unfused plan, measured planned s, measured unfused s) per result."""
    held = {m.name for m in holdout_models()}
    out = []
    for path in paths:
        for r in read(path):
            if r.model in held:
                raise SystemExit(f"{path}: {r.model} is a held-out model: no fit may see it")
            graph = load_model(r.model, None, r.batch)
            plan = make_plan(graph, spec, dtype=r.dtype, precision=r.precision, context="isolated")
            unfused = make_plan(graph, spec, dtype=r.dtype, precision=r.precision, kinds=[], workers=1)
            out.append((graph, plan, unfused, r.measured_planned.median_s, r.measured_unfused.median_s))
    return out


def with_values(spec, x):
    return apply_measured(spec, dict(zip(FIELDS, x, strict=True)))  # fit parameters: they replace the fit's values


def residuals(rows, spec, x) -> np.ndarray:
    s = with_values(spec, x)
    out = []
    for graph, plan, unfused, mp, mu in rows:
        w = predict_whole(graph, s, plan, "graph", unfused_plan=unfused)
        out += [np.log(w.planned.time_s / mp), np.log(w.unfused.time_s / mu)]
    return np.array(out)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", help="whole.json files (plain or .gz) of models the fit may see")
    ap.add_argument("--gpu", default="h100", help="the spec the runs were predicted with (default h100)")
    return ap


def main() -> None:
    args = _parser().parse_args()
    spec = gpu(args.gpu)
    rows = runs(args.results, spec)
    for label, x in (("zero", np.zeros(2)), ("current", np.array([getattr(spec.fit, f) for f in FIELDS]))):
        e = np.abs(np.expm1(residuals(rows, spec, x)))
        print(f"{label}: {len(e)} replays, |error| median {100 * np.median(e):.1f}% p90 {100 * np.percentile(e, 90):.1f}%")
    fit = least_squares(lambda v: residuals(rows, spec, v * 1e-6), np.zeros(2), bounds=([-5.0, -5.0], [5.0, 5.0]))
    e = np.abs(np.expm1(residuals(rows, spec, fit.x * 1e-6)))
    print("fitted: " + ", ".join(f"{f} = {v * 1e-6:.4g}" for f, v in zip(FIELDS, fit.x, strict=True)))
    print(f"after: |error| median {100 * np.median(e):.1f}% p90 {100 * np.percentile(e, 90):.1f}%")


if __name__ == "__main__":
    main()
