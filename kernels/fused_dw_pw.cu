// Fused DW -> PW (depthwise k x k, then projection 1x1), NCHW. See fuseplanner/tiles.py (kind dw_pw).
//
// Block (blockIdx.x: spatial tile, .y: filter tile, .z: image) computes TF PW filters x TH x TW
// pixels. For each chunk of TC DW channels it stages the chunk's input halo window (xw) and DW
// weights (wd), and the TF x TC PW weights (ws, A operand, transposed); computes the DW (+ bias, ACT1)
// into ds (B operand, the communication buffer) and accumulates the PW in registers. The DW is
// recomputed once per filter tile. The fp32 result is staged in shared memory (aliasing the chunk
// buffers) and written with bias, ACT2 and the residual, pixels contiguous across threads.
//
// Defines: T_HALF PREC THREADS TH TW TF TC KH KW SH SW DLH DLW ACT1 ACT2 HAS_B1 HAS_B2 HAS_RES
//          G2M G2N ME2 NE2 SMEM_TOTAL.
#include "fused_common.cuh"

constexpr int HH = (TH - 1) * SH + (KH - 1) * DLH + 1;
constexpr int WW = (TW - 1) * SW + (KW - 1) * DLW + 1;
constexpr int WIN = HH * WW, P = TH * TW, NP = rup(P, 8), KK = KH * KW;
constexpr int KP = rup(TC, 16), MP = rup(TF, 16);
constexpr int LDD = NP + 8, LDW = MP + 8, LDC = NP + 8;
constexpr int SZ_XW = al128(TC * WIN * (int)sizeof(T)), SZ_WD = al128(TC * KK * 4);
constexpr int SZ_DS = al128(KP * LDD * (int)sizeof(T)), SZ_WS = al128(KP * LDW * (int)sizeof(T));
constexpr int SZ_ST = al128(MP * LDC * 4);
constexpr int O_XW = 0, O_WD = O_XW + SZ_XW, O_DS = O_WD + SZ_WD, O_WS = O_DS + SZ_DS;
constexpr int SMEM = imax(O_WS + SZ_WS, SZ_ST);
static_assert(SMEM == SMEM_TOTAL, "shared-memory layout disagrees with fuseplanner.tiles");
constexpr int K2 = PREC == 0 ? TC : KP;

extern "C" __global__ void __launch_bounds__(THREADS)
fused_dw_pw(const T* __restrict__ x, const float* __restrict__ w1, const float* __restrict__ b1,
            const float* __restrict__ w2, const float* __restrict__ b2, const T* __restrict__ res,
            T* __restrict__ out, int C, int N, int H, int W, int Ho, int Wo, int pt, int pl, int tiles_w) {
    extern __shared__ __align__(128) unsigned char smem[];
    T* xw = reinterpret_cast<T*>(smem + O_XW);
    float* wd = reinterpret_cast<float*>(smem + O_WD);
    T* ds = reinterpret_cast<T*>(smem + O_DS);
    T* ws = reinterpret_cast<T*>(smem + O_WS);
    float* st = reinterpret_cast<float*>(smem);
    const int tid = threadIdx.x;
    const int oy0 = (blockIdx.x / tiles_w) * TH, ox0 = (blockIdx.x % tiles_w) * TW;
    const int f0 = blockIdx.y * TF, b = blockIdx.z;
    const int iy0 = oy0 * SH - pt, ix0 = ox0 * SW - pl;
    const T* xb = x + (long long)b * C * H * W;

    BlockAcc<ME2, NE2, G2M, G2N> acc;
    acc.zero();
    int c0l = 0;  // chunk the loaders read
    auto ld0 = [&](int i) {
                const int k = i / WIN, q = i % WIN, c = c0l + k;
                const int gy = iy0 + q / WW, gx = ix0 + q % WW;
                return (c < C && gy >= 0 && gy < H && gx >= 0 && gx < W) ? ldg_f(xb + ((long long)c * H + gy) * W + gx)
                                                                         : 0.f;
            };
    auto st0 = [&](int i, float v) { from_f(xw[i], v); };
    auto ld1 = [&](int i) { return c0l + i / KK < C ? __ldg(w1 + (long long)c0l * KK + i) : 0.f; };
    auto st1 = [&](int i, float v) { wd[i] = v; };
    auto ld2 = [&](int i) {
                const int m = i / KP, k = i % KP, c = c0l + k, f = f0 + m;
                return (k < TC && c < C && m < TF && f < N) ? __ldg(w2 + (long long)f * C + c) : 0.f;
            };
    auto st2 = [&](int i, float v) { ws[(i % KP) * LDW + i / KP] = stage(v); };
    Prefetch3<TC * WIN, TC * KK, MP * KP> pf;
    if constexpr (decltype(pf)::FITS) pf.load(ld0, ld1, ld2);
    for (int c0 = 0; c0 < C; c0 += TC) {
        if constexpr (decltype(pf)::FITS) {
            pf.store(st0, st1, st2);
        } else {
            c0l = c0;
            stage_copy3<TC * WIN, TC * KK, MP * KP>(ld0, st0, ld1, st1, ld2, st2);
        }
        __syncthreads();
        if constexpr (decltype(pf)::FITS) {
            if (c0 + TC < C) {
                c0l = c0 + TC;
                pf.load(ld0, ld1, ld2);
            }
        }
#pragma unroll 2
        for (int i = tid; i < KP * NP; i += THREADS) {
            const int k = i / NP, p = i % NP, c = c0 + k;
            float v = 0.f;
            if (k < TC && c < C && p < P) {
                const int oy = p / TW, ox = p % TW;
                const T* src = xw + k * WIN + oy * SH * WW + ox * SW;
                const float* wf = wd + k * KK;
                float a = 0.f;
#pragma unroll
                for (int ky = 0; ky < KH; ++ky)
#pragma unroll
                    for (int kx = 0; kx < KW; ++kx) a = fmaf(lds_f(src + ky * DLH * WW + kx * DLW), wf[ky * KW + kx], a);
                v = act_t<ACT1>(a + bias_t<HAS_B1>(b1, c));
            }
            ds[k * LDD + p] = stage(v);
        }
        __syncthreads();
        acc.template mac<K2, LDW, LDD>(ws, ds);
        __syncthreads();
    }
    acc.template store<LDC>(st);
    __syncthreads();
#pragma unroll 2
    for (int i = tid; i < TF * P; i += THREADS) {
        const int m = i / P, p = i % P, f = f0 + m;
        const int gy = oy0 + p / TW, gx = ox0 + p % TW;
        if (f < N && gy < Ho && gx < Wo) {
            const long long off = (((long long)b * N + f) * Ho + gy) * Wo + gx;
            float v = act_t<ACT2>(st[m * LDC + p] + bias_t<HAS_B2>(b2, f));
            st_f(out + off, add_residual(v, res, off));
        }
    }
}
