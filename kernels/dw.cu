// Layer-by-layer depthwise convolution (channel multiplier 1), NCHW, fp32 or fp16 storage, fp32 math.
//
// Block (grid x = spatial tile, y = channel tile, z = image): TF channels x TH x TW outputs.
// Shared memory (exactly tiles.smem_bytes("dw")): float ws[TF][KH*KW] then T xs[TF][HH][WW], the
// zero-padded halo window of the TF input planes. Each thread computes V vertically adjacent outputs
// of one column in registers, streaming the window rows once per thread (a row feeds every output
// whose receptive field covers it).
//
// Defines: T_HALF, TH, TW, TF, THREADS, KH, KW, SH, SW, PAD_T, PAD_L, DIL_H, DIL_W, V, VEC,
//          ACT, HAS_BIAS, HAS_RES (see kernels/README.md).
#include "common.cuh"

#ifndef DIL_H
#define DIL_H 1
#endif
#ifndef DIL_W
#define DIL_W 1
#endif
#ifndef V
#define V 1
#endif
#ifndef VEC
#define VEC 1
#endif

#define HH ((TH - 1) * SH + (KH - 1) * DIL_H + 1)
#define WW ((TW - 1) * SW + (KW - 1) * DIL_W + 1)
#define KK (KH * KW)
#define NGROUP (TF * (TH / V) * TW)
#define GPT (NGROUP / THREADS)
#define ROWS ((V - 1) * SH + (KH - 1) * DIL_H + 1)

static_assert(TH % V == 0, "V must divide TH");
static_assert(NGROUP % THREADS == 0, "groups must split evenly over threads");

// Stage the halo window of TF planes: rows iy0.., cols ix0.., zero outside the image.
// VEC > 1: the window row is read as VEC-element aligned vectors covering [ix0, ix0 + WW) (the
// launcher guarantees W % VEC == 0 so vectors never straddle rows), then scattered into smem.
__device__ __forceinline__ void stage_window(const T* __restrict__ xn, T* xs, int c0, int C, int H, int W,
                                             int iy0, int ix0) {
    const int tid = threadIdx.x;
#if VEC > 1
    // aligned vector span covering the window columns: at most NV vectors from vx0
    constexpr int NV = (WW + 2 * VEC - 2) / VEC;
    const int vx0 = (ix0 >= 0 ? ix0 : ix0 - (VEC - 1)) / VEC * VEC;  // floor to a multiple of VEC
    constexpr int total = TF * HH * NV;
#pragma unroll 4
    for (int i = tid; i < total; i += THREADS) {
        const int v = i % NV;
        const int r = (i / NV) % HH;
        const int cc = i / (NV * HH);
        const int iy = iy0 + r;
        const int gx = vx0 + v * VEC;
        T vals[VEC];
        const bool ok = (c0 + cc < C) && iy >= 0 && iy < H && gx >= 0 && gx < W && gx < ix0 + WW;
        if (ok) {
            const T* src = xn + ((long long)cc * H + iy) * W + gx;
#if T_HALF
#if VEC == 8
            uint4 u = __ldg(reinterpret_cast<const uint4*>(src));
            const unsigned w4[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int e = 0; e < 4; ++e) { vals[2 * e] = (T)(w4[e] & 0xffff); vals[2 * e + 1] = (T)(w4[e] >> 16); }
#elif VEC == 4
            uint2 u = __ldg(reinterpret_cast<const uint2*>(src));
            vals[0] = (T)(u.x & 0xffff); vals[1] = (T)(u.x >> 16); vals[2] = (T)(u.y & 0xffff); vals[3] = (T)(u.y >> 16);
#else
            unsigned u = __ldg(reinterpret_cast<const unsigned*>(src));
            vals[0] = (T)(u & 0xffff); vals[1] = (T)(u >> 16);
#endif
#else
#if VEC == 4
            float4 u = __ldg(reinterpret_cast<const float4*>(src));
            vals[0] = u.x; vals[1] = u.y; vals[2] = u.z; vals[3] = u.w;
#else
            float2 u = __ldg(reinterpret_cast<const float2*>(src));
            vals[0] = u.x; vals[1] = u.y;
#endif
#endif
        } else {
#pragma unroll
            for (int e = 0; e < VEC; ++e) vals[e] = (T)0;
        }
        T* dst = xs + (cc * HH + r) * WW;
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
            const int q = gx + e - ix0;
            if (q >= 0 && q < WW) dst[q] = vals[e];
        }
    }
#else
#pragma unroll 4
    for (int i = tid; i < TF * HH * WW; i += THREADS) {
        const int q = i % WW;
        const int r = (i / WW) % HH;
        const int cc = i / (HH * WW);
        const int iy = iy0 + r, ix = ix0 + q;
        const bool ok = (c0 + cc < C) && iy >= 0 && iy < H && ix >= 0 && ix < W;
        xs[i] = ok ? xn[((long long)cc * H + iy) * W + ix] : (T)0;
    }
#endif
}

extern "C" __global__ void __launch_bounds__(THREADS)
dw_kernel(const T* __restrict__ x, const float* __restrict__ w, const float* __restrict__ bias,
          const T* __restrict__ res, T* __restrict__ out, int C, int H, int W, int Ho, int Wo, int tiles_w) {
    extern __shared__ float smem[];
    float* ws = smem;                            // [TF][KK]
    T* xs = reinterpret_cast<T*>(smem + TF * KK);  // [TF][HH][WW]

    const int tid = threadIdx.x;
    const int ty0 = (blockIdx.x / tiles_w) * TH;
    const int tx0 = (blockIdx.x % tiles_w) * TW;
    const int c0 = blockIdx.y * TF;
    const int n = blockIdx.z;

    for (int i = tid; i < TF * KK; i += THREADS) {
        ws[i] = (c0 + i / KK < C) ? __ldg(w + (long long)c0 * KK + i) : 0.f;
    }
    const T* xn = x + ((long long)n * C + c0) * H * W;
    stage_window(xn, xs, c0, C, H, W, ty0 * SH - PAD_T, tx0 * SW - PAD_L);
    __syncthreads();

#pragma unroll 1
    for (int j = 0; j < GPT; ++j) {
        const int g = tid + j * THREADS;
        const int q = g % TW;
        const int yv = (g / TW) % (TH / V);
        const int cc = g / (TW * (TH / V));
        const T* base = xs + (cc * HH + yv * V * SH) * WW + q * SW;
        const float* wc = ws + cc * KK;
        float wr[KK];
#pragma unroll
        for (int k = 0; k < KK; ++k) wr[k] = wc[k];
        float acc[V];
#pragma unroll
        for (int v = 0; v < V; ++v) acc[v] = 0.f;
        dw_rows<V, KH, KW, SH, DIL_H, DIL_W, WW>(base, wr, acc);
        const int c = c0 + cc;
        const int xo = tx0 + q;
        if (c < C && xo < Wo) {
#pragma unroll
            for (int v = 0; v < V; ++v) {
                const int y = ty0 + yv * V + v;
                if (y < Ho) {
                    const long long off = ((long long)n * C + c) * Ho * Wo + (long long)y * Wo + xo;
                    st_f(out + off, add_residual(apply_epilogue(acc[v], bias, c), res, off));
                }
            }
        }
    }
}
