"""The whole-model executor on the GPU: every bundled model, exact fp32 / TF32 / fp16, batch 1, against
onnxruntime (max over outputs of ||out - ref||_2 / ||ref||_2 within 1e-4 / 5e-3 / 2e-2), with the
activation arena poisoned with NaN before the run so an unwritten tensor cannot pass."""

from __future__ import annotations

import numpy as np
import pytest

cp = pytest.importorskip("cupy", reason="CuPy is not installed: GPU executor tests need a CUDA machine")
if not cp.cuda.is_available():
    pytest.skip("no CUDA device visible: GPU executor tests skipped", allow_module_level=True)

from fuseplanner.frontend.load import bundled_models  # noqa: E402
from fuseplanner.run.check import compare, reference_outputs  # noqa: E402
from fuseplanner.run.compiled import compile, onnx_model  # noqa: E402

SHAPES = {"mobilenet_v1_converter_op11": {"input": (1, 3, 224, 224)}}
MODES = [("fp32", "fp32"), ("fp32", "tf32"), ("fp16", "fp32")]
_REF: dict = {}


def _inputs(net):
    rng = np.random.default_rng(0)
    return {s.name: rng.standard_normal(s.shape).astype(np.float32) for s in net.program.inputs}


def _reference(name, x):
    if name not in _REF:
        _REF[name] = reference_outputs(onnx_model(name, SHAPES.get(name)), x)
    return _REF[name]


@pytest.mark.parametrize("dtype,precision", MODES)
@pytest.mark.parametrize("name", bundled_models())
def test_model_matches_onnxruntime(name, dtype, precision):
    net = compile(name, "auto", dtype=dtype, precision=precision, input_shapes=SHAPES.get(name))
    x = _inputs(net)
    net._bound.arena.fill(255)  # NaN in fp32 and fp16: every output must be written by the graph
    got = net(x)
    res = compare(got, _reference(name, x), dtype, precision)
    assert res.ok, (name, dtype, precision, res)
    streamed = net.run_stream(x)
    assert compare(streamed, _reference(name, x), dtype, precision).ok


def test_cupy_in_cupy_out_timing_and_bench():
    net = compile("mobilenet_v2", "auto")
    x = _inputs(net)
    dev = net({k: cp.asarray(v) for k, v in x.items()})
    assert all(isinstance(v, cp.ndarray) for v in dev.values())
    host = net(x)
    for k in host:
        np.testing.assert_array_equal(cp.asnumpy(dev[k]), host[k])
    steps = net.time_nodes(x, repeats=3)
    assert len(steps) == sum(1 for s in net.steps if s.kind != "view") and all(t.seconds > 0 for t in steps)
    for cold in (False, True):
        rec = net.bench(replays=20, cold_l2=cold)
        assert 0 < rec.p10_s <= rec.median_s <= rec.p90_s


def test_unfused_matches_too():
    net = compile("mobilenet_v2", "auto", fuse=False)
    x = _inputs(net)
    net._bound.arena.fill(255)
    assert compare(net(x), _reference("mobilenet_v2", x), "fp32", "fp32").ok
    assert not any(s.kind in ("pw_dw", "dw_pw", "pw_pw", "pw_dw_pw") for s in net.steps)
