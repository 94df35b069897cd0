"""Launcher of the depthwise kernel (dw.cu beside this module).

`prepare_dw` checks the arrays, picks the kernel variant for the tile (rows per item, vector width)
and returns a `Launch` that runs the kernel when called; `run_dw` prepares and runs. The tile itself
must already have passed `tiles.check` (`fuseplanner.kernels.run` does that).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fuseplanner.core.errors import PlanError
from fuseplanner.core.ir import Op, Tile, dtype_bytes
from fuseplanner.kernels import _build, tiles
from fuseplanner.kernels._common import (
    Launch,
    bias_as,
    check_array,
    check_precision,
    conv_out_hw,
    dtype_defines,
    epilogue_defines,
    i32,
    null_ptr,
    output_array,
    vector_elems,
    weight_as,
)
from fuseplanner.kernels.families.dw import DW


def prepare_dw(ops: Sequence[Op], tile: Tile, x, params, *, dtype: str = "fp32", precision: str = "fp32",
               residual=None, out=None) -> Launch:
    """Prepare a depthwise convolution (channel multiplier 1) of NCHW `x` with `tile`."""
    cp = _build.require_device()
    check_precision(dtype, precision)
    (op,) = ops
    if op.kind != "dw" or op.groups != op.c_in or op.c_out != op.c_in:
        raise PlanError(f"op {op.name} is not a depthwise convolution with channel multiplier 1")
    if x.ndim != 4:
        raise PlanError(f"dw input must be NCHW, got shape {tuple(x.shape)}")
    n, c, h, w = x.shape
    x = check_array(cp, x, (n, op.c_in, h, w), dtype, "x")
    ho, wo = conv_out_hw(op, h, w)
    if (ho, wo) != tuple(op.hw_out):
        raise PlanError(f"op {op.name}: input {h}x{w} gives a {ho}x{wo} output, the op says {op.hw_out}")
    (kh, kw), (sh, sw), (dh, dwl) = op.kernel, op.stride, op.dilation
    wt, b = params[0]
    wt = weight_as(cp, wt, (c, kh * kw), None, f"{op.name} weight")
    b = bias_as(cp, b, c, f"{op.name} bias")
    shape = (n, c, ho, wo)
    out = output_array(cp, out, shape, dtype)
    if residual is not None:
        residual = check_array(cp, residual, shape, dtype, "residual")
    th, tw, tf, threads = tile.th, tile.tw, tile.tf, tile.threads
    v = tiles.dw_lbl_rows_per_item(tf, th, tw, threads)
    e = dtype_bytes(dtype)
    vec = vector_elems(x.data.ptr, dtype, lambda u: 1 < u <= tiles.dw_vector_elems(w, e))
    defines = {
        **dtype_defines(dtype),
        **epilogue_defines(op, b is not None, residual is not None),
        "TH": th, "TW": tw, "TF": tf, "THREADS": threads, "KH": kh, "KW": kw, "SH": sh, "SW": sw,
        "PAD_T": op.pads[0], "PAD_L": op.pads[1], "DIL_H": dh, "DIL_W": dwl, "V": v, "VEC": max(vec, 1),
        "LDX": tiles.dw_row_stride(ops, tw, e),
    }
    kernel = _build.compile_kernel(*DW.source("dw"), defines)
    tiles_w = math.ceil(wo / tw)
    grid = (math.ceil(ho / th) * tiles_w, math.ceil(c / tf), n)
    nul = null_ptr(cp)
    args = (x, wt, b if b is not None else nul, residual if residual is not None else nul, out,
            *i32(c, h, w, ho, wo, tiles_w))
    smem = tiles.smem_bytes("dw", ops, tile, dtype)
    return Launch(kernel, grid, threads, smem, args, out, defines, (x, wt, b, residual))


def run_dw(ops, tile, x, params, *, dtype="fp32", precision="fp32", residual=None, out=None):
    """Run a depthwise layer; returns the output array (NCHW)."""
    return prepare_dw(ops, tile, x, params, dtype=dtype, precision=precision, residual=residual, out=out)()
