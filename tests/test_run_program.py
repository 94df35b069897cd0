"""Programs of every bundled model: each ONNX node covered exactly once, planned kernels as planned,
and the CPU executor against onnxruntime (relative L2 error, exact fp32 tolerance 1e-4)."""

from __future__ import annotations

import numpy as np
import pytest
import run_ops_standin as standin

from fuseplanner.frontend.load import bundled_models
from fuseplanner.frontend.view import GraphView
from fuseplanner.planning.search import plan
from fuseplanner.run.check import compare, reference_outputs
from fuseplanner.run.compiled import _load_model, compile
from fuseplanner.run.program import KernelStep, LibraryStep, build_program

SHAPES = {"mobilenet_v1_converter_op11": {"input": (1, 3, 224, 224)}}


@pytest.fixture(scope="module", params=bundled_models())
def built(request):
    name = request.param
    prepared, graph, _ = _load_model(name, SHAPES.get(name), None, 0)
    p = plan(graph, "h100", model="paper", workers=1)
    return name, prepared, graph, p, build_program(prepared, graph, p, ops_lib=standin)


def test_every_onnx_node_is_covered_once(built):
    _, prepared, _, _, program = built
    view = GraphView(prepared)
    covered = [n for s in program.steps for n in s.covers]
    assert len(covered) == len(set(covered))
    compute = {view.node_name(i) for i in view.compute}
    assert set(covered) == compute
    assert set(program.folded) == {view.node_name(i) for i in range(len(view.nodes))} - compute


def test_planned_kernels_are_the_plan(built):
    _, _, graph, p, program = built
    kernels = {s.label: s for s in program.steps if isinstance(s, KernelStep)}
    expected = {"+".join(g.nodes): (g.kind, g.tile) for g in p.groups}
    expected |= {lay.node: (lay.kind, lay.tile) for lay in p.layers if lay.tile is not None}
    fallback = {s.covers[0] for s in program.steps if isinstance(s, LibraryStep) and s.reason}
    for label, (kind, tile) in expected.items():
        if label.split("+")[0] in fallback:
            continue
        assert (kernels[label].kind, kernels[label].tile) == (kind, tile)
    assert set(kernels) <= set(expected)
    for g in p.groups:  # a residual group reads the Add's other operand and writes the Add's output
        step = kernels.get("+".join(g.nodes))
        if step is not None and g.residual:
            assert step.residual == g.residual_input
            assert step.output == graph.op(g.absorbed[-1]).outputs[0]


def test_steps_run_in_dependency_order(built):
    _, prepared, _, _, program = built
    ready = {t.name for t in program.inputs} | set(program.constants)
    for s in program.steps:
        assert all(t in ready for t in s.inputs if t), s.label
        ready.update(s.outputs)
    assert all(o.name in ready for o in program.outputs)


@pytest.mark.parametrize("name", ["mobilenet_v2", "mobilevit_xxs"])
def test_cpu_executor_matches_onnxruntime(name):
    prepared, graph, _ = _load_model(name, None, None, 0)
    net = compile(name, "h100", plan(graph, "h100", model="paper", workers=1), device="cpu", ops_lib=standin)
    x = {s.name: np.random.default_rng(1).standard_normal(s.shape).astype(np.float32) for s in net.program.inputs}
    got = net(x)
    res = compare(got, reference_outputs(prepared, x), "fp32", "fp32")
    assert res.ok, res
    again = net(x)  # outputs are copies; a second call gives the same answer
    for k in got:
        np.testing.assert_array_equal(got[k], again[k])
    assert net.memory < sum(t.nbytes for t in net.program.tensors.values())
