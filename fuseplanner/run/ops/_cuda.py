"""CuPy-only CUDA kernels. Each computes exactly the function of the xp-generic path it replaces
(tests/gpu/test_run_ops_gpu.py compares them with the NumPy path)."""

from __future__ import annotations

from typing import Any

import numpy as np

from fuseplanner.run.ops.geometry import Window
from fuseplanner.run.ops.node import Node

_CONV2D = r"""
const long long wo = i % Q_WO;
long long t = i / Q_WO;
const long long ho = t % Q_HO;
t /= Q_HO;
const long long oc = t % Q_COUT;
const long long n = t / Q_COUT;
const long long chan0 = n * Q_CIN + (oc / Q_MG) * Q_CG;
float acc = 0.f;
for (int ic = 0; ic < Q_CG; ++ic) {
  const long long plane = (chan0 + ic) * Q_H;
  const float* wk = &w[(oc * Q_CG + ic) * (Q_KH * Q_KW)];
  for (int kh = 0; kh < Q_KH; ++kh) {
    const long long ih = ho * Q_SH - Q_PT + kh * Q_DH;
    if (ih < 0 || ih >= Q_H) continue;
    for (int kw = 0; kw < Q_KW; ++kw) {
      const long long iw = wo * Q_SW - Q_PL + kw * Q_DW;
      if (iw < 0 || iw >= Q_W) continue;
      acc += (float)x[(plane + ih) * Q_W + iw] * wk[kh * Q_KW + kw];
    }
  }
}
if (Q_HAS_BIAS) acc += b[oc];
y = (T)acc;
"""


def conv2d(cp: Any, node: Node, win: Window, groups: int):
    """2-D Conv (grouped, depthwise and channel-multiplier included) as one elementwise kernel over
    output elements: y[n, oc, ho, wo] = sum over the group's input channels ic and in-bounds taps of
    x[n, (oc // MG) * CG + ic, ih, iw] * w[oc, ic, kh, kw] (+ b[oc]), summed in float32 (MG output and
    CG input channels per group) — the function of conv's tap loop and im2col paths, without a padded copy."""
    n, c, h, w = node.in_shape
    cout = node.out_shape[1]
    defines = {"WO": win.out[1], "HO": win.out[0], "CIN": c, "COUT": cout, "CG": c // groups, "MG": cout // groups,
               "H": h, "W": w, "KH": win.kernel[0], "KW": win.kernel[1], "SH": win.strides[0], "SW": win.strides[1],
               "DH": win.dilations[0], "DW": win.dilations[1], "PT": win.begin[0], "PL": win.begin[1],
               "HAS_BIAS": int(node.has_input(2))}  # fmt: skip
    preamble = "".join(f"#define Q_{k} {v}\n" for k, v in defines.items())
    kern = cp.ElementwiseKernel("raw T x, raw float32 w, raw float32 b", "T y", _CONV2D, "fuseplanner_conv2d",
                                preamble=preamble)
    const_w, const_b = node.const(1), node.const(2)
    w_dev = None if const_w is None else cp.asarray(const_w.astype(np.float32).reshape(-1))
    b_dev = None if const_b is None else cp.asarray(const_b.astype(np.float32).reshape(-1))

    def kernel(ins, outs):
        wt = w_dev if w_dev is not None else ins[1].astype(np.float32).reshape(-1)
        bias = b_dev if b_dev is not None else (ins[2].astype(np.float32) if node.has_input(2) else wt)
        kern(cp.ascontiguousarray(ins[0]).reshape(-1), wt, bias, outs[0])  # 1-D: raw indexing without unravelling

    return kernel
