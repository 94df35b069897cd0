"""Row kernels as CuPy RawKernels: the GPU paths of LayerNormalization and Softmax / LogSoftmax over the
trailing axes. One warp per row (8 rows per 256-thread block), everything in float32, one launch per op
instead of the generic path's chain of elementwise and reduction kernels. They compute the same
functions as `norm.layer_norm` and `norm.softmax` (tests/gpu/test_run_ops_gpu.py compares them):
LayerNorm: y = (x - mean) / sqrt(mean((x - mean)^2) + eps) * scale (+ bias);
Softmax: y = exp(x - max) / sum(exp(x - max)); LogSoftmax: y = x - max - log(sum(exp(x - max))).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from fuseplanner.run.ops._gemm import FLOAT_TYPES, type_name

_COMMON = r"""
__device__ __forceinline__ float ld(const float* p, long long i) { return p[i]; }
__device__ __forceinline__ float ld(const unsigned short* p, long long i) {
    float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(p[i])); return f;
}
__device__ __forceinline__ void st(float* p, long long i, float v) { p[i] = v; }
__device__ __forceinline__ void st(unsigned short* p, long long i, float v) {
    unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v)); p[i] = h;
}
__device__ __forceinline__ float warp_sum(float v) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
#define ROW_SETUP \
    const long long row = (long long)blockIdx.x * 8 + threadIdx.x / 32; \
    const int lane = threadIdx.x % 32; \
    if (row >= ROWS) return; \
    const long long base = row * COLS;
"""

_LAYERNORM = r"""
extern "C" __global__ void __launch_bounds__(256) fp_layernorm(const TX* __restrict__ x, const TS* __restrict__ s,
                                                               const TB* __restrict__ b, TY* __restrict__ y) {
    ROW_SETUP
    float sum = 0.f;
    for (int c = lane; c < COLS; c += 32) sum += ld(x, base + c);
    const float mean = warp_sum(sum) / COLS;
    float sq = 0.f;
    for (int c = lane; c < COLS; c += 32) { const float d = ld(x, base + c) - mean; sq = fmaf(d, d, sq); }
    const float inv = 1.f / sqrtf(warp_sum(sq) / COLS + EPS);
    for (int c = lane; c < COLS; c += 32) {
        float v = (ld(x, base + c) - mean) * inv * ld(s, c);
        if (HAS_BIAS) v += ld(b, c);
        st(y, base + c, v);
    }
}
"""

_SOFTMAX = r"""
extern "C" __global__ void __launch_bounds__(256) fp_softmax(const TX* __restrict__ x, TY* __restrict__ y) {
    ROW_SETUP
    float m = -3.402823466e38f;
    for (int c = lane; c < COLS; c += 32) m = fmaxf(m, ld(x, base + c));
    m = warp_max(m);
    float sum = 0.f;
    for (int c = lane; c < COLS; c += 32) sum += expf(ld(x, base + c) - m);
    sum = warp_sum(sum);
    const float shift = LOG ? m + logf(sum) : m, scale = LOG ? 1.f : 1.f / sum;
    for (int c = lane; c < COLS; c += 32) {
        const float v = ld(x, base + c) - shift;
        st(y, base + c, LOG ? v : expf(v) * scale);
    }
}
"""


@functools.cache
def _kernel(name: str, defines: tuple[tuple[str, str], ...]):
    import cupy

    head = "".join(f"#define {k} {v}\n" for k, v in defines)
    body = _LAYERNORM if name == "fp_layernorm" else _SOFTMAX
    return cupy.RawKernel(head + _COMMON + body, name, options=("-std=c++17",))


def _grid(rows: int) -> tuple[int, int, int]:
    return ((rows + 7) // 8, 1, 1)


def floats(*dtypes: Any) -> bool:
    return all(np.dtype(d) in FLOAT_TYPES for d in dtypes)


def layer_norm(cp: Any, rows: int, cols: int, eps: float, dtypes: tuple, has_bias: bool):
    """kernel(x, scale, bias, y) over `rows` rows of `cols` contiguous elements; dtypes (x, scale, bias, y)."""
    tx, ts, tb, ty = (type_name(d) for d in dtypes)
    defines = {"ROWS": rows, "COLS": cols, "EPS": f"{eps!r}f", "HAS_BIAS": int(has_bias), "TX": tx, "TS": ts,
               "TB": tb, "TY": ty}
    kern = _kernel("fp_layernorm", tuple(sorted((k, str(v)) for k, v in defines.items())))

    def run(x, s, b, y):
        kern(_grid(rows), (256, 1, 1), (cp.ascontiguousarray(x), cp.ascontiguousarray(s),
                                        cp.ascontiguousarray(b if has_bias else s), y))

    return run


def softmax(cp: Any, rows: int, cols: int, log: bool, dtypes: tuple):
    """kernel(x, y): (log-)softmax of each of `rows` rows of `cols` contiguous elements; dtypes (x, y)."""
    tx, ty = (type_name(d) for d in dtypes)
    defines = {"ROWS": rows, "COLS": cols, "LOG": int(log), "TX": tx, "TY": ty}
    kern = _kernel("fp_softmax", tuple(sorted((k, str(v)) for k, v in defines.items())))
    return lambda x, y: kern(_grid(rows), (256, 1, 1), (cp.ascontiguousarray(x), y))
