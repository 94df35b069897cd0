"""Tuning a plan on the GPU (`fuseplanner.tune`): every group of the first plan is timed against its
unfused layers in graph mode, the groups measured no faster are not fused in the tuned model, the model
returned is the fastest of the tuned, first and unfused ones, and it matches onnxruntime (arena
poisoned with NaN first)."""

from __future__ import annotations

import numpy as np
import pytest

cp = pytest.importorskip("cupy", reason="CuPy is not installed: GPU tuning tests need a CUDA machine")
if not cp.cuda.is_available():
    pytest.skip("no CUDA device visible: GPU tuning tests skipped", allow_module_level=True)

from fuseplanner.planning.search import kernel_key  # noqa: E402
from fuseplanner.run.check import compare, reference_outputs  # noqa: E402
from fuseplanner.run.compiled import onnx_model  # noqa: E402
from fuseplanner.run.program import KernelStep  # noqa: E402
from fuseplanner.validation.tune import tune_model  # noqa: E402


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_tuned_model_drops_the_slower_groups_and_stays_correct(dtype):
    tuned = tune_model("mobilenet_v2", "auto", dtype=dtype, rounds=2, repeats=10, replays=50)
    t = tuned.tuning
    first = {"+".join(g.nodes) for g in tuned.first.plan.groups}
    assert {v.label for v in t.verdicts if v.round == 1} == first
    for v in t.verdicts:
        assert not v.measured or (v.fused_s > 0 and v.unfused_s > 0)
    final = {kernel_key(s.kind, s.ops, None) for s in tuned.tuned.program.steps
             if isinstance(s, KernelStep) and s.kind not in ("dw", "pw", "linear")}  # fmt: skip
    assert not final & t.excluded
    assert len(t.excluded) >= 1 if t.dropped else not t.excluded
    # the model returned is the fastest of the three by whole-model latency
    assert set(tuned.latency) == {"tuned", "first plan", "unfused"} and all(v > 0 for v in tuned.latency.values())
    assert tuned.latency[tuned.chosen] == min(tuned.latency.values())
    rng = np.random.default_rng(1)
    x = {s.name: rng.standard_normal(s.shape).astype(np.float32) for s in tuned.compiled.program.inputs}
    tuned.compiled._bound.arena.fill(255)
    res = compare(tuned.compiled(x), reference_outputs(onnx_model("mobilenet_v2"), x), dtype, "fp32")
    assert res.ok, res
