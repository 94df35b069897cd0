"""Shape folding, batch overrides of constant Reshape targets, and shape/weight checks."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from shape_models import edgenext_like, token_mixer

from fuseplanner.cli.main import main
from fuseplanner.core.errors import ModelError
from fuseplanner.frontend.fold import fold_shapes
from fuseplanner.frontend.load import load_model
from fuseplanner.frontend.shapes import infer

MIXED = ("stem", "mix", "dw", "pw")


def _inputs(graph) -> dict[str, tuple[int, ...]]:
    return {op.name: op.input_shapes[0] for op in graph.ops() if op.name in MIXED + ("slice",)}


@pytest.mark.parametrize("symbolic", [True, False])
def test_edgenext_chain_resolves_on_static_input(symbolic, monkeypatch):
    # Shape(x)[1] = 16; (16 + 1) / 2 = 8 (integer Div truncates); * 1 = 8: the Slice keeps channels 0..7.
    # Without onnxruntime's symbolic inference (not a dependency) only the folder resolves the chain.
    if not symbolic:
        monkeypatch.setattr("fuseplanner.frontend.shapes.symbolic_infer", lambda model: model)
    graph = load_model(edgenext_like(size=32, channels=16))
    ops = {op.name: op for op in graph.ops()}
    assert ops["dw"].kind == "dw" and ops["dw"].input_shapes == ((1, 8, 32, 32),)
    assert ops["pw"].kind == "pw" and ops["pw"].output_shapes == ((1, 16, 32, 32),)


def test_fold_replaces_shape_chain_by_an_initializer():
    model = infer(edgenext_like())
    assert fold_shapes(model)
    ops = [n.op_type for n in model.graph.node]
    assert "Shape" not in ops and "Div" not in ops and "Slice" in ops
    ends = {t.name: t for t in model.graph.initializer}["ends"]
    assert onnx.numpy_helper.to_array(ends).tolist() == [8]


def test_fold_leaves_float_weight_chains_alone():
    model = infer(edgenext_like())
    fold_shapes(model)
    assert all(t.name != "x" for t in model.graph.initializer)  # the activation itself is never folded
    assert [n.name for n in model.graph.node if n.op_type == "Conv"] == ["stem", "dw", "pw"]


def test_unknown_shape_names_the_node_and_input():
    # a NonZero output has a data-dependent shape: no folding can make it static
    model = edgenext_like()
    g = model.graph
    nz = helper.make_node("NonZero", ["x"], ["nz"], name="nonzero")
    red = helper.make_node("ReduceMax", ["nz"], ["mx"], name="rmax", keepdims=0)
    cast = helper.make_node("Cast", ["mx"], ["end"], name="mul", to=TensorProto.INT64)
    nodes = [n for n in g.node if n.name not in ("shape", "gather", "add", "div", "mul")]
    nodes[1:1] = [nz, red, cast]
    del g.node[:]
    g.node.extend(nodes)
    with pytest.raises(ModelError) as err:
        load_model(model)
    msg = str(err.value)
    assert "'input' (1x3x32x32)" in msg and "'dw'" in msg and "Slice node 'slice'" in msg
    assert "--input-shape" not in msg and "\n" not in msg


@pytest.mark.parametrize("style", ["constant", "minus_one", "patches", "shape"])
@pytest.mark.parametrize("how", ["batch", "input_shape"])
def test_batch_override_rewrites_batch_constants(style, how):
    model = token_mixer(style, batch=1)
    kwargs = {"batch": 8} if how == "batch" else {"input_shapes": {"input": (8, 3, 8, 8)}}
    shapes = _inputs(load_model(model, **kwargs))
    tokens = (32, 16, 16) if style == "patches" else (8, 64, 16)  # patches: 8 images x 4 patches
    assert shapes == {"stem": (8, 3, 8, 8), "mix": tokens, "dw": (8, 16, 8, 8), "pw": (8, 16, 8, 8)}


def test_batch_override_from_an_export_batch_of_two():
    shapes = _inputs(load_model(token_mixer("minus_one", batch=2), batch=6))
    assert shapes["dw"] == (6, 16, 8, 8) and shapes["mix"] == (6, 64, 16)


def test_batch_override_keeps_onnxruntime_semantics():
    ort = pytest.importorskip("onnxruntime")
    from fuseplanner.frontend.shapes import prepare

    original = token_mixer("minus_one")
    model = prepare(original, batch=8)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal((8, 3, 8, 8)).astype(np.float32)
    one = ort.InferenceSession(original.SerializeToString(), providers=["CPUExecutionProvider"])
    batched = sess.run(None, {"input": x})[0]
    per_image = np.concatenate([one.run(None, {"input": x[i:i + 1]})[0] for i in range(8)])
    assert batched.shape == (8, 16, 8, 8)
    np.testing.assert_allclose(batched, per_image, rtol=1e-5, atol=1e-5)


def test_cli_batch_and_input_shape_on_constant_targets(tmp_path, capsys):
    path = tmp_path / "mixer.onnx"
    onnx.save(token_mixer("minus_one"), path)
    for extra in (["--batch", "8"], ["--input-shape", "input=8x3x8x8"]):
        assert main(["inspect", str(path), "--json", *extra]) == 0
        out = capsys.readouterr().out
        assert '"name": "dw"' in out and "[8, 16, 8, 8]" in out


def test_pinned_channels_checked_against_first_conv(capsys):
    with pytest.raises(ModelError) as err:
        load_model("mobilenet_v2", input_shapes={"input": (1, 4, 224, 224)})
    msg = str(err.value)
    assert "4 input channels" in msg and "take 3" in msg and "input=1x3x224x224" in msg and "\n" not in msg
    assert main(["plan", "mobilenet_v2", "--gpu", "h100", "--input-shape", "input=1x4x224x224"]) == 2
    err_text = capsys.readouterr().err
    assert err_text.startswith("error: ") and err_text.count("\n") == 1


def test_conv_channel_mismatch_inside_the_model():
    # a constant Reshape target that gives the DW conv 32 channels where its weights take 16
    model = token_mixer("constant")
    for t in model.graph.initializer:
        if t.name == "to_map":
            t.CopyFrom(onnx.numpy_helper.from_array(np.array([1, 32, 4, 8], dtype=np.int64), "to_map"))
    with pytest.raises(ModelError, match=r"Conv node 'dw' receives 32 input channels but its weights"):
        load_model(model)
