"""Rewritten ONNX: self-describing FusedConv nodes, one function each (runs in onnxruntime with the
original outputs), and models saved with external data."""

from __future__ import annotations

import collections
from pathlib import Path

import fakes
import numpy as np
import onnx
import pytest

from fuseplanner.cli.main import main
from fuseplanner.frontend import zoo
from fuseplanner.frontend.load import load_model
from fuseplanner.planning import export
from fuseplanner.planning import search as planner

ort = pytest.importorskip("onnxruntime")
GPU = fakes.FakeGpu()
LEGACY_V2 = Path(__file__).resolve().parents[1].parent / "shared" / "models" / "tv_mobilenet_v2_op17_legacy.onnx"


@pytest.fixture
def fake_costs(monkeypatch):
    monkeypatch.setattr(planner, "_cost_functions", lambda: (fakes.bytes_estimate, fakes.bytes_estimate_op))


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {model.graph.input[0].name: x})[0]


def _input(model: onnx.ModelProto) -> np.ndarray:
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return np.random.default_rng(0).standard_normal(dims).astype(np.float32)


def _rewrite_and_compare(source, original: onnx.ModelProto):
    plan = fakes.plan(load_model(source), GPU)
    assert plan.groups
    out = export.rewrite_onnx(plan, source)
    export.check_onnx(out)
    x = _input(original)
    want, got = _run(original, x), _run(out, x)
    scale = max(float(np.abs(want).max()), 1e-30)
    assert np.abs(want - got).max() <= 1e-5 * scale  # float rounding: the function bodies are the original ops
    return plan, out


@pytest.mark.parametrize("build", [
    lambda: zoo.mobilenet_v2(width=0.5, resolution=64, bn=True),
    lambda: zoo.efficientnet_b0(resolution=64),
    lambda: zoo.mobilenet_v1(width=0.25, resolution=64, opset=11, weights="constant", converter=True),
])
def test_rewritten_zoo_models_run_with_the_original_outputs(build, fake_costs):
    model = build()
    plan, out = _rewrite_and_compare(model, model)
    fused = [n for n in out.graph.node if n.op_type == "FusedConv"]
    assert len(fused) == len(plan.groups) == len(out.functions)
    assert {(f.domain, f.name, f.overload) for f in out.functions} == {(n.domain, n.op_type, n.overload) for n in fused}


@pytest.mark.skipif(not LEGACY_V2.is_file(), reason=f"{LEGACY_V2} (the legacy MobileNetV2 export with weights) is absent")
def test_rewritten_legacy_mobilenet_v2_matches_the_original(fake_costs):
    _rewrite_and_compare(str(LEGACY_V2), onnx.load(str(LEGACY_V2)))


def test_fused_node_describes_every_member(fake_costs):
    model = zoo.mobilenet_v2(width=0.5, resolution=64, bn=True)
    graph = load_model(model)
    plan = fakes.plan(graph, GPU)
    out = export.rewrite_onnx(plan, model)
    node = next(n for n in out.graph.node if n.op_type == "FusedConv")
    group = next(g for g in plan.groups if node.name.startswith(f"fused_{plan.groups.index(g)}_"))
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    ops = [graph.op(m) for m in group.nodes]
    n = len(ops)
    assert [k.decode() for k in attrs["member_kinds"]] == [op.kind for op in ops]
    assert len(attrs["member_kernel_shapes"]) == len(attrs["member_strides"]) == len(attrs["member_dilations"]) == 2 * n
    assert len(attrs["member_pads"]) == 4 * n and list(attrs["member_groups"]) == [op.groups for op in ops]
    assert [e.decode() for e in attrs["member_epilogues"]] == ["+".join(op.epilogue) for op in ops]
    weights = [node.input[i] for i in attrs["member_weights"]]
    assert weights == [f"{op.name.removesuffix('/Conv')}.weight" for op in ops]
    assert list(attrs["tile"]) == [group.tile.th, group.tile.tw, group.tile.tf, group.tile.tc, group.tile.threads]
    body = next(f for f in out.functions if f.overload == node.overload)
    assert collections.Counter(b.op_type for b in body.node)["Conv"] == n


def _external_model(folder: Path) -> Path:
    model = zoo.mobilenet_v1(width=0.25, resolution=32, num_classes=10)
    folder.mkdir()
    path = folder / "model.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx.data", size_threshold=256)
    assert (folder / "model.onnx.data").is_file()
    return path


def test_external_data_model_rewritten_into_another_folder(tmp_path, capsys):
    src = _external_model(tmp_path / "src")
    (tmp_path / "out").mkdir()
    dest = tmp_path / "out" / "fused.onnx"
    assert main(["plan", str(src), "--gpu", "h100", "--onnx", str(dest)]) == 0, capsys.readouterr().err
    back = onnx.load(str(dest))  # loads the external data: fails when the weights are missing
    onnx.checker.check_model(back)
    assert (tmp_path / "out" / "fused.onnx.data").is_file()
    x = _input(back)
    original = onnx.load(str(src))
    np.testing.assert_allclose(_run(back, x), _run(original, x), rtol=1e-5, atol=1e-6)


def test_external_data_write_onnx_next_to_the_source(tmp_path, fake_costs):
    src = _external_model(tmp_path / "src")
    plan = fakes.plan(load_model(str(src)), GPU)
    dest = export.write_onnx(plan, str(src), tmp_path / "src" / "fused.onnx")
    back = onnx.load(str(dest))
    assert sum(n.op_type == "FusedConv" for n in back.graph.node) == len(plan.groups)
    assert (tmp_path / "src" / "model.onnx.data").is_file()  # the source's own data file is untouched
