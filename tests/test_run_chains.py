"""Elementwise chains (fuseplanner.run.chains): which library steps merge, that the merged program
computes bit-for-bit what the separate steps compute on the CPU (NumPy composition), and the CUDA
source generated for the GPU."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from fuseplanner import run as run_pkg
from fuseplanner.frontend import zoo
from fuseplanner.planning.search import plan
from fuseplanner.run.chains import CHAIN_OP
from fuseplanner.run.check import compare, reference_outputs
from fuseplanner.run.compiled import _bind, _load_model, compile
from fuseplanner.run.ops import Node, prepare
from fuseplanner.run.ops.chain import cuda_source
from fuseplanner.run.program import build_program, lib_module


def _both(model, dtype="fp32"):
    """(chained, unchained) CPU models of `model` with one plan."""
    prepared, graph, _ = _load_model(model, None, None, 0)
    p = plan(graph, "h100", model="paper", workers=1, dtype=dtype)
    ops = lib_module()
    nets = []
    for chains in (True, False):
        program = build_program(prepared, graph, p, dtype=dtype, ops_lib=ops, chains=chains)
        nets.append(_bind(program, p, ops, "cpu"))
    return nets


def _x(net, seed=0):
    rng = np.random.default_rng(seed)
    return {s.name: rng.standard_normal(s.shape).astype(np.float32) for s in net.program.inputs}


def _fused(net):
    return [s for s in net.program.steps if getattr(s, "op_type", "") == CHAIN_OP]


@pytest.mark.parametrize("name,dtype", [("efficientnet_b0", "fp32"), ("mobilevit_xxs", "fp32"),
                                        ("mobilevit_xxs", "fp16")])  # fmt: skip
def test_chains_give_identical_outputs_in_fewer_steps(name, dtype):
    chained, plain = _both(name, dtype)
    fused = _fused(chained)
    assert fused, "no chain merged"
    merged = sum(len(s.node.attrs["chain"]) - 1 for s in fused)
    assert len(chained.program.steps) == len(plain.program.steps) - merged
    assert sorted(n for s in chained.program.steps for n in s.covers) == sorted(
        n for s in plain.program.steps for n in s.covers)
    x = _x(plain)
    a, b = chained(x), plain(x)
    for k in b:
        np.testing.assert_array_equal(a[k], b[k])
    assert chained.memory <= plain.memory  # intermediates of a chain are never allocated


def test_silu_after_library_convs_merges():
    """MobileViT's library convs are followed by SiLU (Sigmoid, Mul with the conv output): each pair merges."""
    chained, plain = _both("mobilevit_xxs")
    kinds = Counter("+".join(m.node.op_type for m in s.node.attrs["chain"]) for s in _fused(chained))
    sigmoids = sum(1 for s in plain.program.steps if getattr(s, "op_type", "") == "Sigmoid")
    assert kinds == {"Sigmoid+Mul": sigmoids}


def test_detector_binary_map_is_one_step():
    """Sub, Mul, Neg, Exp, Add, Reciprocal of the DB binary map: six nodes, one step (the Sigmoids feed
    two readers, the Concat reads the probability map too, so they stay apart)."""
    model = zoo.text_detector(resolution=64)
    net = compile(model, "h100", device="cpu")
    chains = {"+".join(m.node.op_type for m in s.node.attrs["chain"]) for s in _fused(net)}
    assert "Sub+Mul+Neg+Exp+Add+Reciprocal" in chains
    x = _x(net)
    with np.errstate(over="ignore"):
        assert compare(net(x), reference_outputs(run_pkg.compiled.onnx_model(model), x), "fp32", "fp32").ok


def _graph_model(nodes, out_shapes: dict, inits=()):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in out_shapes.items()]
    graph = helper.make_graph(nodes, "chains", [x], outs, initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_what_does_not_merge():
    """A tensor read twice, a graph output and a change of shape end a chain; a Clip that joins no chain
    stands alone as a one-member chain; a merged chain still matches onnxruntime."""
    scale = numpy_helper.from_array(np.linspace(0.5, 1.5, 4, dtype=np.float32).reshape(1, 4, 1, 1), "scale")
    lo = numpy_helper.from_array(np.array(-1.0, np.float32), "lo")
    hi = numpy_helper.from_array(np.array(1.0, np.float32), "hi")
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),  # a: read by sig and by mul
        helper.make_node("Sigmoid", ["a"], ["s"], name="sig"),
        helper.make_node("Mul", ["a", "s"], ["m"], name="mul"),  # joins sig: s has one reader
        helper.make_node("Mul", ["m", "scale"], ["o1"], name="scale_mul"),  # o1: a graph output, and read on
        helper.make_node("Clip", ["o1", "lo", "hi"], ["c"], name="clip"),
        helper.make_node("GlobalAveragePool", ["c"], ["g"], name="gap"),
        helper.make_node("Sigmoid", ["g"], ["gs"], name="gsig"),  # (1,4,1,1)
        helper.make_node("Mul", ["c", "gs"], ["y"], name="gate"),  # (1,4,8,8): another shape, no merge
    ]  # fmt: skip
    model = _graph_model(nodes, {"o1": [1, 4, 8, 8], "y": [1, 4, 8, 8]}, (scale, lo, hi))
    net = compile(model, "h100", device="cpu")
    chains = sorted("+".join(m.node.name for m in s.node.attrs["chain"]) for s in _fused(net))
    assert chains == ["clip", "sig+mul+scale_mul"]  # the lone Clip: a one-member chain (one kernel)
    x = _x(net)
    assert compare(net(x), reference_outputs(model, x), "fp32", "fp32").ok


def _silu_node():
    model = _graph_model([helper.make_node("Sigmoid", ["x"], ["s"], name="sig"),
                          helper.make_node("Mul", ["x", "s"], ["y"], name="mul")], {"y": [1, 4, 8, 8]})  # fmt: skip
    (step,) = _fused(compile(model, "h100", device="cpu"))
    return step.node


def test_cuda_source_of_silu_and_clip():
    node = _silu_node()
    body = cuda_source(node, node.attrs["chain"])
    assert body.splitlines() == ["const float r0 = (1.f / (1.f + expf(-(float)x0)));",
                                 "const float r1 = ((float)x0 * r0);", "y = (Y)r1;"]  # fmt: skip
    lo, hi = numpy_helper.from_array(np.array(0.0, np.float32), "lo"), numpy_helper.from_array(np.array(6.0, np.float32), "hi")
    model = _graph_model([helper.make_node("Add", ["x", "x"], ["a"], name="add"),
                          helper.make_node("Clip", ["a", "lo", "hi"], ["y"], name="clip")], {"y": [1, 4, 8, 8]},
                         (lo, hi))  # fmt: skip
    (step,) = _fused(compile(model, "h100", device="cpu"))
    body = cuda_source(step.node, step.node.attrs["chain"])
    assert "const float r1 = fminf(fmaxf(r0, 0.0f), 6.0f);" in body.splitlines()


def test_fused_numpy_kernel_is_the_composition():
    node = _silu_node()
    x = np.random.default_rng(2).standard_normal((1, 4, 8, 8)).astype(np.float32)
    out = np.empty_like(x)
    prepare(np, node)([x], [out])
    sig, mul = (m.node for m in node.attrs["chain"])
    s = np.empty_like(x)
    prepare(np, sig)([x], [s])
    ref = np.empty_like(x)
    prepare(np, mul)([x, s], [ref])
    np.testing.assert_array_equal(out, ref)
    assert isinstance(node, Node) and len(node.input_shapes) == 1  # x read once by the chain

