// Shared device helpers for fuseplanner kernels: storage type, loads/stores, epilogue, cp.async, mma.
//
// Compile-time configuration arrives as #defines injected by fuseplanner/kernels/_build.py (see
// kernels/README.md). No CUDA headers are needed: fp16 is handled as raw 16-bit words converted with
// PTX, so the sources compile the same under NVRTC (CuPy) and nvcc.
#pragma once

#ifndef T_HALF
#define T_HALF 0
#endif
#ifndef ACT
#define ACT 0
#endif
#ifndef HAS_BIAS
#define HAS_BIAS 1
#endif
#ifndef HAS_RES
#define HAS_RES 0
#endif
#ifndef LEAKY_ALPHA
#define LEAKY_ALPHA 0.01f
#endif

// Activation codes (ACT).
#define ACT_NONE 0
#define ACT_RELU 1
#define ACT_RELU6 2
#define ACT_HARDSWISH 3
#define ACT_HARDSIGMOID 4
#define ACT_SIGMOID 5
#define ACT_SILU 6
#define ACT_GELU 7
#define ACT_LEAKYRELU 8

typedef unsigned short half_t;  // IEEE binary16 bits

#if T_HALF
typedef half_t T;  // storage type of activations and (staged) weights
#else
typedef float T;
#endif

// ---- scalar conversion ------------------------------------------------------------------------
__device__ __forceinline__ float h2f(half_t h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ half_t f2h(float f) {
    half_t h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(half_t v) { return h2f(v); }
__device__ __forceinline__ void from_f(float& d, float v) { d = v; }
__device__ __forceinline__ void from_f(half_t& d, float v) { d = f2h(v); }

// Load one element of storage type T as float (read-only path), store a float as T.
__device__ __forceinline__ float ldg_f(const T* p) { return to_f(__ldg(p)); }
__device__ __forceinline__ float lds_f(const T* p) { return to_f(*p); }
__device__ __forceinline__ void st_f(T* p, float v) { from_f(*p, v); }
// R consecutive shared-memory elements into fp32 registers (fp32: float4 / float2 reads, p aligned to
// them; fp16: element by element)
template <int R>
__device__ __forceinline__ void lds_vec(float (&d)[R], const float* p) {
    if constexpr (R % 4 == 0) {
#pragma unroll
        for (int i = 0; i < R; i += 4) {
            float4 v = *reinterpret_cast<const float4*>(p + i);
            d[i] = v.x; d[i + 1] = v.y; d[i + 2] = v.z; d[i + 3] = v.w;
        }
    } else if constexpr (R == 2) {
        float2 v = *reinterpret_cast<const float2*>(p);
        d[0] = v.x; d[1] = v.y;
    } else {
#pragma unroll
        for (int i = 0; i < R; ++i) d[i] = p[i];
    }
}
template <int R>
__device__ __forceinline__ void lds_vec(float (&d)[R], const half_t* p) {
#pragma unroll
    for (int i = 0; i < R; ++i) d[i] = h2f(p[i]);
}

// Two adjacent elements as one store (p aligned to 2 elements).
__device__ __forceinline__ void st_pair(T* p, float a, float b) {
#if T_HALF
    *reinterpret_cast<unsigned*>(p) = (unsigned)f2h(a) | ((unsigned)f2h(b) << 16);
#else
    *reinterpret_cast<float2*>(p) = make_float2(a, b);
#endif
}

// ---- epilogue: bias -> activation -> residual ---------------------------------------------------
// Logistic function on the special-function unit: ex2 and rcp approximations (a few ulp; expf and an
// IEEE division took ~25 instructions per element, which SiLU epilogues over a fused kernel's
// expanded window paid for every element). Saturates to 0 / 1 for large |v|.
__device__ __forceinline__ float fast_sigmoid(float v) { return __fdividef(1.f, 1.f + __expf(-v)); }

__device__ __forceinline__ float activate(float v) {
#if ACT == ACT_RELU
    return fmaxf(v, 0.f);
#elif ACT == ACT_RELU6
    return fminf(fmaxf(v, 0.f), 6.f);
#elif ACT == ACT_HARDSWISH
    return v * fminf(fmaxf(v + 3.f, 0.f), 6.f) * (1.f / 6.f);
#elif ACT == ACT_HARDSIGMOID
    return fminf(fmaxf(v * (1.f / 6.f) + 0.5f, 0.f), 1.f);
#elif ACT == ACT_SIGMOID
    return fast_sigmoid(v);
#elif ACT == ACT_SILU
    return v * fast_sigmoid(v);
#elif ACT == ACT_GELU
    return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
#elif ACT == ACT_LEAKYRELU
    return v >= 0.f ? v : LEAKY_ALPHA * v;
#else
    return v;
#endif
}

// bias (per output channel, float32) then activation. `bias` may be null when HAS_BIAS == 0.
__device__ __forceinline__ float apply_epilogue(float v, const float* __restrict__ bias, int channel) {
#if HAS_BIAS
    v += __ldg(bias + channel);
#endif
    return activate(v);
}

// Residual add (after the activation); `res` has the output's layout and storage type.
__device__ __forceinline__ float add_residual(float v, const T* __restrict__ res, long long off) {
#if HAS_RES
    v += ldg_f(res + off);
#endif
    return v;
}

// ---- integer helpers ---------------------------------------------------------------------------
__host__ __device__ constexpr int cdiv(int a, int b) { return (a + b - 1) / b; }

// ---- depthwise stencil ------------------------------------------------------------------------
// acc[v] += the k x k depthwise stencil of NV vertically adjacent outputs (SH_ rows apart, dilation
// DH_ x DW_) over a staged window whose rows start at base, LDR elements apart; w[ky * KW_ + kx] are
// the taps (a register array or a shared-memory pointer). Each window row is read once for all NV
// outputs (dw.cu, and dw_window in fused_common.cuh).
template <int NV, int KH_, int KW_, int SH_, int DH_, int DW_, int LDR, class S, class Wt>
__device__ __forceinline__ void dw_rows(const S* base, const Wt& w, float (&acc)[NV]) {
    constexpr int NROWS = (NV - 1) * SH_ + (KH_ - 1) * DH_ + 1;
#pragma unroll
    for (int r = 0; r < NROWS; ++r) {
        float row[KW_];
#pragma unroll
        for (int kx = 0; kx < KW_; ++kx) row[kx] = to_f(base[r * LDR + kx * DW_]);
#pragma unroll
        for (int v = 0; v < NV; ++v) {
            const int dy = r - v * SH_;  // compile-time after unrolling: window row r is tap row dy / DH_ of output v
            if (dy >= 0 && dy % DH_ == 0 && dy / DH_ < KH_) {
#pragma unroll
                for (int kx = 0; kx < KW_; ++kx) acc[v] = fmaf(row[kx], w[(dy / DH_) * KW_ + kx], acc[v]);
            }
        }
    }
}

// ---- cp.async (sm_80+) -------------------------------------------------------------------------
// Copy CP (4, 8 or 16) bytes of which the first `n` (0 <= n <= CP) are read from global memory and the
// rest zero-filled (cp.async's source size; `gmem` must be a valid address even when n is 0). Every
// size goes through L1 (.ca), 16-byte copies included: a 16-byte cp.async.cg (around L1) whose shared
// destination rows are padded by 16 bytes, as the kernels' stages are against bank conflicts, reads
// 1.5x its sectors from L2 on the H100, and by 32 or 64 bytes it splits into more L2 requests, which
// defeats the L2's coalescing of the same sectors asked for by several SMs at once; .ca copies read
// exactly their sectors with any padding (benchmarks/probe_copy.py, docs/validation.md).
template <int CP>
__device__ __forceinline__ void cp_async_bytes(void* smem, const void* gmem, int n) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(s), "l"(gmem), "n"(CP), "r"(n));
}
// Copy BYTES (4, 8 or 16) from global to shared memory; when `pred` is false the destination is
// zero-filled and nothing is read (src must still be a valid address).
template <int BYTES>
__device__ __forceinline__ void cp_async(void* smem, const void* gmem, bool pred) {
    cp_async_bytes<BYTES>(smem, gmem, pred ? BYTES : 0);
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// ---- tensor-core MMA (sm_80+), fp32 accumulation ------------------------------------------------
// Fragment layouts (PTX ISA, mma.m16n8k8 .tf32 / mma.m16n8k16 .f16), g = lane >> 2, t = lane & 3:
//   C/D: c0 (g, 2t), c1 (g, 2t+1), c2 (g+8, 2t), c3 (g+8, 2t+1)          [row = M, col = N]
//   tf32 A: a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4);  B: b0 (k=t, n=g), b1 (k=t+4, n=g)
//   f16  A: a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..);
//        B: b0 (k=2t..2t+1, n=g), b1 (k=2t+8..2t+9, n=g)
__device__ __forceinline__ unsigned f2tf32(float f) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(f));
    return r;
}
__device__ __forceinline__ unsigned pack_h2(half_t lo, half_t hi) {
    return (unsigned)lo | ((unsigned)hi << 16);
}
// ldmatrix of 8x8 b16 matrices, one 16-byte row address per lane (lanes 0-7 the first matrix, 8-15 the
// second, ...). Non-transposed, lane l receives the 4-byte word (row l / 4, word l % 4) of each matrix:
// on 4-byte data (fp32/TF32) a matrix is 8 rows x 4 words, exactly a TF32 fragment quarter (rows g,
// words t). The _t forms transpose 16-bit elements (fp16 operands stored k-major).
__device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], const void* p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
__device__ __forceinline__ void ldsm_x2(unsigned (&r)[2], const void* p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(s));
}
__device__ __forceinline__ void ldsm_x4_t(unsigned (&r)[4], const void* p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
__device__ __forceinline__ void ldsm_x2_t(unsigned (&r)[2], const void* p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(s));
}
__device__ __forceinline__ void mma_tf32(float* d, const unsigned* a, const unsigned* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma_f16_k16(float* d, const unsigned* a, const unsigned* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// m16n8k8 f16: A a0 (g, 2t..2t+1), a1 (g+8, 2t..2t+1); B b0 (k=2t..2t+1, n=g).
__device__ __forceinline__ void mma_f16_k8(float* d, const unsigned* a, const unsigned* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(b[0]));
}

// ---- split reduction over a thread-block cluster (KS blocks, Hopper and later) ---------------------
// The KS blocks of a cluster (__cluster_dims__(KS, 1, 1), consecutive blockIdx.x) share one output
// tile: each reduces every KS-th chunk into an fp32 partial tile in its shared memory, then sums a
// 1/KS share of the tile over the cluster's shared memory (DSMEM).
#ifndef KS
#define KS 1
#endif
#if KS > 1
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.aligned;\nbarrier.cluster.wait.aligned;\n" ::: "memory");
}
// Read a float at the same shared-memory offset as `p` in block `rank` of this cluster.
__device__ __forceinline__ float ld_cluster(const float* p, int rank) {
    unsigned a = (unsigned)__cvta_generic_to_shared(p), r;
    float v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(r) : "memory");
    return v;
}
#define CLUSTER_ATTR __cluster_dims__(KS, 1, 1)
#else
#define CLUSTER_ATTR
#endif
