"""Plan exports: rewritten ONNX (checker, kept nodes, attributes), markdown, JSON files."""

from __future__ import annotations

import collections

import fakes
import graphs as G
import numpy as np
import onnx
import pytest

from fuseplanner.core.errors import PlanError
from fuseplanner.frontend.load import load_model, resolve_model
from fuseplanner.planning import export
from fuseplanner.planning import search as planner

GPU = fakes.FakeGpu()


@pytest.fixture(autouse=True)
def bytes_model(monkeypatch):
    monkeypatch.setattr(planner, "_cost_functions", lambda: (fakes.bytes_estimate, fakes.bytes_estimate_op))


def _plan(source, **kw):
    return fakes.plan(load_model(source), GPU, **kw)


def test_rewrite_replaces_each_group_by_one_node():
    model = G.onnx_blocks()
    p = _plan(model)
    assert [(g.kind, g.residual) for g in p.groups] == [("pw_dw_pw", True), ("pw_dw_pw", True)]
    out = export.rewrite_onnx(p, model)
    onnx.checker.check_model(out)  # real weights: the plain checker, nothing stubbed
    ops = collections.Counter(n.op_type for n in out.graph.node)
    assert ops == {"FusedConv": 2, "GlobalAveragePool": 1}
    fused = [n for n in out.graph.node if n.op_type == "FusedConv"]
    assert all(n.domain == export.DOMAIN for n in fused)
    assert any(o.domain == export.DOMAIN and o.version == 1 for o in out.opset_import)
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in fused[0].attribute}
    g0 = p.groups[0]
    assert attrs["kind"] == b"pw_dw_pw"
    assert list(attrs["tile"]) == [g0.tile.th, g0.tile.tw, g0.tile.tf, g0.tile.tc, g0.tile.threads]
    assert [m.decode() for m in attrs["members"]] == ["b0.pw1", "b0.dw", "b0.pw2"]
    assert attrs["residual"] == 1
    # inputs: activation, residual operand, then the six weights/biases by reference
    assert list(fused[0].input[:2]) == ["x", "x"]
    assert {"b0.w1", "b0.b1", "b0.wd", "b0.bd", "b0.w2", "b0.b2"} <= set(fused[0].input)
    assert list(fused[0].output) == ["b0.y"]
    assert list(fused[1].input[:2]) == ["b0.y", "b0.y"]
    # every initializer the fused nodes read still exists
    inits = {t.name for t in out.graph.initializer}
    assert all(i in inits or i in {"x", "b0.y"} for n in fused for i in n.input)


def test_rewrite_keeps_nodes_outside_groups():
    model = G.onnx_blocks()
    p = _plan(model, kinds=["pw_dw"])
    out = export.rewrite_onnx(p, model)
    onnx.checker.check_model(out)
    ops = collections.Counter(n.op_type for n in out.graph.node)
    # each block: pw1+clip1+dw+clip2 fused; pw2 and the Add stay
    assert ops == {"FusedConv": 2, "Conv": 2, "Add": 2, "GlobalAveragePool": 1}


def test_rewritten_model_runs_structurally_with_onnxruntime_shapes():
    # the unrewritten parts keep their shapes: value_info only names tensors that still exist
    model = G.onnx_blocks()
    out = export.rewrite_onnx(_plan(model), model)
    live = {x for n in out.graph.node for x in (*n.input, *n.output)}
    assert all(v.name in live for v in out.graph.value_info)


def test_rewrite_structure_only_bundled_model(tmp_path):
    src = resolve_model("mobilenet_v2_legacy_op17")
    p = _plan(src)
    path = export.write_onnx(p, src, tmp_path / "fused.onnx")
    back = onnx.load(str(path), load_external_data=False)
    n_fused = sum(n.op_type == "FusedConv" for n in back.graph.node)
    assert n_fused == len(p.groups) > 0
    export.check_onnx(back, tmp_path)  # external-weight stubs stay references
    stubs = [t for t in back.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    orig = onnx.load(str(src), load_external_data=False)
    assert len(stubs) == sum(t.data_location == onnx.TensorProto.EXTERNAL for t in orig.graph.initializer)


def test_check_onnx_reports_a_broken_graph():
    model = G.onnx_blocks()
    out = export.rewrite_onnx(_plan(model), model)
    out.graph.node[0].input[0] = "nothing_makes_this"
    with pytest.raises(PlanError, match="onnx.checker"):
        export.check_onnx(out)


def test_rewrite_refuses_a_plan_for_another_model():
    p = _plan(G.onnx_blocks())
    with pytest.raises(PlanError, match="not in the model"):
        export.rewrite_onnx(p, _renamed_model())


def _renamed_model():
    m = G.onnx_blocks()
    for n in m.graph.node:
        n.name = "other_" + n.name
    return m


def test_markdown_report_lists_groups_layers_and_reasons():
    model = G.onnx_blocks()
    p = _plan(model)
    md = export.to_markdown(p)
    assert md.startswith("# Fusion plan: blocks on fake")
    assert "b0.pw1 -> b0.dw -> b0.pw2" in md
    assert "| pool |" in md
    assert "overlap" in md  # the pairs inside each block lost to the triple
    assert export.summary_line(p) in md


def test_write_text_refuses_missing_folder(tmp_path):
    with pytest.raises(PlanError, match="does not exist"):
        export.write_text("x", tmp_path / "no" / "such.json")


def test_fused_onnx_matches_unfused_outputs_where_groups_are_absent():
    """With no groups (kinds none) the rewrite is the prepared model: onnxruntime gives the same output."""
    ort = pytest.importorskip("onnxruntime")
    model = G.onnx_blocks()
    p = _plan(model, kinds=[])
    assert p.groups == []
    out = export.rewrite_onnx(p, model)
    x = np.random.default_rng(1).standard_normal((1, 8, 8, 8)).astype(np.float32)
    a = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    b = ort.InferenceSession(out.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(a, b, rtol=1e-6)
