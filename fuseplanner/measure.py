"""Kernel timing with CUDA events: warm-up, many repeats, medians; L2 flushed (cold) or warm.

CuPy is imported lazily (through `fuseplanner.kernels.require_device`).
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .kernels._build import require_device

#: Bytes written to flush L2 between timed runs, as a multiple of the L2 size.
FLUSH_FACTOR = 2
#: GPU-side wait before each timed run, so the start event never waits for the host to launch `fn`.
LEAD_US = 50.0

_SPIN = r"""
extern "C" __global__ void fp_spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
}
"""


@dataclass(frozen=True)
class Timing:
    """Per-run kernel times in seconds: median, 10th and 90th percentile, and every sample."""

    median_s: float
    p10: float
    p90: float
    all: tuple[float, ...]

    @property
    def median_us(self) -> float:
        return self.median_s * 1e6

    def as_dict(self) -> dict[str, float | int]:
        return {"median_s": self.median_s, "p10_s": self.p10, "p90_s": self.p90, "runs": len(self.all)}


def _quantile(sorted_vals: list[float], q: float) -> float:
    if len(sorted_vals) == 1:
        return sorted_vals[0]
    pos = q * (len(sorted_vals) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


@functools.lru_cache(maxsize=8)
def _flush_buffer(device: int):
    cp = require_device()
    l2 = int(cp.cuda.runtime.getDeviceProperties(device)["l2CacheSize"])
    return cp.empty(max(FLUSH_FACTOR * l2, 1 << 20) // 4, dtype=cp.int32)


def flush_l2() -> None:
    """Evict the L2 cache by writing a buffer twice its size (asynchronous, on the current stream)."""
    cp = require_device()
    buf = _flush_buffer(cp.cuda.runtime.getDevice())
    buf.fill(1)


@functools.lru_cache(maxsize=8)
def _spin_kernel(device: int):
    cp = require_device()
    khz = int(cp.cuda.runtime.getDeviceProperties(device)["clockRate"])
    return cp.RawKernel(_SPIN, "fp_spin"), khz


def gpu_wait(us: float) -> None:
    """Keep the GPU busy for about `us` microseconds without touching memory (asynchronous)."""
    cp = require_device()
    kernel, khz = _spin_kernel(cp.cuda.runtime.getDevice())
    kernel((1,), (1,), (np.int64(us * khz / 1e3),))


def time_kernel(fn: Callable[[], object], *, warmup: int = 10, repeat: int = 200, flush_l2: bool = True) -> Timing:
    """Time `fn` (which launches GPU work on the current stream) with CUDA events.

    Each of `repeat` runs is bracketed by its own pair of events; with `flush_l2` the cache flush
    runs before the start event, outside the timed region. A short GPU-side wait (LEAD_US, no memory
    traffic) precedes every start event so that the host's launch overhead never lands inside the
    timed region (without it, warm runs of small kernels measure the host, not the GPU).
    `warmup` untimed runs come first.
    """
    if repeat < 1:
        raise ValueError("repeat must be at least 1")
    cp = require_device()
    flush = globals()["flush_l2"]
    for _ in range(warmup):
        fn()
    stream = cp.cuda.get_current_stream()
    events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(repeat)]
    for start, end in events:
        if flush_l2:
            flush()
        gpu_wait(LEAD_US)
        start.record(stream)
        fn()
        end.record(stream)
    events[-1][1].synchronize()
    samples = [cp.cuda.get_elapsed_time(s, e) * 1e-3 for s, e in events]
    ordered = sorted(samples)
    return Timing(statistics.median(ordered), _quantile(ordered, 0.1), _quantile(ordered, 0.9), tuple(samples))
