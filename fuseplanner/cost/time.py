"""Resources, occupancy and predicted time of one kernel launch.

time = launch + sum over waves of  max(iters * latency / depth + memory [+ own compute], compute) + latency

- launch: `launch_overhead_s`, the cost of an empty timed region (2.1 us measured on the H100 with
  L2 flushed, BACKGROUND section 4): the floor under any kernel.
- waves: blocks run in waves of sm_count * blocks_per_sm; the last, partial wave runs
  ceil(rest / sm_count) blocks on min(rest, sm_count) SMs (wave quantisation).
- latency: every block runs a serial loop of `iters` chunk iterations, each waiting for one global
  load (`mem_latency_s`); a block's loads pay latency plus transfer time (first byte after the
  latency, the last after the bytes at the block's bandwidth share), and blocks resident on the same
  SM overlap their latencies with each other and with compute, so a wave costs at least
  iters * latency / depth however little data it moves (depth = chunk loads a block keeps in flight:
  PW_STAGES - 1 for the cp.async ring of pw/linear, 1 for the single-buffered dw and fused kernels).
  A single-buffered block cannot overlap its own loads with its own compute: its chain is
  latency + transfer + its compute (at the lanes its threads can use); other resident blocks fill
  the gaps, so a wave costs max(that chain, all resident blocks' compute).
  One more latency covers the prologue/write-back. This is why a small layer at batch 1 runs 5-10x
  above its bandwidth floor.
- compute: an SM runs its resident blocks' FLOPs at rate/sm_count; CUDA-core FLOPs (DW) at the FP32
  rate, PW/linear products at the tensor-core rate of the dtype (fp16 -> fp16_tc_flops, fp32 with
  precision="tf32" -> tf32_tc_flops, else fp32_flops); a block set with fewer threads than the SM's
  FP32 lanes (fp32_flops / (2 clock sm_count)) uses only that share of them.
- memory: each wave moves its share of the L2-level bytes at l2_bw and of the DRAM bytes at dram_bw,
  both split evenly over the active SMs (a wave on few SMs gets their share only).
"""

from __future__ import annotations

from ..specs import Hw
from .work import Work


def blocks_per_sm(smem: int, threads: int, regs: int, hw: Hw) -> tuple[int, str]:
    """Resident blocks per SM and the resource that limits them."""
    warps = -(-threads // hw.warp_size)
    regs_warp = -(-(regs * hw.warp_size) // hw.reg_alloc_unit) * hw.reg_alloc_unit
    by_threads = hw.max_threads_per_sm // threads
    by_regs = hw.regs_per_sm // (regs_warp * warps)
    by_smem = hw.smem_per_sm // (smem + hw.smem_reserved)
    n = min(hw.max_blocks_per_sm, by_threads, by_regs, by_smem)
    if n == by_smem:
        return n, "shared memory"
    if n == by_regs:
        return n, "registers"
    return n, ("threads" if n == by_threads else "blocks")


def mma_rate(dtype: str, precision: str, hw: Hw) -> float:
    """FLOP/s of the PW/linear products for this storage dtype and fp32 math mode."""
    if dtype == "fp16":
        return hw.fp16_tc
    return hw.tf32_tc if precision == "tf32" else hw.fp32


def _wave(per_sm: int, active: int, threads: int, lanes: float, c_blk: float, mem_blk: float, t_lat: float,
          lat: float, serial: bool) -> float:  # fmt: skip
    """Seconds of one wave with `per_sm` blocks on each of `active` SMs."""
    own = threads / lanes  # share of the SM's lanes one block can use
    t_own = c_blk / (own if own < 1.0 else 1.0)  # one block's compute, alone on the SM
    util = per_sm * own
    t_cmp = per_sm * c_blk / (util if util < 1.0 else 1.0)  # all resident blocks' compute
    t_mem = per_sm * active * mem_blk  # the wave's bytes at the wave's bandwidth
    if serial:  # single-buffered: a block loads, waits, then computes; other blocks fill the gaps
        return max(t_lat + t_mem + t_own, t_cmp) + lat
    return max(t_lat + t_mem, t_cmp) + lat


def kernel_time(w: Work, dram_bytes: float, bps: int, threads: int, hw: Hw, mma: float, depth: int = 1) -> float:
    """Predicted seconds of one launch (see the module docstring)."""
    sms = hw.sm_count
    full, rest = divmod(w.blocks, sms * bps)
    nb = float(w.blocks)
    mem_blk = max((w.gma_read + w.gma_write) / hw.l2_bw, dram_bytes / hw.dram_bw) / nb
    c_blk = (w.cuda_flops / hw.fp32 + w.mma_flops / mma) * sms / nb
    lanes = hw.fp32 / (2.0 * hw.clock_hz * sms)
    lat = hw.latency
    t_lat = w.iters * lat / depth
    serial = depth == 1
    t = hw.launch
    if full:
        t += full * _wave(bps, sms, threads, lanes, c_blk, mem_blk, t_lat, lat, serial)
    if rest:
        t += _wave(-(-rest // sms), min(rest, sms), threads, lanes, c_blk, mem_blk, t_lat, lat, serial)
    return t


def stream_time(gma_bytes: float, dram_bytes: float, flops: float, hw: Hw, rate: float) -> float:
    """Time of a library kernel that streams its operands once (dense conv, opaque op): launch plus
    the largest of the L2, DRAM and compute floors, plus one memory latency."""
    return hw.launch + max(gma_bytes / hw.l2_bw, dram_bytes / hw.dram_bw, flops / rate) + hw.latency
