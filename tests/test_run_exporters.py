"""The CPU executor (the real operator library, `fuseplanner.compile(..., device="cpu")`) on full models
from three exporters against onnxruntime: onnx.helper (zoo: a DBNet-style text detector and a ViT
hybrid, trained-like weights), a torch legacy export with its weights (shared/models, skipped when
absent) and the bundled structure-only legacy MobileNetV2 with seeded weights. Metric: max over
outputs of ||out - ref||_2 / ||ref||_2, tolerances from run/check.py (exact fp32 1e-4, fp16 2e-2)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

import fuseplanner
from fuseplanner.frontend import zoo
from fuseplanner.run.check import compare, reference_outputs
from fuseplanner.run.compiled import onnx_model
from fuseplanner.run.weights import missing

SHARED_LEGACY = Path(__file__).resolve().parents[1].parent / "shared" / "models" / "tv_mobilenet_v2_op17_legacy.onnx"
_MODELS: dict = {}


def _model(name: str):
    if name not in _MODELS:
        builders = {"text_detector": lambda: zoo.text_detector(resolution=128),
                    "vit_hybrid": lambda: zoo.vit_hybrid(resolution=64, num_classes=100)}  # fmt: skip
        _MODELS[name] = builders[name]() if name in builders else name
    return _MODELS[name]


def _inputs(net) -> dict:
    rng = np.random.default_rng(5)
    return {s.name: rng.standard_normal(s.shape).astype(np.float32) for s in net.program.inputs}


def _check(name: str, dtype: str):
    model = _model(name)
    net = fuseplanner.compile(model, "h100", dtype=dtype, device="cpu")
    x = _inputs(net)
    with np.errstate(over="ignore"):  # fp16 exp(k (T - P)) overflows to inf, and 1 / (1 + inf) is 0, as in fp32
        got = net(x)
    res = compare(got, reference_outputs(onnx_model(model), x), dtype, "fp32")
    assert res.ok, (name, dtype, res)
    return net, got


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("name", ["text_detector", "vit_hybrid"])
def test_zoo_models_match_onnxruntime(name, dtype):
    net, _ = _check(name, dtype)
    assert any(s.kind not in ("library", "view") for s in net.steps)  # some planned kernels run


def test_legacy_structure_with_seeded_weights():
    _check("mobilenet_v2_legacy_op17", "fp32")


def test_torch_legacy_export_with_weights():
    """Exact fp32 only: the export carries torchvision's untrained initialisation with identity BN, so its
    activations shrink to ~1e-9 at the logits, below float16's smallest subnormal (6e-8)."""
    if not SHARED_LEGACY.is_file():
        pytest.skip(f"{SHARED_LEGACY} is absent (the shared reference exports are not checked out)")
    assert not missing(onnx.load(SHARED_LEGACY, load_external_data=False), SHARED_LEGACY.parent)  # real weights
    _check(str(SHARED_LEGACY), "fp32")


def test_text_detector_has_the_detection_operators():
    ops = Counter(n.op_type for n in _model("text_detector").graph.node)
    modes = {onnx.helper.get_attribute_value(a) for n in _model("text_detector").graph.node if n.op_type == "Resize"
             for a in n.attribute if a.name == "mode"}  # fmt: skip
    assert modes == {b"nearest", b"linear"}
    assert ops["ConvTranspose"] == 4 and ops["Concat"] == 2 and ops["Sigmoid"] == 2
    assert ops["BatchNormalization"] > 20
    dw = [n for n in _model("text_detector").graph.node if n.op_type == "Conv"
          and any(a.name == "group" and a.i > 1 for a in n.attribute)]  # fmt: skip
    assert len(dw) == sum(n for _, _, n in zoo.TEXT_DETECTOR_STAGES)  # one DW per inverted residual block


def test_vit_hybrid_has_attention():
    ops = Counter(n.op_type for n in _model("vit_hybrid").graph.node)
    for op in ("MatMul", "Softmax", "LayerNormalization", "Transpose", "Reshape", "Gather"):
        assert ops[op] > 0, op
    assert ops["Softmax"] == 2  # depth 2


def _tensor_rms(model: onnx.ModelProto, names: list[str], x: np.ndarray) -> dict[str, float]:
    """RMS of intermediate tensors by onnxruntime (the tensors exposed as extra outputs)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    info = {v.name: v for v in inferred.graph.value_info}
    extra = onnx.ModelProto()
    extra.CopyFrom(model)
    extra.graph.output.extend(info[n] for n in names)
    got = reference_outputs(extra, {"input": x})
    return {n: float(np.sqrt(np.mean(np.square(got[n], dtype=np.float64)))) for n in names}


def test_trained_like_weights_keep_activations_at_unit_scale():
    """BN statistics calibrated: every BN output has an rms of order 1 (gamma ~ 1 + 0.1 N, beta ~ 0.1 N;
    the deepest stage is 4x4 at 128x128, so its statistics vary with the input), and the probability map
    is not saturated (a trained detector's is not)."""
    model = _model("text_detector")
    bn = [n.output[0] for n in model.graph.node if n.op_type == "BatchNormalization"]
    x = np.random.default_rng(9).standard_normal((1, 3, 128, 128)).astype(np.float32)
    rms = _tensor_rms(model, bn, x)
    assert all(0.3 < v < 5.0 for v in rms.values()), {k: v for k, v in rms.items() if not 0.3 < v < 5.0}
    prob = reference_outputs(model, {"input": x})["maps"][:, 0]
    assert 0.2 < float(np.mean((prob > 0.05) & (prob < 0.95)))


def test_zoo_detector_rejects_bad_resolution():
    with pytest.raises(ValueError, match="multiple of 32"):
        zoo.text_detector(resolution=100)
