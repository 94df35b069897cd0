"""CuPy-only CUDA kernels. Each computes exactly the function of the xp-generic path it replaces
(tests/gpu/test_run_ops_gpu.py compares them with the NumPy path)."""

from __future__ import annotations

from typing import Any

import numpy as np

from fuseplanner.run.ops.geometry import Window
from fuseplanner.run.ops.node import Node

_DW2D = r"""
const long long wo = i % Q_WO;
long long t = i / Q_WO;
const long long ho = t % Q_HO;
t /= Q_HO;
const long long oc = t % (Q_CIN * Q_MULT);
const long long n = t / (Q_CIN * Q_MULT);
const long long base = (n * Q_CIN + oc / Q_MULT) * Q_H;
float acc = 0.f;
for (int kh = 0; kh < Q_KH; ++kh) {
  const long long ih = ho * Q_SH - Q_PT + kh * Q_DH;
  if (ih < 0 || ih >= Q_H) continue;
  for (int kw = 0; kw < Q_KW; ++kw) {
    const long long iw = wo * Q_SW - Q_PL + kw * Q_DW;
    if (iw < 0 || iw >= Q_W) continue;
    acc += (float)x[(base + ih) * Q_W + iw] * w[(oc * Q_KH + kh) * Q_KW + kw];
  }
}
if (Q_HAS_BIAS) acc += b[oc];
y = (T)acc;
"""


def depthwise2d(cp: Any, node: Node, win: Window):
    """2-D depthwise (and channel-multiplier) Conv as one elementwise kernel over output elements:
    y[n, oc, ho, wo] = sum over in-bounds taps of x[n, oc // MULT, ih, iw] * w[oc, 0, kh, kw] (+ b[oc]),
    summed in float32 — the same function as conv._depthwise's tap loop, without the padded copy."""
    n, c, h, w = node.in_shape
    m = node.out_shape[1] // c
    defines = {"WO": win.out[1], "HO": win.out[0], "CIN": c, "MULT": m, "H": h, "W": w,
               "KH": win.kernel[0], "KW": win.kernel[1], "SH": win.strides[0], "SW": win.strides[1],
               "DH": win.dilations[0], "DW": win.dilations[1], "PT": win.begin[0], "PL": win.begin[1],
               "HAS_BIAS": int(node.has_input(2))}
    preamble = "".join(f"#define Q_{k} {v}\n" for k, v in defines.items())
    kern = cp.ElementwiseKernel("raw T x, raw float32 w, raw float32 b", "T y", _DW2D, "fuseplanner_dw2d",
                                preamble=preamble)
    const_w, const_b = node.const(1), node.const(2)
    w_dev = None if const_w is None else cp.asarray(const_w.astype(np.float32).reshape(-1))
    b_dev = None if const_b is None else cp.asarray(const_b.astype(np.float32).reshape(-1))

    def kernel(ins, outs):
        wt = w_dev if w_dev is not None else ins[1].astype(np.float32).reshape(-1)
        bias = b_dev if b_dev is not None else (ins[2].astype(np.float32) if node.has_input(2) else wt)
        kern(cp.ascontiguousarray(ins[0]), wt, bias, outs[0])

    return kernel
