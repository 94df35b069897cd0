"""Fit the graph context's per-class launch terms (`graph_dw_kernel_s`, `graph_pw_kernel_s`,
`graph_linear_kernel_s`, `graph_fused_kernel_s` of a spec's fit) to the step times measured in graph mode.

    python scripts/fit_graph_kernels.py --gpu h100 \
        data/records/h100/whole/*/{mobilenet_v1,mobilenet_v2,mobilenet_v3_large,mnasnet1_0,efficientnet_b0,mobilevit_xxs}.json.gz

(the bundled spec's values: the six bundled models in all six configurations)

Each whole.json (`fuseplanner validate --whole`) carries the plan it measured (its step times net of
the replay's once cost where one replay timed them, `whole.net_of_replay`); that plan and the
unfused plan are costed with the spec (`planning.recost`) and predicted step by step in the graph
context with the terms at zero. Every step of fuseplanner's own kernels timed in graph mode
(`WholeResult.steps` for the planned run, `unfused_steps` for the unfused one) is a sample: its
prediction is that time plus the term of each of its launches' classes (`core.kinds.LAUNCH_CLASSES`,
held at least at the launch interval). The terms minimise a robust loss (soft L1, scale 0.1) on
log(predicted / measured), so the few steps the rest of the model misses by 2x do not pull the terms.
The script then predicts again with the fitted terms and reports the step error and the whole-replay
error, and gives each term a bootstrap interval: `--resamples` refits on the runs drawn with
replacement (a run's steps move together, as they share its plan and its GPU state), 5th to 95th
percentile. Only pass the models the fit may see (never the held-out list, `models/holdout.toml`).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from fuseplanner.core.kinds import KERNEL_KINDS, LAUNCH_CLASSES
from fuseplanner.cost.execution import class_field, launch_terms, predict
from fuseplanner.frontend.holdout import holdout_models
from fuseplanner.frontend.load import load_model
from fuseplanner.hw.spec import gpu
from fuseplanner.planning.recost import recost
from fuseplanner.planning.whole import predict_whole
from fuseplanner.planning.whole import steps as whole_steps
from fuseplanner.validation.microbench import apply_measured
from fuseplanner.validation.whole import net_of_replay, read, unfused_plan

FIELDS = tuple(class_field(c) for c in LAUNCH_CLASSES)


@dataclass(frozen=True)
class Sample:
    """One timed step of run number `run`: its graph prediction with the terms at zero, its launches
    per class, the least graph time of its launches, and its measured seconds."""

    run: int
    base_s: float
    launches: tuple[int, ...]
    least_s: float
    measured_s: float


@dataclass(frozen=True)
class Run:
    """One saved whole run: its graph, its measured plan and the unfused plan (both costed with the
    spec), the measured step times of each, and the measured replay medians."""

    graph: object
    plans: tuple[object, object]
    measured: tuple[dict, dict]
    replays_s: tuple[float, float]


def runs(paths: list[str], spec) -> list[Run]:
    held = {m.name for m in holdout_models()}
    out = []
    for path in paths:
        for r in (net_of_replay(x, spec) for x in read(path)):
            if r.model in held:
                raise SystemExit(f"{path}: {r.model} is a held-out model: no fit may see it")
            if r.plan is None:
                raise SystemExit(f"{path}: {r.model} was saved without its plan (scripts/store_whole_plans.py)")
            graph = load_model(r.model, None, r.batch)
            unfused = unfused_plan(graph, spec, r.dtype, r.precision, r.batch)
            planned = recost(graph, r.plan, spec, unfused)
            out.append(Run(graph, (planned, unfused), ({s.label: s.measured_s for s in r.steps},
                                                      {s.label: s.measured_s for s in r.unfused_steps}),
                           (r.measured_planned.median_s, r.measured_unfused.median_s)))  # fmt: skip
    return out


def with_values(spec, x):
    return apply_measured(spec, dict(zip(FIELDS, x, strict=True)))  # fit parameters: they replace the fit's values


def samples(rows: list[Run], spec) -> list[Sample]:
    """Every measured own-kernel step of `rows`, predicted with the terms at zero."""
    zero = with_values(spec, np.zeros(len(FIELDS)))
    interval = launch_terms(zero).interval_s
    out = []
    for i, run in enumerate(rows):
        for plan, measured in zip(run.plans, run.measured, strict=True):
            st = whole_steps(run.graph, plan, zero)
            pred = predict(st, zero, "graph")
            for s, p in zip(st, pred.steps, strict=True):
                m = measured.get(s.label)
                if s.kind not in KERNEL_KINDS or not m or m <= 0:
                    continue
                cls = [k.graph_class for k in s.cost.kernels if k.kind in KERNEL_KINDS]
                out.append(Sample(i, p.time_s, tuple(cls.count(c) for c in LAUNCH_CLASSES), s.cost.launches * interval, m))
    return out


def arrays(s: list[Sample]) -> tuple[np.ndarray, ...]:
    """(zero-term seconds, launches per class, least seconds, measured seconds) of samples `s`."""
    return (np.array([v.base_s for v in s]), np.array([v.launches for v in s], dtype=float),
            np.array([v.least_s for v in s]), np.array([v.measured_s for v in s]))  # fmt: skip


def fit_terms(data: tuple[np.ndarray, ...]) -> np.ndarray:
    """The terms (seconds) minimising the soft-L1 loss of `step_residuals`, each within +-5 us."""
    n = len(FIELDS)
    fit = least_squares(lambda v: step_residuals(data, v * 1e-6), np.zeros(n), loss="soft_l1", f_scale=0.1,
                        bounds=([-5.0] * n, [5.0] * n))  # fmt: skip
    return fit.x * 1e-6


def intervals(s: list[Sample], resamples: int, seed: int = 0) -> np.ndarray:
    """5th and 95th percentiles of the terms refitted on runs drawn with replacement (rows: fields)."""
    rng = np.random.default_rng(seed)
    by_run: dict[int, list[Sample]] = {}
    for v in s:
        by_run.setdefault(v.run, []).append(v)
    runs_ = list(by_run)
    fits = [fit_terms(arrays([v for r in rng.choice(runs_, len(runs_)) for v in by_run[r]])) for _ in range(resamples)]
    return np.percentile(np.array(fits), [5, 95], axis=0).T


def step_residuals(data: tuple[np.ndarray, ...], x: np.ndarray) -> np.ndarray:
    base, launches, least, measured = data
    return np.log(np.maximum(least, base + launches @ x) / measured)


def replay_errors(rows: list[Run], spec) -> np.ndarray:
    out = []
    for run in rows:
        w = predict_whole(run.graph, spec, run.plans[0], "graph", unfused_plan=run.plans[1])
        out += [w.planned.time_s / run.replays_s[0] - 1, w.unfused.time_s / run.replays_s[1] - 1]
    return np.abs(out)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", help="whole.json files (plain or .gz) of models the fit may see")
    ap.add_argument("--gpu", default="h100", help="the spec the runs were predicted with (default h100)")
    ap.add_argument("--resamples", type=int, default=200, help="bootstrap refits for the intervals (default 200)")
    return ap


def _report(label: str, rows: list[Run], data, spec, x: np.ndarray) -> None:
    e = np.abs(np.expm1(step_residuals(data, x)))
    r = replay_errors(rows, with_values(spec, x))
    print(f"{label}: {len(e)} steps |error| median {100 * np.median(e):.1f}% p90 {100 * np.percentile(e, 90):.1f}%; "
          f"{len(r)} replays median {100 * np.median(r):.1f}% p90 {100 * np.percentile(r, 90):.1f}%")


def main() -> None:
    args = _parser().parse_args()
    spec = gpu(args.gpu)
    rows = runs(args.results, spec)
    s = samples(rows, spec)
    data = arrays(s)
    _report("current", rows, data, spec, np.array([getattr(spec.fit, f) for f in FIELDS]))
    x = fit_terms(data)
    ci = intervals(s, args.resamples) if args.resamples else None
    for i, f in enumerate(FIELDS):
        band = f" (5-95%: {ci[i, 0]:.4g} .. {ci[i, 1]:.4g})" if ci is not None else ""
        print(f"fitted: {f} = {x[i]:.4g}{band}")
    _report("fitted", rows, data, spec, x)

if __name__ == "__main__":
    main()
