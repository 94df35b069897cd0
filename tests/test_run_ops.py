"""The executor's operator library (fuseplanner.run.ops) on NumPy against onnxruntime.

Every case of tests/run_op_cases.py runs as a one-node ONNX model through onnxruntime (CPU) and through
`prepare(numpy, node)`, with fresh random inputs (no zeros), outputs poisoned first (NaN and 1e30 for
floats, two sentinels for ints and bools) so that an unwritten element fails. Float outputs must agree
to 1e-5 of the reference's largest magnitude (float32) and to 2e-3 for float16 activations against
the float32 reference run on the same float16-rounded inputs; other outputs must match exactly.
"""

from __future__ import annotations

import zlib

import numpy as np
import onnx
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from onnx import helper
from run_op_cases import C, Case, R, W, all_cases, draw, halve, node_for, reference

from fuseplanner.core.errors import ModelError
from fuseplanner.run.ops import SUPPORTED, VIEW_OPS, Node, prepare, unsupported

CASES = all_cases()
HALF = [c for c in CASES if c.half and any(s is not None and s.half and s.dtype == "float32" for s in c.inputs)]


def poisons(dtype: np.dtype) -> tuple:
    if dtype.kind == "f":
        return (np.nan, 1e4 if dtype == np.float16 else 1e30)
    if dtype.kind == "b":
        return (False, True)
    return (np.iinfo(dtype).min, 77)


def run_lib(node: Node, values: list, poison_index: int) -> list[np.ndarray]:
    kernel = prepare(np, node)
    outs = [np.full(s, poisons(np.dtype(d))[poison_index], dtype=d)
            for s, d in zip(node.output_shapes, node.output_dtypes, strict=True)]
    kernel(values, outs)
    return outs


def assert_close(got: np.ndarray, ref: np.ndarray, tol: float, label: str) -> None:
    assert got.shape == ref.shape, f"{label}: shape {got.shape} != {ref.shape}"
    if ref.dtype.kind != "f":
        np.testing.assert_array_equal(got, ref.astype(got.dtype), err_msg=label)
        return
    g, r = got.astype(np.float64), ref.astype(np.float64)
    assert np.isfinite(g).all() or not np.isfinite(r).all(), f"{label}: unwritten or non-finite elements"
    scale = max(float(np.abs(r).max(initial=0.0)), 1e-30)
    err = float(np.abs(g - r).max(initial=0.0)) / scale
    assert err <= tol, f"{label}: max error {err:.2e} of the largest magnitude > {tol:g}"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op_matches_onnxruntime(case: Case) -> None:
    values = draw(case, seed=zlib.crc32(case.id.encode()))
    refs = reference(case, values)
    node = node_for(case, values, refs)
    for k in range(2):
        for i, (got, ref) in enumerate(zip(run_lib(node, values, k), refs, strict=True)):
            assert_close(got, ref, 1e-5, f"{case.id} output {i} (poison {k})")


@pytest.mark.parametrize("case", HALF, ids=[c.id for c in HALF])
def test_op_float16(case: Case) -> None:
    values = draw(case, seed=zlib.crc32(case.id.encode()) + 1)
    lib_values, ref_values = halve(case, values)
    refs = reference(case, ref_values)
    node = node_for(case, lib_values, refs, half=True)
    for i, (got, ref) in enumerate(zip(run_lib(node, lib_values, 0), refs, strict=True)):
        assert got.dtype == np.dtype(node.output_dtypes[i])
        assert_close(got, ref, 2e-3, f"{case.id} float16 output {i}")


class _NoWideCopy(np.ndarray):
    """A float16 array that refuses to be copied to a wider float (what the reductions must not do)."""

    def astype(self, dtype, *args, **kwargs):
        assert np.dtype(dtype).itemsize <= self.dtype.itemsize, f"a {np.dtype(dtype)} copy of the whole input"
        return super().astype(dtype, *args, **kwargs)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "ReduceMean", "ReduceSum"])
def test_float16_reductions_accumulate_without_a_float32_copy(op: str) -> None:
    """The reduction reads float16 and accumulates in float32 itself: a float32 copy of the input first
    moved 2 + 4 + 4 bytes per element instead of 2 (twice the fp32 time on the GPU, BENCHMARKS.md)."""
    case = next(c for c in HALF if c.op == op)
    values = draw(case, seed=5)
    lib_values, ref_values = halve(case, values)
    refs = reference(case, ref_values)
    node = node_for(case, lib_values, refs, half=True)
    guarded = [v.view(_NoWideCopy) if v is not None and v.dtype == np.float16 else v for v in lib_values]
    got = run_lib(node, guarded, 0)[0]
    assert_close(np.asarray(got), refs[0], 2e-3, f"{op} float16")


def _check_case(case: Case) -> None:
    values = draw(case, seed=zlib.crc32(repr(case).encode()))
    refs = reference(case, values)
    for got, ref in zip(run_lib(node_for(case, values, refs), values, 0), refs, strict=True):
        assert_close(got, ref, 1e-5, repr(case))


@st.composite
def windows(draw_, max_kernel: int = 4) -> tuple[dict, tuple[int, int]]:
    """Random 2-D window attributes (kernel, strides, dilations, asymmetric pads) and a fitting H x W."""
    k = [draw_(st.integers(1, max_kernel)) for _ in range(2)]
    s = [draw_(st.integers(1, 3)) for _ in range(2)]
    d = [draw_(st.integers(1, 2)) for _ in range(2)]
    pads = [draw_(st.integers(0, kk - 1)) for kk in k * 2]
    hw = tuple(draw_(st.integers((kk - 1) * dd + 1, 11)) for kk, dd in zip(k, d, strict=True))
    return {"kernel_shape": k, "strides": s, "dilations": d, "pads": pads}, hw


@settings(max_examples=25, deadline=None)
@given(win=windows(), groups=st.sampled_from([1, 2, 4]), per_group=st.integers(1, 3), bias=st.booleans())
def test_conv_random_geometry(win, groups, per_group, bias) -> None:
    attrs, (h, w) = win
    c, m = 4, groups * per_group
    k = attrs["kernel_shape"]
    inputs = (R(2, c, h, w), W(m, c // groups, *k)) + ((W(m),) if bias else ())
    _check_case(Case("Conv", inputs, {**attrs, "group": groups}))


@settings(max_examples=20, deadline=None)
@given(win=windows(), groups=st.sampled_from([1, 2]), adj=st.integers(0, 2))
def test_conv_transpose_random_geometry(win, groups, adj) -> None:
    attrs, (h, w) = win
    k, s, dil = attrs["kernel_shape"], attrs["strides"], attrs["dilations"]
    output_padding = [min(adj, ss - 1) for ss in s]
    pads = attrs["pads"]
    size = [ss * (i - 1) + a + (kk - 1) * dd + 1 - pads[j] - pads[j + 2]
            for j, (ss, i, a, kk, dd) in enumerate(zip(s, (h, w), output_padding, k, dil, strict=True))]
    assume(min(size) >= 1)
    _check_case(Case("ConvTranspose", (R(1, 4, h, w), W(4, 3, *k)),
                     {**attrs, "group": groups, "output_padding": output_padding}))


@settings(max_examples=25, deadline=None)
@given(win=windows(), op=st.sampled_from(["MaxPool", "AveragePool"]), ceil=st.integers(0, 1),
       include=st.integers(0, 1))
def test_pool_random_geometry(win, op, ceil, include) -> None:
    attrs, (h, w) = win
    attrs = {**attrs, "ceil_mode": ceil}
    if op == "AveragePool":
        attrs.pop("dilations")
        attrs["count_include_pad"] = include
    _check_case(Case(op, (R(1, 3, h, w),), attrs))


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_slice_random(data) -> None:
    shape = (5, 6, 7)
    axes = data.draw(st.lists(st.integers(-3, 2), min_size=1, max_size=3, unique_by=lambda a: a % 3))
    starts = [data.draw(st.integers(-9, 9)) for _ in axes]
    ends = [data.draw(st.sampled_from([-9, -3, -1, 0, 2, 5, 9, 2**31])) for _ in axes]
    steps = [data.draw(st.sampled_from([-3, -1, 1, 2])) for _ in axes]
    _check_case(Case("Slice", (R(*shape), C(starts), C(ends), C(axes), C(steps))))


def test_every_supported_op_has_a_case() -> None:
    # FusedElementwise is the executor's own merged chain, not an ONNX op: tests/test_run_chains.py
    assert SUPPORTED - {c.op for c in CASES} == {"FusedElementwise"}
    assert VIEW_OPS <= SUPPORTED


def _model(nodes: list[onnx.NodeProto]) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, None)])
    return helper.make_model(graph)


def test_unsupported_counts_op_types() -> None:
    model = _model([
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("NonZero", ["a"], ["b"]),
        helper.make_node("NonZero", ["a"], ["c"]),
        helper.make_node("Foo", ["a"], ["d"], domain="com.example"),
        helper.make_node("Relu", ["a"], ["z"], domain="ai.onnx"),
    ])
    assert unsupported(model) == {"NonZero": 2, "com.example:Foo": 1}


ERRORS = [
    (Case("NonZero", (R(2, 3),)), "not supported"),
    (Case("MaxPool", (R(1, 2, 4, 4),), {"kernel_shape": [2, 2]}, outputs=2), "Indices"),
    (Case("Resize", (R(1, 1, 4, 4), C([0, 0, 0, 0, 1, 1, 1, 1], "float32"), C([1, 1, 2, 2], "float32")),
          {"coordinate_transformation_mode": "tf_crop_and_resize"}), "tf_crop_and_resize"),
    (Case("Resize", (R(1, 1, 4, 4), None, C([1, 1, 2, 2], "float32")), {"mode": "cubic"}), "cubic"),
    (Case("Resize", (R(1, 1, 4, 4), None, C([1, 1, 2, 2], "float32")), {"antialias": 1}), "antialias"),
    (Case("Pad", (R(2, 3), R(4, dtype="int64"))), "constant"),
    (Case("Slice", (R(4, 5), R(1, dtype="int64"), C([3]))), "constant"),
    (Case("BatchNormalization", (R(2, 3, 4), R(3), R(3), R(3), R(3)), {"training_mode": 1}, outputs=3),
     "training"),
    (Case("Conv", (R(1, 4, 5, 5), R(2, 4, 3, 3)), {"auto_pad": "BOGUS"}), "auto_pad"),
    (Case("Conv", (R(1, 4, 5, 5), R(2, 3, 3, 3)), {"group": 1}), "group"),
    (Case("Gelu", (R(2, 3),), {"approximate": "fast"}), "approximate"),
    (Case("Softmax", (R(2, 3),), {"axis": 4}), "axis"),
    (Case("Dropout", (R(2, 3), C(0.5, "float32"), R(dtype="bool")),), "training_mode"),
    (Case("Gather", (R(4, 5), C([7])),), "indices"),
    (Case("Cast", (R(2, 3),), {"to": onnx.TensorProto.STRING}), "string"),
]


@pytest.mark.parametrize(("case", "needle"), ERRORS, ids=[c.op + "-" + n for c, n in ERRORS])
def test_unsupported_attributes_raise_model_error(case: Case, needle: str) -> None:
    values = draw(case, seed=0)
    outs = [(1,)] * case.outputs
    proto = helper.make_node(case.op, [f"in{i}" if s else "" for i, s in enumerate(case.inputs)],
                             [f"out{k}" for k in range(case.outputs)], name="bad_node", **case.attrs)
    shapes = {f"in{i}": v.shape for i, v in enumerate(values) if v is not None}
    shapes.update({f"out{k}": s for k, s in enumerate(outs)})
    dtypes = {name: "float32" for name in shapes}
    dtypes.update({f"in{i}": v.dtype.name for i, v in enumerate(values) if v is not None})
    consts = {f"in{i}": v for i, (s, v) in enumerate(zip(case.inputs, values, strict=True)) if s and s.const}
    node = Node.from_onnx(proto, shapes, dtypes, consts, case.opset)
    with pytest.raises(ModelError) as info:
        prepare(np, node)
    message = str(info.value)
    assert "\n" not in message and "bad_node" in message and needle in message, message


def test_from_onnx_needs_static_shapes() -> None:
    proto = helper.make_node("Relu", ["x"], ["y"], name="r")
    with pytest.raises(ModelError, match="'y'"):
        Node.from_onnx(proto, {"x": (2,)}, {"x": "float32"}, {}, 18)


def test_from_onnx_decodes_attributes_and_absent_inputs() -> None:
    proto = helper.make_node("Resize", ["x", "", "s"], ["y"], name="rs", mode="linear", axes=[2, 3])
    shapes = {"x": (1, 1, 2, 2), "s": (2,), "y": (1, 1, 4, 4)}
    dtypes = {"x": "float16", "s": "float32", "y": "float16"}
    scales = np.array([2, 2], dtype=np.float32)
    node = Node.from_onnx(proto, shapes, dtypes, {"s": scales}, 18)
    assert node.attrs["mode"] == "linear" and list(node.attrs["axes"]) == [2, 3]
    assert node.input_shapes == ((1, 1, 2, 2), None, (2,)) and node.input_dtypes[1] is None
    assert node.consts[2] is scales and node.consts[0] is None
    assert node.output_dtypes == ("float16",)
