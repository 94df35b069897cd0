"""Generated weights of structure-only models keep activations at trained-network scale.

EfficientNet-B0's exporter folded every BN into its convs; a generated weight there gets a folded BN
scale and then a data-driven rescale (`fuseplanner.run.calibrate_init`) so each such conv's output has
RMS 1 on a seeded input. Without it, SiLU and squeeze-excitation gates shrank activations 6-8x per stage
and the logits ended near 1e-6 (fp16 subnormal), failing the fp16 check.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from fuseplanner.frontend import zoo
from fuseplanner.frontend.load import read_model
from fuseplanner.run import calibrate_init
from fuseplanner.run.check import compare, reference_outputs
from fuseplanner.run.compiled import compile, onnx_model
from fuseplanner.run.weights import materialize, missing


def _weights(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def _all_outputs(model: onnx.ModelProto, x: np.ndarray) -> dict[str, np.ndarray]:
    """Every node output of a shape-inferred full model, by onnxruntime (CPU)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for v in m.graph.value_info:
        if v.name not in have:
            m.graph.output.append(v)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, {m.graph.input[0].name: x}), strict=True))


@pytest.fixture(scope="module")
def b0_outputs():
    model = onnx_model("efficientnet_b0", seed=0)
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(dims).astype(np.float32)  # not the calibration input
    return _all_outputs(model, x)


def _rms(a: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.asarray(a, np.float64) ** 2)))


def test_efficientnet_b0_stages_stay_near_unit_scale(b0_outputs):
    """Every block's output (project conv, residual Add), the head conv and the pooled features within
    [0.1, 10]; the logits (classifier normal(0, 0.01) over 1280 features: ~0.36 x feature RMS) far from
    fp16's subnormal range (they were ~1e-6 before the rescale)."""
    stages = {n: _rms(v) for n, v in b0_outputs.items()
              if n.endswith(("project/Conv_out", "/Add_out", "head.conv/Mul_out", "GlobalAveragePool_out"))
              and not n.split("/")[0].endswith(".se")}  # fmt: skip
    assert sum(n.endswith("project/Conv_out") for n in stages) == 16
    bad = {n: r for n, r in stages.items() if not 0.1 <= r <= 10}
    assert not bad, bad
    assert _rms(b0_outputs["logits"]) > 1e-2


def test_efficientnet_b0_fp16_cpu_check_passes():
    """`fuseplanner run efficientnet_b0 --device cpu --dtype fp16 --check` (it was 2.03e-2 > 2e-2)."""
    net = compile("efficientnet_b0", "h100", dtype="fp16", device="cpu")
    rng = np.random.default_rng(0)
    x = {s.name: rng.standard_normal(s.shape).astype(np.float32) for s in net.program.inputs}
    res = compare(net(x), reference_outputs(onnx_model("efficientnet_b0"), x), "fp16", "fp32")
    print(f"efficientnet_b0 fp16 cpu check error {res.error:.3e}")
    assert res.ok and res.error < 2e-2


def test_calibrated_weights_are_deterministic_and_seeded():
    proto, _, _ = read_model("efficientnet_b0")
    a, b, c = (_weights(materialize(proto, s)) for s in (0, 0, 1))
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
    name = "blocks.15.project.weight" if "blocks.15.project.weight" in a else missing(proto, None)[0]
    assert not np.array_equal(a[name], c[name])


def test_calibration_rescales_only_folded_bn_conv_weights(monkeypatch):
    """Without the rescale, generated weights are as before; with it, only folded-BN conv weights differ,
    each by one positive scalar."""
    proto, _, _ = read_model("efficientnet_b0")
    cal = _weights(materialize(proto, 0))
    monkeypatch.setattr(calibrate_init, "calibrate", lambda *_: {})
    raw = _weights(materialize(proto, 0))
    changed = [n for n in raw if not np.array_equal(raw[n], cal[n])]
    assert changed
    for n in changed:
        assert raw[n].ndim == 4  # a conv weight
        ratio = cal[n].astype(np.float64) / raw[n]
        np.testing.assert_allclose(ratio, ratio.flat[0], rtol=1e-5)
        assert ratio.flat[0] > 0


@pytest.mark.parametrize("source", ["materialized", "zoo"])
def test_a_model_with_every_weight_present_is_unchanged(source, monkeypatch):
    """All initializers present: nothing generated, nothing calibrated, every value as given."""
    if source == "zoo":
        full = zoo.mobilenet_v2(width=0.35, resolution=32, num_classes=10)
    else:
        full = materialize(read_model("efficientnet_b0")[0], 3)

    def boom(*_):
        raise AssertionError("calibrated a model whose weights are all present")

    monkeypatch.setattr(calibrate_init, "calibrate", boom)
    again = _weights(materialize(full, 0))
    given = _weights(full)
    assert again.keys() == given.keys()
    for name in given:
        np.testing.assert_array_equal(again[name], given[name])


def test_dynamic_spatial_dims_calibrate_at_the_compiled_shapes():
    """A structure-only model with dynamic H and W cannot be calibrated at its own shapes: ModelError
    naming the dims; with the shapes it is compiled at, it compiles and runs."""
    from fuseplanner.core.errors import ModelError

    proto, _, _ = read_model("mobilenet_v2")
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    dims[2].dim_param, dims[3].dim_param = "H", "W"
    del proto.graph.value_info[:]
    for out in proto.graph.output:
        for d in out.type.tensor_type.shape.dim:
            d.dim_param = "?"
    with pytest.raises(ModelError, match="dynamic dims"):
        materialize(proto, 0)
    net = compile(proto, "h100", device="cpu", input_shapes={"input": [1, 3, 64, 64]})
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
    assert np.all(np.isfinite(next(iter(net(x).values()))))
