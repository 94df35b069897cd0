"""Resources, occupancy and predicted time of one kernel launch.

time = launch + sum over waves of  max(chain x resident ** c, SM compute, SM issue cap) + latency,
chain = iters * (latency / depth + chunk step) + memory + own compute

- launch: `launch_overhead_s`, the cost of an empty timed region (measured by `fuseplanner calibrate`:
  3.7 us on the H100 with L2 flushed): the floor under any kernel; plus `kernel_fixed_s`
  (layer-by-layer, and PW->PW over NCHW maps) or `fused_kernel_fixed_s` (the fused kinds with a DW
  stage, and PW->PW over channel-last tokens: `KernelModel.fused_fixed`), what a launch of these kernels takes
  beyond it whatever its work (first touches after the L2 flush, prologue, tail). Without it the
  H100 records showed time growing slower than the model's work: fused launches predicted under
  10 us ran 1.26x longer, those over 70 us 0.80x as long (H100 runs of an earlier kernel version).
- waves: blocks run in waves of sm_count * blocks_per_sm; the last, partial wave runs
  ceil(rest / sm_count) blocks on min(rest, sm_count) SMs (wave quantisation). A launch of thread-block
  clusters of 4 or more blocks gets only the `cluster_sms` SMs that whole clusters fill (the scheduler
  keeps a cluster within one GPC; 120 of the 132 SMs of a GH100), so its waves hold fewer blocks.
- latency: every block runs a serial loop of `iters` chunk iterations, each waiting for one global
  load (`mem_latency_s`); depth = chunk loads a block keeps in flight (the stages of a cp.async ring
  less one: PW_STAGES - 1 for pw/linear, `tiles.fused_stages` - 1 for the fused kernels; 1 for dw).
  A layer-by-layer pw/linear chunk iteration also costs `pw_chunk_cycles` (its barrier and register-block
  staging) whatever the block's FMAs: per-warp rates alone charged blocks of 32+ outputs per thread
  1.5x (fp16) to 1.9x (exact fp32) their measured time and blocks of under 8 about 0.9x.
- memory: each wave moves its share of the L2-level bytes at l2_bw and of the DRAM bytes at dram_bw,
  both split evenly over the active SMs (a wave on few SMs gets their share only); and a block's
  reads take at least its bytes / (warps ** exponent x `warp_load_bytes_per_cycle` x clock): a warp
  keeps only so many bytes in flight (Little's law), so a block with few warps that stages a large
  window (a fused block with a small filter tile) is load-bound whatever the chip's bandwidth.
- own compute: one block's FLOPs at the rate its warps actually achieve in fuseplanner's kernels,
  `*_warp_flops_per_cycle` x clock x warps ** exponent (DW stencil FLOPs at the DW rate of the
  storage dtype, in fused kernels at the fused stencil's own rate; PW/linear products at the
  layer-by-layer or fused PW rate of the math mode; the exponent `block_warp_exponent` for layer-by-layer kernels, `fused_block_warp_exponent` for fused
  ones). An exponent under 1 says that doubling a block's warps does not double its rate: they share
  the SM's shared-memory bandwidth and wait at the same barriers. These rates are a few FLOPs per
  warp per clock, 10-50x under the issue peak: operands come from shared memory, barriers separate
  chunks and chains are dependent. A block's chain is serial (load, wait, compute; overlapping them
  did not fit the H100 measurements better than adding them), so a tile with few large blocks is
  slow even when the bytes are few: this is why a small layer at batch 1 runs 5-10x above its
  bandwidth floor, and why the tile search prefers many small blocks.
- issued work (fused kinds): own compute charges the FLOPs a block issues on its critical path, not
  its useful FLOPs (`model.issued`, `fused.issued_per_block`): each GEMM at the busiest unit's share of
  the kernels' own work split (threads x register micro-tiles for exact fp32, warps x 16x8 mma tiles
  for tensor cores; idle units, tensor-core padding and shared operand loads count) and the DW
  stencil in the kernels' items of V output rows per thread (`fused._dw_issue`). A tile whose GEMM
  does not divide over its warps, or pads a 2-pixel tile to an 8-column mma, is slow whatever its
  FLOPs; the fused warp rates are per issued FLOP.
- co-residency: with r blocks resident on an SM, each block's chain takes r ** `coresident_exponent`
  times as long as alone (0.2 on the H100): the blocks share the SM's issue slots and shared-memory
  bandwidth, which the per-warp rates (measured mostly on launches of one or two blocks per SM) do
  not see. Without it the model ran batch-8 launches (several resident blocks) at ~0.8 of their
  measured time and batch-1 ones at ~0.9-1.1.
- SM compute: an SM runs all its resident blocks' FLOPs at most at its peak rate / sm_count: CUDA-core
  FLOPs (DW) at the FP32 rate, PW/linear products at the tensor-core rate of the dtype (fp16 ->
  fp16_tc_flops, fp32 with precision="tf32" -> tf32_tc_flops, else fp32_flops).
- SM issue cap (fused kinds): an SM runs its resident blocks' *issued* work at most at
  `fused_sm_issue_warps` warps' rate (the fused warp rates x this), however many blocks it holds: the
  fused kernels' inner loops are bound by the SM's shared-memory and issue bandwidth, which one block
  of 8 warps nearly fills. On the H100 three co-resident 256-thread blocks of a PW->DW->PW tile ran
  no faster per SM than one (H100 runs of an earlier kernel version); the co-residency term alone
  (r ** 0.2) said 2.4x faster.
"""

from __future__ import annotations

from fuseplanner.core.ir import math_mode
from fuseplanner.costbase.work import Work
from fuseplanner.hw.spec import Hw
from fuseplanner.kernels.family import cost_model, family


def blocks_per_sm(smem: int, threads: int, regs: int, hw: Hw) -> tuple[int, str]:
    """Resident blocks per SM and the resource that limits them."""
    warps = -(-threads // hw.warp_size)
    regs_warp = -(-(regs * hw.warp_size) // hw.reg_alloc_unit) * hw.reg_alloc_unit
    by_threads = hw.max_threads_per_sm // threads
    by_regs = hw.regs_per_sm // (regs_warp * warps)
    by_smem = hw.smem_per_sm_bytes // (smem + hw.smem_reserved_per_block_bytes)
    n = min(hw.max_blocks_per_sm, by_threads, by_regs, by_smem)
    if n == by_smem:
        return n, "shared memory"
    if n == by_regs:
        return n, "registers"
    return n, ("threads" if n == by_threads else "blocks")


def mma_rate(dtype: str, precision: str, hw: Hw) -> float:
    """FLOP/s of the PW/linear products for this storage dtype and fp32 math mode."""
    if dtype == "fp16":
        return hw.fp16_tc_flops
    return hw.tf32_tc_flops if precision == "tf32" else hw.fp32_flops


def warp_rates(kind: str, dtype: str, precision: str, hw: Hw, ops: tuple
               ) -> tuple[float, float, float, float, float, float, float]:  # fmt: skip
    """(DW stencil FLOP/s, PW product FLOP/s) one warp of this kernel kind achieves (spec
    `*_warp_flops_per_cycle`), the exponent of the warps per block (`*block_warp_exponent`), the
    bytes/s one warp loads (`warp_load_bytes_per_cycle`), the SM issue cap in warps
    (`fused_sm_issue_warps` for the fused kinds, `sm_issue_warps` for layer-by-layer pw/linear, none for
    dw; 0 = none), the fixed
    seconds of a launch of this kind over `ops` (`fused_kernel_fixed_s` where its model's `fused_fixed`
    says so, else `kernel_fixed_s`) and the seconds each
    chunk iteration adds to a block's chain (`pw_chunk_cycles` for the kinds whose model is
    `CHUNK_STEPPED`, else 0)."""
    half = dtype == "fp16"
    mode = math_mode(dtype, precision)
    lbl = not family(kind).fused
    pw = hw.pw_warp_flops if lbl else hw.fused_pw_warp_flops
    dw = hw.dw_warp_flops[half] if lbl else hw.fused_dw_warp_flops
    model = cost_model(kind)
    cap = 0.0 if not model.ISSUE_CAPPED else hw.sm_issue_warps if lbl else hw.fused_sm_issue_warps
    exponent = hw.block_warp_exponent if lbl else hw.fused_block_warp_exponent
    fixed = hw.fused_kernel_fixed_s if model.fused_fixed(ops) else hw.kernel_fixed_s
    chunk = hw.pw_chunk_s if model.CHUNK_STEPPED else 0.0
    return dw, pw[mode], exponent, hw.warp_load_bytes_per_s, cap, fixed, chunk


def _wave(per_sm: int, active: int, c_blk: float, mem_blk: float, t_own: float, t_ld: float, t_lat: float,
          lat: float, share: float) -> float:  # fmt: skip
    """Seconds of one wave with `per_sm` blocks on each of `active` SMs; `share`: the co-residency
    exponent (`coresident_exponent`)."""
    t_mem = per_sm * active * mem_blk  # the wave's bytes at the SMs' share of bandwidth
    chain = t_lat + (t_mem if t_mem > t_ld else t_ld) + t_own  # one block: loads, waits, computes
    if share and per_sm > 1:  # resident blocks share the SM's issue slots and shared-memory bandwidth
        chain *= per_sm**share
    return max(chain, per_sm * c_blk) + lat  # all resident blocks' compute at the SM's peak


def kernel_time(w: Work, dram_bytes: float, bps: int, threads: int, hw: Hw, mma: float,
                rates: tuple[float, float, float, float, float, float, float], depth: int = 1, sms: int = 0) -> float:  # fmt: skip
    """Predicted seconds of one launch (see the module docstring); `mma` is the SM-peak rate of the
    PW products, `rates` the (DW, PW) FLOP/s of one warp, the warp exponent, the warp load rate, the
    SM issue cap, the launch's fixed seconds and the seconds per chunk iteration (`warp_rates`); `sms`
    the SMs the launch can use (0: all; `hw.cluster_sms` for a launch of large clusters)."""
    sms = sms or hw.sm_count
    full, rest = divmod(w.blocks, sms * bps)
    nb = float(w.blocks)
    mem_blk = max(((w.req_read or w.gma_read) + w.gma_write) / hw.l2_bw, dram_bytes / hw.dram_bw) / nb
    c_blk = (w.cuda_flops / hw.fp32_flops + w.mma_flops / mma) * sms / nb
    warps = (-(-threads // hw.warp_size)) ** rates[2]
    t_own = ((w.cuda_issue or w.cuda_flops) / rates[0] + (w.mma_issue or w.mma_flops) / rates[1]) / (nb * warps)
    if rates[4]:  # the SM issues its blocks' work at most at `rates[4]` warps' rate: t_own x warps is one warp's
        c_blk = max(c_blk, t_own * warps / rates[4])
    t_ld = (w.ld_read or w.gma_read) / (nb * warps * rates[3])  # one block's reads at what its warps keep in flight
    lat = hw.mem_latency_s
    t_lat = w.iters * lat / depth + w.iters * rates[6]  # chunk loads `depth` deep in flight; each chunk step
    t = hw.launch_overhead_s + rates[5]
    if full:
        t += full * _wave(bps, sms, c_blk, mem_blk, t_own, t_ld, t_lat, lat, hw.coresident_exponent)
    if rest:
        t += _wave(-(-rest // sms), min(rest, sms), c_blk, mem_blk, t_own, t_ld, t_lat, lat, hw.coresident_exponent)
    return t


def stream_time(gma_bytes: float, dram_bytes: float, flops: float, hw: Hw, rate: float) -> float:
    """Time of a library kernel that streams its operands once (dense conv, opaque op): launch plus
    the largest of the L2, DRAM and compute floors, plus one memory latency."""
    return hw.launch_overhead_s + max(gma_bytes / hw.l2_bw, dram_bytes / hw.dram_bw, flops / rate) + hw.mem_latency_s
