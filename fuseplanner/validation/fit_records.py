"""The bundled H100 fit's procedure as code, and bootstrap intervals of a fit to saved records.

`BUNDLED_STAGES` are the `fuseplanner calibrate --from-results --fit FIELDS` steps the bundled h100
spec's kernel fields were fitted by, in order (gpu_specs/h100.toml, `[fit.sources]`): the fused
kernels' L2 weight fractions; the fused kernels' time fields (with `fused_epilogue_weight` fixed, as
chosen by a field scan); the fused TF32 rate alone; the layer-by-layer fields last. Each stage starts
from the values the stages before it fitted. `staged_fit` replays them on any samples (leave one
model out: `fuseplanner.analysis.loo`).

`record_bootstrap` refits `fit.fit_spec` on records drawn with replacement, each refit started at the
point fit (no restarts along the exponents, `max_iter` Nelder-Mead iterations): the intervals of
`fuseplanner calibrate --from-results --resamples N` and the draws `bootstrap.identifiability` reads.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np

from fuseplanner.validation import bootstrap as boot
from fuseplanner.validation import fit
from fuseplanner.validation.microbench import apply_measured

L2_STAGE = tuple(fit.L2_FRACTION_FIELDS.values())
FUSED_STAGE = ("fused_pw_warp_flops_per_cycle_fp32", "fused_pw_warp_flops_per_cycle_fp16",
               "fused_dw_warp_flops_per_cycle", "fused_block_warp_exponent", "coresident_exponent",
               "fused_sm_issue_warps", "fused_kernel_fixed_s", fit.THRESHOLD_FIELD)  # fmt: skip
TF32_STAGE = ("fused_pw_warp_flops_per_cycle_tf32",)
LBL_STAGE = ("dw_warp_flops_per_cycle_fp32", "dw_warp_flops_per_cycle_fp16", "pw_warp_flops_per_cycle_fp32",
             "pw_warp_flops_per_cycle_fp16", "pw_warp_flops_per_cycle_tf32", "block_warp_exponent",
             "warp_load_bytes_per_cycle", "kernel_fixed_s", fit.THRESHOLD_FIELD)  # fmt: skip
BUNDLED_STAGES: tuple[tuple[str, ...], ...] = (L2_STAGE, FUSED_STAGE, TF32_STAGE, LBL_STAGE)
#: Nelder-Mead iterations of one bootstrap refit (started at the point fit).
BOOT_ITER = 120


def informed(samples: Sequence[fit.Sample], names: Sequence[str]) -> list[str]:
    """The fields of `names` the samples can inform: rates of math modes they lack, and L2 fractions of
    storage dtypes without fused records with counters, are left out."""
    rates = set(fit.RATE_FIELDS.values()) | {fit.LOAD_FIELD, *fit.EXPONENT_FIELDS}
    present = set(fit._rate_fields(samples))
    gma = {dtype for s in samples if s.fused and s.gma_bytes for dtype in (s.dtype,)}
    fractions = {fit.L2_FRACTION_FIELDS[d] for d in gma if d in fit.L2_FRACTION_FIELDS}
    return [n for n in names if (n not in rates or n in present)
            and (n not in fit.L2_FRACTION_FIELDS.values() or n in fractions)]  # fmt: skip


def staged_fit(spec: Any, samples: Sequence[fit.Sample], stages: Sequence[Sequence[str]] = BUNDLED_STAGES,
               max_iter: int = 400) -> dict[str, float]:  # fmt: skip
    """The values `stages` fit on `samples`, each stage by `fit.fit_spec` from the values before it."""
    values: dict[str, float] = {}
    for stage in stages:
        names = informed(samples, stage)
        if names:
            values.update(fit.fit_spec(apply_measured(spec, values), samples, max_iter, only=names).values)
    return values


def _refit(start: Any, only: Sequence[str] | None, max_iter: int, names: Sequence[str],
           sub: list[fit.Sample]) -> list[float]:  # fmt: skip
    got = fit.fit_spec(start, sub, max_iter, only=only, restart=False).values
    return [float(got.get(n, math.nan)) for n in names]


def record_bootstrap(spec: Any, samples: Sequence[fit.Sample], only: Sequence[str] | None,
                     values: dict[str, float], resamples: int, seed: int = 0, max_iter: int = BOOT_ITER,
                     jobs: int = 1) -> np.ndarray:  # fmt: skip
    """One row per resample of the fitted `values`' names (in their order): `fit.fit_spec(..., only)`
    on the samples drawn with replacement, started at `values`."""
    refit = partial(_refit, apply_measured(spec, values), only, max_iter, list(values))
    return boot.resample_draws(samples, refit, resamples, seed, jobs)


def record_identifiability(spec: Any, samples: Sequence[fit.Sample], only: Sequence[str] | None,
                           values: dict[str, float], resamples: int, seed: int = 0, max_iter: int = BOOT_ITER,
                           jobs: int = 1) -> boot.Identifiability:  # fmt: skip
    """Bootstrap spreads and correlated pairs of a record fit's `values` (the threshold's spread included)."""
    draws = record_bootstrap(spec, samples, only, values, resamples, seed, max_iter, jobs)
    return boot.identifiability(list(values), values, draws)
