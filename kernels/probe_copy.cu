// Copy probe (benchmarks/probe_copy.py): what the L2 read counters see for one global -> shared copy
// pattern, away from any kernel's math. Block b copies ROWS rows of SEG bytes, PITCH bytes apart,
// from region (b / DIV) % NDIST (REGION bytes apart) of `src` into its shared memory, VB bytes per
// thread and instruction, consecutive threads on consecutive units of a row (the kernels' ChunkUnits
// order), then waits and writes one word to `sink` (so nothing is optimised away) and its SM
// (%smid) to `where` (which readers of a region share an SM, a TPC or a GPC).
//
// Defines: MODE (0 cp.async.cg, 1 cp.async.ca, 2 ld.global + st.shared, 3 ld.global.nc + st.shared,
// 4 cp.async.cg and 5 cp.async.ca in the source-size form the kernels use (`cp.async ..., VB, n;` with
// n = VB in a register), 6 as 4 with every ZF-th unit zero-filled (n = 0, source = `src`)),
// VB (4, 8 or 16; MODE 0 needs 16), SEG, ROWS, PITCH, REGION, DIV, NDIST, THREADS, SMEM (bytes of
// the shared ring the copies cycle through), PAD (bytes between the shared rows, as the kernels pad
// their stages against bank conflicts: row r of the ring starts at r * (SEG + PAD)), KS (thread-block
// clusters of KS consecutive blocks in x, as kernels/families/fused/fused_dw_pw.cu launches its split reduction).
#include <cuda_fp16.h>

#include "cluster_attr.cuh"

template <int N>
struct Vec;
template <>
struct Vec<4> { using t = float; };
template <>
struct Vec<8> { using t = float2; };
template <>
struct Vec<16> { using t = float4; };

#ifndef PAD
#define PAD 0
#endif
#ifndef ZF
#define ZF 8
#endif

__device__ __forceinline__ void copy_unit(unsigned char* dst, const unsigned char* src, const unsigned char* src0,
                                          int u) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
#if MODE >= 4
    const int n = (MODE == 6 && u % ZF == ZF - 1) ? 0 : VB;
    if (MODE == 6 && n == 0) src = src0;
#endif
#if MODE == 4 || MODE == 6
    static_assert(VB == 16, "cp.async.cg copies 16 bytes");
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(n));
#elif MODE == 5
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(s), "l"(src), "n"(VB), "r"(n));
#elif MODE == 0
    static_assert(VB == 16, "cp.async.cg copies 16 bytes");
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src));
#elif MODE == 1
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(s), "l"(src), "n"(VB));
#elif MODE == 2
    *reinterpret_cast<typename Vec<VB>::t*>(dst) = *reinterpret_cast<const typename Vec<VB>::t*>(src);
#else
    *reinterpret_cast<typename Vec<VB>::t*>(dst) = __ldg(reinterpret_cast<const typename Vec<VB>::t*>(src));
#endif
}

extern "C" __global__ void __launch_bounds__(THREADS) CLUSTER_ATTR
probe_copy(const unsigned char* __restrict__ src, float* __restrict__ sink, unsigned* __restrict__ where) {
    extern __shared__ __align__(16) unsigned char smem[];
    constexpr int UNITS = SEG / VB;
    const unsigned char* base = src + (size_t)((blockIdx.x / DIV) % NDIST) * REGION;
    for (int u = threadIdx.x; u < ROWS * UNITS; u += THREADS) {
        const int r = u / UNITS, c = u - (u / UNITS) * UNITS;
        copy_unit(smem + (r * (SEG + PAD) + c * VB) % SMEM, base + (size_t)r * PITCH + c * VB, src, u);
    }
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::);
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        sink[blockIdx.x] = reinterpret_cast<const float*>(smem)[blockIdx.x % 32];
        where[blockIdx.x] = sm;
    }
}
