"""L2 sectors of the warp-wide loads and stores that the kernels issue item by item over a tile: the
output stores of kernels/dw.cu, of the fused kernels' DW stencil (`dw_window`) and of their staged
final tiles (kernels/fused_*.cu), and the window staging of kernels/dw.cu; counted instruction by
instruction.

L2 sees, for every warp instruction, one request per 32-byte sector its active lanes touch
(``lts__t_sectors_srcunit_tex_op_{read,write}``). L1 keeps no written data, so two store instructions
that write parts of one sector count twice; and the window staging issues all of a block's copies
before any of them returns, so its loads of a sector that another instruction also reads miss L1 as
well. These kernels hand thread item `it` (it = thread + i x THREADS, so a warp's 32 lanes are 32
consecutive items) the unit `it % NX` of a row, the row group `(it / NX) % NY` and the plane
`it / (NX x NY)` of their tile, and an item that covers `V` rows issues them one instruction after
another:

- stores: a unit is an output element, NX = TW, NY = TH / V (V: dw.cu's V, the fused kernels' DWV;
  1 for the staged final stores; a token-major output [tokens, C] is one plane of `tokens` rows and
  C columns, TF columns per tile). A warp instruction writes pieces of several rows V apart and of
  several channels; rows 1 .. V - 1 apart, which share sectors where rows are narrower than a
  sector, are written by different instructions, and a row segment that a warp boundary splits is
  written twice;
- window loads (kernels/dw.cu `stage_window`): a unit is an aligned vector of VEC elements, NX the
  vectors that cover a halo row from its start rounded down to VEC, NY the window's rows, V = 1;
  units outside the map are not loaded (zero-filled).

Nsight Compute on the H100 (docs/validation.md, twenty-second session): 644 PW->DW launches at batch
1-8, fp32 and fp16, measured writes / this count: median 1.000, 10th-90th percentile 0.946-1.014 (the
per-row-segment count with narrow-row sharing it replaces: 0.36-1.37); 51 layer-by-layer DW launches,
measured input reads / this count 0.82-1.01, median 0.96 (the per-plane distinct count it replaces:
1.02-1.57).

The count is exact for that mapping: blocks are grouped by the byte phase of their tile's first
element (mod 32) and by the rows, units and planes of their tile inside the tensor (the edge tiles
have fewer), and one block of each group is counted lane by lane over one period of its planes
(after which lanes and byte phases repeat).
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache
from math import gcd
from typing import NamedTuple

import numpy as np

SECTOR = 32
WARP = 32


class Pattern(NamedTuple):
    """A block's items and their addresses (in elements of `e` bytes): unit x of row y*v + j of plane
    k is at k*plane + (y*v + j)*pitch + x*unit, for x < nx, y < ny, j < v (one instruction each)."""

    nx: int
    ny: int
    v: int
    unit: int
    pitch: int
    plane: int
    e: int


def _lcm(a: int, b: int) -> int:
    return a * b // gcd(a, b)


def _combine(a: Counter, b: Counter) -> Counter:
    """Product of two {(byte phase, *extents): count} tallies, phases added mod 32."""
    out: Counter = Counter()
    for (pa, *ma), na in a.items():
        for (pb, *mb), nb in b.items():
            out[((pa + pb) % SECTOR, *ma, *mb)] += na * nb
    return out


def _block_sectors(p: Pattern, phase: np.ndarray, lim: np.ndarray, union: bool = False) -> np.ndarray:
    """Sectors one block of each class requests: `phase` the byte phase of its first unit, `lim` rows
    (planes, row lo, row hi, unit lo, unit hi) of the items inside the tensor; per warp instruction, or
    (`union`, for one row per item) the distinct sectors of all of them."""
    span = int(lim[:, 0].max()) * p.ny * p.nx
    it = np.arange(-(-span // WARP) * WARP)
    x, q = it % p.nx, it // p.nx
    y, k = q % p.ny, q // p.ny
    low = np.iinfo(np.int64).min
    row = (y * p.v)[None, :] + np.arange(p.v)[:, None]  # [instruction j, item]
    lo = lim[:, None, None, :]
    ok = ((k < lo[..., 0]) & (row >= lo[..., 1]) & (row < lo[..., 2])
          & (x >= lo[..., 3]) & (x < lo[..., 4]))  # [class, j, item]  # fmt: skip
    byte = phase[:, None, None] + ((k * p.plane + x * p.unit) + row * p.pitch)[None] * p.e
    shape = (len(phase), p.v, 1, -1) if union else (len(phase), p.v, -1, WARP)
    sec = np.where(ok, byte // SECTOR, low).reshape(shape)
    # addresses rise with the item, so the running maximum is the previous active item's sector
    prev = np.maximum.accumulate(sec, axis=3)
    prev = np.concatenate([np.full(prev.shape[:3] + (1,), low), prev[..., :-1]], axis=3)
    return (ok.reshape(sec.shape) & (sec != prev)).sum(axis=(1, 2, 3)).astype(float)


def _with_planes(lim: np.ndarray, n) -> np.ndarray:
    out = lim.copy()
    out[:, 0] = n
    return out


def _count(p: Pattern, grid: Counter, images: int, union: bool = False) -> float:
    """Sectors of all blocks of `grid` ({(phase, planes, row lo, row hi, unit lo, unit hi): blocks}),
    divided by `images`. A block's planes repeat their lanes and byte phases every `period` planes:
    per instruction, a block of whole x period + rest planes requests whole x S(period) + S(rest); the
    distinct sectors of a whole block (`union`), S(period) + (whole - 1) x (S(2 period) - S(period)) +
    S(period + rest) - S(period)."""
    keys = list(grid)
    phase = np.array([k[0] for k in keys], dtype=np.int64)
    lim = np.array([k[1:] for k in keys], dtype=np.int64)
    period = SECTOR // gcd(SECTOR, p.plane * p.e)
    if not union:
        period = _lcm(period, WARP // gcd(WARP, p.ny * p.nx))
    chans = lim[:, 0]
    whole, rest = chans // period, chans % period

    def s(n: np.ndarray, need: np.ndarray) -> np.ndarray:
        """S(n) of the classes that `need` it (0 elsewhere)."""
        out = np.zeros(len(keys))
        if need.any():
            out[need] = _block_sectors(p, phase[need], _with_planes(lim[need], n[need]), union)
        return out

    one = s(np.minimum(chans, period), np.ones(len(keys), bool))
    if union:
        two = s(np.full_like(chans, 2 * period), whole >= 2)
        more = s(period + rest, (whole >= 1) & (rest > 0))
        blocks = one + np.maximum(whole - 1, 0) * (two - one) + np.where((whole >= 1) & (rest > 0), more - one, 0)
    else:
        blocks = whole * one + s(rest, (whole > 0) & (rest > 0))
        blocks = np.where(whole > 0, blocks, one)
    count = np.array([grid[k] for k in keys], dtype=float)
    return float((count * blocks).sum()) / images


def _planes(n: int, tile: int, plane_bytes: int) -> Counter:
    """{(byte phase, planes inside): tiles} of the plane tiles of one image."""
    return Counter(((t * tile * plane_bytes) % SECTOR, min(tile, n - t * tile)) for t in range(-(-n // tile)))


def _images(planes: int, plane_bytes: int) -> tuple[Counter, int]:
    n = SECTOR // gcd(SECTOR, planes * plane_bytes)
    return Counter(((i * planes * plane_bytes) % SECTOR,) for i in range(n)), n


@lru_cache(maxsize=16384)
def tile_write_sectors(co: int, ho: int, wo: int, e: int, tf: int, th: int, tw: int, v: int) -> float:
    """Write sectors of one image's output (co planes of ho x wo, `e`-byte elements) stored item by
    item from tiles of tf planes x th x tw, `v` rows per item, averaged over the images whose byte
    phases differ."""
    cols = Counter(((t * tw * e) % SECTOR, 0, min(tw, wo - t * tw)) for t in range(-(-wo // tw)))
    rows = Counter(((t * th * wo * e) % SECTOR, 0, min(th, ho - t * th)) for t in range(-(-ho // th)))
    imgs, n = _images(co, ho * wo * e)
    grid = _combine(_combine(imgs, _planes(co, tf, ho * wo * e)), _combine(rows, cols))
    return _count(Pattern(tw, th // v, v, 1, wo, ho * wo, e), grid, n)


@lru_cache(maxsize=16384)
def window_load_sectors(c: int, h: int, w: int, e: int, tf: int, hh: int, ww: int, nty: int, ntx: int, sh: int,
                        sw: int, pt: int, pl: int, vec: int, union: bool = False) -> float:  # fmt: skip
    """Read sectors of one image's input (c planes of h x w, `e`-byte elements) when blocks of tf
    planes stage hh x ww windows starting at (ty x sh - pt, tx x sw - pl) for nty x ntx tiles, in
    aligned vectors of `vec` elements from the window's first column rounded down to `vec` (kernels/dw.cu
    `stage_window`; vec = 1: element by element from the first column), averaged over the images
    whose byte phases differ; per instruction, or (`union`) the distinct sectors of each block."""
    nx = (ww + 2 * vec - 2) // vec if vec > 1 else ww
    cols: Counter = Counter()
    for t in range(ntx):
        x0 = t * sw - pl
        v0 = x0 // vec * vec  # floor, as the kernel's for negative columns
        cols[((v0 * e) % SECTOR, max(0, -(v0 // vec)), min(nx, -(-(w - v0) // vec)))] += 1
    rows: Counter = Counter()
    for t in range(nty):
        y0 = t * sh - pt
        rows[((y0 * w * e) % SECTOR, max(0, -y0), min(hh, h - y0))] += 1
    imgs, n = _images(c, h * w * e)
    grid = _combine(_combine(imgs, _planes(c, tf, h * w * e)), _combine(rows, cols))
    return _count(Pattern(nx, hh, 1, vec, w, h * w, e), grid, n, union)
