// Fused PW -> DW -> PW: a whole inverted-residual block (expansion 1x1, depthwise k x k, projection
// 1x1, optional residual add of the block input), NCHW. See fuseplanner/tiles.py (kind pw_dw_pw).
//
// Block (blockIdx.x: spatial tile, .y: projection filter tile, .z: image) stages the input halo
// window C1 x HH*WW once (xs). For each chunk of TC expanded channels it stages the expansion
// weights TC x C1 (w1s), the DW weights (wd) and the projection weights TF x TC (w2s); computes the
// expansion over the window into fp32 e, applies bias + ACT1 in place with positions outside the map
// set to 0 (the DW's zero padding), runs the DW (+ bias, ACT2) into ds and accumulates the projection
// in registers. Output staged in shared memory, then bias + ACT3 + residual.
//
// Defines: T_HALF PREC THREADS TH TW TF TC C1 KH KW SH SW DLH DLW ACT1 ACT2 ACT3 HAS_B1 HAS_B2
//          HAS_B3 HAS_RES G1M G1N ME1 NE1 G2M G2N ME2 NE2 SMEM_TOTAL.
#include "fused_common.cuh"

constexpr int HH = (TH - 1) * SH + (KH - 1) * DLH + 1;
constexpr int WW = (TW - 1) * SW + (KW - 1) * DLW + 1;
constexpr int N1 = HH * WW, N1P = rup(N1, 8), P = TH * TW, NP = rup(P, 8), KK = KH * KW;
constexpr int KP = rup(TC, 16), MP = rup(TF, 16), C1P = rup(C1, 16);
constexpr int LDX = N1P + 8, LDW1 = KP + 8, LDE = N1P + 8, LDD = NP + 8, LDW2 = MP + 8, LDC = NP + 8;
constexpr int SZ_XS = al128(C1P * LDX * (int)sizeof(T)), SZ_W1 = al128(C1P * LDW1 * (int)sizeof(T));
constexpr int SZ_E = al128(KP * LDE * 4), SZ_WD = al128(TC * KK * 4);
constexpr int SZ_DS = al128(KP * LDD * (int)sizeof(T)), SZ_W2 = al128(KP * LDW2 * (int)sizeof(T));
constexpr int SZ_ST = al128(MP * LDC * 4);
constexpr int O_XS = 0, O_W1 = O_XS + SZ_XS, O_E = O_W1 + SZ_W1, O_WD = O_E + SZ_E, O_DS = O_WD + SZ_WD;
constexpr int O_W2 = O_DS + SZ_DS, SMEM = imax(O_W2 + SZ_W2, SZ_ST);
static_assert(SMEM == SMEM_TOTAL, "shared-memory layout disagrees with fuseplanner.tiles");
constexpr int K1 = PREC == 0 ? C1 : C1P, K2 = PREC == 0 ? TC : KP;

extern "C" __global__ void __launch_bounds__(THREADS)
fused_pw_dw_pw(const T* __restrict__ x, const float* __restrict__ w1, const float* __restrict__ b1,
               const float* __restrict__ wdw, const float* __restrict__ b2, const float* __restrict__ w3,
               const float* __restrict__ b3, const T* __restrict__ res, T* __restrict__ out, int CE, int C3,
               int H, int W, int Ho, int Wo, int pt, int pl, int tiles_w) {
    extern __shared__ __align__(128) unsigned char smem[];
    T* xs = reinterpret_cast<T*>(smem + O_XS);
    T* w1s = reinterpret_cast<T*>(smem + O_W1);
    float* e = reinterpret_cast<float*>(smem + O_E);
    float* wd = reinterpret_cast<float*>(smem + O_WD);
    T* ds = reinterpret_cast<T*>(smem + O_DS);
    T* w2s = reinterpret_cast<T*>(smem + O_W2);
    float* st = reinterpret_cast<float*>(smem);
    const int tid = threadIdx.x;
    const int oy0 = (blockIdx.x / tiles_w) * TH, ox0 = (blockIdx.x % tiles_w) * TW;
    const int f0 = blockIdx.y * TF, b = blockIdx.z;
    const int iy0 = oy0 * SH - pt, ix0 = ox0 * SW - pl;
    const T* xb = x + (long long)b * C1 * H * W;

    stage_copy<C1P * N1P>(
        [&](int i) {
            const int k = i / N1P, n = i % N1P;
            const int gy = iy0 + n / WW, gx = ix0 + n % WW;
            return (k < C1 && n < N1 && gy >= 0 && gy < H && gx >= 0 && gx < W)
                       ? ldg_f(xb + ((long long)k * H + gy) * W + gx) : 0.f;
        },
        [&](int i, float v) { xs[(i / N1P) * LDX + i % N1P] = stage(v); });
    BlockAcc<ME2, NE2, G2M, G2N> acc;
    acc.zero();
    int e0l = 0;  // chunk the loaders read
    auto ld0 = [&](int i) {
                const int m = i / C1P, k = i % C1P;
                return (m < TC && e0l + m < CE && k < C1) ? __ldg(w1 + (long long)(e0l + m) * C1 + k) : 0.f;
            };
    auto st0 = [&](int i, float v) { w1s[(i % C1P) * LDW1 + i / C1P] = stage(v); };
    auto ld1 = [&](int i) { return e0l + i / KK < CE ? __ldg(wdw + (long long)e0l * KK + i) : 0.f; };
    auto st1 = [&](int i, float v) { wd[i] = v; };
    auto ld2 = [&](int i) {
                const int m = i / KP, k = i % KP, f = f0 + m;
                return (k < TC && e0l + k < CE && m < TF && f < C3) ? __ldg(w3 + (long long)f * CE + e0l + k) : 0.f;
            };
    auto st2 = [&](int i, float v) { w2s[(i % KP) * LDW2 + i / KP] = stage(v); };
    Prefetch3<KP * C1P, TC * KK, MP * KP> pf;
    if constexpr (decltype(pf)::FITS) pf.load(ld0, ld1, ld2);
    for (int e0 = 0; e0 < CE; e0 += TC) {
        if constexpr (decltype(pf)::FITS) {
            pf.store(st0, st1, st2);
        } else {
            e0l = e0;
            stage_copy3<KP * C1P, TC * KK, MP * KP>(ld0, st0, ld1, st1, ld2, st2);
        }
        __syncthreads();
        if constexpr (decltype(pf)::FITS) {
            if (e0 + TC < CE) {
                e0l = e0 + TC;
                pf.load(ld0, ld1, ld2);
            }
        }
        gemm_stream<ME1, NE1, G1M, G1N, K1, LDW1, LDX, LDE, false>(w1s, xs, e);
        __syncthreads();
        for (int i = tid; i < TC * N1; i += THREADS) {
            const int k = i / N1, n = i % N1, c = e0 + k;
            const int gy = iy0 + n / WW, gx = ix0 + n % WW;
            float v = 0.f;
            if (c < CE && gy >= 0 && gy < H && gx >= 0 && gx < W) v = act_t<ACT1>(e[k * LDE + n] + bias_t<HAS_B1>(b1, c));
            e[k * LDE + n] = v;
        }
        __syncthreads();
#pragma unroll 2
        for (int i = tid; i < KP * NP; i += THREADS) {
            const int k = i / NP, p = i % NP, c = e0 + k;
            float v = 0.f;
            if (k < TC && c < CE && p < P) {
                const int oy = p / TW, ox = p % TW;
                const float* src = e + k * LDE + oy * SH * WW + ox * SW;
                const float* wf = wd + k * KK;
                float a = 0.f;
#pragma unroll
                for (int ky = 0; ky < KH; ++ky)
#pragma unroll
                    for (int kx = 0; kx < KW; ++kx) a = fmaf(src[ky * DLH * WW + kx * DLW], wf[ky * KW + kx], a);
                v = act_t<ACT2>(a + bias_t<HAS_B2>(b2, c));
            }
            ds[k * LDD + p] = stage(v);
        }
        __syncthreads();
        acc.template mac<K2, LDW2, LDD>(w2s, ds);
        __syncthreads();
    }
    acc.template store<LDC>(st);
    __syncthreads();
#pragma unroll 2
    for (int i = tid; i < TF * P; i += THREADS) {
        const int m = i / P, p = i % P, f = f0 + m;
        const int gy = oy0 + p / TW, gx = ox0 + p % TW;
        if (f < C3 && gy < Ho && gx < Wo) {
            const long long off = (((long long)b * C3 + f) * Ho + gy) * Wo + gx;
            float v = act_t<ACT3>(st[m * LDC + p] + bias_t<HAS_B3>(b3, f));
            st_f(out + off, add_residual(v, res, off));
        }
    }
}
