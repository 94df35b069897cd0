"""The GPU side of a compiled model: CUDA-graph capture, calls, per-step timing and replay benchmarks.

Capture: every allocation of binding (arena, weights) and of op-library temporaries comes from a
private `cupy.cuda.MemoryPool` that nothing else allocates from afterwards, so the addresses the graph
holds stay owned by the model. One warm-up inference (kernel compilation, cuBLAS setup, the pool's
blocks) precedes the captured one. After capture nothing is allocated from that pool: output copies
come from CuPy's default allocator.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from fuseplanner.core.errors import DeviceError


@dataclass(frozen=True)
class BenchRecord:
    """End-to-end latency of CUDA-graph replays, CUDA events around each replay. `mode` "warm-L2":
    replays back to back; "cold-L2": a buffer of twice the L2 size is written between replays (outside
    the timed region). `launch_host_s`: median host time of one `graph.launch` call; `call_host_s`:
    median host time of one whole call `model(inputs)` on CuPy inputs (input checks and copies, the
    launch, output copies; no synchronisation), so `overhead_s` is what a call adds to the launch;
    `bound_host_s`: median host time of `model.launch()`, the zero-copy path over the model's own input
    and output buffers (`bound_overhead_s` is what it adds to the bare launch)."""

    model: str
    mode: str
    replays: int
    median_s: float
    p10_s: float
    p90_s: float
    launch_host_s: float
    call_host_s: float
    bound_host_s: float = 0.0

    @property
    def overhead_s(self) -> float:
        """Host time of a whole call beyond the graph launch."""
        return self.call_host_s - self.launch_host_s

    @property
    def bound_overhead_s(self) -> float:
        """Host time of `model.launch()` beyond the bare graph launch."""
        return self.bound_host_s - self.launch_host_s


@dataclass(frozen=True)
class StepTime:
    """One step's median time (`time_nodes`: stream mode or graph mode)."""

    label: str
    kind: str
    op_type: str
    seconds: float


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _capture(cp, bound, stream):
    stream.begin_capture()
    try:
        for step, fn in bound.runners:
            if fn is None:
                continue
            try:
                fn()
            except Exception as exc:
                raise DeviceError(f"capturing the inference as a CUDA graph failed at step {step.label!r} "
                                  f"({_first_line(exc)}): try run_stream() to debug it") from exc  # fmt: skip
    finally:
        graph = stream.end_capture()
    return graph


def compile_gpu(program, plan, ops_lib, model_cls):
    """Bind on the GPU, warm up once, capture one inference as a CUDA graph."""
    from fuseplanner.kernels import require_device
    from fuseplanner.run.runtime import bind

    cp = require_device()
    pool = cp.cuda.MemoryPool()
    stream = cp.cuda.Stream(non_blocking=True)
    with cp.cuda.using_allocator(pool.malloc), stream:
        bound = bind(program, cp, ops_lib, gpu=True)
        bound.run()
        stream.synchronize()
        graph = _capture(cp, bound, stream)
    stream.synchronize()
    model = model_cls(program, plan, bound, cp, gpu=True)
    model._graph, model._stream, model._pool = graph, stream, pool
    model._io = FastIO(cp, model._in_plan, model._out_plan)
    return model


@dataclass(frozen=True)
class _Copy:
    """One input or output copied with a raw stream-ordered memcpy: the arena view, the caller-side dtype
    and whether the two agree (otherwise the call converts through CuPy)."""

    name: str
    view: object
    dtype: np.dtype
    raw: bool


class FastIO:
    """What a GPU call copies, worked out once, and two reusable events that order the model's stream
    after the caller's (inputs ready) and the caller's after the model's (outputs written)."""

    def __init__(self, cp, in_plan, out_plan) -> None:
        self.ins = tuple(_Copy(n, v, want, v.dtype == want and v.flags.c_contiguous) for n, _, want, v in in_plan)
        self.outs = tuple(_Copy(n, src, want, src.dtype == want and src.flags.c_contiguous)
                          for n, src, want in out_plan)  # fmt: skip
        self.ready = cp.cuda.Event(disable_timing=True)
        self.done = cp.cuda.Event(disable_timing=True)


def _copy_in(cp, c: _Copy, a, host: bool, stream) -> None:
    rt = cp.cuda.runtime
    if c.raw and host and a.flags.c_contiguous:
        rt.memcpyAsync(c.view.data.ptr, a.ctypes.data, a.nbytes, rt.memcpyHostToDevice, stream.ptr)
    elif c.raw and not host and a.flags.c_contiguous:
        rt.memcpyAsync(c.view.data.ptr, a.data.ptr, a.nbytes, rt.memcpyDeviceToDevice, stream.ptr)
    else:
        with stream:
            c.view[...] = cp.asarray(a)


def _copy_out(cp, c: _Copy, host: bool, stream):
    rt, src = cp.cuda.runtime, c.view
    if not c.raw:
        with stream:
            out = src.astype(c.dtype, copy=True)
            return out.get(stream=stream) if host else out
    if host:
        out = np.empty(src.shape, c.dtype)
        rt.memcpyAsync(out.ctypes.data, src.data.ptr, src.nbytes, rt.memcpyDeviceToHost, stream.ptr)
        return out
    out = cp.empty(src.shape, c.dtype)  # on the caller's stream, which waits for `done` before using it
    rt.memcpyAsync(out.data.ptr, src.data.ptr, src.nbytes, rt.memcpyDeviceToDevice, stream.ptr)
    return out


def call(model, inputs: dict, graph: bool = True) -> dict:
    """Copy inputs in, replay the graph (or run step by step), return copies of the outputs: raw
    stream-ordered copies on the model's stream, ordered after the caller's stream by one reusable event
    and before it by another (host inputs: the call returns once the outputs are on the host)."""
    cp, io, stream = model._xp, model._io, model._stream
    host = all(type(v) is np.ndarray for v in inputs.values())
    caller = cp.cuda.get_current_stream()
    io.ready.record(caller)
    stream.wait_event(io.ready)
    for c in io.ins:
        _copy_in(cp, c, inputs[c.name], host, stream)
    if graph:
        model._graph.launch(stream)
    else:
        with stream:
            model._bound.run()
    out = {c.name: _copy_out(cp, c, host, stream) for c in io.outs}
    if host:
        stream.synchronize()
    else:
        io.done.record(stream)
        caller.wait_event(io.done)
    return out


def launch(model, stream=None) -> None:
    """Replay the graph on `stream` (default: the current CuPy stream) over the model's own input and
    output buffers: no copies, no checks."""
    model._graph.launch(stream if stream is not None else model._xp.cuda.get_current_stream())


def _random_inputs(model, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {s.name: rng.standard_normal(s.shape).astype(model.program.model_dtypes.get(s.name, s.dtype))
            for s in model.program.inputs}  # fmt: skip


#: How a step is timed: "stream" (CUDA events around the step in a stream-mode inference: host launch
#: time included when the host is slower than the kernel) or "graph" (the step alone captured `GRAPH_COPIES`
#: and 2 x `GRAPH_COPIES` times back to back in two CUDA graphs, replayed: its spacing as a kernel among
#: graph kernels, `_graph_times`).
STEP_MODES = ("stream", "graph")
GRAPH_COPIES = 10


def time_nodes(model, inputs=None, repeats: int = 20, mode: str = "stream") -> list[StepTime]:
    """Median time of every non-view step over `repeats` inferences (`mode`: see `STEP_MODES`)."""
    if not model.gpu:
        raise DeviceError("time_nodes needs a model compiled for the GPU (device='gpu')")
    if mode not in STEP_MODES:
        raise DeviceError(f"unknown step timing mode {mode!r}: use one of {', '.join(STEP_MODES)}")
    inputs = model._check(inputs if inputs is not None else _random_inputs(model))
    runners = [(s, fn) for s, fn in model._bound.runners if fn is not None]
    with model._stream:
        model._load(inputs)
        model._bound.run()
        seconds = (_stream_times if mode == "stream" else _graph_times)(model, runners, repeats)
    from fuseplanner.run.compiled import _step_info

    infos = [_step_info(s) for s, _ in runners]
    return [StepTime(info.label, info.kind, info.op_type, t) for info, t in zip(infos, seconds, strict=True)]


def _stream_times(model, runners, repeats: int) -> list[float]:
    cp, stream = model._xp, model._stream
    samples: list[list[float]] = [[] for _ in runners]
    for _ in range(repeats):
        events = [cp.cuda.Event() for _ in range(len(runners) + 1)]
        events[0].record(stream)
        for i, (_, fn) in enumerate(runners):
            fn()
            events[i + 1].record(stream)
        events[-1].synchronize()
        for i in range(len(runners)):
            samples[i].append(cp.cuda.get_elapsed_time(events[i], events[i + 1]) * 1e-3)
    return [float(np.median(t)) for t in samples]


def _graph_times(model, runners, repeats: int) -> list[float]:
    """Each step's spacing among graph kernels (`validation.timing.graph_spacing`): the step captured
    `GRAPH_COPIES` and twice as many times back to back in two CUDA graphs (arrays from the model's
    pool, as in the model's own capture), each replayed `repeats` times behind a GPU-side wait, and
    (t_2n - t_n) / n of the medians, so that what a replay costs once (the host submitting it, the
    graph's start) is in no step's time. A step that writes over its own input computes on its
    previous output: the time, not the values, counts."""
    from fuseplanner.validation.timing import graph_spacing

    cp, stream = model._xp, model._stream
    with cp.cuda.using_allocator(model._pool.malloc):
        return [graph_spacing(stream, fn, GRAPH_COPIES, repeats) for _, fn in runners]


def bench(model, replays: int = 200, cold_l2: bool = False) -> BenchRecord:
    """Median/p10/p90 of `replays` CUDA-graph replays on random inputs (see `BenchRecord`)."""
    if not model.gpu:
        raise DeviceError("bench needs a model compiled for the GPU (device='gpu')")
    cp = model._xp
    stream = model._stream
    flush = None
    if cold_l2:
        l2 = int(cp.cuda.Device().attributes["L2CacheSize"])
        flush = cp.empty(2 * l2 // 4, dtype=cp.float32)
    times, host = [], []
    start, end = cp.cuda.Event(), cp.cuda.Event()
    with stream:
        model._load(model._check(_random_inputs(model)))
        for _ in range(10):
            model._graph.launch(stream)
        for i in range(replays):
            if flush is not None:
                flush.fill(float(i))
            start.record(stream)
            t0 = time.perf_counter()
            model._graph.launch(stream)
            host.append(time.perf_counter() - t0)
            end.record(stream)
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end) * 1e-3)
    t = np.asarray(times)
    mode = "cold-L2 (2x L2 buffer written between replays)" if cold_l2 else "warm-L2"
    return BenchRecord(model.program.name, mode, replays, float(np.median(t)), float(np.percentile(t, 10)),
                       float(np.percentile(t, 90)), float(np.median(host)), _call_host(model, min(replays, 100)),
                       _bound_host(model, min(replays, 100)))  # fmt: skip


def _host_median(run, drain, calls: int) -> float:
    """Median host time of `calls` calls of `run`, `drain` (waiting for the GPU) between calls outside
    the timed region."""
    samples = []
    for _ in range(calls):
        t0 = time.perf_counter()
        run()
        samples.append(time.perf_counter() - t0)
        drain()
    return float(np.median(samples))


def _bound_host(model, calls: int) -> float:
    """Median host time of `calls` `model.launch()` calls."""
    return _host_median(model.launch, model._xp.cuda.get_current_stream().synchronize, calls)


def _call_host(model, calls: int) -> float:
    """Median host time of `calls` whole calls on device-resident inputs (after one untimed call)."""
    cp = model._xp
    dev = {k: cp.asarray(v) for k, v in _random_inputs(model, 1).items()}
    model(dev)
    cp.cuda.get_current_stream().synchronize()

    def drain() -> None:
        model._stream.synchronize()
        cp.cuda.get_current_stream().synchronize()

    return _host_median(lambda: model(dev), drain, calls)
