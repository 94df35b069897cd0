// Fused PW -> DW (expansion 1x1, then depthwise k x k), NCHW. See fuseplanner/kernels/tiles.py (kind pw_dw).
//
// Block (blockIdx.x: spatial tile, .y: filter tile, .z: image) computes TF expanded channels x TH x TW
// DW outputs. For each chunk of TC PW input channels it stages the chunk's input halo window (xs,
// B operand, rows of WWA staged columns) and the TC x TF PW weights (ws, A operand At[k][m], read from
// the launcher's packed copy wp[filter tile][C][TFP] in the storage dtype), and accumulates the
// expanded window TF x HH*WWA in fp32 shared memory (cs, the communication buffer); the last chunk's
// GEMM stores bias + ACT1 of the sum, with window positions outside the map set to 0 (the DW's zero
// padding applies to the PW output). The DW (+ bias, ACT2, residual; dw_window, V output rows per
// thread) reads cs and writes the output.
//
// Pipeline: a STAGES-deep cp.async ring of (halo window, PW weights) runs STAGES - 1 chunks ahead
// (STAGES = 1: after the math, fused_common.cuh);
// the DW weights and biases are copied with the first chunk. The halo goes through 4-byte cp.async
// when XA = 1 (fp32 elements; fp16 pairs from an even column, which needs an even W); XA = 2 (fp16, odd
// W): 4-byte cp.async of whole rows from each row's aligned start, realigned by the copying thread
// once they land (copy_halo_rows / fix_halo_rows, fused_common.cuh); XA = 0 (x not 4-byte aligned):
// prefetched through registers one chunk ahead.
//
// Defines: T_HALF PREC THREADS TH TW TF TC KH KW SH SW DLH DLW ACT1 ACT2 HAS_B1 HAS_B2 HAS_RES
//          G1M G1N ME1 NE1 (GEMM groups, from launch.py beside this file) DWV STAGES XA TFP SMEM_TOTAL.
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
constexpr int N1 = HH * WWA, N1P = rup(N1, 8), P = TH * TW, KK = KH * KW;
constexpr int KP = rup(TC, 16), MP = rup(TF, 16);
constexpr int LDX = N1P + 8, LDW = MP + 8, LDC = N1P + 8;
constexpr int WU = 16 / E;                     // elements per 16-byte weight copy
static_assert(TFP % WU == 0 && TFP <= LDW, "packed weight rows must be whole 16-byte units");
constexpr int SZ_XS = al128(KP * LDX * E), SZ_WS = al128(KP * LDW * E);
constexpr int SZ_STAGE = SZ_XS + SZ_WS;
constexpr int SZ_CS = al128(MP * LDC * 4), SZ_WD = al128(TF * (KK + 1) * 4);
constexpr int O_CS = STAGES * SZ_STAGE, O_WD = O_CS + SZ_CS, SMEM = O_WD + SZ_WD;
static_assert(SMEM == SMEM_TOTAL, "shared-memory layout disagrees with fuseplanner.kernels.tiles");
static_assert(STAGES >= 1, "the ring needs a stage");
constexpr int K1 = PREC == 0 ? TC : KP;

extern "C" __global__ void __launch_bounds__(THREADS)
fused_pw_dw(const T* __restrict__ x, const T* __restrict__ wp, const float* __restrict__ b1,
            const float* __restrict__ w2, const float* __restrict__ b2, const T* __restrict__ res,
            T* __restrict__ out, int C, int CE, int H, int W, int Ho, int Wo, int pt, int pl, int tiles_w) {
    extern __shared__ __align__(128) unsigned char smem[];
    float* cs = reinterpret_cast<float*>(smem + O_CS);
    float* wd = reinterpret_cast<float*>(smem + O_WD);
    const int oy0 = (blockIdx.x / tiles_w) * TH, ox0 = (blockIdx.x % tiles_w) * TW;
    const int fb = blockIdx.y, f0 = fb * TF, b = blockIdx.z;
    const int iy0 = oy0 * SH - pt, ix0 = ox0 * SW - pl;
    const int xoff = T_HALF && XA != 2 ? (ix0 & 1) : 0;   // staged column j holds map column xs0 + j
    const int xs0 = ix0 - xoff;
    const T* xb = x + (long long)b * C * H * W;
    const T* wpb = wp + (long long)fb * C * TFP;
    const int nk = (C + TC - 1) / TC;

    auto xs_of = [&](int s) { return reinterpret_cast<T*>(smem + s * SZ_STAGE); };
    auto ws_of = [&](int s) { return reinterpret_cast<T*>(smem + s * SZ_STAGE + SZ_XS); };

    // DW weights and biases of the filter tile (in the first copy group).
    copy_dw_params<TF, KK, HAS_B2>(wd, w2, b2, f0, CE);
    // Asynchronous copies of chunk i into stage s (zero-filled outside the tensors and K padding).
    auto issue = [&](int i, int s) {
        const int c0 = i * TC;
        copy_packed_rows<TFP, KP, TC, LDW>(ws_of(s), wpb, wp, c0, C);
#if XA == 1
        copy_halo<KP, TC, HH, WWA, LDX>(xs_of(s), xb, c0, C, H, W, iy0, xs0);
#elif XA == 2
        copy_halo_rows<KP, TC, HH, WWA, LDX>(xs_of(s), xb, c0, C, H, W, iy0, xs0);
#endif
    };
#if XA == 0
    // Rows k >= TC of every stage (K padding) must be finite, since they meet zero weights; register
    // prefetch never writes them, so zero them once.
    constexpr int PAD = (KP - TC) * N1P, PADD = PAD > 0 ? PAD : 1;
    for (int t = threadIdx.x; t < STAGES * PAD; t += THREADS) {
        const int s = t / PADD, r = t - (t / PADD) * PADD;
        from_f(xs_of(s)[(TC + r / N1P) * LDX + r % N1P], 0.f);
    }
    auto hp = reg_prefetch<TC * N1P>(
        [&](int i, int c) { return halo_elem<N1P, N1, WWA>(i, xb, c, C, H, W, iy0, xs0); });
    hp.load(0);
#endif

    ring_prologue<STAGES>(nk, issue);
#pragma unroll 1
    for (int i = 0; i < nk; ++i) {
        const int s = i % STAGES;
        ring_wait<STAGES>();
#if XA == 2
        fix_halo_rows<KP, TC, HH, WWA, LDX, WW>(xs_of(s), xb, i * TC, C, H, W, iy0, xs0);
#endif
#if XA == 0
        T* xsp = xs_of(s);
        hp.put(i * TC, [&](int t, float v) { from_f(xsp[(t / N1P) * LDX + t % N1P], v); });
#endif
        __syncthreads();
        ring_next<STAGES>(i, nk, issue);
#if XA == 0
        if (i + 1 < nk) hp.load((i + 1) * TC);
#endif
        // The last chunk's GEMM stores bias + ACT1 of the sum, 0 outside the map (window_epilogue). Four
        // calls rather than a runtime `last` test inside one epilogue, which made ptxas spill.
        const auto epi = window_epilogue<ACT1, HAS_B1, WWA, N1>(b1, f0, CE, iy0, xs0, H, W);
        if (i + 1 < nk) {
            if (i == 0) gemm_stream<ME1, NE1, G1M, G1N, K1, LDW, LDX, LDC, false>(ws_of(s), xs_of(s), cs);
            else gemm_stream<ME1, NE1, G1M, G1N, K1, LDW, LDX, LDC, true>(ws_of(s), xs_of(s), cs);
        } else if (i == 0) {
            gemm_stream<ME1, NE1, G1M, G1N, K1, LDW, LDX, LDC, false>(ws_of(s), xs_of(s), cs, epi);
        } else {
            gemm_stream<ME1, NE1, G1M, G1N, K1, LDW, LDX, LDC, true>(ws_of(s), xs_of(s), cs, epi);
        }
        ring_refill<STAGES>(i, nk, issue);
    }
    cp_async_wait<0>();
    __syncthreads();
    // DW (+ bias, ACT2, residual) over the expanded window.
    const long long ob = (long long)b * CE * Ho * Wo;
    dw_window<DWV, TF, TH, TW, KH, KW, SH, SW, DLH, DLW, WWA, LDC>(
        cs + xoff, wd, [=](int m, int oy, int ox, float acc) {
            const int f = f0 + m, gy = oy0 + oy, gx = ox0 + ox;
            if (f < CE && gy < Ho && gx < Wo) {
                const long long off = ob + (f * Ho + gy) * Wo + gx;
                const float v = act_t<ACT2>(acc + (HAS_B2 ? wd[TF * KK + m] : 0.f));
                st_f(out + off, add_residual(v, res, off));
            }
        });
}
