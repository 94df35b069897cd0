"""The GPU GEMM's K split (fuseplanner.run.ops._gemm.k_split), a pure function of the output tile count
and K: splits x tiles approach 264 blocks (two per SM of a 132-SM GPU), no split under 64 deep, at most 16."""

import pytest

from fuseplanner.run.ops._gemm import k_split


@pytest.mark.parametrize(
    "tiles,k,want",
    [
        # MobileViT 3x3 conv, 96 outputs x 1024 positions: 2 x 16 = 32 tiles; 264 // 32 = 8 splits,
        # ceil(1728 / 8) = 216 -> 224 (a multiple of 16); ceil(1728 / 224) = 8 splits
        (32, 1728, (8, 224)),
        # stem conv: 196 tiles already busy -> no split, K 27 padded to 32
        (196, 27, (1, 32)),
        # SE-like GEMV shape through the tiled kernel: 1 tile, K 1152: min(264, 1152 // 64 = 18, 16) = 16,
        # ceil(1152 / 16) = 72 -> 80; ceil(1152 / 80) = 15 splits
        (1, 1152, (15, 80)),
        # long K but enough tiles: 400 >= 264 -> no split
        (400, 4096, (1, 4096)),
        # K of one 64-deep slice never splits
        (8, 64, (1, 64)),
    ],
)
def test_k_split(tiles, k, want):
    assert k_split(tiles, k) == want


@pytest.mark.parametrize("tiles,k", [(1, 10_000), (3, 777), (50, 5000), (264, 100)])
def test_k_split_covers_k_once(tiles, k):
    splits, chunk = k_split(tiles, k)
    assert chunk % 16 == 0 and 1 <= splits <= 16
    assert (splits - 1) * chunk < k <= splits * chunk  # every K index in exactly one split, none empty
