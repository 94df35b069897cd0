"""The float64 reference against direct loops (convolution) and hand-computed epilogues."""

from __future__ import annotations

import numpy as np
import pytest

from fuseplanner.core.errors import PlanError
from fuseplanner.core.ir import Op
from fuseplanner.validation.reference import random_input, random_params, reference


def _op(kind, c_in, c_out, h, w, k, s, pads, d, groups, epi=()):
    return Op(name="t", op_type="Conv", kind=kind, index=0, inputs=("x",), outputs=("y",),
              input_shapes=((2, c_in, h, w),), output_shapes=((2, c_out, 1, 1),), kernel=(k, k), stride=(s, s),
              pads=pads, dilation=(d, d), groups=groups, epilogue=epi)


def _naive(x, w, op):
    n, c, h, wd = x.shape
    (kh, kw), (sh, sw), (dh, dw) = op.kernel, op.stride, op.dilation
    pt, pl, pb, pr = op.pads
    co, cig = w.shape[0], c // op.groups
    ho, wo = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1, (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, co, ho, wo))
    for o in range(co):
        g = o // (co // op.groups)
        for y in range(ho):
            for xx in range(wo):
                for ci in range(cig):
                    for ky in range(kh):
                        for kx in range(kw):
                            iy, ix = y * sh - pt + ky * dh, xx * sw - pl + kx * dw
                            if 0 <= iy < h and 0 <= ix < wd:
                                out[:, o, y, xx] += x[:, g * cig + ci, iy, ix] * w[o, ci, ky, kx]
    return out


@pytest.mark.parametrize("kind,c_in,c_out,k,s,pads,d,groups", [
    ("dw", 6, 6, 3, 2, (1, 1, 1, 1), 1, 6),
    ("dw", 4, 4, 5, 1, (2, 1, 3, 2), 1, 4),
    ("conv", 4, 6, 3, 1, (2, 2, 2, 2), 2, 2),
    ("pw", 5, 7, 1, 2, (0, 0, 0, 0), 1, 1),
])
def test_conv_matches_direct_loops(kind, c_in, c_out, k, s, pads, d, groups):
    rng = np.random.default_rng(7)
    op = _op(kind, c_in, c_out, 9, 11, k, s, pads, d, groups)
    x = rng.standard_normal((2, c_in, 9, 11))
    w = rng.standard_normal((c_out, c_in // groups, k, k))
    got = reference(kind if kind != "conv" else "pw", [op], x, [(w, None)])
    np.testing.assert_allclose(got, _naive(x, w, op), rtol=1e-12, atol=1e-12)


def test_epilogue_order_bias_activation_residual():
    # 1x1 conv with weight 1: y = relu6(x + b) + r; x = 5, b = 2 -> relu6(7) = 6, + r (10) = 16
    op = _op("pw", 1, 1, 1, 1, 1, 1, (0, 0, 0, 0), 1, 1, ("bias", "relu6", "add"))
    x = np.full((1, 1, 1, 1), 5.0)
    got = reference("pw", [op], x, [(np.ones((1, 1, 1, 1)), np.array([2.0]))], residual=np.full((1, 1, 1, 1), 10.0))
    assert got.item() == 16.0


def test_linear_gelu_and_unknown_epilogue():
    op = Op(name="fc", op_type="Gemm", kind="linear", index=0, inputs=("x",), outputs=("y",),
            input_shapes=((3, 4),), output_shapes=((3, 2),), epilogue=("gelu",))
    x = np.array([[1.0, 0.0, 0.0, 0.0]] * 3)
    w = np.array([[1.0, 0, 0, 0], [-1.0, 0, 0, 0]])
    got = reference("linear", [op], x, [(w, None)])
    # gelu(1) = 0.5 * (1 + erf(1/sqrt 2)) = 0.841344746; gelu(-1) = -0.158655254
    np.testing.assert_allclose(got[0], [0.8413447460685429, -0.15865525393145707], rtol=1e-12)
    bad = Op(**{**op.__dict__, "epilogue": ("swish2",)})
    with pytest.raises(PlanError):
        reference("linear", [bad], x, [(w, None)])


def test_random_helpers_shapes_and_scale():
    rng = np.random.default_rng(0)
    op = _op("dw", 32, 32, 14, 14, 3, 1, (1, 1, 1, 1), 1, 32)
    (w, b), = random_params([op], rng)
    assert w.shape == (32, 1, 3, 3) and w.dtype == np.float32 and b.shape == (32,)
    assert 0.28 < w.std() < 0.39  # 1/sqrt(fan_in) = 1/sqrt(9) = 0.333; 288 samples: +-0.014 per sigma
    assert random_input(op, 5, rng).shape == (5, 32, 14, 14)
