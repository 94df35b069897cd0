"""L2 sectors of the warp-wide loads and stores that the kernels issue item by item over a tile: the
output stores of kernels/families/dw/dw.cu, of the fused kernels' DW stencil (`dw_window`) and of their staged
final tiles (kernels/families/fused/fused_*.cu), and the window staging of kernels/families/dw/dw.cu; counted instruction by
instruction. And the register epilogue of kernels/families/pw/pw.cu (`pw_write_sectors`, at the end), whose
warps' stores of one instruction merge.

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
- window loads (kernels/families/dw/dw.cu `stage_window`): a unit is an aligned vector of VEC elements, NX the
  vectors that cover a halo row from its start rounded down to VEC, NY the window's rows, V = 1;
  units outside the map are not loaded (zero-filled).

Nsight Compute on the H100 (data/records/h100): 644 PW->DW launches at batch
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


def _spans(n: int, tile: int, step_bytes: int) -> Counter:
    """{(byte phase, units inside): tiles} of `tile`-unit tiles over `n` units `step_bytes` apart
    (planes of one image, rows of a plane, ...)."""
    return Counter(((t * tile * step_bytes) % SECTOR, min(tile, n - t * tile)) for t in range(-(-n // tile)))


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
    grid = _combine(_combine(imgs, _spans(co, tf, ho * wo * e)), _combine(rows, cols))
    return _count(Pattern(tw, th // v, v, 1, wo, ho * wo, e), grid, n)


@lru_cache(maxsize=16384)
def window_load_sectors(c: int, h: int, w: int, e: int, tf: int, hh: int, ww: int, nty: int, ntx: int, sh: int,
                        sw: int, pt: int, pl: int, vec: int, union: bool = False) -> float:  # fmt: skip
    """Read sectors of one image's input (c planes of h x w, `e`-byte elements) when blocks of tf
    planes stage hh x ww windows starting at (ty x sh - pt, tx x sw - pl) for nty x ntx tiles, in
    aligned vectors of `vec` elements from the window's first column rounded down to `vec` (kernels/families/dw/dw.cu
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
    grid = _combine(_combine(imgs, _spans(c, tf, h * w * e)), _combine(rows, cols))
    return _count(Pattern(nx, hh, 1, vec, w, h * w, e), grid, n, union)


@lru_cache(maxsize=4096)
def _pw_lanes(tf: int, th: int, tw: int, threads: int, ks: int, variant: tuple, vec_ok: bool) -> np.ndarray:
    """[instruction, thread x element] tile items f x P + p (-1: none) of kernels/families/pw/pw.cu's output
    stores, one row per store instruction that every warp of the block issues, for the math path
    `variant` (`tiles.pw_variant` as a tuple of items). Runs of N outputs store as one N-wide
    instruction where `vec_ok` (`store_outv`: NCHW, tw and the map width multiples of N) and the run
    lies inside the tile; the lanes that cannot, output by output, N instructions."""
    d = dict(variant)
    p_all = th * tw
    tid = np.arange(threads)
    if ks > 1 or d.get("FLAT"):  # item by item: a split's cluster epilogue, or the FLAT register block
        it = tid[None, :] + threads * np.arange(-(-tf * p_all // threads))[:, None]
        f, p0, n = np.where(it < tf * p_all, it // p_all, tf), it % p_all, 1
    elif d["USE_TC"]:  # per (i, j, h): rows r0 + 8h of mma tile i, the pixel pair 2 tq of tile j
        warp, lane = tid // WARP, tid % WARP
        wm, wn = warp % d["WARPS_M"], warp // d["WARPS_M"]
        i, j, h = (a.reshape(-1, 1) for a in np.meshgrid(np.arange(d["WM_T"]), np.arange(d["WN_T"]), (0, 1),
                                                         indexing="ij"))  # fmt: skip
        f = (wm * d["WM_T"] + i) * 16 + lane // 4 + 8 * h
        p0, n = (wn * d["WN_T"] + j) * 8 + 2 * (lane % 4), 2
    else:  # the FMA register block: filters ta + i A_THR, pixel slots j (runs of PVEC)
        a_thr = d["A_THR"]
        b_thr = threads // a_thr
        ta, tb = tid // b_thr, tid % b_thr
        n = d.get("PVEC", 1)
        i, j = (a.reshape(-1, 1) for a in np.meshgrid(np.arange(tf // a_thr), np.arange(0, -(-p_all // b_thr), n),
                                                      indexing="ij"))  # fmt: skip
        f = ta + i * a_thr
        if n > 1:
            p0 = (j // n) * b_thr * n + tb * n
        else:
            p0 = tb + j * b_thr
            p0 = np.minimum(p0, p_all - 1) if p_all % b_thr else p0
    f, p0 = np.broadcast_arrays(f, p0)
    elems = p0[..., None] + np.arange(n)  # [run, thread, element]
    ok = (f[..., None] < tf) & (elems < p_all)
    flat = np.where(ok, f[..., None] * p_all + elems, -1)
    whole = ok.all(axis=2) if n > 1 and vec_ok else np.zeros(f.shape, bool)
    rows = [np.where(whole[..., None], flat, -1)] if n > 1 and vec_ok else []
    for k in range(n):  # the lanes that store output by output: one instruction per element
        single = np.full(flat.shape, -1)
        single[..., 0] = np.where(whole, -1, flat[..., k])
        rows.append(single)
    out = np.stack(rows, axis=1)  # [run, instruction of the run, thread, element]
    out = out.reshape(-1, threads * n)
    return out[(out >= 0).any(axis=1)]


@lru_cache(maxsize=4096)
def _pw_filter_patterns(tf: int, th: int, tw: int, threads: int, ks: int, variant: tuple,
                        vec_ok: bool) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], ...]:  # fmt: skip
    """`_pw_lanes` per output plane: (instruction of each element, tile pixel, which of the tile's
    filters store it [f], 0 or 1) for every distinct way in which some of the tile's filters split
    their pixels over instructions, elements in instruction then pixel order.
    A plane's count depends on which of its pixels share an instruction, not on the instructions'
    places in the epilogue, so sequences equal up to a shift of instruction numbers count as one."""
    lanes = _pw_lanes(tf, th, tw, threads, ks, variant, vec_ok)
    d = dict(variant)
    if ks == 1 and not d.get("FLAT"):
        # the mma fragments and the FMA register block give every filter the same pixels in each of
        # its instructions (warps differ in filters or in pixels, never in how they split them)
        at = np.flatnonzero(lanes.ravel() // (th * tw) == 0)  # filter 0's elements, in instruction order
        r, p = at // lanes.shape[1], lanes.ravel()[at]
        order = np.lexsort((p, r))
        return ((r[order] - r[order][0], p[order], np.ones(tf, dtype=np.int64)),)
    valid = lanes >= 0
    r = np.broadcast_to(np.arange(len(lanes))[:, None], lanes.shape)[valid]
    f, p = lanes[valid] // (th * tw), lanes[valid] % (th * tw)
    order = np.argsort((f * len(lanes) + r) * (th * tw) + p)
    f, r, p = f[order], r[order], p[order]
    stored = np.flatnonzero(np.bincount(f, minlength=tf))
    start = np.searchsorted(f, stored)
    length = np.diff(np.append(start, len(f)))
    rel = r - np.repeat(r[start], length)  # instruction numbers from the plane's first
    planes: dict[bytes, list[int]] = {}  # the stored planes of each distinct sequence, by its bytes
    for j, (a, n) in enumerate(zip(start.tolist(), length.tolist(), strict=True)):
        planes.setdefault(rel[a:a + n].tobytes() + p[a:a + n].tobytes(), []).append(j)
    out = []
    for same in planes.values():
        at = slice(start[same[0]], start[same[0]] + length[same[0]])
        member = np.zeros(tf, dtype=np.int64)
        member[stored[same]] = 1
        out.append((rel[at], p[at], member))
    return tuple(out)


def _rising_sectors(sec: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Distinct values among the `ok` entries of each row of `sec` (last axis), whose `ok` entries
    never fall along it: one more at every rise past the previous `ok` entry."""
    sec = np.where(ok, sec, -1)
    prev = np.maximum.accumulate(sec, axis=-1)
    return (ok[..., 1:] & (sec[..., 1:] != prev[..., :-1])).sum(axis=-1) + ok[..., 0]


@lru_cache(maxsize=16384)
def pw_write_sectors(co: int, ho: int, wo: int, e: int, cl: bool, tf: int, th: int, tw: int, threads: int,
                     ks: int, variant: tuple) -> float:  # fmt: skip
    """Write sectors of one image's output from kernels/families/pw/pw.cu (`cl`: token-major, ho tokens of co
    channels, th tokens per tile; else NCHW co planes of ho x wo, th x tw pixels per tile), per store
    instruction of the math path `variant`, averaged over the images whose byte phases differ.

    Store instructions of one block that write parts of one sector merge into one request when the
    block's warps issue them as the same instruction of their epilogue (the warps leave the last
    barrier together): Nsight Compute on the H100 counts such a sector once for the mma epilogue's
    pixel pairs of two warps and twice for the two fragment columns of one warp. So the count is,
    per block, the distinct sectors of each epilogue instruction over all warps."""
    d = dict(variant)
    run = 2 if d["USE_TC"] else d.get("PVEC", 1)  # outputs a thread stores side by side
    vec_ok = not cl and tw % run == 0 and wo % run == 0
    if cl:  # token-major: a tile's filters are its columns
        imgs, n = _images(ho, co * e)
        grid = _combine(_combine(imgs, Counter({(0, tf): 1})), _combine(_spans(ho, th, co * e), _spans(co, tf, e)))
    else:
        imgs, n = _images(co, ho * wo * e)
        grid = _combine(_combine(imgs, _spans(co, tf, ho * wo * e)), _combine(_spans(ho, th, wo * e), _spans(wo, tw, e)))
    keys = list(grid)  # (byte phase, planes, rows, columns inside the tensor)
    count = np.array([grid[k] for k in keys], dtype=float)
    patterns = None if cl else _pw_filter_patterns(tf, th, tw, threads, ks, variant, vec_ok)
    if patterns and _plane_disjoint(patterns, ks == 1 and not d.get("FLAT"), tw, ho, wo, e):
        blocks = _by_plane(keys, patterns, th, tw, ho, wo, e)
    else:
        blocks = _by_block(keys, tf, th, tw, threads, ks, variant, vec_ok, (1, co, 0) if cl else (ho * wo, wo, 1), e, cl)
    return float((count * blocks).sum()) / n


def _by_plane(keys: list, patterns: tuple, th: int, tw: int, ho: int, wo: int, e: int) -> np.ndarray:
    """Sectors of one block of each class of `keys` as the sum of its planes' (`patterns`:
    `_pw_filter_patterns`), where no instruction writes one sector for two planes: plane f adds the
    count of its pixels at the byte phase of its first (f x plane bytes on from the block's), and
    planes that split their pixels alike over instructions count alike."""
    cls = np.array(keys, dtype=np.int64)
    tf = len(patterns[0][2])
    pe = ho * wo * e
    q = SECTOR // gcd(SECTOR, pe)  # planes after which the phases repeat
    sub, inv = np.unique(cls[:, [0, 2, 3]], axis=0, return_inverse=True)  # (phase, rows, columns)
    phase = (sub[:, 0, None, None] + np.arange(q)[:, None] * pe) % SECTOR  # [class, plane residue, 1]
    rlim, clim = sub[:, 1, None, None], sub[:, 2, None, None]
    planes = np.minimum(cls[:, 1], tf) - 1
    residue = np.arange(tf) % q
    blocks = np.zeros(len(keys))
    for r, p, member in patterns:
        row, col = p // tw, p % tw
        # pixels rise with their address within an instruction; instructions lie a tile apart
        sec = (phase + (row * wo + col) * e) // SECTOR + r * (th * wo * e + SECTOR)
        per = _rising_sectors(sec, (row < rlim) & (col < clim))[inv.ravel()]  # [class of keys, residue]
        upto = np.cumsum(member[None, :] * (residue[None, :] == np.arange(q)[:, None]), axis=1)  # [residue, f]
        blocks += (per * upto[:, planes].T).sum(axis=1)
    return blocks


def _plane_disjoint(patterns: tuple, uniform: bool, tw: int, ho: int, wo: int, e: int) -> bool:
    """Whether no store instruction can write one sector for two planes: planes of whole sectors,
    or (`uniform`: every plane stores the same pixels in each of its instructions) no instruction's
    pixels spanning more than a plane less a sector."""
    if (ho * wo * e) % SECTOR == 0:
        return True
    if not uniform:
        return False
    r, p, _ = patterns[0]
    addr = (p // tw) * wo + p % tw
    cut = np.flatnonzero(np.diff(r)) + 1
    span = np.maximum.reduceat(addr, np.r_[0, cut]) - np.minimum.reduceat(addr, np.r_[0, cut])
    return int(span.max()) * e <= ho * wo * e - SECTOR


def _by_block(keys: list, tf: int, th: int, tw: int, threads: int, ks: int, variant: tuple, vec_ok: bool,
              strides: tuple[int, int, int], e: int, cl: bool) -> np.ndarray:  # fmt: skip
    """Sectors of one block of each class of `keys`, instruction by instruction over all its
    elements (`strides`: elements between filters, tile rows, tile columns)."""
    lanes = _pw_lanes(tf, th, tw, threads, ks, variant, vec_ok)
    f, p = lanes // (th * tw), lanes % (th * tw)
    row, col = p // tw, p % tw
    addr = f * strides[0] + row * strides[1] + col * strides[2]
    plane, col = (np.zeros_like(f), f) if cl else (f, col)  # token-major: a tile's filters are its columns
    # each instruction's elements in address order, so that every block's sectors rise along a row
    order = np.argsort(np.where(lanes >= 0, addr, np.iinfo(np.int64).max), axis=1, kind="stable")
    addr, plane, row, col, valid = (np.take_along_axis(a, order, axis=1) for a in (addr, plane, row, col, lanes >= 0))
    lim = np.array([k[1:] for k in keys], dtype=np.int64)[:, :, None, None]
    phase = np.array([k[0] for k in keys], dtype=np.int64)[:, None, None]
    ok = valid & (plane < lim[:, 0]) & (row < lim[:, 1]) & (col < lim[:, 2])
    return _rising_sectors((phase + addr * e) // SECTOR, ok).sum(axis=1)
