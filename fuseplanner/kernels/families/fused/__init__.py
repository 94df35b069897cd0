"""The fused family (`pw_dw`, `dw_pw`, `pw_pw`, `pw_dw_pw`, fused_<kind>.cu).

- ``pw_dw``: a block computes tf expanded (DW) channels x (th x tw) DW outputs. For each chunk of tc
  PW input channels it stages tc x halo window of the PW input and tf x tc PW weights, accumulating the
  expanded halo window tf x hh x ww (fp32, the communication buffer); then the DW reads it.
- ``dw_pw``: a block computes tf PW filters x (th x tw) pixels. For each chunk of tc DW channels it
  stages tc x halo window of the input, runs the DW into a tc x th*tw fp32 buffer (the communication
  buffer) and accumulates the PW with a tf x tc weight chunk. The DW is recomputed once per filter tile.
- ``pw_pw``: a block computes tf filters of the second PW x (th x tw) pixels. It stages the whole input
  pixel tile C1 x th*tw once; for each chunk of tc mid channels it streams the first PW's C1 x tc and
  the second's tc x tf weight chunks through its ring, computes the first PW into a tc x th*tw fp32
  buffer and accumulates the second PW.
- ``pw_dw_pw``: a block computes tf projection filters x (th x tw) pixels. It stages the input halo
  window C_in x hh x ww once; for each chunk of tc expanded channels it streams the expansion's
  C_in x tc weights, the chunk's DW weights and biases and the projection's tc x tf weights through its
  ring, computes the expansion PW over the window (tc x hh x ww fp32), the DW (tc x th*tw) and
  accumulates the projection.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import NamedTuple

from fuseplanner.core.ir import Op, Tile, dtype_bytes, math_mode
from fuseplanner.core.kinds import GROUP_KINDS as FUSED_KINDS
from fuseplanner.kernels.tile_common import ACC_BYTES, _aligned, _halo, _rup, halo_window

#: The fused kernels' cp.async ring: as many stages as fit in FUSED_RING_BYTES, 2..4 (1 for a stage
#: larger than FUSED_RING_BYTES).
FUSED_MIN_STAGES = 2


FUSED_MAX_STAGES = 4


FUSED_RING_BYTES = 64 * 1024


def fused_smem_layout(kind: str, ops: Sequence[Op], tile: Tile, dtype: str) -> dict[str, int]:
    """Bytes of each shared-memory buffer of a fused kernel (fused_<kind>.cu), in order.

    Exactly the kernels' layout: GEMM operands are At[K][M+8] (weights, transposed) and B[K][N+8]
    (activations) with K padded to 16, M (filters) to 16 and N (pixels) to 8, buffers 128-byte
    aligned; the fp32 communication buffers are [rows][N+8]. Every kind streams its chunks through a
    `fused_stages`-deep "ring" (pw_dw, dw_pw: halo window and PW weights, dw_pw also DW weights and
    biases; pw_pw, pw_dw_pw: the weights of both PWs, pw_dw_pw also DW weights and biases); pw_pw
    and pw_dw_pw stage their input "xs" once, after the ring. "staging" (the fp32 final-output tile)
    aliases the others from offset 0, so the block needs max(sum of the rest, staging).
    """
    return _fused_smem_layout(kind, ops, tile.th, tile.tw, tile.tf, tile.tc, dtype_bytes(dtype))


def _fused_smem_layout(kind: str, ops: Sequence[Op], th: int, tw: int, tf: int, tc: int, e: int) -> dict[str, int]:
    a = _aligned
    kp, mp, np_ = -(-tc // 16) * 16, -(-tf // 16) * 16, -(-(th * tw) // 8) * 8
    if kind == "pw_dw":
        hh, ww = _halo(kind, ops, th, tw)
        kh, kw = ops[1].kernel
        n1p = _rup(hh * staged_window_width(ww, e), 8)
        return {"ring": _ring_bytes(kind, ops, th, tw, tf, tc, e), "cs": a(mp * (n1p + 8) * ACC_BYTES),
                "wd": a(tf * (kh * kw + 1) * ACC_BYTES)}
    if kind == "dw_pw":
        return {"ring": _ring_bytes(kind, ops, th, tw, tf, tc, e), "ds": a(kp * (np_ + 8) * e),
                "staging": a(mp * (np_ + 8) * ACC_BYTES)}
    c1p = _rup(ops[0].c_in, 16)
    if kind == "pw_pw":
        # ms: the fp16 copy of the mid channels (fp32 storage stages them in mf itself)
        return {"ring": _ring_bytes(kind, ops, th, tw, tf, tc, e), "xs": a(c1p * (np_ + 8) * e),
                "mf": a(kp * (np_ + 8) * ACC_BYTES), "ms": a(kp * (np_ + 8) * e) if e == 2 else 0,
                "staging": a(mp * (np_ + 8) * ACC_BYTES)}
    if kind == "pw_dw_pw":
        hh, ww = _halo(kind, ops, th, tw)
        n1p = _rup(hh * staged_window_width(ww, e), 8)
        return {"ring": _ring_bytes(kind, ops, th, tw, tf, tc, e), "xs": a(c1p * (n1p + 8) * e),
                "e": a(kp * (n1p + 8) * ACC_BYTES), "ds": a(kp * (np_ + 8) * e),
                "staging": a(mp * (np_ + 8) * ACC_BYTES)}
    raise ValueError(f"{kind!r} is not a fused kernel kind: use one of {', '.join(FUSED_KINDS)}")


def staged_window_width(ww: int, e: int) -> int:
    """Columns of a halo row as the pw_dw, dw_pw and pw_dw_pw kernels stage it: fp16 rows start at an
    even map column and hold whole 4-byte pairs (fused_*.cu WWA)."""
    return ww if e == 4 else _rup(ww + 1, 2)


def _dw_pw_stage_bytes(ops: Sequence[Op], th: int, tw: int, tf: int, tc: int, e: int) -> int:
    """One stage of the dw_pw ring: halo window tc x hh x WWA (dtype), DW weights and biases
    tc x (kh kw + 1) (fp32), PW weights At[kp][mp + 8] (dtype), each 128-byte aligned."""
    a = _aligned
    hh, ww = _halo("dw_pw", ops, th, tw)
    kh, kw = ops[0].kernel
    kp, mp = _rup(tc, 16), _rup(tf, 16)
    return a(tc * hh * staged_window_width(ww, e) * e) + a(tc * (kh * kw + 1) * ACC_BYTES) + a(kp * (mp + 8) * e)


def _pw_dw_stage_bytes(ops: Sequence[Op], th: int, tw: int, tf: int, tc: int, e: int) -> int:
    """One stage of the pw_dw ring: halo window Xs[kp][n1p + 8] with rows of the staged width, and PW
    weights At[kp][mp + 8], both in the dtype and 128-byte aligned."""
    hh, ww = _halo("pw_dw", ops, th, tw)
    kp, mp = _rup(tc, 16), _rup(tf, 16)
    n1p = _rup(hh * staged_window_width(ww, e), 8)
    return _aligned(kp * (n1p + 8) * e) + _aligned(kp * (mp + 8) * e)


def _pw_pw_stage_bytes(ops: Sequence[Op], th: int, tw: int, tf: int, tc: int, e: int) -> int:
    """One stage of the pw_pw ring: the first PW's weight chunk At[c1p][kp + 8] and the second's
    At[kp][mp + 8], both in the dtype and 128-byte aligned (c1p = C1 rounded up to 16)."""
    c1p, kp, mp = _rup(ops[0].c_in, 16), _rup(tc, 16), _rup(tf, 16)
    return _aligned(c1p * (kp + 8) * e) + _aligned(kp * (mp + 8) * e)


def _pw_dw_pw_stage_bytes(ops: Sequence[Op], th: int, tw: int, tf: int, tc: int, e: int) -> int:
    """One stage of the pw_dw_pw ring: the expansion's weight chunk At[c1p][kp + 8] (dtype), the DW
    weights and biases of the chunk tc x (kh kw + 1) (fp32) and the projection's At[kp][mp + 8]
    (dtype), each 128-byte aligned."""
    kh, kw = ops[1].kernel
    c1p, kp, mp = _rup(ops[0].c_in, 16), _rup(tc, 16), _rup(tf, 16)
    return _aligned(c1p * (kp + 8) * e) + _aligned(tc * (kh * kw + 1) * ACC_BYTES) + _aligned(kp * (mp + 8) * e)


#: One ring stage's bytes of each fused kind, (ops, th, tw, tf, tc, element bytes) -> bytes.
_STAGE_BYTES = {"pw_dw": _pw_dw_stage_bytes, "dw_pw": _dw_pw_stage_bytes, "pw_pw": _pw_pw_stage_bytes,
                "pw_dw_pw": _pw_dw_pw_stage_bytes}


def _ring_bytes(kind: str, ops: Sequence[Op], th: int, tw: int, tf: int, tc: int, e: int) -> int:
    """Shared memory of a fused kind's whole ring: its depth (`_ring_depth`) times one stage."""
    stage = _STAGE_BYTES[kind](ops, th, tw, tf, tc, e)
    return _ring_depth(kind, ops, tc, stage) * stage


def _ring_depth(kind: str, ops: Sequence[Op], tc: int, stage: int) -> int:
    """`ring_stages` of a stage, and for pw_dw and dw_pw (whose chunks run over the first op's input
    channels) no more stages than chunks: a 24-channel input in chunks of 32 is one chunk, and a
    second stage would only take shared memory (and resident blocks) from the SM."""
    depth = ring_stages(stage)
    if kind in ("pw_dw", "dw_pw"):
        depth = min(depth, max(1, -(-ops[0].c_in // tc)))
    return depth


def ring_stages(stage: int) -> int:
    """Ring depth of the fused kernels for a stage of `stage` bytes (fused_*.cu STAGES): as
    many as fit in FUSED_RING_BYTES, between FUSED_MIN_STAGES and FUSED_MAX_STAGES; a stage larger
    than FUSED_RING_BYTES alone runs single-buffered (1: its copies do not overlap the math), so that
    wide layers (a 960- or 1152-channel PW input chunk) still have a feasible tile."""
    if stage > FUSED_RING_BYTES:
        return 1
    return max(FUSED_MIN_STAGES, min(FUSED_MAX_STAGES, FUSED_RING_BYTES // stage))


def fused_stages(kind: str, ops: Sequence[Op], tile: Tile, dtype: str) -> int:
    """Ring depth of a fused kernel (fused_<kind>.cu STAGES): its block keeps stages - 1
    chunks in flight (pw_dw, dw_pw: at most one stage per chunk)."""
    if kind not in _STAGE_BYTES:
        raise ValueError(f"{kind!r} is not a fused kernel kind: use one of {', '.join(FUSED_KINDS)}")
    return _ring_depth(kind, ops, tile.tc, _STAGE_BYTES[kind](ops, tile.th, tile.tw, tile.tf, tile.tc, dtype_bytes(dtype)))


def fused_smem_total(layout: dict[str, int]) -> int:
    """Bytes a fused kernel's block needs: its buffers back to back, or the aliased staging tile."""
    staging = layout.get("staging", 0)
    return max(sum(layout.values()) - staging, staging)


def fused_shape_reason(kind: str, ops: Sequence[Op]) -> str | None:
    """Why the fused kernels cannot run this group at all (any tile), or None."""
    for op, k in zip(ops, kind.split("_"), strict=False):
        if k == "pw" and op.kind == "pw" and (tuple(op.stride) != (1, 1) or any(op.pads)):
            return f"fused kernels need stride-1 unpadded pointwise members ({op.name} has stride {op.stride}); run it unfused"
        if k == "dw" and op.multiplier != 1:
            return f"fused kernels need a depthwise channel multiplier of 1 ({op.name} has {op.multiplier}); run it unfused"
    return None


class BlockGemm(NamedTuple):
    """One block GEMM of a fused kernel's chunk, C[m][n] (+)= sum_k At[k][m] B[k][n]: real extents m x n,
    shared buffers padded to mp (multiple of 16) x np_ (multiple of 8); k the reduction of the exact
    fp32 path, kp the tensor cores' (padded to 16); `resident`: accumulators stay in registers over
    the chunks (the last PW), else the product is streamed to shared memory."""

    m: int
    n: int
    mp: int
    np_: int
    k: int
    kp: int
    resident: bool


def block_gemms(kind: str, ops: Sequence[Op], tile: Tile, e: int) -> dict[str, BlockGemm]:
    """The block GEMMs of one channel chunk of a fused kind, by define prefix ("1": the first PW over
    the tile or staged window, "2": the last PW into the output tile), for element size `e`: what the
    launcher compiles (launch.kernel_defines) and what the cost model charges
    (cost.issued_per_block)."""
    p, kp, mp = tile.th * tile.tw, _rup(tile.tc, 16), _rup(tile.tf, 16)
    out = {}
    if kind in ("pw_dw", "pw_dw_pw"):
        hh, ww = halo_window(kind, ops, tile)
        n1 = hh * staged_window_width(ww, e)
    if kind == "pw_dw":
        out["1"] = BlockGemm(tile.tf, n1, mp, _rup(n1, 8), tile.tc, kp, False)
    elif kind in ("pw_pw", "pw_dw_pw"):
        n = p if kind == "pw_pw" else n1
        c1 = ops[0].c_in
        out["1"] = BlockGemm(tile.tc, n, kp, _rup(n, 8), c1, _rup(c1, 16), False)
    if kind != "pw_dw":
        out["2"] = BlockGemm(tile.tf, p, mp, _rup(p, 8), tile.tc, kp, True)
    return out


def dw_rows_per_item(nch: int, th: int, tw: int, threads: int) -> int:
    """Output rows one thread item of a fused kernel's DW stencil covers (the DWV define of
    fused_*.cu, dw_window): 4, 2 or 1, the most that divides th and still gives every thread of
    the block an item. The launcher (launch.kernel_defines) and the cost model
    (cost._dw_issue) both read it here."""
    for v in (4, 2):
        if th % v == 0 and nch * (th // v) * tw >= threads:
            return v
    return 1


#: Accumulator registers per thread above which a work split is penalised (spills follow).
MAX_ACC = 128


@lru_cache(maxsize=8192)
def fma_group(m: int, n: int, threads: int, resident: bool) -> tuple[int, int, int, int]:
    """(GM, GN, ME, NE): each thread's register micro-tile GM x GN for an m x n exact-fp32 GEMM and
    the covered extents (m, n rounded up to GM, GN). Minimises per-thread FMAs plus shared loads."""
    best = None
    for gm in (1, 2, 4, 8):
        for gn in (1, 2, 4, 8):
            if gm * gn > 32:
                continue
            me, ne = _rup(m, gm), _rup(n, gn)
            mt = math.ceil((me // gm) * (ne // gn) / threads)
            cost = mt * (gm * gn + 0.5 * (math.ceil(gm / 4) + math.ceil(gn / 4)))
            if resident and mt * gm * gn > MAX_ACC:
                cost *= 4
            if best is None or cost < best[0]:
                best = (cost, (gm, gn, me, ne))
    return best[1]


@lru_cache(maxsize=8192)
def mma_group(m: int, n: int, warps: int, resident: bool) -> tuple[int, int, int, int]:
    """(GM, GN, ME, NE): each warp's tile of 16 x 8 mma tiles over an m x n GEMM (m a multiple of 16,
    n of 8). Minimises mma instructions per warp plus fragment loads."""
    tm, tn = m // 16, n // 8
    best = None
    for mi in (d for d in (1, 2, 4) if tm % d == 0):
        for ni in (d for d in range(1, 9) if tn % d == 0):
            mt = math.ceil((tm // mi) * (tn // ni) / warps)
            cost = mt * (mi * ni + 0.5 * (mi + 0.5 * ni))
            if resident and mt * mi * ni * 4 > MAX_ACC:
                cost *= 4
            if best is None or cost < best[0]:
                best = (cost, (16 * mi, 8 * ni, m, n))
    return best[1]


def gemm_accumulators(kind: str, ops: Sequence[Op], tile: Tile, dtype: str, precision: str) -> float:
    """fp32 accumulators a thread of the `kind` kernel holds at once in its block GEMMs, as the launcher
    groups them (launch.gemm_defines): a streamed GEMM holds one group (GM x GN outputs of a thread, or
    of a warp's 16 x 8 mma tiles, 4 per tile and thread), a resident one every group the thread owns
    (fused_common.cuh, BlockAcc). The register table's slope variable (`kernels.registers`)."""
    exact = math_mode(dtype, precision) == 0
    units = tile.threads if exact else tile.threads // 32
    total = 0
    for g in block_gemms(kind, ops, tile, dtype_bytes(dtype)).values():
        if exact:
            gm, gn, me, ne = fma_group(g.m, g.n, tile.threads, g.resident)
            per = gm * gn
        else:
            gm, gn, me, ne = mma_group(g.mp, g.np_, units, g.resident)
            per = gm * gn // 32
        total += per * (math.ceil((me // gm) * (ne // gn) / units) if g.resident else 1)
    return float(total)


class FusedFamily:
    """The fused kernels: tiles, shared memory, cost models, launchers and sources (see
    `family.KernelFamily`)."""

    name = "fused"
    kinds = FUSED_KINDS
    fused = True
    uneven = False

    def source(self, kind: str) -> tuple[str, str]:
        return (f"fused_{kind}.cu", f"fused_{kind}")

    def spatial_sizes(self, kind: str, ho: int, wo: int) -> None:
        return None  # NCHW map tiles (`tiles._grid_sizes`)

    def chunk_sizes(self, tf: int, tcs: Sequence[int]) -> Sequence[int]:
        return tcs

    def tile_reason(self, kind: str, tile: Tile) -> str | None:
        return None

    def shape_reason(self, kind: str, ops: Sequence[Op]) -> str | None:
        return fused_shape_reason(kind, ops)

    def smem(self, kind: str, ops: Sequence[Op], th: int, tw: int, tf: int, tc: int, e: int) -> int:
        return fused_smem_total(_fused_smem_layout(kind, ops, th, tw, tf, tc, e))

    def accumulators(self, kind: str, ops: Sequence[Op], tile: Tile, dtype: str, precision: str) -> float:
        return gemm_accumulators(kind, ops, tile, dtype, precision)

    def splits(self, kind: str) -> bool:
        return kind == "dw_pw"  # the DW->PW reduction over a thread-block cluster

    def split_fits(self, kind: str, ops: Sequence[Op], tile: Tile, dtype: str) -> bool:
        return True

    def pipeline_depth(self, kind: str, ops: Sequence[Op], tile: Tile, dtype: str) -> int:
        return max(1, fused_stages(kind, ops, tile, dtype) - 1)

    def output_rows(self, kind: str, tile: Tile) -> int:
        """The DW stencil's rows per item for pw_dw (it stores from the stencil); 1 for the kinds that
        store a staged tile."""
        return dw_rows_per_item(tile.tf, tile.th, tile.tw, tile.threads) if kind == "pw_dw" else 1

    def store_key(self, kind: str, tile: Tile) -> int:
        return self.output_rows(kind, tile)

    def cost_model(self, kind: str) -> type:
        from fuseplanner.kernels.families.fused import cost

        return {"pw_dw": cost.PwDwModel, "dw_pw": cost.DwPwModel, "pw_pw": cost.PwPwModel,
                "pw_dw_pw": cost.PwDwPwModel}[kind]

    def preparer(self, kind: str) -> Callable:
        from fuseplanner.kernels.families.fused import launch

        return getattr(launch, f"prepare_{kind}")


FUSED = FusedFamily()
