"""Fit every kernel parameter at once to a micro-sweep (`validation.sweep`), with bootstrap intervals.

`fit.fit_spec` refines a few fields from a good start (Nelder-Mead); a new GPU needs all of them
from the borrowed fit's values, which Nelder-Mead does not reach in 25 dimensions. Here:

1. the L2 fractions (from L2 counters, when the sweep read them) and nothing else, by `fit.fit_spec`;
2. the time parameters by robust nonlinear least squares (`scipy.optimize.least_squares`, trust
   region, soft-L1 loss) on log(predicted / measured) time of every sample plus, per group measured
   fused and unfused, the error of log(fused / unfused) (what a fuse decision rests on), over the
   logarithms of the parameters (exponents at most 1; a parameter that is off, 0, starts where
   `sweep.PROBE_START` puts it);
3. the fuse threshold by `fit.fit_spec`'s rule on the fitted predictions;
4. `bootstrap`: records resampled with replacement and refitted (step 2 from the point estimate,
   few iterations), the 5th and 95th percentiles of each parameter as its interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fuseplanner.core.errors import FusePlannerError
from fuseplanner.hw.kernel_fit import KernelFit
from fuseplanner.validation import bootstrap as boot
from fuseplanner.validation import fit as fit_mod
from fuseplanner.validation.microbench import apply_measured
from fuseplanner.validation.records import RunMeta

#: Relative finite-difference step of the Jacobian (the cost model has kinks: occupancy, waves).
DIFF_STEP = 0.02
#: Soft-L1 scale of a residual (log units: about 10% error before it counts linearly).
F_SCALE = 0.1
#: Weight of a fused/unfused pair residual against a sample's.
PAIR_WEIGHT = 2.0
UNIT_BOUNDED = (*fit_mod.EXPONENT_FIELDS, fit_mod.CORESIDENT_FIELD)


@dataclass(frozen=True)
class SweepFit:
    """Fitted values, accuracy before and after (median APE %, decisions %), and intervals."""

    values: dict[str, float]
    n_time: int
    n_gma: int
    before: dict[str, float]
    after: dict[str, float]
    ci: dict[str, tuple[float, float]]

    def as_fit(self) -> fit_mod.Fit:
        return fit_mod.Fit(dict(self.values), self.n_time, self.n_gma, dict(self.before), dict(self.after))


def time_fields(samples: Sequence[fit_mod.Sample], names: Sequence[str]) -> list[str]:
    """The time parameters of `names` the samples can inform (rates of absent math modes dropped)."""
    present = set(fit_mod._rate_fields(samples))
    rates = set(fit_mod.RATE_FIELDS.values()) | {fit_mod.LOAD_FIELD, *fit_mod.EXPONENT_FIELDS}
    skip = {*fit_mod.L2_FRACTION_FIELDS.values(), fit_mod.THRESHOLD_FIELD}
    return [n for n in names if n not in skip and (n not in rates or n in present)]


def _start(spec, names: Sequence[str]) -> np.ndarray:
    from fuseplanner.validation.sweep import PROBE_START

    return np.log([float(spec.eff(n)) or PROBE_START.get(n, 1e-3) for n in names])


def _bounds(x0: np.ndarray, names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    lo = x0 - math.log(1e3)
    hi = np.array([0.0 if n in UNIT_BOUNDED else x + math.log(1e3) for n, x in zip(names, x0, strict=True)])
    return lo, np.maximum(hi, lo + 1e-6)


def _residuals(spec, names: Sequence[str], samples: Sequence[fit_mod.Sample]):
    meas = np.log([s.time_s for s in samples])
    pairs = np.array(fit_mod.decision_pairs(samples), dtype=int).reshape(-1, 2)

    def res(x: np.ndarray) -> np.ndarray:
        sp = apply_measured(spec, {n: float(math.exp(v)) for n, v in zip(names, x, strict=True)})
        pred = np.array([fit_mod.predict(sp, s)[0] for s in samples])
        d = np.log(np.maximum(pred, 1e-12)) - meas
        return np.concatenate([d, PAIR_WEIGHT * (d[pairs[:, 0]] - d[pairs[:, 1]])])

    return res


def _solve(spec, names: Sequence[str], samples: Sequence[fit_mod.Sample], x0: np.ndarray, max_nfev: int) -> np.ndarray:
    from scipy.optimize import least_squares

    lo, hi = _bounds(_start(spec, names), names)
    x0 = np.clip(x0, lo + 1e-9, hi - 1e-9)
    r = least_squares(_residuals(spec, names, samples), x0, bounds=(lo, hi), loss="soft_l1", f_scale=F_SCALE,
                      diff_step=DIFF_STEP, max_nfev=max_nfev, x_scale=1.0)  # fmt: skip
    return r.x


def _rounded(values: dict[str, float]) -> dict[str, float]:
    return {n: float(f"{v:.4g}") if n in fit_mod.SECONDS_FIELDS else round(min(v, 1.0) if n in UNIT_BOUNDED else v, 4)
            for n, v in values.items()}  # fmt: skip


def point_fit(spec, samples: Sequence[fit_mod.Sample], names: Sequence[str], max_nfev: int = 60) -> dict[str, float]:
    """The L2 fractions (by `fit.fit_spec`), then the time parameters of `names`, then the threshold."""
    values: dict[str, float] = {}
    fractions = [n for n in fit_mod.L2_FRACTION_FIELDS.values() if n in names]
    if fractions and any(s.gma_bytes for s in samples):
        values.update(fit_mod.fit_spec(spec, samples, only=fractions).values)
    start = apply_measured(spec, values)
    tnames = time_fields(samples, names)
    if tnames:
        x = _solve(start, tnames, samples, _start(start, tnames), max_nfev * (len(tnames) + 1))
        values.update(_rounded({n: math.exp(v) for n, v in zip(tnames, x, strict=True)}))
    if fit_mod.THRESHOLD_FIELD in names:
        times = np.array([fit_mod.predict(apply_measured(spec, values), s)[0] for s in samples])
        tau = fit_mod._fit_threshold(fit_mod._pair_ratios(times, samples))
        if tau is not None:
            values[fit_mod.THRESHOLD_FIELD] = tau
    return values


def bootstrap(spec, samples: Sequence[fit_mod.Sample], names: Sequence[str], values: dict[str, float],
              resamples: int = 8, seed: int = 0, max_nfev: int = 8) -> dict[str, tuple[float, float]]:  # fmt: skip
    """5th-95th percentile of each time parameter over `resamples` refits on records drawn with
    replacement, each started at `values` (the point fit) for `max_nfev` x (parameters + 1) evaluations."""
    tnames = time_fields(samples, names)
    if resamples < 2 or not tnames:
        return {}
    start = apply_measured(spec, values)
    x0 = _start(start, tnames)

    def refit(sub: list[fit_mod.Sample]) -> np.ndarray:
        return np.exp(_solve(start, tnames, sub, x0, max_nfev * (len(tnames) + 1)))

    ci = boot.intervals(tnames, boot.resample_draws(samples, refit, resamples, seed))
    return {n: (_rounded({n: a})[n], _rounded({n: b})[n]) for n, (a, b) in ci.items()}


def fit_sweep(spec, samples: Sequence[fit_mod.Sample], names: Sequence[str], resamples: int = 8,
              max_nfev: int = 60, seed: int = 0) -> SweepFit:  # fmt: skip
    """Fit `names` to the sweep's samples from `spec`'s values, with bootstrap intervals."""
    if not samples:
        raise FusePlannerError("no correctly measured sweep records to fit")
    values = point_fit(spec, samples, names, max_nfev)
    ci = bootstrap(spec, samples, names, values, resamples, seed)
    tau0 = float(spec.eff(fit_mod.THRESHOLD_FIELD))
    before = fit_mod._summary(fit_mod._predictions(spec, samples), samples, tau0)
    after = fit_mod._summary(fit_mod._predictions(apply_measured(spec, values), samples),
                            samples, values.get(fit_mod.THRESHOLD_FIELD, tau0))  # fmt: skip
    return SweepFit(values, len(samples), sum(1 for s in samples if s.gma_bytes), before, after, ci)


def sweep_kernel_fit(spec, result: SweepFit, records: str, meta: dict) -> KernelFit:
    """`spec`'s kernel fit with the sweep fit's values and intervals, as the fit of the GPU it was measured
    on (`meta`: ``device_name``, ``versions``, ``design``): its name, driver, today's date, the records
    file and count, a note per fitted value (`fit.kernel_fit` keeps the values not fitted)."""
    fit = result.as_fit()
    run_meta = RunMeta(gpu=meta.get("gpu"), device_name=meta.get("device_name"), versions=meta.get("versions") or {})
    own = fit_mod.kernel_fit(spec, fit, [records], run_meta)
    b, a = result.before, result.after
    note = (f"fuseplanner calibrate: fitted to the {meta.get('design', '')} micro-sweep ({result.n_time} measured "
            f"kernel sequences, {result.n_gma} with counters; {records}); median time APE {b['time']:.1f}% -> "
            f"{a['time']:.1f}% with the borrowed fit as start"
            + (f", fuse decisions agreeing {b['decisions']:.0f}% -> {a['decisions']:.0f}%" if "decisions" in a else ""))
    sources = {**own.sources, **dict.fromkeys(result.values, note)}
    return own.model_copy(update={"sources": sources, "ci": {**own.ci, **result.ci}})
