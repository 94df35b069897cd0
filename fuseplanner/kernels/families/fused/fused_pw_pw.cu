// Fused PW -> PW (two 1x1 convolutions, or linear -> act -> linear over channel-last tokens).
// See fuseplanner/kernels/tiles.py (kind pw_pw).
//
// Block (blockIdx.x: pixel/token tile, .y: filter tile of the second PW, .z: image/sequence) stages
// the whole input tile C1 x TH*TW once (xs, B operand of the first PW). For each chunk of TC mid
// channels it computes the first PW into fp32 mf (A operand At[k][m]: the chunk's block of the
// launcher's packed copy w1p[C2 / TC chunks][C1][TCP]), applies bias + ACT1 into ms (the communication
// buffer; ms is mf for fp32 storage) and accumulates the second PW in registers (A operand: rows
// c0 .. c0+TC of w2p[filter tile][C2][TFP]). Both packed copies are in the storage dtype. The output
// tile is staged in fp32 shared memory (aliasing the ring), then bias + ACT2 + residual.
//
// Pipeline: a STAGES-deep cp.async ring of (first PW chunk, second PW chunk) runs STAGES - 1 chunks
// ahead (STAGES = 1: after the math, fused_common.cuh); the input tile is copied with the first
// chunk. It goes through 4-byte cp.async when XA = 1 (fp32 elements, transposed for CL = 1; fp16
// pairs of an NCHW row from an even column, which needs even W and TW), else through registers once
// (stage_copy) while the ring fills.
//
// CL = 1: channel-last tokens, x (batch, tokens, C1) -> out (batch, tokens, C3); H = tokens, W = 1.
// Defines: T_HALF PREC THREADS TH TW TF TC C1 CL ACT1 ACT2 HAS_B1 HAS_B2 HAS_RES
//          G1M G1N ME1 NE1 G2M G2N ME2 NE2 STAGES XA TCP TFP SMEM_TOTAL.
#include "fused_common.cuh"

#ifndef CL
#define CL 0
#endif
#ifndef XA
#define XA 1
#endif

constexpr int E = (int)sizeof(T);
constexpr int P = TH * TW, NP = rup(P, 8), KP = rup(TC, 16), MP = rup(TF, 16), C1P = rup(C1, 16);
constexpr int LDX = NP + 8, LDW1 = KP + 8, LDM = NP + 8, LDW2 = MP + 8, LDC = NP + 8;
constexpr int WU = 16 / E;                     // elements per 16-byte weight copy
static_assert(TCP % WU == 0 && TCP <= LDW1 && TFP % WU == 0 && TFP <= LDW2,
              "packed weight rows must be whole 16-byte units");
static_assert(!XA || !T_HALF || (!CL && TW % 2 == 0), "4-byte fp16 copies need pairs of an NCHW row");
constexpr int SZ_W1 = al128(C1P * LDW1 * E), SZ_W2 = al128(KP * LDW2 * E), SZ_STAGE = SZ_W1 + SZ_W2;
constexpr int SZ_XS = al128(C1P * LDX * E), SZ_MF = al128(KP * LDM * 4), SZ_MS = T_HALF ? al128(KP * LDM * 2) : 0;
constexpr int SZ_ST = al128(MP * LDC * 4);
constexpr int O_XS = STAGES * SZ_STAGE, O_MF = O_XS + SZ_XS, O_MS = O_MF + SZ_MF;
constexpr int SMEM = imax(O_MS + SZ_MS, SZ_ST);
static_assert(SMEM == SMEM_TOTAL, "shared-memory layout disagrees with fuseplanner.kernels.tiles");
static_assert(STAGES >= 1, "the ring needs a stage");
constexpr int K1 = PREC == 0 ? C1 : C1P, K2 = PREC == 0 ? TC : KP;

#if CL
// Element i of the token tile (xs[k][p] = x[p0 + p][k], channels k < C1P): consecutive i are
// consecutive channels of one token, so a warp reads contiguous memory; 0 past C1 and past H.
__device__ __forceinline__ bool token_elem(int i, int p0, int H, int& k, int& p) {
    p = i / C1P;
    k = i - p * C1P;
    return k < C1 && p0 + p < H;
}
#endif

#if XA
// The input tile into xs (K padding rows C1 .. C1P zero) with 4-byte cp.async (XA), in the caller's
// open copy group. Defined only with XA: an fp16 tile one column wide has no 4-byte pairs, and
// copy_halo's instantiation for it would not compile.
__device__ __forceinline__ void copy_input(T* xs, const T* __restrict__ xb, int oy0, int ox0, int H, int W) {
#if CL
    for (int t = threadIdx.x; t < P * C1P; t += THREADS) {
        int k, p;
        const bool ok = token_elem(t, oy0, H, k, p);
        cp_async<4>(xs + k * LDX + p, ok ? xb + (long long)(oy0 + p) * C1 + k : xb, ok);
    }
#else
    copy_halo<C1P, C1, TH, TW, LDX>(xs, xb, 0, C1, H, W, oy0, ox0);
#endif
}
#endif

// The input tile into xs through registers (!XA: fp16 tokens, odd widths, unaligned x); all of
// C1P x NP is written, 0 outside the tensor. In NCHW only the tile's P pixels of each row are loaded
// and the padding columns P .. NP-1 are zeroed apart: a 1x1 map (squeeze-excitation) loads C1P
// elements, not C1P x 8, and waits for one batch of loads instead of eight.
__device__ __forceinline__ void stage_input(T* xs, const T* __restrict__ xb, int oy0, int ox0, int H, int W) {
#if CL
    stage_copy<NP * C1P>(
        [&](int i) {
            int k, p;
            return token_elem(i, oy0, H, k, p) && p < P ? ldg_f(xb + (long long)(oy0 + p) * C1 + k) : 0.f;
        },
        [&](int i, float v) { from_f(xs[(i % C1P) * LDX + i / C1P], v); });
#else
    stage_copy<C1P * P>([&](int i) { return halo_elem<P, P, TW>(i, xb, 0, C1, H, W, oy0, ox0); },
                        [&](int i, float v) { from_f(xs[(i / P) * LDX + i % P], v); });
    if constexpr (NP > P) {
        constexpr int PAD = NP - P;
        for (int i = threadIdx.x; i < C1P * PAD; i += THREADS) from_f(xs[(i / PAD) * LDX + P + i % PAD], 0.f);
    }
#endif
}

extern "C" __global__ void __launch_bounds__(THREADS)
fused_pw_pw(const T* __restrict__ x, const T* __restrict__ w1p, const float* __restrict__ b1,
            const T* __restrict__ w2p, const float* __restrict__ b2, const T* __restrict__ res,
            T* __restrict__ out, int C2, int C3, int H, int W, int tiles_w) {
    extern __shared__ __align__(128) unsigned char smem[];
    T* xs = reinterpret_cast<T*>(smem + O_XS);
    float* mf = reinterpret_cast<float*>(smem + O_MF);
    T* ms = reinterpret_cast<T*>(smem + (T_HALF ? O_MS : O_MF));
    float* st = reinterpret_cast<float*>(smem);
    const int tid = threadIdx.x;
    const int oy0 = (blockIdx.x / tiles_w) * TH, ox0 = (blockIdx.x % tiles_w) * TW;
    const int f0 = blockIdx.y * TF, b = blockIdx.z;
    const long long HW = (long long)H * W;
    const T* xb = x + (long long)b * C1 * HW;
    const int nk = (C2 + TC - 1) / TC;

    auto w1_of = [&](int s) { return reinterpret_cast<T*>(smem + s * SZ_STAGE); };
    auto w2_of = [&](int s) { return reinterpret_cast<T*>(smem + s * SZ_STAGE + SZ_W1); };
    // Asynchronous copies of chunk i into stage s: the first PW's block i of w1p (C1 rows, zero K
    // padding) and rows c0 .. c0+TC of the second's filter tile (zero past C2 and in the K padding).
    // The tile's base is recomputed from the arguments each time: kept live through the loop, such
    // pointers are what ptxas spills.
    auto issue = [&](int i, int s) {
        const T* w2pb = w2p + (long long)blockIdx.y * C2 * TFP;
        copy_packed_rows<TCP, C1P, C1, LDW1>(w1_of(s), w1p + (long long)i * C1 * TCP, w1p, 0, C1);
        copy_packed_rows<TFP, KP, TC, LDW2>(w2_of(s), w2pb, w2p, i * TC, C2);
    };

#if XA
    copy_input(xs, xb, oy0, ox0, H, W);  // joins chunk 0's copy group
#endif
    ring_prologue<STAGES>(nk, issue);
#if !XA
    stage_input(xs, xb, oy0, ox0, H, W);  // while the ring fills
#endif
    BlockAcc<ME2, NE2, G2M, G2N> acc;
    acc.zero();
#pragma unroll 1
    for (int i = 0; i < nk; ++i) {
        const int s = i % STAGES, c0 = i * TC;
        ring_wait<STAGES>();
        __syncthreads();  // chunk i landed; every unit is done with chunk i - 1 (its stage and mf/ms)
        ring_next<STAGES>(i, nk, issue);
        gemm_stream<ME1, NE1, G1M, G1N, K1, LDW1, LDX, LDM, false>(w1_of(s), xs, mf);
        __syncthreads();
        for (int t = tid; t < KP * NP; t += THREADS) {
            const int k = t / NP, p = t - (t / NP) * NP;
            float v = 0.f;
            if (k < TC && c0 + k < C2 && p < P) v = act_t<ACT1>(mf[k * LDM + p] + bias_t<HAS_B1>(b1, c0 + k));
            ms[k * LDM + p] = stage(v);
        }
        __syncthreads();
        acc.template mac<K2, LDW2, LDM>(w2_of(s), ms);
        ring_refill<STAGES>(i, nk, issue);
    }
    cp_async_wait<0>();
    __syncthreads();  // the staging tile aliases the ring
    acc.template store<LDC>(st);
    __syncthreads();
    T* ob = out + (long long)b * C3 * HW;
    const T* rb = HAS_RES ? res + (long long)b * C3 * HW : res;
#if CL
    for (int i = tid; i < TF * P; i += THREADS) {
        const int p = i / TF, m = i % TF, f = f0 + m, gy = oy0 + p;
        if (f < C3 && gy < H) {
            const long long off = (long long)gy * C3 + f;
            float v = act_t<ACT2>(st[m * LDC + p] + bias_t<HAS_B2>(b2, f));
            st_f(ob + off, add_residual(v, rb, off));
        }
    }
#else
#pragma unroll 2
    for (int i = tid; i < TF * P; i += THREADS) {
        const int m = i / P, p = i % P, f = f0 + m;
        const int gy = oy0 + p / TW, gx = ox0 + p % TW;
        if (f < C3 && gy < H && gx < W) {
            const long long off = f * HW + (long long)gy * W + gx;
            float v = act_t<ACT2>(st[m * LDC + p] + bias_t<HAS_B2>(b2, f));
            st_f(ob + off, add_residual(v, rb, off));
        }
    }
#endif
}
