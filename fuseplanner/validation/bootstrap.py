"""Bootstrap intervals of fitted parameters, and which of them the data cannot identify.

Shared by the micro-sweep fit (`fit_sweep.bootstrap`) and the fit to saved validation records
(`fit_records.record_bootstrap`): the samples are drawn with replacement `resamples` times, a
caller's `refit` fits each draw, and each parameter's 5th-95th percentile over the refits is its
interval. `identifiability` flags a parameter whose interval is wide against its value, and pairs of
parameters whose refits move together (|Pearson r| of their logarithms above `MAX_R`): a valley of
equal loss along which the data pin down only a combination of the two (a product, a ratio).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: A parameter is flagged when its 5-95% interval is wider than this times its fitted value.
WIDE_FACTOR = 0.5
#: Two parameters are flagged when their refits correlate beyond this (|r| of their logarithms).
MAX_R = 0.9


def resample_draws(samples: Sequence[Any], refit: Callable[[list[Any]], Sequence[float]], resamples: int,
                   seed: int = 0, jobs: int = 1) -> np.ndarray:  # fmt: skip
    """One row per resample: `refit` of the samples drawn with replacement (seeded; `jobs` > 1 fits the
    draws in that many processes, so `refit` must then be picklable)."""
    rng = np.random.default_rng(seed)
    subs = [[samples[i] for i in rng.integers(0, len(samples), len(samples))] for _ in range(resamples)]
    if jobs > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=jobs) as pool:
            rows = list(pool.map(refit, subs))
    else:
        rows = [refit(s) for s in subs]
    return np.array(rows, dtype=float).reshape(resamples, -1)


def intervals(names: Sequence[str], draws: np.ndarray) -> dict[str, tuple[float, float]]:
    """5th and 95th percentile of each parameter's column (refits that left it out are NaN)."""
    lo, hi = np.nanpercentile(draws, [5, 95], axis=0)
    return {n: (float(a), float(b)) for n, a, b in zip(names, lo, hi, strict=True)}


@dataclass(frozen=True)
class Spread:
    """One parameter's point fit and bootstrap interval; `wide` when the data leave it loose."""

    name: str
    value: float
    lo: float
    hi: float
    width_factor: float = WIDE_FACTOR

    @property
    def relative_width(self) -> float:
        return (self.hi - self.lo) / abs(self.value) if self.value else math.inf

    @property
    def wide(self) -> bool:
        return self.relative_width > self.width_factor


@dataclass(frozen=True)
class Correlated:
    """Two parameters whose refits move together (Pearson r of their logarithms over the resamples)."""

    a: str
    b: str
    r: float


@dataclass(frozen=True)
class Identifiability:
    """Each parameter's spread, the strongly correlated pairs, and the thresholds that flagged them."""

    spreads: tuple[Spread, ...]
    pairs: tuple[Correlated, ...]
    resamples: int
    width_factor: float = WIDE_FACTOR
    max_r: float = MAX_R

    @property
    def flagged(self) -> tuple[str, ...]:
        """Names of the parameters with a wide interval or in a correlated pair, in fit order."""
        bad = {s.name for s in self.spreads if s.wide} | {n for p in self.pairs for n in (p.a, p.b)}
        return tuple(s.name for s in self.spreads if s.name in bad)


def _log_columns(draws: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(draws > 0, np.log(np.where(draws > 0, draws, 1.0)), np.nan)


def correlated_pairs(names: Sequence[str], draws: np.ndarray, max_r: float = MAX_R) -> tuple[Correlated, ...]:
    """Pairs of parameters with |r| > `max_r` over the resamples (a constant column correlates with nothing)."""
    logs = _log_columns(draws)
    out = []
    for i in range(len(names)):
        for j in range(i + 1, len(names)):
            ok = np.isfinite(logs[:, i]) & np.isfinite(logs[:, j])
            x, y = logs[ok, i], logs[ok, j]
            if len(x) < 3 or x.std() == 0 or y.std() == 0:
                continue
            r = float(np.corrcoef(x, y)[0, 1])
            if abs(r) > max_r:
                out.append(Correlated(names[i], names[j], r))
    return tuple(out)


def identifiability(names: Sequence[str], values: dict[str, float], draws: np.ndarray,
                    width_factor: float = WIDE_FACTOR, max_r: float = MAX_R) -> Identifiability:  # fmt: skip
    """Spreads and correlated pairs of the parameters `names` (the columns of `draws`), fitted at `values`."""
    ci = intervals(names, draws)
    spreads = tuple(Spread(n, float(values[n]), *ci[n], width_factor) for n in names)
    return Identifiability(spreads, correlated_pairs(names, draws, max_r), len(draws), width_factor, max_r)


def report_lines(ident: Identifiability) -> list[str]:
    """The spreads and flags as text lines (what `calibrate --resamples` prints)."""
    lines = [f"bootstrap over {ident.resamples} resamples: 5-95% interval, (width / value); "
             f"flagged: width > {ident.width_factor:g} x value, or |r| > {ident.max_r:g} with another parameter"]
    for s in ident.spreads:
        mark = "  WIDE" if s.wide else ""
        lines.append(f"  {s.name} = {s.value:g}  [{s.lo:.4g}, {s.hi:.4g}]  ({s.relative_width:.2f}){mark}")
    lines += [f"  correlated: {p.a} ~ {p.b}  r = {p.r:+.2f}" for p in ident.pairs]
    flagged = ", ".join(ident.flagged) or "none"
    lines.append(f"not identified by these records: {flagged}")
    return lines
