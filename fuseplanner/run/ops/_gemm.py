"""Batched GEMM as a CuPy RawKernel: the GPU path of `linalg.matmul`.

CuPy refuses cuBLAS calls while a stream is being captured into a CUDA graph, so the executor's library
matmuls (MatMul, Gemm, the im2col product of general Conv, ConvTranspose) run on this kernel instead.
out[b] = a[b] @ b[b] for operands of any strides (transposed views and broadcast batch dimensions
included: a stride of 0 reads the same matrix for every batch entry), float32 or float16 storage,
float32 accumulation, contiguous output. Shapes and strides are compile-time constants: one compiled
kernel per distinct (shapes, strides, dtypes), cached.

Tiling: 64 x 64 outputs per 256-thread block (split over K into partial sums, added by a second kernel,
when there are too few output tiles to fill the GPU and K is long), 16-deep K slices staged in shared memory as float32; each
thread accumulates a 4 x 4 sub-tile. Operand tiles are read with the unit-stride dimension fastest
across threads when there is one (coalesced for row- and column-major operands alike). Matrix-vector
products (one output column or row: squeeze-and-excitation 1x1 convs over a 1x1 map, classifiers at
batch 1) run one warp per output instead, lanes striding over K, so a long K loop is spread over the
whole GPU rather than one block.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float16): "unsigned short"}
#: Storage dtypes the kernel reads and writes.
FLOAT_TYPES = frozenset(_TYPES)
_MAX_BATCH_DIMS = 4

_SOURCE = r"""
__device__ __forceinline__ float ld(const float* p, long long i) { return p[i]; }
__device__ __forceinline__ float ld(const unsigned short* p, long long i) {
    float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(p[i])); return f;
}
__device__ __forceinline__ void st(float* p, long long i, float v) { p[i] = v; }
__device__ __forceinline__ void st(unsigned short* p, long long i, float v) {
    unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v)); p[i] = h;
}

extern "C" __global__ void __launch_bounds__(256) fp_gemm(const TA* __restrict__ A, const TB* __restrict__ B,
                                                          TC* __restrict__ C, float* __restrict__ W) {
    __shared__ float As[16][64 + 1];
    __shared__ float Bs[16][64 + 1];
    const int split = blockIdx.z % KSPLIT;
    long long r = blockIdx.z / KSPLIT, oa = 0, ob = 0;
    { long long i = r % BD3; r /= BD3; oa += i * SA3; ob += i * SB3; }
    { long long i = r % BD2; r /= BD2; oa += i * SA2; ob += i * SB2; }
    { long long i = r % BD1; r /= BD1; oa += i * SA1; ob += i * SB1; }
    oa += r * SA0; ob += r * SB0;
    const long long oc = (long long)(blockIdx.z / KSPLIT) * GM * GN;
    const int k_begin = split * KCHUNK, k_end = min(GK, k_begin + KCHUNK);
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int m0 = blockIdx.y * 64, n0 = blockIdx.x * 64;
    float acc[4][4];
    #pragma unroll
    for (int i = 0; i < 4; ++i)
        #pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;
    for (int k0 = k_begin; k0 < k_end; k0 += 16) {
        for (int t = threadIdx.x; t < 1024; t += 256) {
            const int kk = A_KFAST ? t % 16 : t / 64, mm = A_KFAST ? t / 16 : t % 64;
            const int gm = m0 + mm, gk = k0 + kk;
            As[kk][mm] = (gm < GM && gk < k_end) ? ld(A, oa + (long long)gm * SAM + (long long)gk * SAK) : 0.f;
            const int kb = B_KFAST ? t % 16 : t / 64, nn = B_KFAST ? t / 16 : t % 64;
            const int gn = n0 + nn, gkb = k0 + kb;
            Bs[kb][nn] = (gn < GN && gkb < k_end) ? ld(B, ob + (long long)gkb * SBK + (long long)gn * SBN) : 0.f;
        }
        __syncthreads();
        #pragma unroll
        for (int kk = 0; kk < 16; ++kk) {
            float a[4], b[4];
            #pragma unroll
            for (int i = 0; i < 4; ++i) { a[i] = As[kk][ty + 16 * i]; b[i] = Bs[kk][tx + 16 * i]; }
            #pragma unroll
            for (int i = 0; i < 4; ++i)
                #pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
    #pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int gm = m0 + ty + 16 * i;
        #pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int gn = n0 + tx + 16 * j;
            if (gm < GM && gn < GN) {
                if (KSPLIT == 1) st(C, oc + (long long)gm * GN + gn, acc[i][j]);
                else W[(long long)blockIdx.z * GM * GN + (long long)gm * GN + gn] = acc[i][j];
            }
        }
    }
}
"""


_GEMV = r"""
extern "C" __global__ void __launch_bounds__(256) fp_gemv(const TM* __restrict__ Mt, const TV* __restrict__ V,
                                                          TC* __restrict__ C) {
    long long r = blockIdx.z, om = 0, ov = 0;
    { long long i = r % BD3; r /= BD3; om += i * SA3; ov += i * SB3; }
    { long long i = r % BD2; r /= BD2; om += i * SA2; ov += i * SB2; }
    { long long i = r % BD1; r /= BD1; om += i * SA1; ov += i * SB1; }
    om += r * SA0; ov += r * SB0;
    const int row = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= GR) return;
    float acc = 0.f;
    for (int k = lane; k < GK; k += 32)
        acc = fmaf(ld(Mt, om + (long long)row * SR + (long long)k * SK), ld(V, ov + (long long)k * SV), acc);
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if (lane == 0) st(C, (long long)blockIdx.z * GR + row, acc);
}
"""


def type_name(dtype: Any) -> str:
    """The CUDA type the kernels here read and write for a storage dtype (float16 as its bits)."""
    return _TYPES[np.dtype(dtype)]


def _elem_strides(a: Any) -> tuple[int, ...]:
    return tuple(s // a.itemsize for s in a.strides)


_HELPERS, _TILED = _SOURCE.split('extern "C"', 1)
_GEMM = 'extern "C"' + _TILED


@functools.cache
def _compiled(name: str, source: str, defines: tuple[tuple[str, str], ...]):
    import cupy

    head = "".join(f"#define {k} {v}\n" for k, v in defines)
    return cupy.RawKernel(head + _HELPERS + source, name, options=("-std=c++17",))


def raw_kernel(name: str, source: str, defines: dict):
    """Kernel `name` of CUDA `source`, compiled once per distinct `defines` (each a #define before the
    source), with the device functions `ld` / `st` (float32 or float16-as-bits storage, float32
    values) in scope."""
    return _compiled(name, source, _defines(defines))


def _defines(d: dict) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((key, str(v)) for key, v in d.items()))


def _batch_layout(a: Any, b: Any, batch: tuple[int, ...]) -> dict[str, int]:
    """Sizes and element strides of up to four batch dimensions (outermost first, padded with size 1)."""
    if len(batch) > _MAX_BATCH_DIMS:
        raise ValueError(f"matmul with {len(batch)} batch dimensions: at most {_MAX_BATCH_DIMS} are supported")
    pad = _MAX_BATCH_DIMS - len(batch)
    sizes = (1,) * pad + tuple(batch)
    sa = (0,) * pad + _elem_strides(a)[:-2]
    sb = (0,) * pad + _elem_strides(b)[:-2]
    out = {}
    for i in range(_MAX_BATCH_DIMS):
        out[f"BD{i}"], out[f"SA{i}"], out[f"SB{i}"] = sizes[i], sa[i], sb[i]
    return out


def batched_gemm(cp: Any, a: Any, b: Any, out: Any) -> None:
    """out = a @ b on the current stream (NumPy broadcasting over batch dimensions); out must be
    C-contiguous with the broadcast shape."""
    batch = tuple(out.shape[:-2])
    m, k = a.shape[-2:]
    n = b.shape[-1]
    a = cp.broadcast_to(a, (*batch, m, k))
    b = cp.broadcast_to(b, (*batch, k, n))
    if not out.flags.c_contiguous:
        raise ValueError("gemm writes a C-contiguous output")
    (sam, sak), (sbk, sbn) = _elem_strides(a)[-2:], _elem_strides(b)[-2:]
    blocks = int(np.prod(batch)) if batch else 1
    if not (blocks and m and n):
        return
    if n == 1 or m == 1:
        _gemv(a, b, out, batch, blocks)
        return
    defines = {"TA": _TYPES[a.dtype], "TB": _TYPES[b.dtype], "TC": _TYPES[out.dtype], "GM": m, "GN": n, "GK": k,
               "SAM": sam, "SAK": sak, "SBK": sbk, "SBN": sbn, "A_KFAST": int(sak == 1 and sam != 1),
               "B_KFAST": int(sbk == 1 and sbn != 1), **_batch_layout(a, b, batch)}
    tiles = ((n + 63) // 64) * ((m + 63) // 64) * blocks
    ksplit, kchunk = k_split(tiles, k)
    defines.update(KSPLIT=ksplit, KCHUNK=kchunk)
    grid = ((n + 63) // 64, (m + 63) // 64, blocks * ksplit)
    work = cp.empty((blocks * ksplit, m, n), dtype=cp.float32) if ksplit > 1 else out
    raw_kernel("fp_gemm", _GEMM, defines)(grid, (256, 1, 1), (a, b, out, work))
    if ksplit > 1:
        _split_sum(cp)(work.reshape(-1), np.int32(ksplit), np.int64(m * n), out.reshape(blocks * m * n))


#: Output tiles (x K splits) that keep every SM busy: about two blocks per SM of a 132-SM GPU.
_BUSY_BLOCKS = 264


def k_split(tiles: int, k: int) -> tuple[int, int]:
    """(splits, K per split, a multiple of 16) so that `tiles` x splits approaches `_BUSY_BLOCKS`, no split
    shorter than 64."""
    want = min(max(_BUSY_BLOCKS // max(tiles, 1), 1), max(k // 64, 1), 16)
    if want <= 1:
        return 1, ((k + 15) // 16) * 16
    chunk = ((-(-k // want) + 15) // 16) * 16
    return -(-k // chunk), chunk


@functools.cache
def _split_sum(cp: Any):
    """(work (B, S, E) float32, S, E, out (B * E)): out = the partial sums added over S, in split order,
    cast to out's dtype."""
    body = ("const long long b = i / e, k = i % e; float acc = 0.f;"
            "for (int j = 0; j < s; ++j) acc += w[(b * s + j) * e + k]; y = (T)acc;")
    return cp.ElementwiseKernel("raw float32 w, int32 s, int64 e", "T y", body, "fuseplanner_split_sum")


def _gemv(a: Any, b: Any, out: Any, batch: tuple[int, ...], blocks: int) -> None:
    """One output column (n == 1: rows of a times the vector b) or row (m == 1: columns of b times the
    vector a), one warp per output element."""
    (m, k), n = a.shape[-2:], b.shape[-1]
    (sam, sak), (sbk, sbn) = _elem_strides(a)[-2:], _elem_strides(b)[-2:]
    layout = _batch_layout(a, b, batch)
    if n == 1:
        mat, vec, rows, sr, sk, sv = a, b, m, sam, sak, sbk
    else:  # m == 1: swap the operands' roles (and their batch strides)
        mat, vec, rows, sr, sk, sv = b, a, n, sbn, sbk, sak
        for i in range(_MAX_BATCH_DIMS):
            layout[f"SA{i}"], layout[f"SB{i}"] = layout[f"SB{i}"], layout[f"SA{i}"]
    defines = {"TM": _TYPES[mat.dtype], "TV": _TYPES[vec.dtype], "TC": _TYPES[out.dtype], "GR": rows, "GK": k,
               "SR": sr, "SK": sk, "SV": sv, **layout}
    grid = ((rows + 7) // 8, 1, blocks)
    raw_kernel("fp_gemv", _GEMV, defines)(grid, (256, 1, 1), (mat, vec, out))
