// Layer-by-layer pointwise (1x1, stride SH x SW) convolution over NCHW, or `linear` over channel-last
// tokens (CL = 1): out[f, p] = sum_c W[f, c] x[c, p], then bias -> activation -> residual.
//
// Block (grid x = pixel/token tile, y = filter tile, z = image/sequence): TF filters x P = TH*TW
// pixels. The reduction runs over TC-deep channel chunks in a STAGES-deep shared-memory ring filled
// with cp.async (XU/WU elements per copy) running STAGES - 1 chunks ahead; an operand whose alignment
// rules out cp.async (XU/WU = 0, e.g. fp16 rows of odd width) is prefetched one chunk ahead through
// registers instead. One barrier per chunk.
// Shared memory (exactly tiles.smem_bytes("pw"/"linear")):
//   Ws[STAGES][TF][TC + WPAD]                            weights, k contiguous
//   Xs[STAGES][TC][P + XPAD]   (NCHW)  or  Xs[STAGES][P][TC + WPAD]  (CL)
// The pads keep the tensor-core fragment reads free of bank conflicts.
//
// Math paths (USE_TC): 0 = exact fp32 FMA with a register block of RF filters x RP pixels per
// thread (A_THR threads along filters, THREADS / A_THR along pixels, the last of a thread's RP pixels
// possibly past the tile; or FLAT = 1: outputs tid + r*THREADS, those past TF * P idle). Its shared-memory loads (fp32 only,
// tiles.pw_variant): KVEC = 4 reads a filter's weights 4 channels at a time (one float4 per filter per 4
// channels); PVEC = 2 or 4 gives each thread runs of PVEC neighbouring pixels, read and (where the
// output rows allow) stored PVEC at a time, the runs of a warp's threads side by side (slot j of thread
// tb: pixel (j / PVEC) * B_THR * PVEC + tb * PVEC + j % PVEC; the reads of slots past the tile stay
// inside the row's XPAD), instead of single pixels (PVEC = 1). 1 = TF32 mma.sync m16n8k8 (A
// fragments by ldmatrix); 2 = fp16 mma.sync m16n8k16 (KSTEP 16) or m16n8k8 (KSTEP 8); fp32 accumulation. Tensor-core
// warps form a WARPS_M x WARPS_N grid, each owning WM_T x WN_T mma tiles of 16 x 8.
//
// Split reduction (KS > 1, tiles.cluster_split: a deep reduction over few output tiles): grid x is
// the pixel tile times KS, the KS blocks of a cluster take every KS-th chunk, leave their fp32 partial
// tile Ps[TF][P + PPAD] in the (drained) ring, and each applies the epilogue to a 1/KS share of the
// tile summed over the cluster's shared memory.
#include "common.cuh"

#ifndef CL
#define CL 0
#endif
#ifndef USE_TC
#define USE_TC 0
#endif
#ifndef XU
#define XU 0
#endif
#ifndef WU
#define WU 0
#endif
#ifndef FLAT
#define FLAT 0
#endif
#ifndef KVEC
#define KVEC 1
#endif
#ifndef PVEC
#define PVEC 1
#endif

#ifndef STAGES
#define STAGES 3
#endif
#define P (TH * TW)
#define WPAD (16 / (T_HALF ? 2 : 4))
#define XPAD 8
#define WLD (TC + WPAD)
#if CL
#define XLD (TC + WPAD)
#define XS_ELEMS (P * XLD)
#else
#define XLD (P + XPAD)
#define XS_ELEMS (TC * XLD)
#endif
#define WS_ELEMS (TF * WLD)
#define PPAD 4
#define PLD (P + PPAD)
static_assert(KS == 1 || TF * PLD * 4 <= STAGES * (WS_ELEMS + XS_ELEMS) * (int)sizeof(T),
              "the split's partial tile must fit in the ring it aliases (tiles.cluster_split)");

// element (k, p) of an X stage
#if CL
#define XS_AT(xs, k, p) ((xs)[(p) * XLD + (k)])
#else
#define XS_AT(xs, k, p) ((xs)[(k) * XLD + (p)])
#endif

struct Geom {
    int C_in, H, W, C_out, Ho, Wo;
};

// ---- global -> shared chunk copies ---------------------------------------------------------------
// The units of a chunk, U elements each, as ROWS rows of COLS units, units fastest (coalesced): W is
// TF filter rows of TC channels, X (NCHW) TC channel rows of P pixels (U | TW: a unit stays in one
// tile row), X (CL) P token rows of TC channels. A thread keeps its column (its source offset within a
// row and its bounds check, worked out once per chunk) and walks rows RPP = THREADS / COLS apart, so a
// unit costs an address add and a compare rather than an index decomposition; with more columns than
// threads it takes CB columns, all rows each. Threads past RPP * COLS sit the copy out. f(slot, dst,
// src, ok) gets each of a thread's units: slot < SLOTS its own index, dst the element offset in the
// stage, src the source (`base` where !ok: outside the tensor, to be zero-filled).
template <int U, bool IS_W>
struct ChunkUnits {
    static constexpr bool K_ROWS = !IS_W && !CL;  // the chunk's channels run down the rows (NCHW X) or along them
    static constexpr int ROWS = IS_W ? TF : (CL ? P : TC);
    static constexpr int COLS = (K_ROWS ? P : TC) / U;
    static constexpr int LD = IS_W ? WLD : XLD;
    static constexpr int RPP = COLS >= THREADS ? 1 : THREADS / COLS;
    static constexpr int CB = COLS >= THREADS ? cdiv(COLS, THREADS) : 1;
    static constexpr int NR = cdiv(ROWS, RPP);
    static constexpr int SLOTS = CB * NR;

    template <typename F>
    __device__ __forceinline__ static void each(const T* __restrict__ base, int a0, int a1, int k0, const Geom& g, F f) {
        const int tid = threadIdx.x;
        const int row0 = COLS >= THREADS ? 0 : tid / COLS;
        if (row0 >= RPP) return;
        // rows: channels k0 + r (stride H*W) for NCHW X; filters f0 + r (W) or tokens y0 + r (CL X), stride C_in
        const int rbase = K_ROWS ? k0 : a0;
        const int rlimit = K_ROWS ? g.C_in : (IS_W ? g.C_out : g.Ho);
        const int rstride = K_ROWS ? g.H * g.W : g.C_in;  // 32-bit offsets: launch._check_pw_offsets bounds them
#pragma unroll
        for (int cb = 0; cb < CB; ++cb) {
            const int col = COLS >= THREADS ? cb * THREADS + tid : tid % COLS;
            if (COLS % THREADS != 0 && COLS >= THREADS && col >= COLS) break;
            const int e = col * U;  // first element of the unit along the row
            int off;
            bool cok;
            if (K_ROWS) {
                const int y = a0 + e / TW, xo = a1 + e % TW;
                cok = y < g.Ho && xo < g.Wo;
                off = y * SH * g.W + xo * SW;
            } else {
                cok = k0 + e < g.C_in;
                off = k0 + e;
            }
            off += (rbase + row0) * rstride;
#pragma unroll
            for (int j = 0; j < NR; ++j, off += RPP * rstride) {
                const int r = row0 + j * RPP;
                if (ROWS % RPP != 0 && r >= ROWS) break;
                const bool ok = cok && rbase + r < rlimit;
                f(cb * NR + j, r * LD + e, base + (ok ? off : 0), ok);
            }
        }
    }
};

// Asynchronous copy of a chunk with U-element units (cp.async, zero-filled outside the tensor).
template <int U, bool IS_W>
__device__ __forceinline__ void issue_async(T* stage, const T* __restrict__ base, int a0, int a1, int k0,
                                            const Geom& g) {
    ChunkUnits<U, IS_W>::each(base, a0, a1, k0, g, [&](int, int dst, const T* src, bool ok) {
        cp_async<U * sizeof(T)>(stage + dst, src, ok);
    });
}

// Register-staged copy (when cp.async cannot be used): fetch() issues the global loads of a chunk,
// put() writes them to a stage after the current chunk's math, both in ChunkUnits' order. Chunks with
// more than 32 elements per thread are copied synchronously by put() instead.
template <bool IS_W>
struct RegStage {
    using Units = ChunkUnits<1, IS_W>;
    static constexpr bool IN_REGS = Units::SLOTS <= 32;
    T v[IN_REGS ? Units::SLOTS : 1];
    int k0;
    __device__ __forceinline__ void fetch(const T* __restrict__ base, int a0, int a1, int k, const Geom& g) {
        k0 = k;
        if constexpr (IN_REGS)
            Units::each(base, a0, a1, k0, g, [&](int s, int, const T* src, bool ok) { v[s] = ok ? *src : (T)0; });
    }
    __device__ __forceinline__ void put(T* stage, const T* __restrict__ base, int a0, int a1, const Geom& g) const {
        if constexpr (IN_REGS)
            Units::each(base, a0, a1, k0, g, [&](int s, int dst, const T*, bool) { stage[dst] = v[s]; });
        else
            Units::each(base, a0, a1, k0, g, [&](int, int dst, const T* src, bool ok) { stage[dst] = ok ? *src : (T)0; });
    }
};

// output / residual offset of (filter f, tile pixel p)
__device__ __forceinline__ bool out_offset(int n, int f, int y0, int x0, int p, const Geom& g, long long& off) {
    const int y = y0 + p / TW, xo = x0 + p % TW;
    if (f >= g.C_out || y >= g.Ho || xo >= g.Wo) return false;
#if CL
    off = ((long long)n * g.Ho + y) * g.C_out + f;
#else
    off = (((long long)n * g.C_out + f) * g.Ho + y) * g.Wo + xo;
#endif
    return true;
}

__device__ __forceinline__ void store_out(T* __restrict__ out, const float* __restrict__ bias,
                                          const T* __restrict__ res, int n, int f, int y0, int x0, int p,
                                          float v, const Geom& g) {
    long long off;
    if (p < P && out_offset(n, f, y0, x0, p, g, off)) st_f(out + off, add_residual(apply_epilogue(v, bias, f), res, off));
}

// Outputs (f, p .. p + N - 1) as one N-wide store when they lie in one NCHW output row (TW % N == 0
// and p a multiple of N) whose length keeps the store aligned; element by element otherwise (at the
// map's right and bottom edges too). N = 2: the pair of an mma fragment (p even), any storage dtype: a
// warp then writes 4 x 2 contiguous elements per row instead of two interleaved halves. N = 4 (fp32):
// an exact-fp32 pixel run (PVEC).
template <int N>
__device__ __forceinline__ void store_outv(T* __restrict__ out, const float* __restrict__ bias,
                                           const T* __restrict__ res, int n, int f, int y0, int x0, int p,
                                           const float* v, const Geom& g) {
    static_assert(N == 2 || (N == 4 && !T_HALF), "runs of 2 elements, or of 4 fp32 elements");
#if !CL
    long long off;
    const bool aligned = (reinterpret_cast<unsigned long long>(out) & (N * sizeof(T) - 1)) == 0;
    if (TW % N == 0 && aligned && g.Wo % N == 0 && p + N - 1 < P && out_offset(n, f, y0, x0, p + N - 1, g, off)) {
        off -= N - 1;  // the run's last output is inside the map and in the first one's row
        float r[N];
#pragma unroll
        for (int e = 0; e < N; ++e) r[e] = add_residual(apply_epilogue(v[e], bias, f), res, off + e);
        if constexpr (N == 4) *reinterpret_cast<float4*>(out + off) = make_float4(r[0], r[1], r[2], r[3]);
        else st_pair(out + off, r[0], r[1]);
        return;
    }
#endif
#pragma unroll
    for (int e = 0; e < N; ++e) store_out(out, bias, res, n, f, y0, x0, p + e, v[e], g);
}

// Outputs (f, p) and (f, p + 1) of an mma fragment row (store_outv<2>).
__device__ __forceinline__ void store_out2(T* __restrict__ out, const float* __restrict__ bias,
                                           const T* __restrict__ res, int n, int f, int y0, int x0, int p,
                                           float v0, float v1, const Geom& g) {
    const float v[2] = {v0, v1};
    store_outv<2>(out, bias, res, n, f, y0, x0, p, v, g);
}

// Accumulator (f, p) of this block: into its partial tile (KS > 1) or, with the epilogue, to `out`.
#if KS > 1
#define EMIT(f, p, v) (((f) < TF && (p) < P) ? (void)(part[(f) * PLD + (p)] = (v)) : (void)0)
#define EMIT2(f, p, v0, v1) (EMIT(f, p, v0), EMIT(f, (p) + 1, v1))
#else
#define EMIT(f, p, v) store_out(out, bias, res, n, f0 + (f), y0, x0, p, v, g)
#define EMIT2(f, p, v0, v1) store_out2(out, bias, res, n, f0 + (f), y0, x0, p, v0, v1, g)
#endif

extern "C" __global__ void __launch_bounds__(THREADS) CLUSTER_ATTR
pw_kernel(const T* __restrict__ x, const T* __restrict__ w, const float* __restrict__ bias,
          const T* __restrict__ res, T* __restrict__ out, int C_in, int H, int W, int C_out, int Ho, int Wo,
          int tiles_w) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* ws_base = reinterpret_cast<T*>(smem_raw);
    T* xs_base = ws_base + STAGES * WS_ELEMS;
    const Geom g{C_in, H, W, C_out, Ho, Wo};

    const int tid = threadIdx.x;
    const int rank = KS > 1 ? (int)(blockIdx.x % KS) : 0;
    const int tile = blockIdx.x / KS;
    const int y0 = (tile / tiles_w) * TH;
    const int x0 = (tile % tiles_w) * TW;
    const int f0 = blockIdx.y * TF;
    const int n = blockIdx.z;
#if CL
    const T* xn = x + (long long)n * Ho * C_in;
#else
    const T* xn = x + (long long)n * C_in * H * W;
#endif
    const int nch = cdiv(C_in, TC);
    const int nk = nch > rank ? (nch - rank + KS - 1) / KS : 0;  // this block's chunks: rank, rank + KS, ...
    auto k0_of = [&](int i) { return (rank + i * KS) * TC; };     // first channel of its i-th chunk

#if USE_TC == 0
#if FLAT
    // R outputs per thread; a tile whose outputs do not split evenly (tiles.UNEVEN_KINDS: fewer outputs
    // than threads over a 1x1 squeeze-excite map) leaves the threads past its TF * P outputs idle
    constexpr int R = (TF * P + THREADS - 1) / THREADS;
    constexpr bool EVEN = TF * P % THREADS == 0;
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.f;
#else
    constexpr int B_THR = THREADS / A_THR;
    // B_THR need not divide P: the last pixels of a thread past P load pixel P - 1 and are not stored
    constexpr int RF = TF / A_THR, RP = (P + B_THR - 1) / B_THR;
    const int ta = tid / B_THR, tb = tid % B_THR;
    static_assert(KVEC == 1 || (KVEC == 4 && !T_HALF && TC % 4 == 0), "KVEC 4: fp32 weights, 4 | TC");
    static_assert(PVEC == 1 || (!T_HALF && !CL && RP % PVEC == 0 && XLD % PVEC == 0 && B_THR * RP <= XLD),
                  "PVEC: fp32 NCHW, PVEC | RP and the row stride, a block's pixel slots inside the padded row");
    // tile pixel of a thread's j-th slot (the load of slots past the tile: PVEC 1 clamps to the last pixel)
#if PVEC > 1
#define PIX(j) (((j) / PVEC) * (B_THR * PVEC) + tb * PVEC + (j) % PVEC)
#else
#define PIX(j) (P % B_THR ? min(tb + (j) * B_THR, P - 1) : tb + (j) * B_THR)
#endif
    float acc[RF][RP];
#pragma unroll
    for (int i = 0; i < RF; ++i)
#pragma unroll
        for (int j = 0; j < RP; ++j) acc[i][j] = 0.f;
#endif
#else
    constexpr int KSTEP = (USE_TC == 1) ? 8 : ((TC % 16 == 0) ? 16 : 8);
    const int lane = tid & 31, warp = tid >> 5;
    const int gq = lane >> 2, tq = lane & 3;
    const int wm = warp % WARPS_M, wn = warp / WARPS_M;
    float acc[WM_T][WN_T][4];
#pragma unroll
    for (int i = 0; i < WM_T; ++i)
#pragma unroll
        for (int j = 0; j < WN_T; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
#endif

    // Pipeline: cp.async operands run STAGES - 1 chunks ahead; register-staged operands one chunk ahead.
    RegStage<true> wreg;
    RegStage<false> xreg;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < nk) {
            if (WU > 0) issue_async<(WU > 0 ? WU : 1), true>(ws_base + s * WS_ELEMS, w, f0, 0, k0_of(s), g);
            if (XU > 0) issue_async<(XU > 0 ? XU : 1), false>(xs_base + s * XS_ELEMS, xn, y0, x0, k0_of(s), g);
        }
        cp_async_commit();
    }
    if (WU == 0) { wreg.fetch(w, f0, 0, k0_of(0), g); wreg.put(ws_base, w, f0, 0, g); }
    if (XU == 0) { xreg.fetch(xn, y0, x0, k0_of(0), g); xreg.put(xs_base, xn, y0, x0, g); }

#pragma unroll 1
    for (int kc = 0; kc < nk; ++kc) {
        const bool more = kc + 1 < nk;
        if (WU == 0 && more) wreg.fetch(w, f0, 0, k0_of(kc + 1), g);
        if (XU == 0 && more) xreg.fetch(xn, y0, x0, k0_of(kc + 1), g);
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        {
            const int nc = kc + STAGES - 1, ns = nc % STAGES;
            if (nc < nk) {
                if (WU > 0) issue_async<(WU > 0 ? WU : 1), true>(ws_base + ns * WS_ELEMS, w, f0, 0, k0_of(nc), g);
                if (XU > 0) issue_async<(XU > 0 ? XU : 1), false>(xs_base + ns * XS_ELEMS, xn, y0, x0, k0_of(nc), g);
            }
            cp_async_commit();
        }
        const int st = kc % STAGES;
        const T* ws = ws_base + st * WS_ELEMS;
        const T* xs = xs_base + st * XS_ELEMS;

#if USE_TC == 0
#if FLAT
#pragma unroll 4
        for (int k = 0; k < TC; ++k) {
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const int o = tid + r * THREADS;
                if (!EVEN && o >= TF * P) break;
                acc[r] = fmaf(lds_f(ws + (o / P) * WLD + k), lds_f(&XS_AT(xs, k, o % P)), acc[r]);
            }
        }
#else
        constexpr int K_UNROLL = 8 / KVEC;
#pragma unroll K_UNROLL
        for (int k = 0; k < TC; k += KVEC) {
            float a[RF][KVEC];
#pragma unroll
            for (int i = 0; i < RF; ++i) lds_vec<KVEC>(a[i], ws + (ta + i * A_THR) * WLD + k);
#pragma unroll
            for (int kk = 0; kk < KVEC; ++kk) {
                float b[RP / PVEC][PVEC];  // slot j = b[j / PVEC][j % PVEC]
#pragma unroll
                for (int j = 0; j < RP; j += PVEC) lds_vec<PVEC>(b[j / PVEC], &XS_AT(xs, k + kk, PIX(j)));
#pragma unroll
                for (int i = 0; i < RF; ++i)
#pragma unroll
                    for (int j = 0; j < RP; ++j) acc[i][j] = fmaf(a[i][kk], b[j / PVEC][j % PVEC], acc[i][j]);
            }
        }
#endif
#else
#pragma unroll
        for (int ks = 0; ks < TC; ks += KSTEP) {
            unsigned af[WM_T][4], bf[WN_T][2];
#pragma unroll
            for (int i = 0; i < WM_T; ++i) {
#if USE_TC == 1
                // One ldmatrix.x4: lanes 0-15 address rows r .. r + 15 at k, lanes 16-31 the same rows at k + 4,
                // which yields a0..a3 of the m16n8k8 fragment. The launcher rounds the weights to TF32
                // (tf32_rounded), so their bits go to the tensor cores as they are. Rows past TF read row
                // TF - 1: they only feed accumulator rows that are never stored.
                ldsm_x4(af[i], ws + min((wm * WM_T + i) * 16 + (lane & 15), TF - 1) * WLD + ks + 4 * (lane >> 4));
#else
                const int r0 = (wm * WM_T + i) * 16 + gq, r1 = r0 + 8;
                // rows past TF occur when TF % 16 != 0 or when the warp grid overhangs the tile
                const bool ok0 = r0 < TF, ok1 = r1 < TF;
                af[i][0] = ok0 ? *reinterpret_cast<const unsigned*>(ws + r0 * WLD + ks + 2 * tq) : 0u;
                af[i][1] = ok1 ? *reinterpret_cast<const unsigned*>(ws + r1 * WLD + ks + 2 * tq) : 0u;
                if (KSTEP == 16) {
                    af[i][2] = ok0 ? *reinterpret_cast<const unsigned*>(ws + r0 * WLD + ks + 2 * tq + 8) : 0u;
                    af[i][3] = ok1 ? *reinterpret_cast<const unsigned*>(ws + r1 * WLD + ks + 2 * tq + 8) : 0u;
                }
#endif
            }
#pragma unroll
            for (int j = 0; j < WN_T; ++j) {
                const int c = (wn * WN_T + j) * 8 + gq;
                const bool ok = c < P;
#if USE_TC == 1 && CL
                // tokens are rows of k-contiguous words: one ldmatrix.x2 (lanes 0-7 at k, 8-15 at k + 4);
                // rows past P read row P - 1 and only feed columns that are never stored
                ldsm_x2(bf[j], &XS_AT(xs, ks + 4 * ((lane >> 3) & 1), min((wn * WN_T + j) * 8 + (lane & 7), P - 1)));
#elif USE_TC == 1
                // the input rounded to TF32 to nearest (cvt.rna, as the weights are): fed as raw fp32 bits
                // the tensor cores would truncate them, an error biased toward zero that adds up over layers
                bf[j][0] = ok ? f2tf32(XS_AT(xs, ks + tq, c)) : 0u;
                bf[j][1] = ok ? f2tf32(XS_AT(xs, ks + tq + 4, c)) : 0u;
#elif CL
                bf[j][0] = ok ? *reinterpret_cast<const unsigned*>(&XS_AT(xs, ks + 2 * tq, c)) : 0u;
                if (KSTEP == 16) bf[j][1] = ok ? *reinterpret_cast<const unsigned*>(&XS_AT(xs, ks + 2 * tq + 8, c)) : 0u;
#else
                bf[j][0] = ok ? pack_h2(XS_AT(xs, ks + 2 * tq, c), XS_AT(xs, ks + 2 * tq + 1, c)) : 0u;
                if (KSTEP == 16) bf[j][1] = ok ? pack_h2(XS_AT(xs, ks + 2 * tq + 8, c), XS_AT(xs, ks + 2 * tq + 9, c)) : 0u;
#endif
            }
#pragma unroll
            for (int i = 0; i < WM_T; ++i) {
                if ((wm * WM_T + i) * 16 >= TF) continue;  // warp-uniform
#pragma unroll
                for (int j = 0; j < WN_T; ++j) {
                    if ((wn * WN_T + j) * 8 >= P) continue;  // warp-uniform
#if USE_TC == 1
                    mma_tf32(acc[i][j], af[i], bf[j]);
#else
                    if (KSTEP == 16) mma_f16_k16(acc[i][j], af[i], bf[j]);
                    else mma_f16_k8(acc[i][j], af[i], bf[j]);
#endif
                }
            }
        }
#endif
        if (more) {
            const int ns = (kc + 1) % STAGES;
            if (WU == 0) wreg.put(ws_base + ns * WS_ELEMS, w, f0, 0, g);
            if (XU == 0) xreg.put(xs_base + ns * XS_ELEMS, xn, y0, x0, g);
        }
    }

    // ---- epilogue ----------------------------------------------------------------------------------
#if KS > 1
    float* part = reinterpret_cast<float*>(smem_raw);
    cp_async_wait<0>();
    __syncthreads();  // the partial tile aliases the ring
#endif
#if USE_TC == 0
#if FLAT
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const int o = tid + r * THREADS;
        if (!EVEN && o >= TF * P) break;
        EMIT(o / P, o % P, acc[r]);
    }
#else
#if PVEC > 1 && KS == 1
#pragma unroll
    for (int i = 0; i < RF; ++i)
#pragma unroll
        for (int j = 0; j < RP; j += PVEC) store_outv<PVEC>(out, bias, res, n, f0 + ta + i * A_THR, y0, x0, PIX(j), &acc[i][j], g);
#else
#pragma unroll
    for (int i = 0; i < RF; ++i)
#pragma unroll
        for (int j = 0; j < RP; ++j) EMIT(ta + i * A_THR, PIX(j), acc[i][j]);
#endif
#endif
#else
#pragma unroll
    for (int i = 0; i < WM_T; ++i) {
        const int r0 = (wm * WM_T + i) * 16 + gq;
#pragma unroll
        for (int j = 0; j < WN_T; ++j) {
            const int c = (wn * WN_T + j) * 8 + 2 * tq;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = r0 + h * 8;
                if (r < TF) EMIT2(r, c, acc[i][j][2 * h], acc[i][j][2 * h + 1]);
            }
        }
    }
#endif
#if KS > 1
    cluster_sync();  // every block's partial tile is in its shared memory
    for (int i = rank * THREADS + tid; i < TF * P; i += KS * THREADS) {
        const int f = i / P, p = i - (i / P) * P;
        float a = 0.f;
#pragma unroll
        for (int q = 0; q < KS; ++q) a += ld_cluster(part + f * PLD + p, q);
        store_out(out, bias, res, n, f0 + f, y0, x0, p, a, g);
    }
    cluster_sync();  // keep this block's shared memory alive until the others have read it
#endif
}
