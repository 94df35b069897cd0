"""TF32 emulation of the float64 reference (`validation.reference.tf32_round`, `precision="tf32"`), which
the CPU executor uses for `--device cpu --precision tf32`."""

from __future__ import annotations

import numpy as np
import pytest

from fuseplanner.validation.reference import tf32_round


def test_tf32_round_by_hand():
    # TF32 keeps 10 mantissa bits: the spacing above 1 is 2^-10. 1 + 2^-11 is a tie: away from zero
    # (cvt.rna) gives 1 + 2^-10; 1 + 2^-12 is below the tie: 1; 1 + 3 * 2^-12 is above it: 1 + 2^-10.
    x = np.array([1 + 2**-11, 1 + 2**-12, 1 + 3 * 2**-12, -(1 + 2**-11), 1 + 2**-10, 0.0], dtype=np.float32)
    assert tf32_round(x).tolist() == [1 + 2**-10, 1.0, 1 + 2**-10, -(1 + 2**-10), 1 + 2**-10, 0.0]


def test_tf32_rounded_carries_into_the_exponent_and_keeps_float32():
    # `core.tf32.tf32_rounded`, the one definition the launchers (CuPy) and the reference share: the
    # largest float32 below 2 (mantissa all ones) rounds up to 2.0, its carry moving into the exponent;
    # 3 * 2^-130 (subnormal) keeps its top bits; the result stays float32
    from fuseplanner.core.tf32 import tf32_rounded

    below_two = np.nextafter(np.float32(2), np.float32(0))
    got = tf32_rounded(np, np.array([below_two, -below_two, 3 * 2.0**-130], dtype=np.float32))
    assert got.dtype == np.float32
    assert got.tolist() == [2.0, -2.0, 3 * 2.0**-130]


def test_cpu_executor_tf32_rounds_pointwise_operands():
    """MobileNetV2 on the CPU executor: TF32 operands move the output away from exact fp32 (by far more
    than fp32 rounding, 2^-24) and stay within the TF32 tolerance against onnxruntime."""
    pytest.importorskip("onnxruntime")
    import fuseplanner
    from fuseplanner.hw.spec import gpu
    from fuseplanner.run.check import check, relative_error

    exact = fuseplanner.compile("mobilenet_v2", gpu("h100"), device="cpu")
    tf32 = fuseplanner.compile("mobilenet_v2", gpu("h100"), device="cpu", precision="tf32")
    x = {n: np.random.default_rng(3).standard_normal(s.shape).astype(np.float32)
         for n, s in zip(exact.input_names, exact.program.inputs, strict=True)}  # fmt: skip
    a, b = exact(x), tf32(x)
    name = next(iter(a))
    assert relative_error(b[name], a[name]) > 1e-5
    res = check(tf32, fuseplanner.run.compiled.onnx_model("mobilenet_v2"), x)
    assert res.ok and res.error > 1e-5
