// Fused PW -> DW -> PW: a whole inverted-residual block (expansion 1x1, depthwise k x k, projection
// 1x1, optional residual add of the block input), NCHW. See fuseplanner/kernels/tiles.py (kind pw_dw_pw).
//
// Block (blockIdx.x: spatial tile, .y: projection filter tile, .z: image) stages the input halo window
// C1 x HH*WWA once (xs, B operand of the expansion; rows of WWA staged columns). For each chunk of TC
// expanded channels it computes the expansion over the window into fp32 e (A operand At[k][m]: the
// chunk's block of the launcher's packed copy w1p[CE / TC chunks][C1][TCP]; the GEMM stores bias + ACT1
// with window positions outside the map set to 0, the DW's zero padding of the expansion's output),
// runs the DW (+ bias, ACT2; dw_window) into ds (B operand, the communication buffer) and
// accumulates the projection in registers (A operand: rows c0 .. c0+TC of w3p[filter tile][CE][TFP]).
// Both packed copies are in the storage dtype. The output tile is staged in fp32 shared memory
// (aliasing the ring), then bias + ACT3 + residual.
//
// Pipeline: a STAGES-deep cp.async ring of (expansion chunk, DW weights and biases, projection chunk)
// runs STAGES - 1 chunks ahead (STAGES = 1: after the math, fused_common.cuh); the halo window is
// copied once, with the first chunk through 4-byte cp.async when XA = 1 (fp32 elements; fp16 pairs
// from an even column, which needs an even W), else through registers (stage_copy) before the ring
// starts.
//
// Defines: T_HALF PREC THREADS TH TW TF TC C1 KH KW SH SW DLH DLW ACT1 ACT2 ACT3 HAS_B1 HAS_B2
//          HAS_B3 HAS_RES G1M G1N ME1 NE1 G2M G2N ME2 NE2 DWV STAGES XA TCP TFP SMEM_TOTAL.
#include "fused_common.cuh"

#ifndef XA
#define XA 1
#endif

constexpr int E = (int)sizeof(T);
constexpr int HH = (TH - 1) * SH + (KH - 1) * DLH + 1;
constexpr int WW = (TW - 1) * SW + (KW - 1) * DLW + 1;
constexpr int XU = T_HALF ? 2 : 1;             // elements per 4-byte halo copy
constexpr int WWA = rup(WW + XU - 1, XU);      // window row as staged (fp16: from an even column)
constexpr int N1 = HH * WWA, N1P = rup(N1, 8), P = TH * TW, NP = rup(P, 8), KK = KH * KW;
constexpr int KP = rup(TC, 16), MP = rup(TF, 16), C1P = rup(C1, 16);
constexpr int LDX = N1P + 8, LDW1 = KP + 8, LDE = N1P + 8, LDD = NP + 8, LDW2 = MP + 8, LDC = NP + 8;
constexpr int WU = 16 / E;                     // elements per 16-byte weight copy
static_assert(TCP % WU == 0 && TCP <= LDW1 && TFP % WU == 0 && TFP <= LDW2,
              "packed weight rows must be whole 16-byte units");
constexpr int SZ_W1 = al128(C1P * LDW1 * E), SZ_WD = al128(TC * (KK + 1) * 4), SZ_W2 = al128(KP * LDW2 * E);
constexpr int SZ_STAGE = SZ_W1 + SZ_WD + SZ_W2;
constexpr int SZ_XS = al128(C1P * LDX * E), SZ_E = al128(KP * LDE * 4), SZ_DS = al128(KP * LDD * E);
constexpr int SZ_ST = al128(MP * LDC * 4);
constexpr int O_XS = STAGES * SZ_STAGE, O_E = O_XS + SZ_XS, O_DS = O_E + SZ_E;
constexpr int SMEM = imax(O_DS + SZ_DS, SZ_ST);
static_assert(SMEM == SMEM_TOTAL, "shared-memory layout disagrees with fuseplanner.kernels.tiles");
static_assert(STAGES >= 1, "the ring needs a stage");
constexpr int K1 = PREC == 0 ? C1 : C1P, K2 = PREC == 0 ? TC : KP;

extern "C" __global__ void __launch_bounds__(THREADS)
fused_pw_dw_pw(const T* __restrict__ x, const T* __restrict__ w1p, const float* __restrict__ b1,
               const float* __restrict__ wdw, const float* __restrict__ b2, const T* __restrict__ w3p,
               const float* __restrict__ b3, const T* __restrict__ res, T* __restrict__ out, int CE, int C3,
               int H, int W, int Ho, int Wo, int pt, int pl, int tiles_w) {
    extern __shared__ __align__(128) unsigned char smem[];
    T* xs = reinterpret_cast<T*>(smem + O_XS);
    float* e = reinterpret_cast<float*>(smem + O_E);
    T* ds = reinterpret_cast<T*>(smem + O_DS);
    float* st = reinterpret_cast<float*>(smem);
    const int tid = threadIdx.x;
    const int oy0 = (blockIdx.x / tiles_w) * TH, ox0 = (blockIdx.x % tiles_w) * TW;
    const int f0 = blockIdx.y * TF, b = blockIdx.z;
    const int iy0 = oy0 * SH - pt, ix0 = ox0 * SW - pl;
    const int xoff = T_HALF ? (ix0 & 1) : 0;   // staged column j holds map column xs0 + j
    const int xs0 = ix0 - xoff;
    const T* xb = x + (long long)b * C1 * H * W;
    const int nk = (CE + TC - 1) / TC;

    auto w1_of = [&](int s) { return reinterpret_cast<T*>(smem + s * SZ_STAGE); };
    auto wd_of = [&](int s) { return reinterpret_cast<float*>(smem + s * SZ_STAGE + SZ_W1); };
    auto w2_of = [&](int s) { return reinterpret_cast<T*>(smem + s * SZ_STAGE + SZ_W1 + SZ_WD); };
    // Asynchronous copies of chunk i into stage s: the expansion's block i of w1p (C1 rows, zero K
    // padding), the chunk's DW weights and biases, and rows c0 .. c0+TC of the projection's filter
    // tile (zero past CE and in the K padding). The tile's base is recomputed from the arguments each
    // time: kept live through the loop, such pointers are what ptxas spills.
    auto issue = [&](int i, int s) {
        const int c0 = i * TC;
        const T* w3pb = w3p + (long long)blockIdx.y * CE * TFP;
        copy_packed_rows<TCP, C1P, C1, LDW1>(w1_of(s), w1p + (long long)i * C1 * TCP, w1p, 0, C1);
        copy_dw_params<TC, KK, HAS_B2>(wd_of(s), wdw, b2, c0, CE);
        copy_packed_rows<TFP, KP, TC, LDW2>(w2_of(s), w3pb, w3p, c0, CE);
    };

#if XA
    copy_halo<C1P, C1, HH, WWA, LDX>(xs, xb, 0, C1, H, W, iy0, xs0);  // joins chunk 0's copy group
#else
    // through registers, all of C1P x N1P (0 outside the map); before the ring, as overlapping the two
    // made ptxas spill
    stage_copy<C1P * N1P>([&](int i) { return halo_elem<N1P, N1, WWA>(i, xb, 0, C1, H, W, iy0, xs0); },
                          [&](int i, float v) { from_f(xs[(i / N1P) * LDX + i % N1P], v); });
#endif
    zero_operand_padding<KP, NP, TC, P, LDD>(ds);
    ring_prologue<STAGES>(nk, issue);
    BlockAcc<ME2, NE2, G2M, G2N> acc;
    acc.zero();
#pragma unroll 1
    for (int i = 0; i < nk; ++i) {
        const int s = i % STAGES, c0 = i * TC;
        ring_wait<STAGES>();
        __syncthreads();  // chunk i landed; every unit is done with chunk i - 1 (its stage, e and ds)
        ring_next<STAGES>(i, nk, issue);
        // The expansion's GEMM stores bias + ACT1 of each sum, 0 outside the map (window_epilogue).
        gemm_stream<ME1, NE1, G1M, G1N, K1, LDW1, LDX, LDE, false>(
            w1_of(s), xs, e, window_epilogue<ACT1, HAS_B1, WWA, N1>(b1, c0, CE, iy0, xs0, H, W));
        __syncthreads();
        const float* wd = wd_of(s);
        dw_window<DWV, TC, TH, TW, KH, KW, SH, SW, DLH, DLW, WWA, LDE>(
            e + xoff, wd, dw_to_operand<ACT2, HAS_B2, TC, KK, TW, LDD>(ds, wd, c0, CE));
        __syncthreads();
        acc.template mac<K2, LDW2, LDD>(w2_of(s), ds);
        ring_refill<STAGES>(i, nk, issue);
    }
    cp_async_wait<0>();
    __syncthreads();  // the staging tile aliases the ring
    acc.template store<LDC>(st);
    __syncthreads();
#pragma unroll 2
    for (int i = tid; i < TF * P; i += THREADS) {
        const int m = i / P, p = i - (i / P) * P, f = f0 + m;
        const int gy = oy0 + p / TW, gx = ox0 + p % TW;
        if (f < C3 && gy < Ho && gx < Wo) {
            const long long off = (((long long)b * C3 + f) * Ho + gy) * Wo + gx;
            float v = act_t<ACT3>(st[m * LDC + p] + bias_t<HAS_B3>(b3, f));
            st_f(out + off, add_residual(v, res, off));
        }
    }
}
