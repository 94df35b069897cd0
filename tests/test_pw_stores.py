"""Write requests of kernels/families/pw/pw.cu's epilogue (`costbase.requests.pw_write_sectors`): hand-computed
cases, and the count against a thread-by-thread walk through the kernel's store code over every
block."""

from __future__ import annotations

from collections import defaultdict
from math import gcd

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fuseplanner.core.ir import Tile
from fuseplanner.costbase.requests import pw_write_sectors
from fuseplanner.kernels import tiles


def _variant(tile: Tile, dtype: str, precision: str, kind: str, wo: int, c_in: int) -> tuple:
    v = tiles.pw_variant(tile, dtype, precision, kind, wo, c_in)
    return tuple(sorted((k, x) for k, x in v.items() if k != "KVEC"))


def test_two_fragment_columns_of_one_warp_write_a_sector_twice():
    # EfficientNet-B0 blocks.0.project in fp16: 16 planes of 112 x 112, tiles 16 x 16 x 16, 256
    # threads: 8 warps along pixels, each with WN_T = 4 fragment columns of 8 pixels (16 B), so the
    # two halves of a 16-pixel (32-B, aligned) row are the j and j + 1 stores of one warp: 2 requests
    # per sector. 16 planes x 112 rows x 7 sectors = 12,544 sectors, x 2 = 25,088 per image
    # (measured on the H100 at batch 8: 6,422,528 B = 8 x 25,088 x 32 B)
    t = Tile(16, 16, 16, 32, 256)
    v = _variant(t, "fp16", "fp32", "pw", 112, 24)
    assert dict(v) == {"USE_TC": 2, "WARPS_M": 1, "WARPS_N": 8, "WM_T": 1, "WN_T": 4}
    assert pw_write_sectors(16, 112, 112, 2, False, 16, 16, 16, 256, 1, v) == 25088


def test_halves_stored_by_two_warps_as_one_instruction_merge():
    # MobileViT-XXS fp16, 64 planes of 16 x 16, tiles 1 x 16 x 16: warps 0 and 1 (WN_T = 1) store
    # pixels 0-7 and 8-15 of the row (one 32-B sector) as the same instruction of their epilogue:
    # one request (measured: 1.00 x the output). 64 planes x 16 rows x 1 sector = 1,024
    t = Tile(1, 16, 16, 64, 256)
    v = _variant(t, "fp16", "fp32", "pw", 16, 64)
    assert dict(v)["WN_T"] == 1 and dict(v)["WARPS_N"] == 8
    assert pw_write_sectors(64, 16, 16, 2, False, 16, 1, 16, 256, 1, v) == 1024


def test_cluster_split_stores_item_by_item():
    # 240 planes of 1 x 1 in fp16, tiles of 128 filters split over a cluster (KS 8): items
    # rank x 128 + tid + k x 8 x 128, one filter each; the first tile's 128 filters (256 B, 8 sectors)
    # are one instruction, the second's 112 (224 B, 7 sectors) too: 15 sectors per image
    t = Tile(1, 1, 128, 16, 128)
    v = _variant(t, "fp16", "fp32", "pw", 1, 960)
    assert pw_write_sectors(240, 1, 1, 2, False, 128, 1, 1, 128, 8, v) == 15
    # the same tiles without the split: rows f and f + 8 of an mma fragment (16 B apart) are the
    # h = 0 and h = 1 stores of one warp, both in each 16-filter sector: 2 requests per sector
    assert pw_write_sectors(240, 1, 1, 2, False, 128, 1, 1, 128, 1, v) == 30


def test_token_major_fp16_fragment_rows_share_sectors():
    # linear over 4 tokens of 16 channels, fp16, one 4 x 16 tile, 32 threads (one warp, one mma tile):
    # every store writes 8 filters (16 B) of a token; filters 0-7 (h = 0) and 8-15 (h = 1) of a token
    # are one sector written by two instructions, and the pixel pairs of the fragment store token by
    # token (2 instructions): 4 tokens x 1 sector x 2 = 8
    t = Tile(4, 1, 16, 16, 32)
    v = _variant(t, "fp16", "fp32", "linear", 1, 16)
    assert dict(v)["USE_TC"] == 2
    assert pw_write_sectors(16, 4, 1, 2, True, 16, 4, 1, 32, 1, v) == 8


# ---- thread by thread --------------------------------------------------------------------------------
def _epilogue(d: dict, tf: int, th: int, tw: int, threads: int, ks: int, cl: bool, wo: int, in_map, offset):
    """{instruction: [(thread, element offsets)]} of one block (of one cluster rank r when ks > 1,
    keyed (r, ...)): kernels/families/pw/pw.cu's stores walked thread by thread, on a map `wo` wide (g.Wo).
    `in_map(f, p)` says whether tile output (f, p) is inside the tensor, `offset(f, p)` where it is."""
    p_all = th * tw
    out: dict = defaultdict(list)

    def store_out(key, tid, f, p):  # store_out: p < P and out_offset
        if p < p_all and in_map(f, p):
            out[key].append((tid, [offset(f, p)]))

    def store_outv(key, tid, f, p, n):
        last = p + n - 1
        if not cl and tw % n == 0 and wo % n == 0 and last < p_all and in_map(f, last):
            out[key + ("v",)].append((tid, [offset(f, p + e) for e in range(n)]))
            return
        for e in range(n):
            store_out(key + (e,), tid, f, p + e)

    for tid in range(threads):
        if ks > 1:
            for r in range(ks):
                for k, i in enumerate(range(r * threads + tid, tf * p_all, ks * threads)):
                    store_out((r, k), tid, i // p_all, i % p_all)
        elif d.get("FLAT"):
            for r in range(tf * p_all // threads):
                o = tid + r * threads
                store_out((r,), tid, o // p_all, o % p_all)
        elif d["USE_TC"]:
            warp, lane = tid // 32, tid % 32
            wm, wn = warp % d["WARPS_M"], warp // d["WARPS_M"]
            gq, tq = lane // 4, lane % 4
            for i in range(d["WM_T"]):
                for j in range(d["WN_T"]):
                    for h in (0, 1):
                        r = (wm * d["WM_T"] + i) * 16 + gq + 8 * h
                        if r < tf:
                            store_outv((i, j, h), tid, r, (wn * d["WN_T"] + j) * 8 + 2 * tq, 2)
        else:
            a_thr = d["A_THR"]
            b_thr = threads // a_thr
            ta, tb = tid // b_thr, tid % b_thr
            rp, pv = -(-p_all // b_thr), d.get("PVEC", 1)
            for i in range(tf // a_thr):
                for j in range(0, rp, pv):
                    f = ta + i * a_thr
                    if pv > 1:
                        store_outv((i, j), tid, f, (j // pv) * b_thr * pv + tb * pv + 0, pv)
                    else:
                        p = tb + j * b_thr
                        store_out((i, j), tid, f, min(p, p_all - 1) if p_all % b_thr else p)
    return out


def _walk(co, ho, wo, e, cl, tile, ks, variant, images):
    """Write sectors of `images` images: per block, the distinct sectors of each epilogue
    instruction over the block's warps."""
    d = dict(variant)
    total = 0
    tw = 1 if cl else tile.tw
    for n in range(images):
        for f0 in range(0, co, tile.tf):
            for y0 in range(0, ho, tile.th):
                for x0 in range(0, 1 if cl else wo, tw):

                    def in_map(f, p, f0=f0, y0=y0, x0=x0):
                        return f0 + f < co and y0 + p // tw < ho and x0 + p % tw < (1 if cl else wo)

                    def offset(f, p, n=n, f0=f0, y0=y0, x0=x0):
                        y, x = y0 + p // tw, x0 + p % tw
                        return (n * ho + y) * co + f0 + f if cl else ((n * co + f0 + f) * ho + y) * wo + x

                    ins = _epilogue(d, tile.tf, tile.th, tw, tile.threads, ks, cl, wo, in_map, offset)
                    total += sum(len({a * e // 32 for _, offs in lanes for a in offs}) for lanes in ins.values())
    return total


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["fp16", "fp32"]), st.sampled_from(["fp32", "tf32"]), st.booleans(), st.integers(1, 40),
    st.integers(1, 9), st.integers(1, 9), st.sampled_from([8, 16, 24, 32]), st.integers(1, 8), st.integers(1, 8),
    st.sampled_from([8, 12, 16]), st.sampled_from([32, 64, 128]), st.sampled_from([1, 2]),
)  # fmt: skip
def test_count_equals_thread_by_thread(dtype, precision, cl, co, ho, wo, tf, th, tw, tc, threads, ks):
    if cl:
        wo, tw = 1, 1
    assume(tf * th * tw % threads == 0)  # tiles.check: a block's outputs split evenly over its threads
    tile = Tile(th, tw, tf, tc, threads)
    kind = "linear" if cl else "pw"
    variant = _variant(tile, dtype, precision, kind, wo, 320)
    e = 2 if dtype == "fp16" else 4
    images = 32 // gcd(32, co * ho * wo * e)
    got = pw_write_sectors(co, ho, wo, e, cl, tf, th, tw, threads, ks, variant)
    assert got * images == _walk(co, ho, wo, e, cl, tile, ks, variant, images)
