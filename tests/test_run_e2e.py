"""CPU executor end to end on zoo-built models with full weights (BN, converter style, batch 8,
fp16, linear/GELU/LayerNorm), against onnxruntime on the same weights."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import run_ops_standin as standin

from fuseplanner.core.errors import ModelError
from fuseplanner.frontend import zoo
from fuseplanner.run.check import compare, reference_outputs, relative_error
from fuseplanner.run.compiled import compile, onnx_model


def _run(model, dtype="fp32", batch=None, fuse=True, shapes=None):
    net = compile(model, "h100", dtype=dtype, batch=batch, fuse=fuse, device="cpu", ops_lib=standin,
                  input_shapes=shapes)  # fmt: skip
    rng = np.random.default_rng(3)
    x = {s.name: rng.standard_normal(s.shape).astype(np.float32) for s in net.program.inputs}
    ref = reference_outputs(onnx_model(model, shapes, batch), x)
    return net, net(x), ref


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_zoo_mobilenet_v2_with_bn(dtype):
    model = zoo.mobilenet_v2(width=0.35, resolution=64, num_classes=10, bn=True)
    net, got, ref = _run(model, dtype)
    res = compare(got, ref, dtype, "fp32")
    assert res.ok, res
    assert net.program.counts().get("pw_dw_pw", 0) + net.program.counts().get("pw_dw", 0) > 0
    assert all(v.dtype == np.float32 for v in got.values())


def test_buffers_and_launch_give_the_call_outputs_without_copies():
    net, got, _ = _run(zoo.mobilenet_v2(width=0.35, resolution=32, num_classes=10))
    rng = np.random.default_rng(3)  # the same input `_run` drew
    x = {s.name: rng.standard_normal(s.shape).astype(np.float32) for s in net.program.inputs}
    for name, buf in net.input_buffers.items():
        buf[...] = x[name]
    for buf in net.output_buffers.values():
        buf[...] = np.nan
    net.launch()
    for name, buf in net.output_buffers.items():
        np.testing.assert_array_equal(buf, got[name])
    assert not any(np.shares_memory(buf, got[name]) for name, buf in net.output_buffers.items())


def test_converter_style_batch_8_unfused():
    model = zoo.mobilenet_v1(width=0.25, resolution=64, opset=11, weights="constant", dynamic=True,
                             converter=True, bn=True, act="relu6", num_classes=10)  # fmt: skip
    shapes = {"input": (8, 3, 64, 64)}
    net, got, ref = _run(model, batch=8, fuse=False, shapes=shapes)
    assert compare(got, ref, "fp32", "fp32").ok
    assert not any(k in net.program.counts() for k in ("pw_dw", "dw_pw", "pw_pw", "pw_dw_pw"))


@pytest.mark.parametrize("gelu", ["erf", "tanh"])
def test_token_mlp(gelu):
    net, got, ref = _run(zoo.token_mlp(tokens=16, dim=32, hidden=64, gelu=gelu))
    assert compare(got, ref, "fp32", "fp32").ok
    if gelu == "tanh":  # the kernels apply exact GELU: the tanh form runs in the library, saying why
        assert any("Tanh" in s.reason for s in net.steps)


def test_inputs_are_checked_before_running():
    net = compile(zoo.mobilenet_v2(width=0.35, resolution=32, num_classes=10), "h100", device="cpu", ops_lib=standin)
    good = np.zeros((1, 3, 32, 32), np.float32)
    with pytest.raises(ModelError, match="shape"):
        net(np.zeros((1, 3, 33, 32), np.float32))
    with pytest.raises(ModelError, match="float64"):
        net(good.astype(np.float64))
    with pytest.raises(ModelError, match="unknown nope"):
        net({"input": good, "nope": good})
    assert np.all(np.isfinite(net(good)["logits"]))


def test_relative_error_metric():
    ref = np.array([3.0, 4.0])
    assert relative_error(ref + np.array([0.3, 0.4]), ref) == pytest.approx(0.1)  # ||(.3,.4)|| / ||(3,4)|| = .5/5
    assert relative_error(np.array([np.nan, 4.0]), ref) == float("inf")


def test_structure_only_weights_are_seeded_and_scaled():
    from fuseplanner.frontend.load import read_model
    from fuseplanner.run.weights import materialize, missing

    proto, _, _ = read_model("mobilenet_v2")
    assert missing(proto, None)
    a, b, c = materialize(proto, 0), materialize(proto, 0), materialize(proto, 1)
    init = {t.name: onnx.numpy_helper.to_array(t) for t in a.graph.initializer}
    same = {t.name: onnx.numpy_helper.to_array(t) for t in b.graph.initializer}
    other = {t.name: onnx.numpy_helper.to_array(t) for t in c.graph.initializer}
    name = missing(proto, None)[0]
    np.testing.assert_array_equal(init[name], same[name])
    assert not np.array_equal(init[name], other[name])
    assert not missing(a, None)


def test_a_call_uses_the_precomputed_copy_plan():
    """Inputs are checked against the plan (a dict of the right arrays passes as is; anything else gets
    the full check and its message) and copied into the arena views the steps read."""
    net = compile(zoo.mobilenet_v2(width=0.35, resolution=32, num_classes=10), "h100", device="cpu", ops_lib=standin)
    (name, shape, dtype, view), = net._in_plan
    assert (name, shape, dtype) == ("input", (1, 3, 32, 32), np.float32)
    assert view is net._bound.views["input"]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    first = net({"input": x})["logits"]
    np.testing.assert_array_equal(view, x)
    assert not np.array_equal(net({"input": -x})["logits"], first)
    with pytest.raises(ModelError, match="float64"):
        net({"input": x.astype(np.float64)})
    with pytest.raises(ModelError, match="unknown image"):
        net({"image": x})


def test_bench_record_overhead_is_call_beyond_launch():
    from fuseplanner.run.device import BenchRecord

    rec = BenchRecord("m", "warm-L2", 200, 4e-4, 3e-4, 5e-4, launch_host_s=6e-6, call_host_s=2.1e-5)
    assert rec.overhead_s == pytest.approx(1.5e-5)  # 21 us whole call - 6 us launch
    zero = BenchRecord("m", "warm-L2", 200, 4e-4, 3e-4, 5e-4, launch_host_s=6e-6, call_host_s=2.1e-5, bound_host_s=6.5e-6)
    assert zero.bound_overhead_s == pytest.approx(5e-7)  # 6.5 us launch() - 6 us bare graph launch
