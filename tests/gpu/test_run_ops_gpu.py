"""The executor's operator library on CuPy against its NumPy path (tests/test_run_ops.py checks NumPy
against onnxruntime), over every case of tests/run_op_cases.py in float32 and float16.

Outputs are poisoned with NaN (floats) or a sentinel before each run. This is the only test of the
CuPy-specific code: the 2-D depthwise Conv CUDA kernel, cupyx's erf (Erf, Gelu) and cuBLAS float16
GEMMs (MatMul, Gemm, Conv, ConvTranspose). A second test captures each kernel into a CUDA graph
(stream-ordered allocator) and replays it: a kernel that synchronises with the host cannot be captured.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

cp = pytest.importorskip("cupy", reason="CuPy is not installed: GPU kernel tests need a CUDA machine")
if not cp.cuda.is_available():
    pytest.skip("no CUDA device visible: GPU kernel tests skipped", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from run_op_cases import all_cases, draw, halve, node_for, reference  # noqa: E402

from fuseplanner.run.ops import prepare  # noqa: E402

CASES = all_cases()
HALF = [c for c in CASES if c.half and any(s is not None and s.half and s.dtype == "float32" for s in c.inputs)]
TOL = {"float32": 1e-5, "float16": 2e-3}


def _poison(shape, dtype, xp):
    dt = np.dtype(dtype)
    fill = np.nan if dt.kind == "f" else (True if dt.kind == "b" else 77)
    return xp.full(shape, fill, dtype=dt)


def _run(xp, node, values):
    kernel = prepare(xp, node)
    ins = [None if v is None else xp.asarray(v) for v in values]
    outs = [_poison(s, d, xp) for s, d in zip(node.output_shapes, node.output_dtypes, strict=True)]
    kernel(ins, outs)
    return kernel, ins, outs


def _compare(gpu, host, tol, label, scale=0.0):
    """Max |gpu - host| over the larger of the output's largest magnitude and `scale` (for products: the
    largest sum of |terms|, since summation order alone moves a sum that cancels by that much)."""
    got = cp.asnumpy(gpu)
    assert got.shape == host.shape and got.dtype == host.dtype, label
    if host.dtype.kind != "f":
        np.testing.assert_array_equal(got, host, err_msg=label)
        return
    assert np.isfinite(got).all() or not np.isfinite(host).all(), f"{label}: unwritten elements"
    scale = max(float(np.abs(host.astype(np.float64)).max(initial=0.0)), scale, 1e-30)
    err = float(np.abs(got.astype(np.float64) - host).max(initial=0.0)) / scale
    assert err <= tol, f"{label}: CuPy vs NumPy max error {err:.2e} of the largest magnitude"


def _check(case, half):
    values = draw(case, seed=11)
    lib_values, ref_values = halve(case, values) if half else (values, values)
    node = node_for(case, lib_values, reference(case, ref_values), half=half)
    _, _, host = _run(np, node, lib_values)
    _, _, gpu = _run(cp, node, lib_values)
    terms = 0.0
    if case.op == "MatMul":  # a dot product's terms: |a| @ |b|
        a, b = (np.abs(np.asarray(v, dtype=np.float64)) for v in lib_values[:2])
        terms = float(np.max(np.matmul(a, b), initial=0.0))
    for i, (g, h) in enumerate(zip(gpu, host, strict=True)):
        _compare(g, h, TOL["float16" if half else "float32"], f"{case.id} output {i}", terms)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_cupy_matches_numpy(case):
    _check(case, half=False)


@pytest.mark.parametrize("case", HALF, ids=[c.id for c in HALF])
def test_cupy_matches_numpy_float16(case):
    _check(case, half=True)


@pytest.fixture
def async_allocator():
    previous = cp.cuda.get_allocator()
    cp.cuda.set_allocator(cp.cuda.MemoryAsyncPool().malloc)
    yield
    cp.cuda.set_allocator(previous)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_kernel_captures_into_cuda_graph(case, async_allocator):
    values = draw(case, seed=5)
    node = node_for(case, values, reference(case, values))
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        kernel, ins, outs = _run(cp, node, values)  # warm-up: compiles, uploads, plans cuBLAS
        expected = [o.copy() for o in outs]
        for o in outs:
            o.fill(np.nan if o.dtype.kind == "f" else 0)
        stream.begin_capture()
        kernel(ins, outs)
        graph = stream.end_capture()
        graph.launch(stream)
    stream.synchronize()
    for i, (o, e) in enumerate(zip(outs, expected, strict=True)):
        _compare(o, cp.asnumpy(e), 0.0, f"{case.id} graph replay output {i}")
