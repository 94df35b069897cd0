// Fused DW -> PW (depthwise k x k, then projection 1x1), NCHW. See fuseplanner/kernels/tiles.py (kind dw_pw).
//
// Block (blockIdx.x: spatial tile x KS, .y: filter tile, .z: image) computes TF PW filters x TH x TW
// pixels. For each chunk of TC DW channels it stages the chunk's input halo window (xw), DW weights and
// biases (wd) and the TC x TF PW weights (ws, A operand At[k][m], read from the launcher's packed copy
// wp[filter tile][C][TFP] in the storage dtype, so each row is one contiguous 16-byte-aligned run);
// computes the DW (+ bias, ACT1; dw_window, V output rows per thread) into ds (B operand, the
// communication buffer) and accumulates the PW in registers. The DW is recomputed once per filter tile.
//
// Pipeline: a STAGES-deep shared-memory ring filled with cp.async runs STAGES - 1 chunks ahead (two
// barriers per chunk; STAGES = 1 copies after the math, fused_common.cuh). The halo goes through
// cp.async in 4-byte units when XA = 1 (fp32 elements; fp16 pairs, the window starting at an even
// column so pairs never straddle the map border, which needs an even W); XA = 2 (fp16, odd W): 4-byte
// cp.async of whole rows from each row's aligned start, realigned by the copying thread once they land
// (copy_halo_rows / fix_halo_rows, fused_common.cuh); with XA = 0 (x not 4-byte aligned) it is
// prefetched through registers one chunk ahead instead.
//
// Split reduction (KS > 1): the KS blocks of a thread-block cluster (__cluster_dims__(KS, 1, 1),
// consecutive blockIdx.x) share one output tile and take every KS-th channel chunk; each leaves its
// fp32 partial tile in its shared memory, and after a cluster barrier each block sums a 1/KS share of
// the tile over the cluster's shared memory (DSMEM) and writes it with bias, ACT2 and the residual.
//
// Defines: T_HALF PREC THREADS TH TW TF TC KH KW SH SW DLH DLW ACT1 ACT2 HAS_B1 HAS_B2 HAS_RES
//          G2M G2N ME2 NE2 DWV STAGES KS XA TFP SMEM_TOTAL.
#include "fused_common.cuh"

#ifndef XA
#define XA 1
#endif
static_assert(XA != 2 || T_HALF, "row-aligned halo copies are the fp16 path");

constexpr int E = (int)sizeof(T);
constexpr int HH = (TH - 1) * SH + (KH - 1) * DLH + 1;
constexpr int WW = (TW - 1) * SW + (KW - 1) * DLW + 1;
constexpr int XU = T_HALF ? 2 : 1;             // elements per 4-byte halo copy
constexpr int WWA = rup(WW + XU - 1, XU);      // window row as staged (fp16: from an even column)
constexpr int WIN = HH * WWA, P = TH * TW, NP = rup(P, 8), KK = KH * KW;
constexpr int KP = rup(TC, 16), MP = rup(TF, 16);
constexpr int LDD = NP + 8, LDW = MP + 8, LDC = NP + 8;
constexpr int WU = 16 / E;                     // elements per 16-byte weight copy
static_assert(TFP % WU == 0 && TFP <= LDW, "packed weight rows must be whole 16-byte units");
constexpr int SZ_XW = al128(TC * WIN * E), SZ_WD = al128(TC * (KK + 1) * 4), SZ_WS = al128(KP * LDW * E);
constexpr int SZ_STAGE = SZ_XW + SZ_WD + SZ_WS;
constexpr int SZ_DS = al128(KP * LDD * E), SZ_ST = al128(MP * LDC * 4);
constexpr int O_DS = STAGES * SZ_STAGE;
constexpr int SMEM = imax(O_DS + SZ_DS, SZ_ST);
static_assert(SMEM == SMEM_TOTAL, "shared-memory layout disagrees with fuseplanner.kernels.tiles");
static_assert(STAGES >= 1, "the ring needs a stage");
constexpr int K2 = PREC == 0 ? TC : KP;

extern "C" __global__ void __launch_bounds__(THREADS) CLUSTER_ATTR
fused_dw_pw(const T* __restrict__ x, const float* __restrict__ w1, const float* __restrict__ b1,
            const T* __restrict__ wp, const float* __restrict__ b2, const T* __restrict__ res,
            T* __restrict__ out, int C, int N, int H, int W, int Ho, int Wo, int pt, int pl, int tiles_w) {
    extern __shared__ __align__(128) unsigned char smem[];
    T* ds = reinterpret_cast<T*>(smem + O_DS);
    float* st = reinterpret_cast<float*>(smem);
    const int tid = threadIdx.x;
    const int rank = KS > 1 ? (int)(blockIdx.x % KS) : 0;
    const int tile = blockIdx.x / KS;
    const int oy0 = (tile / tiles_w) * TH, ox0 = (tile % tiles_w) * TW;
    const int fb = blockIdx.y, f0 = fb * TF, b = blockIdx.z;
    const int iy0 = oy0 * SH - pt, ix0 = ox0 * SW - pl;
    const int xoff = T_HALF && XA != 2 ? (ix0 & 1) : 0;   // staged column j holds map column xs0 + j
    const int xs0 = ix0 - xoff;
    const T* xb = x + (long long)b * C * H * W;
    const T* wpb = wp + (long long)fb * C * TFP;
    const int nch = (C + TC - 1) / TC;
    const int nk = nch > rank ? (nch - rank + KS - 1) / KS : 0;  // this block's chunks: rank, rank + KS, ...

    auto xw_of = [&](int s) { return reinterpret_cast<T*>(smem + s * SZ_STAGE); };
    auto wd_of = [&](int s) { return reinterpret_cast<float*>(smem + s * SZ_STAGE + SZ_XW); };
    auto ws_of = [&](int s) { return reinterpret_cast<T*>(smem + s * SZ_STAGE + SZ_XW + SZ_WD); };
    auto chunk0 = [&](int i) { return (rank + i * KS) * TC; };

    // Asynchronous copies of chunk i into stage s (zero-filled outside the tensors).
    auto issue = [&](int i, int s) {
        const int c0 = chunk0(i);
        copy_dw_params<TC, KK, HAS_B1>(wd_of(s), w1, b1, c0, C);
        copy_packed_rows<TFP, KP, TC, LDW>(ws_of(s), wpb, wp, c0, C);
#if XA == 1
        copy_halo<TC, TC, HH, WWA, WIN>(xw_of(s), xb, c0, C, H, W, iy0, xs0);
#elif XA == 2
        copy_halo_rows<TC, TC, HH, WWA, WIN>(xw_of(s), xb, c0, C, H, W, iy0, xs0);
#endif
    };

#if XA == 0
    // Register prefetch of the halo window (one chunk ahead), for rows that 4-byte copies cannot serve.
    auto hp = reg_prefetch<TC * WIN>(
        [&](int i, int c) { return halo_elem<WIN, WIN, WWA>(i, xb, c, C, H, W, iy0, xs0); });
    if (nk > 0) hp.load(chunk0(0));
#endif

    zero_operand_padding<KP, NP, TC, P, LDD>(ds);
    BlockAcc<ME2, NE2, G2M, G2N> acc;
    acc.zero();
    ring_prologue<STAGES>(nk, issue);
#pragma unroll 1
    for (int i = 0; i < nk; ++i) {
        const int s = i % STAGES, c0 = chunk0(i);
        ring_wait<STAGES>();
#if XA == 2
        fix_halo_rows<TC, TC, HH, WWA, WIN, WW>(xw_of(s), xb, c0, C, H, W, iy0, xs0);
#endif
#if XA == 0
        T* xwp = xw_of(s);
        hp.put(c0, [&](int t, float v) { from_f(xwp[t], v); });
#endif
        __syncthreads();
        ring_next<STAGES>(i, nk, issue);
#if XA == 0
        if (i + 1 < nk) hp.load(chunk0(i + 1));
#endif
        const float* wd = wd_of(s);
        dw_window<DWV, TC, TH, TW, KH, KW, SH, SW, DLH, DLW, WWA, WIN>(
            xw_of(s) + xoff, wd, dw_to_operand<ACT1, HAS_B1, TC, KK, TW, LDD>(ds, wd, c0, C));
        __syncthreads();
        acc.template mac<K2, LDW, LDD>(ws_of(s), ds);
        ring_refill<STAGES>(i, nk, issue);
    }
    cp_async_wait<0>();
    __syncthreads();  // the staging tile aliases the ring
    acc.template store<LDC>(st);
#if KS > 1
    cluster_sync();   // every block's partial tile is in its shared memory
    for (int i = rank * THREADS + tid; i < TF * P; i += KS * THREADS) {
        const int m = i / P, p = i - (i / P) * P, f = f0 + m;
        const int gy = oy0 + p / TW, gx = ox0 + p % TW;
        float a = 0.f;
#pragma unroll
        for (int q = 0; q < KS; ++q) a += ld_cluster(st + m * LDC + p, q);
        if (f < N && gy < Ho && gx < Wo) {
            const long long off = (((long long)b * N + f) * Ho + gy) * Wo + gx;
            float v = act_t<ACT2>(a + bias_t<HAS_B2>(b2, f));
            st_f(out + off, add_residual(v, res, off));
        }
    }
    cluster_sync();   // keep this block's shared memory alive until the others have read it
#else
    __syncthreads();
#pragma unroll 2
    for (int i = tid; i < TF * P; i += THREADS) {
        const int m = i / P, p = i - (i / P) * P, f = f0 + m;
        const int gy = oy0 + p / TW, gx = ox0 + p % TW;
        if (f < N && gy < Ho && gx < Wo) {
            const long long off = (((long long)b * N + f) * Ho + gy) * Wo + gx;
            float v = act_t<ACT2>(st[m * LDC + p] + bias_t<HAS_B2>(b2, f));
            st_f(out + off, add_residual(v, res, off));
        }
    }
#endif
}
