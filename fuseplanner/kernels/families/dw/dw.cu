// Layer-by-layer depthwise convolution (channel multiplier 1), NCHW, fp32 or fp16 storage, fp32 math.
//
// Block (grid x = spatial tile, y = channel tile, z = image): TF channels x TH x TW outputs.
// Shared memory (exactly tiles.smem_bytes("dw")): float ws[TF][KH*KW] (padded to 16 bytes) then
// T xs[TF][HH][LDX], the zero-padded halo window of the TF input planes, each row staged from a
// VEC-aligned map column (LDX = tiles.dw_row_stride: the widest such row any VEC of this W needs).
// Each thread computes V vertically adjacent outputs of one column in registers, streaming the window
// rows once per thread (a row feeds every output whose receptive field covers it).
//
// Defines: T_HALF, TH, TW, TF, THREADS, KH, KW, SH, SW, PAD_T, PAD_L, DIL_H, DIL_W, V, VEC, LDX,
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
#ifndef LDX
#define LDX ((WW + 2 * VEC - 2) / VEC * VEC)  // tiles.dw_row_stride for this VEC
#endif

#define HH ((TH - 1) * SH + (KH - 1) * DIL_H + 1)
#define WW ((TW - 1) * SW + (KW - 1) * DIL_W + 1)
#define KK (KH * KW)
#define WS_FLOATS ((TF * KK + 3) / 4 * 4)  // filters, padded so the window starts 16-byte aligned
#define NGROUP (TF * (TH / V) * TW)
#define GPT (NGROUP / THREADS)
#define ROWS ((V - 1) * SH + (KH - 1) * DIL_H + 1)

static_assert(TH % V == 0, "V must divide TH");
static_assert(NGROUP % THREADS == 0, "groups must split evenly over threads");

#define ESZ (T_HALF ? 2 : 4)
// Stage the halo window of TF planes: rows iy0.., map columns from vx0 = ix0 rounded down to a
// multiple of VEC, zero outside the image. Staged row r of plane cc starts at xs[(cc * HH + r) * LDX];
// staged column j holds map column vx0 + j. Returns ix0 - vx0 (where column ix0 sits).
// VEC * ESZ >= 4: one cp.async of VEC elements per aligned vector (the launcher guarantees W % VEC == 0,
// so a vector is wholly inside or outside a row, and LDX % VEC == 0): every copy of the window is in
// flight at once and no register holds it. fp16 with VEC == 1 (odd W): through registers, in batches
// of SB elements loaded before any is stored.
__device__ __forceinline__ int stage_window(const T* __restrict__ xn, T* xs, int c0, int C, int H, int W,
                                            int iy0, int ix0) {
    const int tid = threadIdx.x;
    const int vx0 = (ix0 >= 0 ? ix0 : ix0 - (VEC - 1)) / VEC * VEC;  // floor to a multiple of VEC
#if VEC * ESZ >= 4
    constexpr int NV = (WW + 2 * VEC - 2) / VEC;  // vectors covering [ix0, ix0 + WW) from vx0
    static_assert(NV * VEC <= LDX && LDX % VEC == 0, "LDX must hold the aligned vectors of a window row");
    for (int i = tid; i < TF * HH * NV; i += THREADS) {
        const int v = i % NV;
        const int r = (i / NV) % HH;
        const int cc = i / (NV * HH);
        const int iy = iy0 + r;
        const int gx = vx0 + v * VEC;
        const bool ok = (c0 + cc < C) && iy >= 0 && iy < H && gx >= 0 && gx < W;
        const T* src = ok ? xn + ((long long)cc * H + iy) * W + gx : xn;
        cp_async<VEC * ESZ>(xs + (cc * HH + r) * LDX + v * VEC, src, ok);
    }
    cp_async_commit();
    cp_async_wait<0>();
#else
    constexpr int UNITS = TF * HH * WW;
    constexpr int UPT = (UNITS + THREADS - 1) / THREADS;
    constexpr int SB = UPT < 16 ? UPT : 16;
#pragma unroll 1
    for (int b0 = 0; b0 < UPT; b0 += SB) {
        T u[SB];
#pragma unroll
        for (int j = 0; j < SB; ++j) {
            const int i = tid + (b0 + j) * THREADS;
            const int q = i % WW;
            const int r = (i / WW) % HH;
            const int cc = i / (WW * HH);
            const int iy = iy0 + r, ix = ix0 + q;
            const bool ok = b0 + j < UPT && i < UNITS && (c0 + cc < C) && iy >= 0 && iy < H && ix >= 0 && ix < W;
            u[j] = ok ? __ldg(xn + ((long long)cc * H + iy) * W + ix) : (T)0;
        }
#pragma unroll
        for (int j = 0; j < SB; ++j) {
            const int i = tid + (b0 + j) * THREADS;
            if (b0 + j < UPT && i < UNITS) xs[(i / WW) * LDX + i % WW] = u[j];
        }
    }
#endif
    return ix0 - vx0;
}

extern "C" __global__ void __launch_bounds__(THREADS)
dw_kernel(const T* __restrict__ x, const float* __restrict__ w, const float* __restrict__ bias,
          const T* __restrict__ res, T* __restrict__ out, int C, int H, int W, int Ho, int Wo, int tiles_w) {
    extern __shared__ float smem[];
    float* ws = smem;                                    // [TF][KK]
    T* xs = reinterpret_cast<T*>(smem + WS_FLOATS);  // [TF][HH][LDX], 16-byte aligned

    const int tid = threadIdx.x;
    const int ty0 = (blockIdx.x / tiles_w) * TH;
    const int tx0 = (blockIdx.x % tiles_w) * TW;
    const int c0 = blockIdx.y * TF;
    const int n = blockIdx.z;

    for (int i = tid; i < TF * KK; i += THREADS) {
        ws[i] = (c0 + i / KK < C) ? __ldg(w + (long long)c0 * KK + i) : 0.f;
    }
    const T* xn = x + ((long long)n * C + c0) * H * W;
    const int xoff = stage_window(xn, xs, c0, C, H, W, ty0 * SH - PAD_T, tx0 * SW - PAD_L);
    __syncthreads();

#pragma unroll 1
    for (int j = 0; j < GPT; ++j) {
        const int g = tid + j * THREADS;
        const int q = g % TW;
        const int yv = (g / TW) % (TH / V);
        const int cc = g / (TW * (TH / V));
        const T* base = xs + (cc * HH + yv * V * SH) * LDX + xoff + q * SW;
        const float* wc = ws + cc * KK;
        float wr[KK];
#pragma unroll
        for (int k = 0; k < KK; ++k) wr[k] = wc[k];
        float acc[V];
#pragma unroll
        for (int v = 0; v < V; ++v) acc[v] = 0.f;
        dw_rows<V, KH, KW, SH, DIL_H, DIL_W, LDX>(base, wr, acc);
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
