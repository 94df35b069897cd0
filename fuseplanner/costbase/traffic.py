"""Memory traffic primitives: 32-byte sectors of tiled 2-D reads and writes, and the L2/DRAM split.

GMA (global-memory accesses, the paper's term) is modelled as what the L2 counters see
(``lts__t_sectors_srcunit_tex_op_{read,write}``): whole 32-byte sectors requested by the SMs. A block
that stages a window of a row-major plane touches, per row, every sector that a row segment overlaps,
so a segment of L bytes starting at byte phase p (mod 32) costs floor((p + L - e) / 32) + 1 sectors
(e = element size). Tiles whose rows start off a sector boundary, and halo windows that overlap
their neighbours, therefore cost more than the tensor's size: BACKGROUND section 4 measured 2.1x the
input for a 144x56x56 fp32 3x3 depthwise conv with 16x16 tiles, which `window_sectors` reproduces
(116,064 input sectors + weights vs 118,897 measured).

Narrow rows: when the bytes between a window's row segments, (W - ww) * e, are fewer than a sector,
consecutive rows of one window share sectors; the block's loads of a shared sector after the first
hit its SM's L1 (or merge in one warp request), so L2 sees the distinct sectors of the window
(`plane_windows_sectors`). Nsight Compute on the H100 (`scripts/gpu_run.py OUT probe-reads`): a 7x7 fp16 DW layer with
2x4 tiles looks up 30,300 L1 sectors of which 26,520 miss, against 40,020 per-row-segment sectors.

Row phases: a row y of plane c starts at byte (c*H*W + y*W)*e. Over all rows and planes those start
phases (mod 32) are spread evenly over the multiples of g = gcd(W*e, 32), so the sector count of a
segment is averaged over that set of phases (exact when W*e is a multiple of 32; an average over
rows otherwise). Tensors themselves are assumed to start on a 256-byte boundary (cudaMalloc).

Co-resident re-reads: the filter tiles of one spatial tile read the same input window. The block
scheduler hands consecutive blocks to consecutive SMs (block k to SM k mod SMs, then the next round),
so when the spatial tiles per image divide evenly into the SM count the blocks one SM holds at a time
share their spatial tile and fetch its window from L2 once (`coresident_share`). Nsight Compute on
the H100 (docs/validation.md): an EfficientNet-B0 PW->DW with 4 spatial tiles and 84 filter tiles,
3 blocks per SM, reads 0.39 of its modelled input windows from L2, the share `coresident_share`
gives (132 / 336). Cluster launches (dw_pw split over channel chunks) are placed per GPU processing
cluster and are not modelled so.

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


def _union_rows(p: int, y0: int, rows: int, x0: int, x1: int, pitch: int, e: int, sector: int) -> int:
    """Distinct sectors of rows y0 .. y0+rows of a plane starting at byte phase p, each row's columns
    [x0, x1) (row segments are increasing in address, so only neighbours can share a sector)."""
    total, last = 0, -1
    for y in range(y0, y0 + rows):
        a = (p + y * pitch + x0 * e) // sector
        b = (p + y * pitch + x1 * e - 1) // sector
        total += b - a + 1 - (last - a + 1 if last >= a else 0)
        last = b
    return total


@lru_cache(maxsize=65536)
def plane_windows_sectors(h: int, w: int, pt: int, pl: int, hh: int, ww: int, sh: int, sw: int, nh: int, nw: int,
                          e: int, plane: int, sector: int = SECTOR) -> tuple[float, float]:  # fmt: skip
    """(distinct, requested) sectors of one H x W plane (row pitch W*e, planes `plane` bytes apart) read
    by nh x nw windows of hh x ww elements starting at (i*sh - pt, j*sw - pl), clipped to the plane:
    each window's rows counted once per distinct sector (what reaches L2, `Narrow rows` above) and
    once per row segment (what the block's loads request), averaged over the plane start phases."""
    pitch = w * e
    rows_of = [(max(0, i * sh - pt), min(h, i * sh - pt + hh)) for i in range(nh)]
    cols_of = [(max(0, j * sw - pl), min(w, j * sw - pl + ww)) for j in range(nw)]
    narrow = any(hi > lo and (w - (hi - lo)) * e < sector for lo, hi in cols_of)
    rows = sum(max(0, hi - lo) for lo, hi in rows_of)
    requested = rows * row_sectors(w, pl, ww, sw, nw, e, pitch, sector)
    if not narrow or all(hi - lo <= 1 for lo, hi in rows_of):
        return requested, requested
    g = gcd(plane, sector) if plane else sector
    if sector % g:
        g = 1
    phases = range(0, sector, g)
    total = 0
    for y0, y1 in rows_of:
        if y1 <= y0:
            continue
        for x0, x1 in cols_of:
            if x1 > x0:
                total += sum(_union_rows(p, y0, y1 - y0, x0, x1, pitch, e, sector) for p in phases)
    return total / len(phases), requested


def coresident_share(nsp: int, nf: int, sms: int, bps: int, blocks: int = 0) -> float:
    """Share of the per-filter-tile input reads of a launch of `blocks` blocks that reach L2 when
    co-resident blocks of one SM share them through its L1 (`Co-resident re-reads` above): blocks
    k = x + nsp * y (x the spatial tile, y the filter tile, per image) go to SM k mod `sms`, at most
    `bps` at a time, so block k finds its window in L1 when block k - p*sms, p = nsp / gcd(nsp, sms),
    is the same window of the same image and still resident (p < bps): the first p*sms blocks of each
    image miss, the others hit. That placement holds for the first wave (`sms` x `bps` blocks) only:
    later blocks take whichever SM frees a slot first, away from their twins, and miss (Nsight Compute
    on the H100, layer sweeps in data/records/h100/holdout: PW launches of 1.5-7 waves read 0.9-1.1 of
    their windows per filter tile from L2). `blocks` 0: one wave."""
    if nf <= 1 or bps <= 1:
        return 1.0
    p = nsp // gcd(nsp, sms)
    if p >= bps:
        return 1.0
    share = min(1.0, p * sms / (nsp * nf))
    first = min(1.0, sms * bps / blocks) if blocks > 0 else 1.0
    return first * share + (1.0 - first)


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
