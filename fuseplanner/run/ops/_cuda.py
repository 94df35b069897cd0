"""CuPy-only CUDA kernels. Each computes exactly the function of the xp-generic path it replaces
(tests/gpu/test_run_ops_gpu.py compares them with the NumPy path)."""

from __future__ import annotations

from typing import Any

import numpy as np

from fuseplanner.run.ops.geometry import Window
from fuseplanner.run.ops.node import Node

_CONV2D = r"""
extern "C" __global__ void __launch_bounds__(256) fp_conv2d(const TX* __restrict__ x, const float* __restrict__ w,
                                                            const float* __restrict__ b, TY* __restrict__ y) {
    const IDX i = (IDX)blockIdx.x * 256 + threadIdx.x;
    if (i >= TOTAL) return;
    const int wo = (int)(i % WO);
    IDX t = i / WO;
    const int ho = (int)(t % HO);
    t /= HO;
    const int oc = (int)(t % COUT);
    const IDX n = t / COUT;
    const IDX base = (n * CIN + (IDX)(oc / MG) * CG) * (IDX)(H * W);
    const float* wk = w + (IDX)oc * (CG * KH * KW);
    const int ih0 = ho * SH - PT, iw0 = wo * SW - PL;
    float acc = 0.f;
    for (int ic = 0; ic < CG; ++ic) {
        #pragma unroll
        for (int kh = 0; kh < KH; ++kh) {
            const int ih = ih0 + kh * DH;
            if (ih < 0 || ih >= H) continue;
            #pragma unroll
            for (int kw = 0; kw < KW; ++kw) {
                const int iw = iw0 + kw * DW;
                if (iw < 0 || iw >= W) continue;
                acc += ld(x, base + (IDX)(ic * H + ih) * W + iw) * __ldg(wk + (ic * KH + kh) * KW + kw);
            }
        }
    }
    if (HAS_BIAS) acc += __ldg(b + oc);
    st(y, i, acc);
}
"""


def conv2d(cp: Any, node: Node, win: Window, groups: int):
    """2-D Conv (grouped, depthwise and channel-multiplier included) as one RawKernel, one thread per
    output element (32-bit index arithmetic where the sizes allow, taps unrolled): y[n, oc, ho, wo] = sum
    over the group's input channels ic and in-bounds taps of x[n, (oc // MG) * CG + ic, ih, iw] *
    w[oc, ic, kh, kw] (+ b[oc]), summed in float32 (MG output and CG input channels per group): the
    function of conv's tap loop and im2col paths, without a padded copy."""
    from fuseplanner.run.ops._gemm import raw_kernel, type_name

    n, c, h, w = node.in_shape
    cout = node.out_shape[1]
    total = n * cout * win.out[0] * win.out[1]
    defines = {"WO": win.out[1], "HO": win.out[0], "CIN": c, "COUT": cout, "CG": c // groups, "MG": cout // groups,
               "H": h, "W": w, "KH": win.kernel[0], "KW": win.kernel[1], "SH": win.strides[0], "SW": win.strides[1],
               "DH": win.dilations[0], "DW": win.dilations[1], "PT": win.begin[0], "PL": win.begin[1],
               "HAS_BIAS": int(node.has_input(2)), "TOTAL": f"{total}LL",
               "IDX": "int" if total * max(c, cout) < 2**31 and n * c * h * w < 2**31 else "long long",
               "TX": type_name(node.input_dtypes[0]), "TY": type_name(node.output_dtypes[0])}  # fmt: skip
    kern = raw_kernel("fp_conv2d", _CONV2D, defines)
    grid = ((total + 255) // 256, 1, 1)
    const_w, const_b = node.const(1), node.const(2)
    w_dev = None if const_w is None else cp.asarray(const_w.astype(np.float32).reshape(-1))
    b_dev = None if const_b is None else cp.asarray(const_b.astype(np.float32).reshape(-1))

    def kernel(ins, outs):
        wt = w_dev if w_dev is not None else cp.ascontiguousarray(ins[1], dtype=np.float32).reshape(-1)
        bias = b_dev if b_dev is not None else (cp.ascontiguousarray(ins[2], dtype=np.float32) if node.has_input(2)
                                                else wt)  # fmt: skip
        kern(grid, (256, 1, 1), (cp.ascontiguousarray(ins[0]), wt, bias, outs[0]))

    return kernel
