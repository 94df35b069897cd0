"""Measure the local GPU's bandwidths, launch overhead and arithmetic throughput, and write a GPU spec
TOML whose ``[measured]`` table overrides the datasheet values in the cost model.

Each figure is a median over repeated CUDA-event-timed runs:

- ``dram_bw``: a device-to-device copy of a buffer many times larger than L2 (bytes read + written
  per second, the convention of the datasheet figure and of BACKGROUND section 4);
- ``l2_bw``: repeated L2-only reads (``ld.global.cg``, bypassing L1) of a buffer a quarter of L2;
- ``launch_overhead``: an empty kernel timed alone between two events after an L2 flush (the floor
  under any single-kernel time measured the way `fuseplanner.validation.validate` times cold runs); the warm
  figure and the back-to-back launch interval of many empty kernels are reported beside it;
- ``fp32_flops`` / ``fp16_flops``: independent FMA chains (fp32 ``fmaf``, fp16 ``__hfma2``), no tensor
  cores, enough blocks to fill every SM;
- the graph execution context's launch interval, kernel tail and opaque-operator floor: CUDA graphs of
  back-to-back launches (`fuseplanner.validation.graph_probe`).

CuPy is imported lazily; without a usable device the functions raise `DeviceError`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fuseplanner.core.errors import DeviceError
from fuseplanner.validation.graph_probe import GraphProbe, LibraryOp

#: Our measurement name -> the GpuSpec field it overrides (see `fuseplanner.hw.spec`).
SPEC_FIELDS = {
    "dram_bw_bytes_per_s": "dram_bw_bytes_per_s",
    "l2_bw_bytes_per_s": "l2_bw_bytes_per_s",
    "launch_overhead_s": "launch_overhead_s",
    "fp32_flops": "fp32_flops",
    "fp16_flops": "fp16_flops",
}

_SOURCE = r"""
#include <cuda_fp16.h>
extern "C" __global__ void fp_empty() {}

extern "C" __global__ void fp_l2_read(const float4* __restrict__ buf, long long n4, int reps, float* out) {
    float acc = 0.f;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (int r = 0; r < reps; ++r) {
        for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
            float4 v = __ldcg(buf + i);
            acc += v.x + v.y + v.z + v.w;
        }
    }
    if (acc == 1.2345678e30f) out[0] = acc;   // never true for finite data: keeps the loads alive
}

#define CHAINS 8
extern "C" __global__ void fp_fma32(const float* __restrict__ seed, int iters, float* out) {
    float a = seed[0], b = seed[1];
    float x[CHAINS];
    #pragma unroll
    for (int c = 0; c < CHAINS; ++c) x[c] = seed[2] + c * 1e-3f + threadIdx.x * 1e-7f;
    for (int i = 0; i < iters; ++i) {
        #pragma unroll
        for (int c = 0; c < CHAINS; ++c) x[c] = fmaf(x[c], a, b);
    }
    float s = 0.f;
    #pragma unroll
    for (int c = 0; c < CHAINS; ++c) s += x[c];
    if (s == 1.2345678e30f) out[0] = s;
}

extern "C" __global__ void fp_fma16(const float* __restrict__ seed, int iters, float* out) {
    __half2 a = __float2half2_rn(seed[0]), b = __float2half2_rn(seed[1]);
    __half2 x[CHAINS];
    #pragma unroll
    for (int c = 0; c < CHAINS; ++c) x[c] = __float2half2_rn(seed[2] + c * 1e-3f);
    for (int i = 0; i < iters; ++i) {
        #pragma unroll
        for (int c = 0; c < CHAINS; ++c) x[c] = __hfma2(x[c], a, b);
    }
    float s = 0.f;
    #pragma unroll
    for (int c = 0; c < CHAINS; ++c) s += __low2float(x[c]) + __high2float(x[c]);
    if (s == 1.2345678e30f) out[0] = s;
}
"""
_CHAINS = 8


@dataclass(frozen=True)
class Calibration:
    """Measured figures of one GPU (SI units: bytes/s, s, FLOP/s)."""

    device_name: str
    sm_count: int
    l2_bytes: int
    dram_bw_bytes_per_s: float
    l2_bw_bytes_per_s: float
    launch_overhead_s: float
    launch_warm_s: float
    launch_interval_s: float
    fp32_flops: float
    fp16_flops: float
    graph: GraphProbe | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def measured(self) -> dict[str, float]:
        """The values that override a GPU spec, keyed by spec field name (the graph terms when probed)."""
        d = self.as_dict()
        out = {field: float(d[name]) for name, field in SPEC_FIELDS.items()}
        return {**out, **(self.graph.measured() if self.graph is not None else {})}


def _module():
    from fuseplanner.kernels._build import require_device

    cp = require_device()
    return cp, cp.RawModule(code=_SOURCE, options=("-std=c++17",))


def _time(cp, fn: Callable[[], None], repeat: int, warmup: int = 3, flush_l2: bool = False) -> float:
    """Median seconds of `fn` between two CUDA events (`fuseplanner.validation.timing.time_kernel`)."""
    from fuseplanner.validation.timing import time_kernel

    return time_kernel(fn, warmup=warmup, repeat=repeat, flush_l2=flush_l2).median_s


def measure_dram_bw(cp, l2_bytes: int, repeat: int = 20) -> float:
    """Bytes read + written per second by a device-to-device copy of max(1 GiB, 16 x L2)."""
    n = max(1 << 30, 16 * l2_bytes)
    src = cp.ones(n // 4, dtype=cp.float32)
    dst = cp.empty_like(src)
    t = _time(cp, lambda: dst.data.copy_from_device_async(src.data, n), repeat)
    return 2 * n / t


def measure_l2_bw(cp, mod, l2_bytes: int, sm_count: int, repeat: int = 20) -> float:
    """Bytes per second of L2-resident reads (a buffer of L2/4 read 50 times per run)."""
    n = (l2_bytes // 4) // 16 * 16
    buf = cp.random.random(n // 4, dtype=cp.float32)
    out = cp.zeros(1, dtype=cp.float32)
    kern = mod.get_function("fp_l2_read")
    reps, blocks, threads = 50, sm_count * 4, 512
    t = _time(cp, lambda: kern((blocks,), (threads,), (buf, cp.int64(n // 16), cp.int32(reps), out)), repeat)
    return reps * n / t


def measure_launch(cp, mod, repeat: int = 200, burst: int = 1000) -> tuple[float, float, float]:
    """Empty kernel alone between two events with L2 flushed before (as validation times cold runs)
    and without, and the back-to-back interval of `burst` empty launches; seconds."""
    kern = mod.get_function("fp_empty")

    def one() -> None:
        kern((1,), (1,), ())

    def many() -> None:
        for _ in range(burst):
            kern((1,), (1,), ())

    cold = _time(cp, one, repeat, warmup=20, flush_l2=True)
    warm = _time(cp, one, repeat, warmup=20)
    return cold, warm, _time(cp, many, 5, warmup=1) / burst


def measure_flops(cp, mod, sm_count: int, half: bool, repeat: int = 10) -> float:
    """Non-tensor-core FMA throughput in FLOP/s (an FMA is 2 FLOPs; a half2 FMA is 4)."""
    seed = cp.asarray([0.999, 1e-4, 0.5], dtype=cp.float32)
    out = cp.zeros(1, dtype=cp.float32)
    kern = mod.get_function("fp_fma16" if half else "fp_fma32")
    blocks, threads, iters = sm_count * 16, 256, 4096
    t = _time(cp, lambda: kern((blocks,), (threads,), (seed, cp.int32(iters), out)), repeat)
    per_fma = 4 if half else 2
    return blocks * threads * iters * _CHAINS * per_fma / t


def calibrate(device: int = 0, library_ops: Callable[[Any], Sequence[LibraryOp]] | None = None) -> Calibration:
    """Measure the GPU `device`; raises DeviceError without a usable CUDA device. `library_ops(cp)`
    builds the operator-library ops whose graph spacing gives the opaque-operator floor
    (`fuseplanner.validation.graph_probe.measure`; default: plain CuPy calls)."""
    from fuseplanner.validation import graph_probe

    cp, mod = _module()
    try:
        with cp.cuda.Device(device):
            props = cp.cuda.runtime.getDeviceProperties(device)
            name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
            sms, l2 = int(props["multiProcessorCount"]), int(props["l2CacheSize"])
            cold, warm, interval = measure_launch(cp, mod)
            return Calibration(
                device_name=name,
                sm_count=sms,
                l2_bytes=l2,
                dram_bw_bytes_per_s=measure_dram_bw(cp, l2),
                l2_bw_bytes_per_s=measure_l2_bw(cp, mod, l2, sms),
                launch_overhead_s=cold,
                launch_warm_s=warm,
                launch_interval_s=interval,
                fp32_flops=measure_flops(cp, mod, sms, half=False),
                fp16_flops=measure_flops(cp, mod, sms, half=True),
                graph=graph_probe.measure(cp, library_ops),
            )
    except DeviceError:
        raise
    except Exception as exc:  # CUDA runtime / compile errors come as several exception types
        raise DeviceError(f"calibration failed on device {device}: {str(exc).splitlines()[0]}") from exc


# ---- TOML -------------------------------------------------------------------------------------------


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ("nan" if math.isnan(v) else ("inf" if v > 0 else "-inf"))
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def _key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else _toml_value(k)


def to_toml(base: Mapping[str, Any], measured: Mapping[str, float], notes: Mapping[str, str] | None = None) -> str:
    """A GPU spec TOML: the scalar fields of `base` at top level, then ``[measured]`` and its tables.

    None values are left out (TOML has no null); nested mappings become tables (``[fit]``,
    ``[fit.sources]``). Each measured value's note goes into the ``[sources]`` table as
    ``"measured.FIELD"``, the bundled specs' convention; a measured field leaves ``estimated``.
    """
    notes = dict(notes or {})
    device = notes.pop("device", "")
    lines = ["# GPU spec written by `fuseplanner calibrate`" + (f" on {device}" if device else "") + ":",
             "# datasheet fields as in the spec it started from; [measured] overrides them in the cost model.", ""]
    body = dict(base)
    tables = {k: dict(v) for k, v in base.items() if isinstance(v, Mapping)}
    if measured or "measured" in tables:
        body["measured"] = {**tables.get("measured", {}), **{k: float(v) for k, v in measured.items()}}
        if "estimated" in body:
            body["estimated"] = [f for f in body["estimated"] if f not in body["measured"]]
    if notes or "sources" in tables:
        body["sources"] = {**tables.get("sources", {}), **{f"measured.{k}": v for k, v in notes.items()}}
    return "\n".join(lines + _toml_table(body, ())) + "\n"


def _toml_table(table: Mapping[str, Any], path: tuple[str, ...]) -> list[str]:
    """Rows of `table`'s scalar values, then each nested mapping as a ``[path.name]`` table."""
    rows = [f"{_key(k)} = {_toml_value(v)}" for k, v in table.items() if v is not None and not isinstance(v, Mapping)]
    lines = (["", "[" + ".".join(_key(p) for p in path) + "]"] if path and rows else []) + rows
    for k, v in table.items():
        if isinstance(v, Mapping):
            lines += _toml_table(v, (*path, k))
    return lines


def measurement_notes(cal: Calibration) -> dict[str, str]:
    """One source note per measured field (how it was measured)."""
    return {
        "dram_bw_bytes_per_s": "fuseplanner calibrate: device-to-device copy >= 1 GiB, bytes read + written, "
        "median of 20 CUDA-event-timed runs",
        "l2_bw_bytes_per_s": "fuseplanner calibrate: ld.global.cg reads of an L2/4 buffer, 50 passes, median of 20",
        "launch_overhead_s": f"fuseplanner calibrate: empty kernel between two events, L2 flushed before, median "
        f"of 200 (warm {cal.launch_warm_s * 1e6:.2f} us; back-to-back launch interval {cal.launch_interval_s * 1e6:.2f} us)",
        "fp32_flops": "fuseplanner calibrate: 8 independent fmaf chains per thread, 16 blocks x 256 threads per SM",
        "fp16_flops": "fuseplanner calibrate: 8 independent __hfma2 chains per thread (no tensor cores)",
        **(cal.graph.notes() if cal.graph is not None else {}),
        "device": cal.device_name,
    }


def spec_dict(spec: Any) -> dict[str, Any]:
    """A GPU spec as a plain dict (pydantic model or mapping): the fields the spec sets, so that a
    written spec keeps following the schema's defaults instead of freezing them. A borrowed kernel fit
    stays a ``fit_from`` reference; a fit of the spec's own is kept as its ``[fit]`` table."""
    if spec is None:
        return {}
    if not hasattr(spec, "model_dump"):
        return dict(spec)
    d = dict(spec.model_dump(mode="json", exclude_unset=True))
    if spec.fit.borrowed:
        d.pop("fit", None)
        d["fit_from"] = spec.fit_from
    else:  # a fit of its own holds what a [refit] table gave the borrowed one
        d.pop("refit", None)
        d["fit"] = spec.fit.model_dump(mode="json", exclude={"borrowed"})
    return d


def with_own_fit(spec: Any, fit: Any) -> dict[str, Any]:
    """`spec` as a plain dict (`spec_dict`) whose kernel fit is `fit` (a `KernelFit`), a fit of its own:
    no ``fit_from`` and no ``[refit]`` table (a fit built from the spec's holds the refit values), no
    name (the file's stem names the written spec)."""
    d = spec_dict(spec)
    for key in ("name", "fit_from", "refit"):
        d.pop(key, None)
    if "sources" in d:  # a refit value's note moved into the fit's sources with it
        d["sources"] = {k: v for k, v in d["sources"].items() if not k.startswith("refit.")}
    d["fit"] = fit.model_dump(mode="json", exclude={"borrowed"})
    return d


def write_spec(path: str | Path, spec: Any, cal: Calibration) -> Path:
    """Write `spec` (a GpuSpec or dict, may be None) with `cal` as its ``[measured]`` table to `path`."""
    base = spec_dict(spec)
    base.pop("name", None)  # the file's stem names the calibrated spec
    if not base:
        base = {"name": cal.device_name, "sm_count": cal.sm_count, "l2_bytes": cal.l2_bytes}
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(to_toml(base, cal.measured(), measurement_notes(cal)))
    return p


# ---- using a calibration ----------------------------------------------------------------------------


def datasheet_values(spec: Any) -> dict[str, float | None]:
    """The spec's own (top-level) values of the calibrated fields, ignoring its measured overrides."""
    return {f: (None if getattr(spec, f, None) is None else float(getattr(spec, f))) for f in SPEC_FIELDS.values()}


def apply(spec: Any, cal: Calibration) -> Any:
    """A new GpuSpec like `spec` whose measured overrides are `cal`'s values (its other ones kept)."""
    return apply_measured(spec, cal.measured())


def apply_measured(spec: Any, values: Mapping[str, float]) -> Any:
    """A new GpuSpec like `spec` with `values` merged into its measured overrides; kernel parameters
    among them (`kernel_fit.PARAMS`) replace the values of its fit, unvalidated: `fuseplanner.validation.fit`
    explores values beyond the schema's bounds and clamps what it keeps."""
    from fuseplanner.hw.kernel_fit import PARAMS

    params = {k: float(v) for k, v in values.items() if k in PARAMS}
    measured = {**dict(getattr(spec, "measured", None) or {}), **{k: v for k, v in values.items() if k not in PARAMS}}
    if hasattr(spec, "model_validate"):  # rebuilt, not copied, so cached effective values are recomputed
        d = spec.model_dump(exclude={"fit"})
        refit = {k: v for k, v in d.get("refit", {}).items() if k not in params}  # the values given win
        return type(spec).model_validate({**d, "measured": measured, "refit": refit,
                                          "fit": spec.fit.model_copy(update=params)})  # fmt: skip
    from dataclasses import replace

    return replace(spec, measured={**measured, **params})
