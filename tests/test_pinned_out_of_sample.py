"""Pinned out-of-sample numbers that docs/validation.md and docs/cost_model.md quote: the held-out TF32
and fp16 batch-8 per-kernel sweeps, and the layer-by-layer launches' predicted / measured time by work
(`fuseplanner analyze accuracy --gpu h100 [--by-work] FILES`). A change that moves them fails here, so
that the docs move with it, on purpose."""

from __future__ import annotations

from pathlib import Path

import pytest

from fuseplanner.analysis.accuracy import accuracy, work_bias
from fuseplanner.analysis.runs import load_runs
from fuseplanner.hw import spec as specs

RECORDS = Path(__file__).resolve().parents[1] / "data" / "records" / "h100"


def _runs(pattern: str):
    return load_runs(sorted(str(p) for p in RECORDS.glob(pattern)), specs.gpu("h100"))


@pytest.fixture(scope="module")
def fp16_b8():
    return _runs("holdout_fp16_b8/*.jsonl.gz")


def test_held_out_tf32_batch_8_is_pinned():
    pooled = accuracy(_runs("holdout_tf32_b8/*.jsonl.gz"))[-1]
    assert (round(pooled.time.median, 1), round(pooled.time.p90, 1)) == (11.5, 29.5)
    assert (pooled.agreeing, pooled.groups) == (87, 103)


def test_held_out_fp16_batch_8_is_pinned(fp16_b8):
    rows = {r.run: r for r in accuracy(fp16_b8)}
    pooled = rows["all"]
    assert (pooled.time.n, round(pooled.time.median, 1), round(pooled.time.p90, 1)) == (725, 17.8, 46.0)
    assert (pooled.agreeing, pooled.groups) == (72, 114)
    lost = {name.split()[0]: round(r.time_lost_percent, 1) for name, r in rows.items() if name != "all"}
    assert lost == {"efficientnet_v2_s": 46.2, "mnasnet0_5": 3.5, "mobilenet_v2_160": 3.1}


@pytest.mark.parametrize("pattern, band, median", [
    ("fit/*-fp16-*.json.gz", 0, 0.84),        # under 10 MFLOP
    ("fit/*-fp16-*.json.gz", 2, 0.91),        # 0.1-0.3 GFLOP
    ("fp16_b32/*.jsonl.gz", 3, 1.06),         # 0.3-1 GFLOP
    ("fp16_b32/*.jsonl.gz", 4, 1.36),         # over 1 GFLOP
    ("holdout_fp16_b8/*.jsonl.gz", 3, 1.43),
    ("holdout_fp16_b8/*.jsonl.gz", 4, 1.24),
])
def test_large_layer_bias_is_pinned(pattern, band, median):
    b = work_bias(_runs(pattern))[band]
    assert round(b.quantile(0.5), 2) == median
