// Fused PW -> PW (two 1x1 convolutions, or linear -> act -> linear over channel-last tokens).
// See fuseplanner/tiles.py (kind pw_pw).
//
// Block (blockIdx.x: pixel/token tile, .y: filter tile of the second PW, .z: image/sequence) stages
// the whole input tile C1 x TH*TW once (xs). For each chunk of TC mid channels it stages the first
// PW's TC x C1 weights (w1s) and the second's TF x TC (w2s), computes the first PW into fp32 mf,
// applies bias + ACT1 into ms (the communication buffer; ms is mf for fp32 storage) and accumulates
// the second PW in registers. Output staged in shared memory, then bias + ACT2 + residual.
//
// CL = 1: channel-last tokens, x (batch, tokens, C1) -> out (batch, tokens, C3); H = tokens, W = 1.
// Defines: T_HALF PREC THREADS TH TW TF TC C1 CL ACT1 ACT2 HAS_B1 HAS_B2 HAS_RES
//          G1M G1N ME1 NE1 G2M G2N ME2 NE2 SMEM_TOTAL.
#include "fused_common.cuh"

#ifndef CL
#define CL 0
#endif

constexpr int P = TH * TW, NP = rup(P, 8), KP = rup(TC, 16), MP = rup(TF, 16), C1P = rup(C1, 16);
constexpr int LDX = NP + 8, LDW1 = KP + 8, LDM = NP + 8, LDW2 = MP + 8, LDC = NP + 8;
constexpr int SZ_XS = al128(C1P * LDX * (int)sizeof(T)), SZ_W1 = al128(C1P * LDW1 * (int)sizeof(T));
constexpr int SZ_MF = al128(KP * LDM * 4), SZ_MS = T_HALF ? al128(KP * LDM * 2) : 0;
constexpr int SZ_W2 = al128(KP * LDW2 * (int)sizeof(T)), SZ_ST = al128(MP * LDC * 4);
constexpr int O_XS = 0, O_W1 = O_XS + SZ_XS, O_MF = O_W1 + SZ_W1, O_MS = O_MF + SZ_MF, O_W2 = O_MS + SZ_MS;
constexpr int SMEM = imax(O_W2 + SZ_W2, SZ_ST);
static_assert(SMEM == SMEM_TOTAL, "shared-memory layout disagrees with fuseplanner.tiles");
constexpr int K1 = PREC == 0 ? C1 : C1P, K2 = PREC == 0 ? TC : KP;

extern "C" __global__ void __launch_bounds__(THREADS)
fused_pw_pw(const T* __restrict__ x, const float* __restrict__ w1, const float* __restrict__ b1,
            const float* __restrict__ w2, const float* __restrict__ b2, const T* __restrict__ res,
            T* __restrict__ out, int C2, int C3, int H, int W, int tiles_w) {
    extern __shared__ __align__(128) unsigned char smem[];
    T* xs = reinterpret_cast<T*>(smem + O_XS);
    T* w1s = reinterpret_cast<T*>(smem + O_W1);
    float* mf = reinterpret_cast<float*>(smem + O_MF);
    T* ms = reinterpret_cast<T*>(smem + (T_HALF ? O_MS : O_MF));
    T* w2s = reinterpret_cast<T*>(smem + O_W2);
    float* st = reinterpret_cast<float*>(smem);
    const int tid = threadIdx.x;
    const int oy0 = (blockIdx.x / tiles_w) * TH, ox0 = (blockIdx.x % tiles_w) * TW;
    const int f0 = blockIdx.y * TF, b = blockIdx.z;
    const long long HW = (long long)H * W;
    const T* xb = x + (long long)b * C1 * HW;

    stage_copy<C1P * NP>(
        [&](int i) {
#if CL
            const int p = i / C1P, k = i % C1P, gy = oy0 + p;  // channels contiguous in memory
            return (k < C1 && p < P && gy < H) ? ldg_f(xb + (long long)gy * C1 + k) : 0.f;
#else
            const int k = i / NP, p = i % NP, gy = oy0 + p / TW, gx = ox0 + p % TW;
            return (k < C1 && p < P && gy < H && gx < W) ? ldg_f(xb + k * HW + (long long)gy * W + gx) : 0.f;
#endif
        },
        [&](int i, float v) {
#if CL
            xs[(i % C1P) * LDX + i / C1P] = stage(v);
#else
            xs[(i / NP) * LDX + i % NP] = stage(v);
#endif
        });
    BlockAcc<ME2, NE2, G2M, G2N> acc;
    acc.zero();
    int m0l = 0;  // chunk the loaders read
    auto ld0 = [&](int i) {
                const int m = i / C1P, k = i % C1P;
                return (m < TC && m0l + m < C2 && k < C1) ? __ldg(w1 + (long long)(m0l + m) * C1 + k) : 0.f;
            };
    auto st0 = [&](int i, float v) { w1s[(i % C1P) * LDW1 + i / C1P] = stage(v); };
    auto ld1 = [&](int i) {
                const int m = i / KP, k = i % KP, f = f0 + m;
                return (k < TC && m0l + k < C2 && m < TF && f < C3) ? __ldg(w2 + (long long)f * C2 + m0l + k) : 0.f;
            };
    auto st1 = [&](int i, float v) { w2s[(i % KP) * LDW2 + i / KP] = stage(v); };
    auto ld2 = [](int) { return 0.f; };
    auto st2 = [](int, float) {};
    Prefetch3<KP * C1P, MP * KP, 0> pf;
    if constexpr (decltype(pf)::FITS) pf.load(ld0, ld1, ld2);
    for (int m0 = 0; m0 < C2; m0 += TC) {
        if constexpr (decltype(pf)::FITS) {
            pf.store(st0, st1, st2);
        } else {
            m0l = m0;
            stage_copy3<KP * C1P, MP * KP, 0>(ld0, st0, ld1, st1, ld2, st2);
        }
        __syncthreads();
        if constexpr (decltype(pf)::FITS) {
            if (m0 + TC < C2) {
                m0l = m0 + TC;
                pf.load(ld0, ld1, ld2);
            }
        }
        gemm_stream<ME1, NE1, G1M, G1N, K1, LDW1, LDX, LDM, false>(w1s, xs, mf);
        __syncthreads();
        for (int i = tid; i < KP * NP; i += THREADS) {
            const int k = i / NP, p = i % NP;
            float v = 0.f;
            if (k < TC && m0 + k < C2 && p < P) v = act_t<ACT1>(mf[k * LDM + p] + bias_t<HAS_B1>(b1, m0 + k));
            ms[k * LDM + p] = stage(v);
        }
        __syncthreads();
        acc.template mac<K2, LDW2, LDM>(w2s, ms);
        __syncthreads();
    }
    acc.template store<LDC>(st);
    __syncthreads();
    T* ob = out + (long long)b * C3 * HW;
#if CL
    const T* rb = HAS_RES ? res + (long long)b * C3 * HW : res;
    for (int i = tid; i < TF * P; i += THREADS) {
        const int p = i / TF, m = i % TF, f = f0 + m, gy = oy0 + p;
        if (f < C3 && gy < H) {
            const long long off = (long long)gy * C3 + f;
            float v = act_t<ACT2>(st[m * LDC + p] + bias_t<HAS_B2>(b2, f));
            st_f(ob + off, add_residual(v, rb, off));
        }
    }
#else
    const T* rb = HAS_RES ? res + (long long)b * C3 * HW : res;
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
