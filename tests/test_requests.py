"""Warp-instruction sector counts of the kernels' item-by-item stores and window copies
(`costbase.requests`): hand-computed cases, and the class-and-period count against a lane-by-lane
reference over every block."""

from __future__ import annotations

from math import gcd

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fuseplanner.core.ir import Tile
from fuseplanner.costbase.requests import tile_write_sectors, window_load_sectors
from fuseplanner.kernels import tiles


def test_rows_of_one_item_are_separate_store_instructions():
    # one 4 x 8 fp16 plane (rows of 16 B, 64 B = 2 sectors), one 4 x 8 tile:
    # V 1: 32 items, one warp instruction writes all 4 rows -> sectors {0, 1} = 2
    assert tile_write_sectors(1, 4, 8, 2, 1, 4, 8, 1) == 2
    # V 2: 16 items; instruction j = 0 writes rows 0 and 2 (sectors 0, 1), j = 1 rows 1 and 3 (0, 1) -> 4
    assert tile_write_sectors(1, 4, 8, 2, 1, 4, 8, 2) == 4
    # V 4: 8 items, 4 instructions of one 16-B row each -> 4
    assert tile_write_sectors(1, 4, 8, 2, 1, 4, 8, 4) == 4
    # fp32: rows of 32 B are whole sectors, whatever the instruction -> 4
    assert tile_write_sectors(1, 4, 8, 4, 1, 4, 8, 4) == 4


def test_window_copies_per_instruction_and_per_block():
    # one 2 x 20 fp32 plane (rows of 80 B), one 2 x 18 window from (0, 0), element by element:
    # 36 items; warp 0: row 0 cols 0-17 (bytes 0-71: sectors 0-2) and row 1 cols 0-13 (80-135: 2-4)
    # -> 5; warp 1: row 1 cols 14-17 (136-151: sector 4) -> 1; 6 per instruction, 5 distinct
    args = (1, 2, 20, 4, 1, 2, 18, 1, 1, 2, 18, 0, 0, 1)
    assert window_load_sectors(*args) == 6
    assert window_load_sectors(*args, True) == 5


def test_window_copies_skip_vectors_outside_the_map():
    # 1 x 16 fp16 row (32 B), windows of 6 columns from columns -2 and 8 in 8-byte vectors (VEC 4):
    # 3 vectors from column -4 (outside: not copied), 0 and 4 -> bytes 0-15, one sector; from column 8,
    # vectors at 8, 12 and 16 (outside) -> bytes 16-31, the same sector: 2 tiles, 2 sectors
    assert window_load_sectors(1, 1, 16, 2, 1, 1, 6, 1, 2, 1, 10, 0, 2, 4) == 2


def test_output_rows_per_item_follow_the_launchers():
    assert tiles.output_rows_per_item("dw", Tile(4, 8, 16, 16, 128)) == 4  # 16 x 1 x 8 = 128 items
    assert tiles.output_rows_per_item("dw", Tile(4, 8, 16, 16, 256)) == 2  # 128 items do not fill 256
    assert tiles.output_rows_per_item("pw_dw", Tile(4, 8, 16, 8, 256)) == 2
    assert tiles.output_rows_per_item("dw_pw", Tile(4, 8, 16, 8, 128)) == 1  # a staged tile


def _stores(co, ho, wo, e, tf, th, tw, v, images):
    """Write sectors of `images` images, lane by lane over every block."""
    vy = th // v
    it = np.arange(-(-tf * vy * tw // 32) * 32)
    ox, q = it % tw, it // tw
    y, k = q % vy, q // vy
    total = 0
    for b in range(images):
        for f0 in range(0, co, tf):
            for y0 in range(0, ho, th):
                for x0 in range(0, wo, tw):
                    for j in range(v):
                        row = y0 + y * v + j
                        ok = (it < tf * vy * tw) & (f0 + k < co) & (row < ho) & (x0 + ox < wo)
                        sec = ((((b * co + f0 + k) * ho + row) * wo + x0 + ox) * e // 32)[ok]
                        total += len(set(zip((it // 32)[ok].tolist(), sec.tolist(), strict=True)))
    return total


def _loads(c, h, w, e, tf, hh, ww, nty, ntx, sh, sw, pt, pl, vec, images, union):
    """Read sectors of `images` images' window copies, lane by lane over every block."""
    nx = (ww + 2 * vec - 2) // vec if vec > 1 else ww
    it = np.arange(-(-tf * hh * nx // 32) * 32)
    x, q = it % nx, it // nx
    r, k = q % hh, q // hh
    total = 0
    for b in range(images):
        for c0 in range(0, c, tf):
            for ty in range(nty):
                for tx in range(ntx):
                    v0 = (tx * sw - pl) // vec * vec
                    iy, gx = ty * sh - pt + r, v0 + x * vec
                    ok = (it < tf * hh * nx) & (c0 + k < c) & (iy >= 0) & (iy < h) & (gx >= 0) & (gx < w)
                    sec = ((((b * c + c0 + k) * h + iy) * w + gx) * e // 32)[ok]
                    keys = sec.tolist() if union else zip((it // 32)[ok].tolist(), sec.tolist(), strict=True)
                    total += len(set(keys))
    return total


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([2, 4]), st.integers(1, 20), st.integers(1, 9), st.integers(1, 9), st.integers(1, 8),
       st.integers(1, 4), st.integers(1, 9), st.sampled_from([1, 2, 4]))  # fmt: skip
def test_store_count_equals_lane_by_lane(e, co, ho, wo, tf, th, tw, v):
    th, tw, tf = min(th, ho), min(tw, wo), min(tf, co)
    v = v if th % v == 0 else 1
    images = 32 // gcd(32, co * ho * wo * e)  # the images over which the byte phases repeat
    assert tile_write_sectors(co, ho, wo, e, tf, th, tw, v) * images == _stores(co, ho, wo, e, tf, th, tw, v, images)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([2, 4]), st.integers(1, 12), st.integers(2, 9), st.integers(1, 4), st.sampled_from([1, 3, 5]),
       st.sampled_from([1, 2]), st.integers(1, 4), st.integers(1, 6), st.sampled_from([1, 2, 4]), st.booleans())  # fmt: skip
def test_window_count_equals_lane_by_lane(e, c, h, wmul, k, s, th, tw, vec, union):
    w = h * wmul if vec == 1 else -(-h * wmul // vec) * vec  # the kernel copies vectors only when W % VEC == 0
    p = (k - 1) // 2
    ho, wo = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    th, tw = min(th, ho), min(tw, wo)
    hh, ww = (th - 1) * s + k, (tw - 1) * s + k
    tf = min(c, 4)
    images = 32 // gcd(32, c * h * w * e)
    args = (c, h, w, e, tf, hh, ww, -(-ho // th), -(-wo // tw), th * s, tw * s, p, p, vec)
    assert window_load_sectors(*args, union) * images == _loads(*args, images, union)
