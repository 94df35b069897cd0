"""Dense convs costed as the executor runs them (fuseplanner.cost.layers): the direct kernel for short
reductions, im2col + GEMM launches for deep ones; hand-computed bytes and launches."""

from __future__ import annotations

import pytest
from opfactory import conv

from fuseplanner.cost.layers import DIRECT_MAX_TERMS, conv_terms, stream_cost
from fuseplanner.hw.spec import gpu

H100 = gpu("h100")


def test_stem_runs_direct_one_launch():
    op = conv(3, 32, 224, 224, k=3, s=2)  # 3 x 9 = 27 products per output <= 288
    assert conv_terms(op) == 27 <= DIRECT_MAX_TERMS
    c = stream_cost(op, "fp32", 1, H100)
    assert c.launches == 1
    # reads: input 3 x 224 x 224 x 4 B = 602,112 B (18,816 sectors) + weights 32 x 27 x 4 = 3,456 B (108 sectors)
    assert c.gma_read_bytes == 602_112 + 3_456
    # writes: 32 x 112 x 112 x 4 B = 1,605,632 B
    assert c.gma_write_bytes == 1_605_632
    # 2 x 32 x 112 x 112 x 27 = 21,676,032 FLOPs, on CUDA cores
    assert c.flops == 21_676_032


def test_deep_conv_takes_im2col_and_gemm():
    op = conv(64, 64, 14, 14, k=3, s=1)  # 64 x 9 = 576 products per output > 288; padded by 1; BN folds to a bias
    assert conv_terms(op) == 576 > DIRECT_MAX_TERMS
    c = stream_cost(op, "fp32", 1, H100)
    # launches: padded copy (fill + copy) 2, gather 1, GEMM 1, bias add 1
    assert c.launches == 5
    inp = 64 * 14 * 14 * 4  # 50,176 B
    out = 64 * 14 * 14 * 4  # 50,176 B
    w = 64 * 576 * 4  # 147,456 B
    col = 576 * 196 * 4  # the column matrix: 451,584 B, written by the gather and read by the GEMM
    # reads: input + weights + column matrix + padded copy (written and read: 2 x input) + bias add (2 x output)
    assert c.gma_read_bytes == inp + w + col + 2 * inp + 2 * out
    assert c.gma_write_bytes == out + col + 2 * inp + 2 * out
    one = stream_cost(conv(64, 64, 14, 14, k=1, s=1), "fp32", 1, H100)
    assert one.launches == 1  # a 1x1 stride-1 unpadded conv is one GEMM: no gather
    # each launch beyond the first pays the launch floor: at least 4 x 3.68 us more than the body
    assert c.time_s >= 4 * H100.eff("launch_overhead_s")


@pytest.mark.parametrize("batch", [1, 8])
def test_conv_cost_scales_with_batch(batch):
    c1 = stream_cost(conv(3, 16, 64, 64, k=3, s=2), "fp16", 1, H100)
    cb = stream_cost(conv(3, 16, 64, 64, k=3, s=2), "fp16", batch, H100)
    assert cb.flops == batch * c1.flops
