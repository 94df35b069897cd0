"""The layer-by-layer pointwise and linear family (`pw`, `linear`, pw.cu):
out[f, p] = sum_c W[f, c] x[c, p]. A block computes tf filters x (th x tw) pixels (tokens for linear),
looping over input channels in chunks of tc through a cp.async ring: input chunk tc x th*tw and weight
chunk tf x tc; deep reductions split over a thread-block cluster."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import NamedTuple

from fuseplanner.core.ir import Op, Tile, dtype_bytes, math_mode
from fuseplanner.kernels.registers import outputs_per_thread
from fuseplanner.kernels.tile_common import ACC_BYTES

#: Row padding of the pw/linear kernel's shared-memory chunks (pw.cu XPAD, WPAD).
PW_XPAD = 8


PW_KPAD_BYTES = 16


#: Shared-memory ring depth of the pw/linear kernel (cp.async runs stages - 1 chunks ahead): as many
#: stages as fit in PW_RING_BYTES, between PW_MIN_STAGES and PW_MAX_STAGES (deep rings hide the DRAM
#: latency of small tiles with long reductions).
PW_MIN_STAGES = 2


PW_MAX_STAGES = 6


PW_RING_BYTES = 64 * 1024


#: Deepest pw/linear ring (the depth of a given tile is `pw_stages(kind, tile, dtype)`).
PW_STAGES = PW_MAX_STAGES


#: Row pad of the split pw/linear kernel's fp32 partial tile (pw.cu PPAD).
PW_PPAD = 4


#: The pw/linear kernel splits only reductions at least this deep. Measured on the H100
#: (`scripts/gpu_run.py OUT kernels`, BENCHMARKS.md "Deep PW layers split"): MobileNetV2's 384-960-channel PW layers on 14x14 and
#: 7x7 maps ran 1.5-3x faster split (e.g. 960->160 at batch 8, TF32 40.2 -> 19.1 us), while MobileViT's
#: 64-192-channel linear layers ran about 1 us slower split than unsplit (few short chunks: the
#: cluster barriers and the reduction cost more than the chain they shorten).
LBL_SPLIT_MIN_CHANNELS = 256


def pw_stage_bytes(kind: str, tile: Tile, dtype: str) -> int:
    """Bytes of one pw/linear ring stage: weights tf x (tc + pad) and inputs tc x (p + PW_XPAD)
    (NCHW) or p x (tc + pad) (linear); rows padded against bank conflicts in the mma reads."""
    return _pw_stage_bytes(kind, tile.th * tile.tw, tile.tf, tile.tc, dtype_bytes(dtype))


def _pw_stage_bytes(kind: str, p: int, tf: int, tc: int, e: int) -> int:
    kpad = PW_KPAD_BYTES // e
    x_elems = p * (tc + kpad) if kind == "linear" else tc * (p + PW_XPAD)
    return (x_elems + tf * (tc + kpad)) * e


def pw_stages(kind: str, tile: Tile, dtype: str) -> int:
    """Ring depth of the pw/linear kernel for `tile` (pw.cu STAGES)."""
    return _pw_stages(pw_stage_bytes(kind, tile, dtype))


def _pw_stages(stage: int) -> int:
    return max(PW_MIN_STAGES, min(PW_MAX_STAGES, PW_RING_BYTES // stage))


def split_partial_bytes(tile: Tile) -> int:
    """Bytes of a split pw/linear block's fp32 partial tile, Ps[tf][th*tw + PW_PPAD] (pw.cu)."""
    return tile.tf * (tile.th * tile.tw + PW_PPAD) * ACC_BYTES


# ---- exact-fp32 register block of the pw/linear kernel (pw.cu USE_TC 0) ----------------------
#: Share of a block's pixel slots the exact-fp32 register blocks may leave past the tile (pw.cu
#: USE_TC 0, when the threads along pixels do not divide the tile's pixels).
FMA_MAX_IDLE = 0.25


#: Input channels from which an exact-fp32 tile reads pixels in runs (pw.cu PVEC) even where
#: its output rows cannot take the runs as vector stores: those outputs are then stored element by
#: element, 2-4 words apart across a warp (2-4x the L2 write sectors of coalesced stores), which
#: only a deep reduction's saved shared-memory reads outweigh.
PVEC_SCATTER_MIN_CIN = 128


class FmaSplit(NamedTuple):
    """How the pw kernel's exact-fp32 path spreads a tile over its threads: A_THR threads along the
    filters (each RF = tf / A_THR of them), B = threads / A_THR along the pixels (each RP = ceil(p / B)
    slots), weights read KVEC channels at a time, pixels in runs of PVEC; `cycles`: its issue cycles per
    useful output and channel (`fma_cycles`)."""

    a_thr: int
    kvec: int
    pvec: int
    cycles: float


def pixel_vector(rp: int, b: int, xld: int, widths: Sequence[int] = (4, 2)) -> int:
    """Pixels a thread of the exact-fp32 register block reads at a time (pw.cu PVEC): the first
    of `widths` that divides its RP pixel slots and the row of `xld` words (so the reads stay aligned)
    with the block's b * rp pixel slots inside that padded row; otherwise 1 (single pixels)."""
    for pv in widths:
        if rp % pv == 0 and xld % pv == 0 and b * rp <= xld:
            return pv
    return 1


def fma_cycles(rf: int, rp: int, b: int, p: int, kv: int = 1, pv: int = 1) -> float:
    """Cycles per useful output and channel of an RF x RP register block with `b` threads along the
    tile's `p` pixels, the larger of its shared-memory wavefronts and its issue slots per warp and
    channel. A warp holds `rows` = 32 / b filter rows (padded 4 words apart: 8 per wavefront) and
    min(32, b) pixel threads: the weights take rf * ceil(rows / 8) wavefronts per kv channels (kv = 4:
    one float4 per filter), the pixels rp / pv loads of min(32, b) * pv words (a wavefront moves 32);
    the SM issues 4 warp instructions (loads and FMAs alike) per cycle. A thread's useful outputs are
    rf * p / b (slots past the tile are not). A perfect block (no loads, no idle slots) takes 1/4."""
    rows = max(1, 32 // b)
    wavefronts = rf * math.ceil(rows / 8) / kv + rp / pv * math.ceil(min(32, b) * pv / 32)
    issue = (rf / kv + rp / pv + rf * rp) / 4
    return max(wavefronts, issue) * b / (rf * p)


@lru_cache(maxsize=8192)
def fma_map(tf: int, p: int, threads: int, vector: bool = False, xld: int = 0,
            widths: tuple[int, ...] = (4, 2)) -> FmaSplit | None:  # fmt: skip
    """The exact-fp32 register block of tf filters x p pixels over `threads`: of the splits with
    A_THR | tf and at most FMA_MAX_IDLE of the pixel slots past the tile, the fewest cycles per useful
    output (`fma_cycles`; with `vector`, weights read 4 channels at a time and pixels in runs of
    `pixel_vector(..., widths)` in rows of `xld` words); ties go to fewer idle slots, then more
    threads along pixels. None when no split qualifies (the kernel then runs FLAT)."""
    best = None
    kv = 4 if vector else 1
    for a in (d for d in range(1, threads + 1) if threads % d == 0 and tf % d == 0):
        b = threads // a
        rp = math.ceil(p / b)
        idle = b * rp - p
        if idle > FMA_MAX_IDLE * b * rp:
            continue
        pv = pixel_vector(rp, b, xld, widths) if vector else 1
        cyc = fma_cycles(tf // a, rp, b, p, kv, pv)
        score = (round(cyc, 9), idle, -b)
        if best is None or score < best[0]:
            best = (score, FmaSplit(a, kv, pv, cyc))
    return None if best is None else best[1]


@lru_cache(maxsize=8192)
def fma_split(kind: str, tile: Tile, dtype: str, wo: int = 0, c_in: int = 0) -> FmaSplit | None:
    """The register block the pw/linear kernel's FMA path (exact fp32, or no tensor-core grid) runs
    `tile` with, for NCHW maps `wo` pixels wide and `c_in` input channels: in fp32 (tc a multiple of
    4) weights read 4 channels at a time and pixels in runs whose outputs store as vectors (tile and
    map rows divisible by the run) or, from PVEC_SCATTER_MIN_CIN input channels on, element by
    element. None: no split qualifies (FLAT). The launcher reads it through `pw_variant`."""
    vector = dtype == "fp32" and tile.tc % 4 == 0
    deep = c_in >= PVEC_SCATTER_MIN_CIN
    widths = tuple(v for v in (4, 2) if kind == "pw" and (deep or (tile.tw % v == 0 and wo % v == 0)))
    return fma_map(tile.tf, tile.th * tile.tw, tile.threads, vector, tile.th * tile.tw + PW_XPAD, widths)


#: Most fp32 accumulator registers per thread the tensor-core path may use before it falls back.
MAX_MMA_ACC = 128


def mma_grid(tf: int, p: int, warps: int) -> tuple[int, int, int, int] | None:
    """(WARPS_M, WARPS_N, WM_T, WN_T) covering tf x p with 16 x 8 mma tiles, fewest tiles per warp."""
    mt_m, mt_n = math.ceil(tf / 16), math.ceil(p / 8)
    best = None
    for wm in (d for d in range(1, warps + 1) if warps % d == 0):
        wn = warps // wm
        a, b = math.ceil(mt_m / wm), math.ceil(mt_n / wn)
        score = (a * b, a + b)
        if best is None or score < best[0]:
            best = (score, (wm, wn, a, b))
    if best is None or best[1][2] * best[1][3] * 4 > MAX_MMA_ACC:
        return None
    return best[1]


def pw_variant(tile: Tile, dtype: str, precision: str, kind: str = "pw", wo: int = 0,
               c_in: int = 0) -> dict[str, int]:  # fmt: skip
    """Math-path defines of pw.cu for `tile`: USE_TC and its warp grid, or the FMA mapping
    (`fma_split`: in fp32 weights read 4 channels at a time, KVEC, and pixels in runs, PVEC)."""
    p, tf, tc, threads = tile.th * tile.tw, tile.tf, tile.tc, tile.threads
    use_tc = math_mode(dtype, precision)
    if use_tc and tc % 8 == 0 and threads % 32 == 0:
        g = mma_grid(tf, p, threads // 32)
        if g is not None:
            return {"USE_TC": use_tc, "WARPS_M": g[0], "WARPS_N": g[1], "WM_T": g[2], "WN_T": g[3]}
    s = fma_split(kind, tile, dtype, wo, c_in)
    if s is None:
        return {"USE_TC": 0, "FLAT": 1}
    return {"USE_TC": 0, "A_THR": s.a_thr, **({"KVEC": s.kvec, "PVEC": s.pvec} if s.kvec > 1 else {})}


class PwFamily:
    """The `pw` and `linear` kernel: tiles, shared memory, cost model, launcher and source (see
    `family.KernelFamily`). Its tiles need not split their outputs evenly over the threads (`uneven`)."""

    name = "pw"
    kinds = ("pw", "linear")
    fused = False
    uneven = True

    def source(self, kind: str) -> tuple[str, str]:
        return ("pw.cu", "pw_kernel")

    def spatial_sizes(self, kind: str, ho: int, wo: int) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """(row options, column tiles) of token tiles for linear (rows of tokens, one column); None: NCHW."""
        return ((8, 16, 32, 64, 128), (1,)) if kind == "linear" else None

    def chunk_sizes(self, tf: int, tcs: Sequence[int]) -> Sequence[int]:
        return tcs

    def tile_reason(self, kind: str, tile: Tile) -> str | None:
        return None

    def shape_reason(self, kind: str, ops: Sequence[Op]) -> str | None:
        return None

    def smem(self, kind: str, ops: Sequence[Op], th: int, tw: int, tf: int, tc: int, e: int) -> int:
        # pw.cu: a pw_stages()-deep ring of pw_stage_bytes() stages
        # weights Ws[tf][tc + PW_KPAD_BYTES/e], inputs Xs[tc][p + PW_XPAD] (NCHW) or Xs[p][tc + pad] (linear)
        stage = _pw_stage_bytes(kind, th * tw, tf, tc, e)
        return _pw_stages(stage) * stage

    def accumulators(self, kind: str, ops: Sequence[Op], tile: Tile, dtype: str, precision: str) -> float:
        return outputs_per_thread(tile)

    def splits(self, kind: str) -> bool:
        return True

    def split_fits(self, kind: str, ops: Sequence[Op], tile: Tile, dtype: str) -> bool:
        """Only reductions of LBL_SPLIT_MIN_CHANNELS or more, and only while the fp32 partial tile fits
        in the ring it aliases (`split_partial_bytes`)."""
        ring = self.smem(kind, ops, tile.th, tile.tw, tile.tf, tile.tc, dtype_bytes(dtype))
        return ops[0].c_in >= LBL_SPLIT_MIN_CHANNELS and split_partial_bytes(tile) <= ring

    def pipeline_depth(self, kind: str, ops: Sequence[Op], tile: Tile, dtype: str) -> int:
        return PW_STAGES - 1

    def output_rows(self, kind: str, tile: Tile) -> int:
        return 1

    def store_key(self, kind: str, tile: Tile) -> int:
        return tile.threads  # its warp grid or register block follows its threads

    def cost_model(self, kind: str) -> type:
        from fuseplanner.kernels.families.pw.cost import PwModel

        return PwModel

    def preparer(self, kind: str) -> Callable:
        from fuseplanner.kernels.families.pw import launch

        return getattr(launch, f"prepare_{kind}")


PW = PwFamily()
