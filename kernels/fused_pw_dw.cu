// Fused PW -> DW (expansion 1x1, then depthwise k x k), NCHW. See fuseplanner/tiles.py (kind pw_dw).
//
// Block (blockIdx.x: spatial tile, .y: filter tile, .z: image) computes TF expanded channels x TH x TW
// DW outputs. For each chunk of TC PW input channels it stages the chunk's input halo window
// (xs, B operand) and the TF x TC PW weights (ws, A operand, transposed), and accumulates the expanded
// window TF x HH*WW in fp32 shared memory (cs, the communication buffer). Then bias + ACT1 are applied
// in place, with window positions outside the map set to 0 (the DW's zero padding applies to the PW
// output), and the DW (+ bias, ACT2, residual) reads cs and writes the output.
//
// Defines: T_HALF PREC THREADS TH TW TF TC KH KW SH SW DLH DLW ACT1 ACT2 HAS_B1 HAS_B2 HAS_RES
//          G1M G1N ME1 NE1 (GEMM groups, from fuseplanner/kernels/fused.py) SMEM_TOTAL.
#include "fused_common.cuh"

constexpr int HH = (TH - 1) * SH + (KH - 1) * DLH + 1;
constexpr int WW = (TW - 1) * SW + (KW - 1) * DLW + 1;
constexpr int N1 = HH * WW, N1P = rup(N1, 8), P = TH * TW, KK = KH * KW;
constexpr int KP = rup(TC, 16), MP = rup(TF, 16);
constexpr int LDX = N1P + 8, LDW = MP + 8, LDC = N1P + 8;
constexpr int SZ_XS = al128(KP * LDX * (int)sizeof(T)), SZ_WS = al128(KP * LDW * (int)sizeof(T));
constexpr int SZ_CS = al128(MP * LDC * 4), SZ_WD = al128(TF * KK * 4);
constexpr int O_XS = 0, O_WS = O_XS + SZ_XS, O_CS = O_WS + SZ_WS, O_WD = O_CS + SZ_CS, SMEM = O_WD + SZ_WD;
static_assert(SMEM == SMEM_TOTAL, "shared-memory layout disagrees with fuseplanner.tiles");
constexpr int K1 = PREC == 0 ? TC : KP;

extern "C" __global__ void __launch_bounds__(THREADS)
fused_pw_dw(const T* __restrict__ x, const float* __restrict__ w1, const float* __restrict__ b1,
            const float* __restrict__ w2, const float* __restrict__ b2, const T* __restrict__ res,
            T* __restrict__ out, int C, int CE, int H, int W, int Ho, int Wo, int pt, int pl, int tiles_w) {
    extern __shared__ __align__(128) unsigned char smem[];
    T* xs = reinterpret_cast<T*>(smem + O_XS);
    T* ws = reinterpret_cast<T*>(smem + O_WS);
    float* cs = reinterpret_cast<float*>(smem + O_CS);
    float* wd = reinterpret_cast<float*>(smem + O_WD);
    const int tid = threadIdx.x;
    const int oy0 = (blockIdx.x / tiles_w) * TH, ox0 = (blockIdx.x % tiles_w) * TW;
    const int f0 = blockIdx.y * TF, b = blockIdx.z;
    const int iy0 = oy0 * SH - pt, ix0 = ox0 * SW - pl;
    const T* xb = x + (long long)b * C * H * W;

    stage_copy<TF * KK>([&](int i) { return f0 + i / KK < CE ? __ldg(w2 + (long long)f0 * KK + i) : 0.f; },
                        [&](int i, float v) { wd[i] = v; });
    int c0l = 0;  // chunk the loaders read
    auto ld0 = [&](int i) {
                const int k = i / N1P, n = i % N1P, c = c0l + k;
                const int gy = iy0 + n / WW, gx = ix0 + n % WW;
                return (k < TC && c < C && n < N1 && gy >= 0 && gy < H && gx >= 0 && gx < W)
                           ? ldg_f(xb + ((long long)c * H + gy) * W + gx) : 0.f;
            };
    auto st0 = [&](int i, float v) { xs[(i / N1P) * LDX + i % N1P] = stage(v); };
    auto ld1 = [&](int i) {
                const int m = i / KP, k = i % KP, c = c0l + k, f = f0 + m;
                return (k < TC && c < C && m < TF && f < CE) ? __ldg(w1 + (long long)f * C + c) : 0.f;
            };
    auto st1 = [&](int i, float v) { ws[(i % KP) * LDW + i / KP] = stage(v); };
    auto ld2 = [](int) { return 0.f; };
    auto st2 = [](int, float) {};
    Prefetch3<KP * N1P, MP * KP, 0> pf;
    if constexpr (decltype(pf)::FITS) pf.load(ld0, ld1, ld2);
    for (int c0 = 0; c0 < C; c0 += TC) {
        if constexpr (decltype(pf)::FITS) {
            pf.store(st0, st1, st2);
        } else {
            c0l = c0;
            stage_copy3<KP * N1P, MP * KP, 0>(ld0, st0, ld1, st1, ld2, st2);
        }
        __syncthreads();
        if constexpr (decltype(pf)::FITS) {
            if (c0 + TC < C) {
                c0l = c0 + TC;
                pf.load(ld0, ld1, ld2);
            }
        }
        if (c0 == 0) gemm_stream<ME1, NE1, G1M, G1N, K1, LDW, LDX, LDC, false>(ws, xs, cs);
        else gemm_stream<ME1, NE1, G1M, G1N, K1, LDW, LDX, LDC, true>(ws, xs, cs);
        __syncthreads();
    }
    // PW epilogue in place; zero outside the map (the DW pads the PW output with zeros).
    for (int i = tid; i < TF * N1; i += THREADS) {
        const int m = i / N1, n = i % N1, f = f0 + m;
        const int gy = iy0 + n / WW, gx = ix0 + n % WW;
        float v = 0.f;
        if (f < CE && gy >= 0 && gy < H && gx >= 0 && gx < W) v = act_t<ACT1>(cs[m * LDC + n] + bias_t<HAS_B1>(b1, f));
        cs[m * LDC + n] = v;
    }
    __syncthreads();
#pragma unroll 2
    for (int i = tid; i < TF * P; i += THREADS) {
        const int m = i / P, p = i % P, f = f0 + m;
        const int oy = p / TW, ox = p % TW, gy = oy0 + oy, gx = ox0 + ox;
        const float* src = cs + m * LDC + oy * SH * WW + ox * SW;
        const float* wf = wd + m * KK;
        float acc = 0.f;
#pragma unroll
        for (int ky = 0; ky < KH; ++ky)
#pragma unroll
            for (int kx = 0; kx < KW; ++kx) acc = fmaf(src[ky * DLH * WW + kx * DLW], wf[ky * KW + kx], acc);
        if (f < CE && gy < Ho && gx < Wo) {
            const long long off = (((long long)b * CE + f) * Ho + gy) * Wo + gx;
            float v = act_t<ACT2>(acc + bias_t<HAS_B2>(b2, f));
            st_f(out + off, add_residual(v, res, off));
        }
    }
}
