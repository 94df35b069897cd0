// Building blocks of the fused DW/PW kernels (fused_*.cu): per-member activations, and a block-level
// GEMM on shared memory, C[m][n] = sum_k At[k][m] * B[k][n], with three back ends chosen by PREC:
//   PREC 0: exact fp32 FMA, each thread owns a GM x GN register micro-tile (float4 shared loads);
//   PREC 1: TF32 tensor cores (mma.sync m16n8k8), weights rounded to TF32 on the host, activations
//           rounded (cvt.rna) as the B fragments are loaded (cp.async stages the input raw);
//   PREC 2: fp16 tensor cores (mma.sync m16n8k16, ldmatrix.trans), fp32 accumulation.
// Shared-memory operand layout (all back ends): At[K][LDA] (weights, transposed: m contiguous) and
// B[K][LDB] (activations: channel-major, pixels contiguous), LDA/LDB multiples of 8 elements and
// buffers 128-byte aligned, K zero-padded to a multiple of 16. A "group" is the unit of work of one
// thread (PREC 0, GM x GN outputs) or one warp (PREC > 0, GM/16 x GN/8 mma tiles).
#pragma once
#include "common.cuh"

#ifndef PREC
#define PREC 0
#endif
#ifndef THREADS
#define THREADS 256
#endif
#ifndef ACT1
#define ACT1 0
#endif
#ifndef ACT2
#define ACT2 0
#endif
#ifndef ACT3
#define ACT3 0
#endif
#ifndef HAS_B1
#define HAS_B1 0
#endif
#ifndef HAS_B2
#define HAS_B2 0
#endif
#ifndef HAS_B3
#define HAS_B3 0
#endif

#if PREC == 0
#define UNITS THREADS
#define UNIT_ID ((int)threadIdx.x)
#else
#define UNITS (THREADS / 32)
#define UNIT_ID ((int)(threadIdx.x >> 5))
#endif

__host__ __device__ constexpr int rup(int a, int b) { return (a + b - 1) / b * b; }
__host__ __device__ constexpr int al128(int bytes) { return rup(bytes, 128); }
__host__ __device__ constexpr int imax(int a, int b) { return a > b ? a : b; }

// ---- activations by code (same codes and formulas as common.cuh's activate) ----------------------
template <int A>
__device__ __forceinline__ float act_t(float v) {
    if constexpr (A == ACT_RELU) return fmaxf(v, 0.f);
    else if constexpr (A == ACT_RELU6) return fminf(fmaxf(v, 0.f), 6.f);
    else if constexpr (A == ACT_HARDSWISH) return v * fminf(fmaxf(v + 3.f, 0.f), 6.f) * (1.f / 6.f);
    else if constexpr (A == ACT_HARDSIGMOID) return fminf(fmaxf(v * (1.f / 6.f) + 0.5f, 0.f), 1.f);
    else if constexpr (A == ACT_SIGMOID) return fast_sigmoid(v);
    else if constexpr (A == ACT_SILU) return v * fast_sigmoid(v);
    else if constexpr (A == ACT_GELU) return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
    else if constexpr (A == ACT_LEAKYRELU) return v >= 0.f ? v : LEAKY_ALPHA * v;
    else return v;
}

template <int HB>
__device__ __forceinline__ float bias_t(const float* __restrict__ b, int c) {
    if constexpr (HB != 0) return __ldg(b + c);
    else return 0.f;
}

// Value as staged into a GEMM operand buffer: rounded to TF32 for PREC 1, converted to T otherwise.
__device__ __forceinline__ T stage(float v) {
#if PREC == 1
    return __uint_as_float(f2tf32(v));
#else
    T r;
    from_f(r, v);
    return r;
#endif
}

// ---- one group's accumulator tile ------------------------------------------------------------------
#if PREC == 0
template <int GM, int GN>
struct AccTile {
    float v[GM][GN];
    __device__ __forceinline__ void zero() {
#pragma unroll
        for (int i = 0; i < GM; ++i)
#pragma unroll
            for (int j = 0; j < GN; ++j) v[i][j] = 0.f;
    }
    // v += At[0:K][m0:m0+GM]^T * B[0:K][n0:n0+GN]
    template <int K, int LDA, int LDB>
    __device__ __forceinline__ void mac(const T* __restrict__ At, const T* __restrict__ B, int m0, int n0) {
        const T* a = At + m0;
        const T* b = B + n0;
#pragma unroll 4
        for (int k = 0; k < K; ++k) {
            float av[GM], bv[GN];
            lds_vec<GM>(av, a + k * LDA);
            lds_vec<GN>(bv, b + k * LDB);
#pragma unroll
            for (int i = 0; i < GM; ++i)
#pragma unroll
                for (int j = 0; j < GN; ++j) v[i][j] = fmaf(av[i], bv[j], v[i][j]);
        }
    }
    // f(m, n, element&) for every element of the tile at (m0, n0).
    template <class F>
    __device__ __forceinline__ void each(int m0, int n0, F f) {
#pragma unroll
        for (int i = 0; i < GM; ++i)
#pragma unroll
            for (int j = 0; j < GN; ++j) f(m0 + i, n0 + j, v[i][j]);
    }
};
#else
template <int GM, int GN>
struct AccTile {
    static constexpr int MI = GM / 16, NI = GN / 8;
    static_assert(GM % 16 == 0 && GN % 8 == 0, "mma group must be a multiple of 16 x 8");
    float v[MI][NI][4];
    __device__ __forceinline__ void zero() {
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j)
#pragma unroll
                for (int r = 0; r < 4; ++r) v[i][j][r] = 0.f;
    }
    template <int K, int LDA, int LDB>
    __device__ __forceinline__ void mac(const T* __restrict__ At, const T* __restrict__ B, int m0, int n0) {
        const int lane = threadIdx.x & 31;
#if PREC == 1
        static_assert(K % 8 == 0, "tf32 K must be a multiple of 8");
        const int g = lane >> 2, t = lane & 3;
        const float* a = At + t * LDA + m0 + g;
        const float* b = B + t * LDB + n0 + g;
#pragma unroll 2
        for (int k = 0; k < K; k += 8) {
            unsigned af[MI][4], bf[NI][2];
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                const float* p = a + k * LDA + i * 16;
                af[i][0] = __float_as_uint(p[0]);
                af[i][1] = __float_as_uint(p[8]);
                af[i][2] = __float_as_uint(p[4 * LDA]);
                af[i][3] = __float_as_uint(p[4 * LDA + 8]);
            }
#pragma unroll
            for (int j = 0; j < NI; ++j) {  // activations: cp.async copies them raw, so round here
                const float* q = b + k * LDB + j * 8;  // (the tensor cores would truncate the low bits)
                bf[j][0] = f2tf32(q[0]);
                bf[j][1] = f2tf32(q[4 * LDB]);
            }
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j) mma_tf32(v[i][j], af[i], bf[j]);
        }
#else
        static_assert(K % 16 == 0, "fp16 K must be a multiple of 16");
        // ldmatrix.trans row addresses: A quadrants (k0|k0+8) x (m|m+8); B halves k0 | k0+8.
        const int r8 = lane & 7;
        const half_t* a = At + (r8 + ((lane >> 4) << 3)) * LDA + m0 + ((lane >> 3) & 1) * 8;
        const half_t* b = B + (r8 + (((lane >> 3) & 1) << 3)) * LDB + n0 + ((lane >> 4) << 3);
#pragma unroll 2
        for (int k = 0; k < K; k += 16) {
            unsigned af[MI][4], bf[NI][2];
#pragma unroll
            for (int i = 0; i < MI; ++i) ldsm_x4_t(af[i], a + k * LDA + i * 16);
#pragma unroll
            for (int j = 0; j + 1 < NI; j += 2) {
                unsigned r[4];
                ldsm_x4_t(r, b + k * LDB + j * 8);
                bf[j][0] = r[0]; bf[j][1] = r[1]; bf[j + 1][0] = r[2]; bf[j + 1][1] = r[3];
            }
            if constexpr (NI % 2 == 1) {
                unsigned r[2];
                // lanes 16..31 repeat lanes 0..15's rows (x2 reads only lanes 0..15's addresses)
                ldsm_x2_t(r, b + k * LDB + (NI - 1) * 8 - ((lane >> 4) << 3));
                bf[NI - 1][0] = r[0]; bf[NI - 1][1] = r[1];
            }
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j) mma_f16_k16(v[i][j], af[i], bf[j]);
        }
#endif
    }
    template <class F>
    __device__ __forceinline__ void each(int m0, int n0, F f) {
        const int lane = threadIdx.x & 31;
        const int g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j)
#pragma unroll
                for (int r = 0; r < 4; ++r) f(m0 + i * 16 + g + (r >> 1) * 8, n0 + j * 8 + 2 * t + (r & 1), v[i][j][r]);
    }
};
#endif

// ---- block-level GEMMs -----------------------------------------------------------------------------
// Streamed: C[m][n] (+)= sum_k At[k][m] B[k][n] for m < ME, n < NE (multiples of GM, GN); each unit
// loops over groups, C is fp32 in shared memory (accumulated when ACC).
// With an epilogue `epi(m, n, x) -> float`, the last chunk's call stores epi's value instead of the sum,
// so no separate pass over C is needed.
template <int ME, int NE, int GM, int GN, int K, int LDA, int LDB, int LDC, bool ACC, class Epi>
__device__ __forceinline__ void gemm_stream(const T* __restrict__ At, const T* __restrict__ B, float* C, Epi epi) {
    static_assert(ME % GM == 0 && NE % GN == 0, "group must divide the GEMM");
    constexpr int GNN = NE / GN, NG = (ME / GM) * GNN;
    for (int g = UNIT_ID; g < NG; g += UNITS) {
        const int m0 = (g / GNN) * GM, n0 = (g % GNN) * GN;
        AccTile<GM, GN> a;
        if constexpr (ACC) a.each(m0, n0, [&](int m, int n, float& x) { x = C[m * LDC + n]; });
        else a.zero();
        a.template mac<K, LDA, LDB>(At, B, m0, n0);
        a.each(m0, n0, [&](int m, int n, float& x) { C[m * LDC + n] = epi(m, n, x); });
    }
}
template <int ME, int NE, int GM, int GN, int K, int LDA, int LDB, int LDC, bool ACC>
__device__ __forceinline__ void gemm_stream(const T* __restrict__ At, const T* __restrict__ B, float* C) {
    gemm_stream<ME, NE, GM, GN, K, LDA, LDB, LDC, ACC>(At, B, C, [](int, int, float x) { return x; });
}

// Register-resident accumulators for the block's final outputs (ME x NE), accumulated over chunks.
template <int ME, int NE, int GM, int GN>
struct BlockAcc {
    static_assert(ME % GM == 0 && NE % GN == 0, "group must divide the GEMM");
    static constexpr int GNN = NE / GN, NG = (ME / GM) * GNN, MT = (NG + UNITS - 1) / UNITS;
    AccTile<GM, GN> a[MT];
    __device__ __forceinline__ void zero() {
#pragma unroll
        for (int t = 0; t < MT; ++t) a[t].zero();
    }
    template <int K, int LDA, int LDB>
    __device__ __forceinline__ void mac(const T* __restrict__ At, const T* __restrict__ B) {
#pragma unroll
        for (int t = 0; t < MT; ++t) {
            const int g = UNIT_ID + t * UNITS;
            if (NG % UNITS == 0 || g < NG) a[t].template mac<K, LDA, LDB>(At, B, (g / GNN) * GM, (g % GNN) * GN);
        }
    }
    template <int LDC>
    __device__ __forceinline__ void store(float* C) {
#pragma unroll
        for (int t = 0; t < MT; ++t) {
            const int g = UNIT_ID + t * UNITS;
            if (NG % UNITS == 0 || g < NG)
                a[t].each((g / GNN) * GM, (g % GNN) * GN, [&](int m, int n, float& x) { C[m * LDC + n] = x; });
        }
    }
};

// ---- depthwise convolution over a staged window ---------------------------------------------------
// Depthwise k x k of NCH channels over their staged windows: channel k's window element (row, col) is
// src[k * CSTR + row * LDR + col], its weights wd[k * KH * KW + ky * KW + kx] (fp32, shared memory).
// Each item of a thread is one channel and column and V vertically adjacent outputs (the DWV define,
// fuseplanner.kernels.tiles.dw_rows_per_item), so the window rows they share are read once; out(k, oy, ox,
// sum) receives each output of the TH x TW tile (sum without bias or activation).
template <int V, int NCH, int TH_, int TW_, int KH_, int KW_, int SH_, int SW_, int DH_, int DW_, int LDR, int CSTR,
          class S, class F>
__device__ __forceinline__ void dw_window(const S* __restrict__ src, const float* __restrict__ wd, F out) {
    static_assert(V >= 1 && TH_ % V == 0, "a DW item's rows must divide the tile's rows");
    constexpr int VY = TH_ / V, ITEMS = NCH * VY * TW_, KK_ = KH_ * KW_;
#pragma unroll 1
    for (int it = threadIdx.x; it < ITEMS; it += THREADS) {
        const int ox = it % TW_, q = it / TW_, vy = q % VY, k = q / VY;
        const S* s = src + k * CSTR + vy * V * SH_ * LDR + ox * SW_;
        const float* w = wd + k * KK_;
        float acc[V];
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] = 0.f;
        dw_rows<V, KH_, KW_, SH_, DH_, DW_, LDR>(s, w, acc);
#pragma unroll
        for (int j = 0; j < V; ++j) out(k, vy * V + j, ox, acc[j]);
    }
}

// ---- epilogues between the fused stages -------------------------------------------------------------
// gemm_stream epilogue of an expansion over a staged window (pw_dw, pw_dw_pw): bias + ACT of channel
// c0 + m at window position n (row n / Wwa), 0 outside the map, past `count` channels or at n >= N1
// (the DW pads the expansion's output with zeros).
template <int A, int HB, int Wwa, int N1>
__device__ __forceinline__ auto window_epilogue(const float* __restrict__ b, int c0, int count, int iy0, int xs0,
                                                int H, int W) {
    return [=](int m, int n, float v) {
        const int row = n / Wwa, gy = iy0 + row, gx = xs0 + (n - row * Wwa), c = c0 + m;
        return c < count && n < N1 && (unsigned)gy < (unsigned)H && (unsigned)gx < (unsigned)W
                   ? act_t<A>(v + bias_t<HB>(b, c)) : 0.f;
    };
}

// dw_window output into the next GEMM's B operand ds[k][p] (dw_pw, pw_dw_pw): bias (wd[NCH * KK + k],
// copied with the chunk's DW weights) + ACT of channel c0 + k, 0 past `count` channels, staged.
template <int A, int HB, int NCH, int KK_, int TW_, int LDD>
__device__ __forceinline__ auto dw_to_operand(T* ds, const float* wd, int c0, int count) {
    return [=](int k, int oy, int ox, float a) {
        const float v = c0 + k < count ? act_t<A>(a + (HB ? wd[NCH * KK_ + k] : 0.f)) : 0.f;
        ds[k * LDD + oy * TW_ + ox] = stage(v);
    };
}

// Zero the padding of a B operand ds[Kp][Np] (rows Tc .. Kp, columns P .. Np) once, before the chunk
// loop: dw_to_operand writes the rest every chunk.
template <int Kp, int Np, int Tc, int P_, int LDD>
__device__ __forceinline__ void zero_operand_padding(T* ds) {
    for (int t = threadIdx.x; t < Kp * Np; t += THREADS) {
        const int k = t / Np, p = t - (t / Np) * Np;
        if (k >= Tc || p >= P_) from_f(ds[k * LDD + p], 0.f);
    }
}

// ---- global -> shared staging -------------------------------------------------------------------------
// Element i (0 <= i < TOTAL) of a staged buffer: thread t handles i = t, t + THREADS, ... . All loads
// of a batch (up to 16 per thread) are issued before any store, so a buffer costs one memory round
// trip per batch instead of one per few elements. load(i) -> float (0 outside the tensor);
// store(i, value).
template <int TOTAL, class L, class S>
__device__ __forceinline__ void stage_copy(L load, S store) {
    constexpr int ITER = (TOTAL + THREADS - 1) / THREADS;
    constexpr int B = ITER < 16 ? (ITER > 0 ? ITER : 1) : 16;
    if constexpr (TOTAL == 0) return;
#pragma unroll 1
    for (int base = 0; base < ITER; base += B) {
        float v[B];
#pragma unroll
        for (int j = 0; j < B; ++j) {
            const int i = (int)threadIdx.x + (base + j) * THREADS;
            v[j] = (base + j < ITER && i < TOTAL) ? load(i) : 0.f;
        }
#pragma unroll
        for (int j = 0; j < B; ++j) {
            const int i = (int)threadIdx.x + (base + j) * THREADS;
            if (base + j < ITER && i < TOTAL) store(i, v[j]);
        }
    }
}

// Register prefetch of one staged buffer of N elements (software pipelining, see RegPrefetch): load()
// issues a chunk's global loads, which stay in flight while the block computes the current chunk;
// store() writes them to shared memory after the block's barrier. FITS is false when a chunk needs
// more than 32 registers per thread.
template <int N>
struct Prefetch {
    static constexpr int I = (N + THREADS - 1) / THREADS;
    static constexpr bool FITS = I <= 32;
    float v[I > 0 ? I : 1];
    template <class L>
    __device__ __forceinline__ void load(L l) {
        const int t = threadIdx.x;
#pragma unroll
        for (int j = 0; j < I; ++j) v[j] = t + j * THREADS < N ? l(t + j * THREADS) : 0.f;
    }
    template <class S>
    __device__ __forceinline__ void store(S s) {
        const int t = threadIdx.x;
#pragma unroll
        for (int j = 0; j < I; ++j) if (t + j * THREADS < N) s(t + j * THREADS, v[j]);
    }
};

// ---- cp.async staging of the pw_dw and dw_pw rings -------------------------------------------------
// DW weights [n][kk] and biases of channels c0 .. c0+N (fp32) into dst[N*KK] then dst[N*KK + k];
// zero-filled past `count` channels and when there is no bias (HB == 0).
template <int N, int KK, int HB>
__device__ __forceinline__ void copy_dw_params(float* dst, const float* __restrict__ w, const float* __restrict__ bias,
                                               int c0, int count) {
    for (int t = threadIdx.x; t < N * (KK + 1); t += THREADS) {
        if (t < N * KK) {
            const bool ok = c0 + t / KK < count;
            cp_async<4>(dst + t, ok ? w + (long long)c0 * KK + t : w, ok);
        } else {
            const int c = c0 + t - N * KK;
            const bool ok = HB && c < count;
            cp_async<4>(dst + t, ok ? bias + c : w, ok);
        }
    }
}

// Rows c0 .. c0+Kp of a packed weight block wpb[C][Tfp] (storage dtype) into At[k][Ldw] with 16-byte
// copies; rows k >= Tc (K padding) and channels >= C are zero-filled.
template <int Tfp, int Kp, int Tc, int Ldw>
__device__ __forceinline__ void copy_packed_rows(T* dst, const T* __restrict__ wpb, const T* valid, int c0, int C) {
    constexpr int WU = 16 / (int)sizeof(T), WROW = Tfp / WU;
    for (int t = threadIdx.x; t < Kp * WROW; t += THREADS) {
        const int k = t / WROW, u = t - (t / WROW) * WROW, c = c0 + k;
        const bool ok = k < Tc && c < C;
        cp_async<16>(dst + k * Ldw + u * WU, ok ? wpb + (long long)c * Tfp + u * WU : valid, ok);
    }
}

// The halo windows of channels c0 .. c0+Rows (rows k >= Tc and channels >= C zero-filled) with 4-byte
// copies: window row yy of channel k lands at dst[k * Kstride + yy * Wwa], staged column j holding map
// column xs0 + j (xs0 even for fp16, W even: a pair is inside the map or outside it).
// Each thread keeps one 4-byte column u of the window (its map column and its border test fixed) and
// walks the rows r = (k, yy) with a stride of THREADS / UROW rows, so a copy costs a row update and one
// cp.async instead of a flat index's divisions. Offsets within one image are 32-bit (C*H*W < 2^31).
template <int Rows, int Tc, int Hh, int Wwa, int Kstride>
__device__ __forceinline__ void copy_halo(T* dst, const T* __restrict__ xb, int c0, int C, int H, int W, int iy0,
                                          int xs0) {
    constexpr int XU = 4 / (int)sizeof(T), UROW = Wwa / XU, NR = Rows * Hh;
    if constexpr (UROW <= THREADS) {
        constexpr int RSTEP = THREADS / UROW;
        const int t = threadIdx.x, u = t % UROW;
        if (t >= RSTEP * UROW) return;
        const int gx = xs0 + u * XU;
        const bool colok = gx >= 0 && gx + XU <= W;
        T* d = dst + u * XU;
#pragma unroll 4
        for (int r = t / UROW; r < NR; r += RSTEP) {
            const int k = r / Hh, yy = r - k * Hh, c = c0 + k, gy = iy0 + yy;
            const bool ok = colok && k < Tc && c < C && (unsigned)gy < (unsigned)H;
            cp_async<4>(d + k * Kstride + yy * Wwa, ok ? xb + ((c * H + gy) * W + gx) : xb, ok);
        }
    } else {
        for (int t = threadIdx.x; t < NR * UROW; t += THREADS) {
            const int r = t / UROW, u = t - r * UROW, k = r / Hh, yy = r - k * Hh;
            const int c = c0 + k, gy = iy0 + yy, gx = xs0 + u * XU;
            const bool ok = k < Tc && c < C && (unsigned)gy < (unsigned)H && gx >= 0 && gx + XU <= W;
            cp_async<4>(dst + k * Kstride + yy * Wwa + u * XU, ok ? xb + ((c * H + gy) * W + gx) : xb, ok);
        }
    }
}

// fp16 halo windows of a map with an odd W (XA = 2), whose rows alternate between 4-byte-aligned and
// unaligned starts: each thread copies whole rows (rows k >= Tc, channels >= C and rows outside the map
// zero-filled) with 4-byte cp.async from the aligned element at or before the window's first column
// ix0 (row shift s = 0 or 1: staged column j holds map column ix0 - s + j until `fix_halo_rows`). A
// pair holding map columns W - 1 and W copies 2 bytes (cp.async zero-fills the rest); a pair holding
// columns -1 and 0 copies both, column -1 (the row before) is zeroed by `fix_halo_rows`. Nothing is read
// outside the tensor: a row's pairs never pass its last element, and column -1 exists whenever its pair
// is aligned, since x itself is 4-byte aligned.
__device__ __forceinline__ int halo_row_shift(const T* p) { return (int)((reinterpret_cast<size_t>(p) >> 1) & 1); }

template <int Rows, int Tc, int Hh, int Wwa, int Kstride>
__device__ __forceinline__ void copy_halo_rows(T* dst, const T* __restrict__ xb, int c0, int C, int H, int W, int iy0,
                                               int ix0) {
    static_assert(Wwa % 2 == 0, "rows are staged as whole pairs");
    for (int r = threadIdx.x; r < Rows * Hh; r += THREADS) {
        const int k = r / Hh, yy = r - (r / Hh) * Hh, c = c0 + k, gy = iy0 + yy;
        const bool ok = k < Tc && c < C && gy >= 0 && gy < H;
        const T* row = xb + ((long long)c * H + gy) * W;
        const int s = ok ? halo_row_shift(row + ix0) : 0;
        T* d = dst + k * Kstride + yy * Wwa;
#pragma unroll
        for (int u = 0; u < Wwa / 2; ++u) {
            const int gx = ix0 - s + 2 * u;
            const bool lo = gx >= 0 && gx < W, hi = gx + 1 >= 0 && gx + 1 < W;
            const int n = ok ? (hi ? 4 : (lo ? 2 : 0)) : 0;
            cp_async_bytes<4>(d + 2 * u, n ? row + gx : xb, n);
        }
    }
}

// After this thread's `copy_halo_rows` copies have landed (same thread, same rows, before the barrier
// that publishes them): shift rows with s = 1 left by one and zero columns outside the map, so staged
// column j holds map column ix0 + j (0 outside the map) for j < Wneed.
template <int Rows, int Tc, int Hh, int Wwa, int Kstride, int Wneed>
__device__ __forceinline__ void fix_halo_rows(T* dst, const T* __restrict__ xb, int c0, int C, int H, int W, int iy0,
                                              int ix0) {
    static_assert(Wneed < Wwa, "a shifted row needs one spare staged column");
    for (int r = threadIdx.x; r < Rows * Hh; r += THREADS) {
        const int k = r / Hh, yy = r - (r / Hh) * Hh, c = c0 + k, gy = iy0 + yy;
        if (!(k < Tc && c < C && gy >= 0 && gy < H)) continue;
        const int s = halo_row_shift(xb + ((long long)c * H + gy) * W + ix0);
        if (s == 0 && ix0 >= 0) continue;  // aligned and no column left of the map: staged as is
        T* d = dst + k * Kstride + yy * Wwa;
#pragma unroll
        for (int j = 0; j < Wneed; ++j) {
            const int gx = ix0 + j;
            const T v = d[j + s];
            if (gx >= 0 && gx < W) d[j] = v;
            else from_f(d[j], 0.f);
        }
    }
}

// Element i of a chunk's halo windows for register staging (when 4-byte copies cannot serve the rows):
// channel c0 + i / Kn, staged position n = i % Kn (row n / Wwa, map column xs0 + n % Wwa); 0 outside
// the map, past C and for n >= Nvalid.
template <int Kn, int Nvalid, int Wwa>
__device__ __forceinline__ float halo_elem(int i, const T* __restrict__ xb, int c0, int C, int H, int W, int iy0,
                                           int xs0) {
    const int k = i / Kn, n = i - (i / Kn) * Kn, c = c0 + k;
    const int gy = iy0 + n / Wwa, gx = xs0 + n % Wwa;
    return (c < C && n < Nvalid && gy >= 0 && gy < H && gx >= 0 && gx < W) ? ldg_f(xb + ((long long)c * H + gy) * W + gx)
                                                                           : 0.f;
}

// A cp.async ring of S stages. S >= 2: chunk i + S - 1 is copied while chunk i is computed (S - 1
// commit groups in flight). S == 1 (a stage larger than the ring budget, tiles.ring_stages): chunk
// i + 1 is copied after every unit is done with chunk i, so copies do not overlap the math.
// Use: ring_prologue; per chunk i: ring_wait, __syncthreads, ring_next, compute, ring_refill.

// Fill the ring: chunks 0 .. max(S-1, 1)-1 (of nk) into their stages, one commit group per stage
// (empty groups past nk keep the group count of ring_wait right).
template <int S, class F>
__device__ __forceinline__ void ring_prologue(int nk, F issue) {
#pragma unroll 1
    for (int s = 0; s < (S > 1 ? S - 1 : 1); ++s) {
        if (s < nk) issue(s, s);
        cp_async_commit();
    }
}

// Wait until the oldest chunk's copy group has landed (the later ones may stay in flight).
template <int S>
__device__ __forceinline__ void ring_wait() {
    if constexpr (S > 1) cp_async_wait<S - 2>();
    else cp_async_wait<0>();
}

// Issue chunk i + S - 1 of nk into its stage and commit one group (empty past nk): the steady-state
// step of a ring of S >= 2 stages, after the barrier that ends every unit's use of chunk i - 1.
template <int S, class F>
__device__ __forceinline__ void ring_next(int i, int nk, F issue) {
    if constexpr (S > 1) {
        const int j = i + S - 1;
        if (j < nk) issue(j, j % S);
        cp_async_commit();
    }
}

// End of chunk i: a one-stage ring refills its stage with chunk i + 1 once every unit is done with it.
template <int S, class F>
__device__ __forceinline__ void ring_refill(int i, int nk, F issue) {
    if constexpr (S == 1) {
        __syncthreads();
        if (i + 1 < nk) issue(i + 1, 0);
        cp_async_commit();
    }
}

// Register prefetch, one chunk ahead, of the N staged elements of a chunk that cp.async cannot copy:
// ld(i, c0) reads element i of the chunk starting at channel c0. load(c0) issues a chunk's loads into
// registers; put(c0, st) hands them to st(i, value), or, when a chunk needs more than 32 registers
// per thread, reads chunk c0 then and there (one memory round trip per chunk).
template <int N, class L>
struct RegPrefetch {
    Prefetch<N> pf;
    L ld;
    int c0 = 0;
    __device__ __forceinline__ void load(int c) {
        if constexpr (Prefetch<N>::FITS) {
            c0 = c;
            pf.load([&](int i) { return ld(i, c0); });
        }
    }
    template <class S>
    __device__ __forceinline__ void put(int c, S st) {
        if constexpr (Prefetch<N>::FITS) pf.store(st);
        else stage_copy<N>([&](int i) { return ld(i, c); }, st);
    }
};
template <int N, class L>
__device__ __forceinline__ RegPrefetch<N, L> reg_prefetch(L ld) {
    return RegPrefetch<N, L>{{}, ld, 0};
}
