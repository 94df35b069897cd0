"""End-to-end validation on the GPU: a residual inverted-residual block planned with the real cost
models, run, checked against the float64 reference, timed, and (where allowed) profiled with ncu."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

cp = pytest.importorskip("cupy", reason="CuPy is not installed: GPU validation tests need a CUDA machine")
if not cp.cuda.is_available():
    pytest.skip("no CUDA device visible: GPU validation tests skipped", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import graphs as G  # noqa: E402

from fuseplanner.hw import spec as specs  # noqa: E402
from fuseplanner.planning import search as planner  # noqa: E402
from fuseplanner.validation import ncu  # noqa: E402
from fuseplanner.validation.records import read_run  # noqa: E402
from fuseplanner.validation.validate import validate  # noqa: E402

GPU = specs.detect() or specs.gpu("h100")


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_block_validates_counter_free(dtype, tmp_path):
    g = G.residual(h=14, c=32, exp=192)
    plan = planner.plan(g, GPU, dtype=dtype)
    res = validate(g, GPU, plan, tiles="sweep", ncu=False, progress=False, repeat=10, warmup=2, out_dir=tmp_path)
    recs = res.run.records
    assert recs and all(r.error is None for r in recs), [r.error for r in recs]
    assert all(r.check.ok for r in recs), [(r.id, r.check) for r in recs]
    for r in recs:
        m = r.measured
        assert 0 < m.time_cold_s < 1e-2 and 0 < m.time_warm_s < 1e-2
        assert m.traffic == "counter-free" and m.gma_bytes is None
        # what the compiler gave each launch, and the blocks per SM that allows, beside the model's
        assert tuple(k.kind for k in m.kernels) == r.step_kinds, r.id
        for k, t in zip(m.kernels, r.tiles, strict=True):
            assert 16 <= k.regs <= 255 and k.blocks_per_sm >= 1 and k.model_blocks_per_sm >= 1, (r.id, k)
            assert k.threads == t.threads
    roles = {r.role for r in recs}
    assert "unfused" in roles
    saved = read_run(tmp_path / "records.jsonl")
    assert saved == res.run and saved.meta.traffic_source == "counter-free"
    assert (tmp_path / "report.md").is_file()


@pytest.mark.skipif(ncu.find_ncu() is None, reason="Nsight Compute (ncu) is not installed")
def test_block_with_counters(tmp_path):
    g = G.residual(h=14, c=32, exp=192)
    plan = planner.plan(g, GPU)
    res = validate(g, GPU, plan, ncu="auto", progress=False, repeat=5, warmup=1)
    if res.run.meta.traffic_source != "ncu":
        pytest.skip(f"counters not readable here: {res.run.meta.traffic_note}")
    for r in res.run.records:
        m = r.measured
        assert m.ncu_kernels == r.launches, r.id
        # at least the input is read and the output written between the SMs and L2 (fp32: 4 B each)
        first, last = g.op(r.nodes[0]), g.op(r.nodes[-1])
        compulsory = 4 * (math.prod(first.in_shape) + math.prod(last.out_shape))
        assert m.gma_bytes >= compulsory, r.id
        assert m.dram_bytes > 0
