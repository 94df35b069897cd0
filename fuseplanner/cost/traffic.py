"""Memory traffic primitives: 32-byte sectors of tiled 2-D reads and writes, and the L2/DRAM split.

GMA (global-memory accesses, the paper's term) is modelled as what the L2 counters see
(``lts__t_sectors_srcunit_tex_op_{read,write}``): whole 32-byte sectors requested by the SMs. A block
that stages a window of a row-major plane touches, per row, every sector that a row segment overlaps,
so a segment of L bytes starting at byte phase p (mod 32) costs floor((p + L - e) / 32) + 1 sectors
(e = element size). Tiles whose rows start off a sector boundary, and halo windows that overlap
their neighbours, therefore cost more than the tensor's size: BACKGROUND section 4 measured 2.1x the
input for a 144x56x56 fp32 3x3 depthwise conv with 16x16 tiles, which `window_sectors` reproduces
(116,064 input sectors + weights vs 118,897 measured).

Row phases: a row y of plane c starts at byte (c*H*W + y*W)*e. Over all rows and planes those start
phases (mod 32) are spread evenly over the multiples of g = gcd(W*e, 32), so the sector count of a
segment is averaged over that set of phases (exact when W*e is a multiple of 32; an average over
rows otherwise). Tensors themselves are assumed to start on a 256-byte boundary (cudaMalloc).

DRAM (cold L2, i.e. L2 flushed before the kernel, as `ncu --cache-control all` and the validation
timings do):

- reads: each sector of every input, weight and residual tensor is fetched once (compulsory); a
  re-read (weights re-read by every spatial tile, inputs re-read by every filter tile) hits in L2
  unless its reuse footprint exceeds the usable L2 (`l2_bytes * l2_usable_fraction`); between one
  and two times that capacity the miss fraction ramps linearly from 0 to 1 (LRU thrashing of a cyclic
  stream);
- writes: L2 is write-back; written sectors stay in L2 as dirty lines and are only written to DRAM
  when evicted during the kernel. With a total footprint F (compulsory reads + writes) and usable
  capacity L, the written-back share is max(0, F - L) / F of the output (the oldest lines are evicted
  first, and outputs are spread evenly over the kernel's lifetime). When everything fits,
  dram_write = 0, as measured on the H100 (BACKGROUND section 4). Dirty lines written back after
  the kernel ends are not counted (they are not the kernel's traffic in ncu either).
"""

from __future__ import annotations

from functools import lru_cache
from math import gcd

SECTOR = 32


def sectors(nbytes: float, sector: int = SECTOR) -> int:
    """Whole sectors of a contiguous, sector-aligned buffer of `nbytes` bytes."""
    return -(-int(nbytes) // sector)


@lru_cache(maxsize=65536)
def span_total(n: int, pad: int, win: int, step: int, ntiles: int) -> int:
    """Sum over `ntiles` windows [j*step - pad, j*step - pad + win) of their lengths clipped to [0, n)."""
    total = 0
    for j in range(ntiles):
        lo = j * step - pad
        hi = min(lo + win, n)
        if lo < 0:
            lo = 0
        if hi > lo:
            total += hi - lo
    return total


@lru_cache(maxsize=65536)
def span_union(n: int, pad: int, win: int, step: int, ntiles: int) -> int:
    """Number of distinct indices in [0, n) covered by the `ntiles` windows of `span_total`."""
    if step >= win:
        return span_total(n, pad, win, step, ntiles)
    lo = max(0, -pad)
    hi = min(n, (ntiles - 1) * step - pad + win)
    return max(0, hi - lo)


def _avg_segment_sectors(x0: int, length: int, e: int, g: int, sector: int) -> float:
    """Average sectors of a segment of `length` elements at element offset x0 of a row whose start
    phase is a uniformly distributed multiple of g."""
    n = sector // g
    d = (x0 * e) % g + length * e - e
    q, r = divmod(d, sector)
    hit = n - (-(-(sector - r) // g))  # phases k*g (k < n) with k*g >= sector - r wrap one more sector
    return q + 1 + hit / n


@lru_cache(maxsize=65536)
def row_sectors(n: int, pad: int, win: int, step: int, ntiles: int, e: int, pitch: int, sector: int = SECTOR) -> float:
    """Sectors one row costs when `ntiles` windows of `win` elements (start j*step - pad, clipped to
    [0, n)) each read their own segment of it; rows have a pitch of `pitch` bytes (0: a single row)."""
    g = gcd(pitch, sector) if pitch else sector
    g = max(g, 1)
    if sector % g:
        g = 1
    total = 0.0
    for j in range(ntiles):
        lo = j * step - pad
        hi = min(lo + win, n)
        if lo < 0:
            lo = 0
        if hi > lo:
            total += _avg_segment_sectors(lo, hi - lo, e, g, sector)
    return total


@lru_cache(maxsize=65536)
def row_union_sectors(n: int, pad: int, win: int, step: int, ntiles: int, e: int, pitch: int, sector: int = SECTOR) -> float:
    """Distinct sectors of one row that the windows of `row_sectors` touch (what DRAM must deliver)."""
    if step >= win:
        return row_sectors(n, pad, win, step, ntiles, e, pitch, sector)
    lo = max(0, -pad)
    hi = min(n, (ntiles - 1) * step - pad + win)
    return row_sectors(n, -lo, hi - lo, hi - lo, 1, e, pitch, sector) if hi > lo else 0.0


def miss_fraction(footprint: float, capacity: float) -> float:
    """Share of re-reads that miss L2 for a reuse footprint: 0 when it fits, ramping to 1 at 2x capacity."""
    if footprint <= capacity:
        return 0.0
    return min(1.0, (footprint - capacity) / capacity)


def dram_write_bytes(out_bytes: float, footprint: float, capacity: float) -> float:
    """Output bytes written back to DRAM during the kernel (write-back L2; see the module docstring)."""
    if footprint <= capacity or footprint <= 0:
        return 0.0
    return out_bytes * (footprint - capacity) / footprint
