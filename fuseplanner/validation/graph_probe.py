"""Measure the graph execution context's launch terms (`fuseplanner.cost.execution`) on the local GPU.

Every figure is a per-launch spacing inside a CUDA graph captured on one stream (so its kernels are
serialized, each depending on the one before, as in a model): a graph of ``n`` launches and one of
``2n`` are replayed with CUDA events around each replay (`fuseplanner.validation.timing.time_kernel`,
warm L2), and the spacing is ``(t_2n - t_n) / n``, which cancels what a replay costs once.

- ``graph_launch_interval_s``: the spacing of empty kernels;
- ``graph_kernel_tail_s``: graphs of spin kernels of a few body lengths, body = the kernel's isolated
  warm time minus an empty kernel's (`isolated time - launch floor`, the cost model's body); the tail
  is the median of spacing - body over the bodies whose spacing is above the interval (a shorter body
  waits for the next launch); a free line spacing = slope x body + intercept is reported beside it;
- ``opaque_op_floor_s``: the median over op types of the spacing of small operator-library ops;
- ``reduce_op_floor_s``: the same over the reductions among them (`core.kinds.REDUCE_OP_TYPES`);
- ``graph_replay_s``: what one replay costs once, timed as a model's replay is timed (CUDA events around
  the host's launch, no GPU-side wait before it: `run.device.bench`): the median replay of a graph of
  `REPLAY_KERNELS` empty kernels less that many launch intervals.

The fitting and the notes are plain functions on timings (tested on CPU); `measure` is the GPU part.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fuseplanner.core.errors import DeviceError
from fuseplanner.core.kinds import REDUCE_OP_TYPES
from fuseplanner.validation.timing import capture_graph, graph_spacing, replay_median, time_kernel

#: Launches per graph (the second graph has twice as many), replays timed per graph.
KERNELS = 200
REPLAYS = 30
#: Empty kernels in the graph whose replay gives the once-per-replay cost (few: the intervals it
#: subtracts carry their own error).
REPLAY_KERNELS = 10
#: Spin-kernel body lengths aimed at, microseconds.
BODIES_US = (2.0, 5.0, 10.0)
#: A spacing within this fraction above the interval counts as waiting for the next launch.
FLOOR_MARGIN = 0.05
#: Shape of the tensors the opaque-op probe runs on (small: the launch, not the data, dominates).
OPAQUE_SHAPE = (1, 64, 14, 14)

_SOURCE = r"""
extern "C" __global__ void gp_empty() {}
extern "C" __global__ void gp_spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
}
"""


@dataclass(frozen=True)
class LibraryOp:
    """One small operator-library op, its arrays bound: `launch()` enqueues it on the current stream and
    writes `output`."""

    name: str
    launch: Callable[[], Any]
    output: Any


@dataclass(frozen=True)
class TailFit:
    """The tail chosen from (body, spacing) points: the median of spacing - body over the `used`
    points above the interval floor, and a free least-squares line (None with one body)."""

    tail_s: float
    used: int
    dropped: int
    slope: float | None
    intercept_s: float | None


@dataclass(frozen=True)
class GraphProbe:
    """The graph context's launch terms measured on one GPU (seconds), with what they came from."""

    launch_interval_s: float
    kernel_tail_s: float
    opaque_op_floor_s: float
    kernels: int
    replays: int
    bodies_s: tuple[float, ...]
    body_spacings_s: tuple[float, ...]
    tail_fit: TailFit
    opaque_ops_s: tuple[tuple[str, float], ...]
    replay_s: float | None = None

    @property
    def reduce_op_floor_s(self) -> float | None:
        return reduce_floor(self.opaque_ops_s)

    def measured(self) -> dict[str, float]:
        """The measured values keyed by GpuSpec field (the reduction floor when a reduction was timed)."""
        out = {"graph_launch_interval_s": self.launch_interval_s, "graph_kernel_tail_s": self.kernel_tail_s,
               "opaque_op_floor_s": self.opaque_op_floor_s}
        if self.reduce_op_floor_s is not None:
            out["reduce_op_floor_s"] = self.reduce_op_floor_s
        if self.replay_s is not None:
            out["graph_replay_s"] = self.replay_s
        return out

    def notes(self) -> dict[str, str]:
        """One source note per measured field (how it was measured)."""
        return graph_notes(self)


# ---- pure: spacings, the tail fit, the chosen values, the notes ----------------------------------------


def fit_tail(bodies_s: Sequence[float], spacings_s: Sequence[float], interval_s: float) -> TailFit:
    """The graph kernel tail from spin-kernel bodies and their graph spacings (module docstring)."""
    if len(bodies_s) != len(spacings_s) or not bodies_s:
        raise ValueError("give one spacing per body, at least one")
    kept = [(b, s) for b, s in zip(bodies_s, spacings_s, strict=True) if s > interval_s * (1 + FLOOR_MARGIN)]
    if not kept:
        raise DeviceError(f"graph probe: every spin body ran at the launch interval ({interval_s * 1e6:.2f} us): "
                          "no kernel tail to measure; the bodies are too short for this GPU")
    tail = statistics.median(s - b for b, s in kept)
    if not tail > 0:
        raise DeviceError(f"graph probe: the kernel tail came out {tail * 1e6:.2f} us (a graph kernel took less "
                          "than its isolated body): the spin timings are inconsistent; rerun calibrate")
    slope = intercept = None
    xs = [b for b, _ in kept]
    if len(set(xs)) >= 2:
        slope, intercept = _line(xs, [s for _, s in kept])
    return TailFit(tail, len(kept), len(bodies_s) - len(kept), slope, intercept)


def _line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares slope and intercept of ys against xs (at least two distinct xs)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return slope, my - slope * mx


def opaque_floor(per_op_s: Sequence[tuple[str, float]]) -> float:
    """The opaque-operator floor: the median over op types of their graph spacings."""
    if not per_op_s:
        raise ValueError("no library op was measured")
    return statistics.median(v for _, v in per_op_s)


def reduce_floor(per_op_s: Sequence[tuple[str, float]]) -> float | None:
    """The reduction floor: the median graph spacing of the reductions measured (None: none was)."""
    spacings = [v for name, v in per_op_s if name in REDUCE_OP_TYPES]
    return statistics.median(spacings) if spacings else None


def summarize(interval_s: float, bodies_s: Sequence[float], spacings_s: Sequence[float],
              per_op_s: Sequence[tuple[str, float]], kernels: int = KERNELS, replays: int = REPLAYS,
              replay_median_s: float | None = None) -> GraphProbe:  # fmt: skip
    """A `GraphProbe` from the measured spacings: the tail fitted, the opaque floor chosen, and with
    `replay_median_s` (the median replay of `REPLAY_KERNELS` empty kernels, `replay_time`) the
    once-per-replay cost (None, not measured, where the replay took no longer than its intervals)."""
    fit = fit_tail(bodies_s, spacings_s, interval_s)
    once = None if replay_median_s is None else replay_median_s - REPLAY_KERNELS * interval_s
    if once is not None and once <= 0:
        once = None
    return GraphProbe(interval_s, fit.tail_s, opaque_floor(per_op_s), kernels, replays, tuple(bodies_s),
                      tuple(spacings_s), fit, tuple(per_op_s), once)  # fmt: skip


def graph_notes(p: GraphProbe) -> dict[str, str]:
    """The one-line method note of each measured graph field."""
    us = 1e6
    head = f"fuseplanner calibrate: CUDA graphs of {p.kernels} and {2 * p.kernels} launches on one stream"
    tail = f"{head}, spin kernels of bodies {', '.join(f'{b * us:.2f}' for b in p.bodies_s)} us (isolated warm "
    tail += f"time - empty kernel's) spaced {', '.join(f'{s * us:.2f}' for s in p.body_spacings_s)} us: "
    tail += f"median spacing - body over {p.tail_fit.used} bodies above the interval"
    if p.tail_fit.slope is not None:
        tail += f"; free fit spacing = {p.tail_fit.slope:.3f} x body + {p.tail_fit.intercept_s * us:.2f} us"
    ops = ", ".join(f"{name} {v * us:.2f} us" for name, v in p.opaque_ops_s)
    reduce = {} if p.reduce_op_floor_s is None else {
        "reduce_op_floor_s": f"{head}, the same ops: median over the reductions among them"}
    replay = {} if p.replay_s is None else {"graph_replay_s": (
        f"fuseplanner calibrate: a CUDA graph of {REPLAY_KERNELS} empty kernels, CUDA events around the host's "
        f"launch as a model's replay is timed: median of {p.replays} replays - {REPLAY_KERNELS} launch intervals")}
    return reduce | replay | {
        "graph_launch_interval_s": f"{head}, empty kernels: (t_2n - t_n) / n, median of {p.replays} replays",
        "graph_kernel_tail_s": tail,
        "opaque_op_floor_s": f"{head}, operator-library ops on a {'x'.join(map(str, OPAQUE_SHAPE))} float32 "
        f"tensor ({ops}): median over op types",
    }


# ---- GPU ---------------------------------------------------------------------------------------------


def cupy_ops(cp) -> list[LibraryOp]:
    """Small CuPy elementwise and reduction ops (the calls the executor's Add, Relu and
    GlobalAveragePool make), for callers that do not pass the executor's own."""
    x = cp.random.random(OPAQUE_SHAPE, dtype=cp.float32)
    y, out = cp.empty_like(x), cp.empty_like(x)
    pooled = cp.empty(OPAQUE_SHAPE[:2] + (1, 1), dtype=cp.float32)
    return [LibraryOp("Add", lambda: cp.add(x, x, out=y), y),
            LibraryOp("Relu", lambda: cp.maximum(x, 0, out=out), out),
            LibraryOp("GlobalAveragePool", lambda: cp.copyto(pooled, x.mean(axis=(2, 3), keepdims=True)), pooled)]


def _spin_bodies(cp, mod, stream, n: int, replays: int) -> tuple[list[float], list[float]]:
    """(body, graph spacing) of a spin kernel per `BODIES_US` target."""
    empty, spin = mod.get_function("gp_empty"), mod.get_function("gp_spin")
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.runtime.getDevice())
    khz = int(props.get("clockRate") or 1_500_000)  # only aims the bodies: each is measured
    with stream:
        warm = time_kernel(lambda: empty((1,), (1,), ()), warmup=20, repeat=100, flush_l2=False).median_s
    bodies, spacings = [], []
    for us in BODIES_US:
        cycles = cp.int64(int(us * khz / 1e3))
        launch = lambda c=cycles: spin((1,), (1,), (c,))  # noqa: E731
        with stream:
            alone = time_kernel(launch, warmup=10, repeat=50, flush_l2=False).median_s
        bodies.append(alone - warm)
        spacings.append(graph_spacing(stream, launch, n, replays))
    return bodies, spacings


def replay_time(stream, empty, replays: int) -> float:
    """Median seconds of a replay of a graph of `REPLAY_KERNELS` launches of `empty`, CUDA events around
    the host's launch (no GPU-side wait before it), after three untimed replays."""
    graph = capture_graph(stream, lambda: empty((1,), (1,), ()), REPLAY_KERNELS)
    return replay_median(stream, graph, replays)


def measure(cp, library_ops: Callable[[Any], Sequence[LibraryOp]] | None = None, n: int = KERNELS,
            replays: int = REPLAYS) -> GraphProbe:
    """Measure the graph terms on the current device (module docstring). `library_ops(cp)` builds the
    operator-library ops to time (default `cupy_ops`); their temporaries come from a private memory
    pool, as in the executor's capture."""
    mod = cp.RawModule(code=_SOURCE, options=("-std=c++17",))
    stream = cp.cuda.Stream(non_blocking=True)
    empty = mod.get_function("gp_empty")
    interval = graph_spacing(stream, lambda: empty((1,), (1,), ()), n, replays)
    bodies, spacings = _spin_bodies(cp, mod, stream, n, replays)
    pool = cp.cuda.MemoryPool()
    per_op = []
    with cp.cuda.using_allocator(pool.malloc):
        for op in (library_ops or cupy_ops)(cp):
            per_op.append((op.name, graph_spacing(stream, op.launch, n, replays)))
    return summarize(interval, bodies, spacings, per_op, n, replays, replay_time(stream, empty, replays))
