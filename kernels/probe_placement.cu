// Placement probe (benchmarks/probe_placement.py): where the block scheduler puts the blocks of one
// launch and when they run. Block b writes out[3b] = its SM (%smid), out[3b+1] and out[3b+2] = the
// global timer (ns) when it started and ended. Each block holds the launch's dynamic shared memory
// (which sets how many blocks fit on an SM, as in the fused kernels) and spins SPIN ns, long against
// launch and scheduling latency, so blocks that run at the same time overlap in [start, end).
//
// Defines: THREADS (block size), KS (thread-block cluster of KS consecutive blocks in x, as
// kernels/families/fused/fused_dw_pw.cu launches its split reduction; 1 = no clusters).
#include "cluster_attr.cuh"

__device__ __forceinline__ unsigned int sm_id() {
    unsigned int r;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
    return r;
}

__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

extern "C" __global__ void __launch_bounds__(THREADS) CLUSTER_ATTR
probe_placement(unsigned long long* out, unsigned long long spin_ns) {
    extern __shared__ volatile unsigned char held[];  // the launch's dynamic shared memory, kept resident
    const unsigned long long t0 = global_ns();
    if (threadIdx.x == 0) held[0] = 1;
    unsigned long long t = t0;
    while (t - t0 < spin_ns) t = global_ns();
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned long long b = blockIdx.x;
        out[3 * b] = sm_id();
        out[3 * b + 1] = t0;
        out[3 * b + 2] = global_ns();
    }
}
