"""Kernel timing with CUDA events: warm-up, many repeats, medians; L2 flushed (cold) or warm.

CuPy is imported lazily (through `fuseplanner.kernels.require_device`).
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fuseplanner.core.errors import DeviceError
from fuseplanner.kernels._build import require_device

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


# ---- spacing in a CUDA graph --------------------------------------------------------------------------


def spacing(t_n: float, t_2n: float, n: int) -> float:
    """Seconds per launch from replay times of graphs of `n` and `2n` launches: what a replay costs once
    (the graph's start, the events) cancels."""
    if n < 1:
        raise ValueError("n must be at least 1")
    per = (t_2n - t_n) / n
    if not per > 0:
        raise DeviceError(f"a CUDA graph of {2 * n} launches replayed no slower than one of {n} "
                          f"({t_2n * 1e6:.2f} vs {t_n * 1e6:.2f} us): the timings are noise; measure again")  # fmt: skip
    return per


def capture_graph(stream, launch: Callable[[], object], n: int):
    """A CUDA graph of `n` calls of `launch` on `stream` (each depending on the one before), warmed up
    once outside the capture. Arrays the calls allocate come from the caller's allocator."""
    with stream:
        launch()
        stream.synchronize()
        stream.begin_capture()
        try:
            for _ in range(n):
                launch()
        finally:
            graph = stream.end_capture()
    return graph


def graph_spacing(stream, launch: Callable[[], object], n: int, replays: int) -> float:
    """Seconds per call of `launch` among back-to-back graph kernels: graphs of `n` and `2n` calls, each
    replayed `replays` times (`time_kernel`, warm L2, the host's launch outside the timed region), then
    `spacing` of the two medians."""
    times = []
    for k in (n, 2 * n):
        graph = capture_graph(stream, launch, k)
        with stream:
            times.append(time_kernel(lambda g=graph: g.launch(stream), warmup=3, repeat=replays, flush_l2=False).median_s)
        del graph
    return spacing(times[0], times[1], n)


def replay_median(stream, graph, replays: int, warmup: int = 3) -> float:
    """Median seconds of `replays` replays of `graph` on `stream`, each between two CUDA events recorded
    around the host's launch as a model's replay is timed (`run.device.bench`): no GPU-side wait before
    it, so what the host takes to submit the graph is inside."""
    cp = require_device()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    times = []
    with stream:
        for i in range(warmup + replays):
            start.record(stream)
            graph.launch(stream)
            end.record(stream)
            end.synchronize()
            if i >= warmup:
                times.append(cp.cuda.get_elapsed_time(start, end) * 1e-3)
    return statistics.median(times)


# ---- block placement ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """Where and when the blocks of one launch ran (`probe_placement`): SMs used, the most blocks
    resident on one SM at once, the rounds the blocks started in, and the launch's span."""

    blocks: int
    sms: int
    max_per_sm: int
    rounds: int
    first_round_blocks: int
    first_round_sms: int
    span_ns: float

    def as_dict(self) -> dict[str, float | int]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def placement_summary(records: np.ndarray, spin_ns: float) -> Placement:
    """Summary of per-block (SM, start ns, end ns) rows. A round is the blocks that start within
    `spin_ns` / 2 of the first start of the round (each block runs at least `spin_ns`, so a block that
    starts later waited for a slot); blocks of one SM overlap when their [start, end) intervals do."""
    rec = np.asarray(records, dtype=np.float64).reshape(-1, 3)
    if not len(rec):
        raise ValueError("no blocks recorded")
    sm, start, end = rec[:, 0].astype(np.int64), rec[:, 1], rec[:, 2]
    most = 0
    for s in np.unique(sm):
        mine = sm == s
        # +1 at each start, -1 at each end; an end sorts before a start at the same time
        times = np.concatenate([start[mine], end[mine]])
        steps = np.concatenate([np.ones(mine.sum()), -np.ones(mine.sum())])
        order = np.lexsort((steps, times))
        most = max(most, int(np.cumsum(steps[order]).max()))
    order = np.argsort(start, kind="stable")
    rounds, first, round_of = 0, None, np.empty(len(rec), dtype=np.int64)
    for i in order:
        if first is None or start[i] > first + spin_ns / 2:
            rounds, first = rounds + 1, start[i]
        round_of[i] = rounds
    r1 = round_of == 1
    return Placement(blocks=len(rec), sms=len(np.unique(sm)), max_per_sm=most, rounds=rounds,
                     first_round_blocks=int(r1.sum()), first_round_sms=len(np.unique(sm[r1])),
                     span_ns=float(end.max() - start.min()))  # fmt: skip


def probe_placement(blocks: int, threads: int, smem_bytes: int, cluster: int = 1, spin_us: float = 200.0) -> Placement:
    """Launch kernels/probe_placement.cu with `blocks` blocks of `threads` threads, each holding
    `smem_bytes` of dynamic shared memory, in thread-block clusters of `cluster` (1: none); every
    block spins `spin_us`. Returns where and when the blocks ran (after one untimed warm-up launch)."""
    from fuseplanner.kernels._build import compile_kernel, launch

    if blocks % cluster:
        raise ValueError(f"{blocks} blocks do not split into clusters of {cluster}")
    cp = require_device()
    kernel = compile_kernel("probe_placement.cu", "probe_placement", {"THREADS": threads, "KS": cluster})
    out = cp.zeros(3 * blocks, dtype=cp.uint64)
    spin = np.uint64(spin_us * 1e3)
    for _ in range(2):
        launch(kernel, (blocks, 1, 1), threads, smem_bytes, (out, spin))
    cp.cuda.get_current_stream().synchronize()
    return placement_summary(cp.asnumpy(out).reshape(-1, 3), spin_us * 1e3)
