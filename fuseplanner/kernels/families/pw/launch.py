"""Launcher of the pointwise and linear kernel (pw.cu beside this module).

`prepare_pw` / `prepare_linear` check the arrays, pick the kernel variant for the tile (vector widths,
math path, thread mapping) and return a `Launch` that runs the kernel when called; `run_*` prepares
and runs. The tile itself must already have passed `tiles.check` (`fuseplanner.kernels.run` does that).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fuseplanner.core.errors import PlanError
from fuseplanner.core.ir import Op, Tile, dtype_bytes
from fuseplanner.core.tf32 import tf32_rounded
from fuseplanner.costbase.work import cdiv
from fuseplanner.kernels import _build, tiles
from fuseplanner.kernels._common import (
    Launch,
    bias_as,
    check_array,
    check_precision,
    conv_out_hw,
    device_props,
    dtype_defines,
    epilogue_defines,
    i32,
    linear_dims,
    null_ptr,
    output_array,
    vector_elems,
    weight_as,
)
from fuseplanner.kernels.families.pw import PW


def _pw_shapes(op: Op, kind: str, x) -> tuple[int, int, int, int, int, int, tuple, tuple]:
    """(N, C_in, H, W, Ho, Wo, x shape, out shape) of a pw/linear op applied to `x`."""
    if kind == "linear":
        n, s, c = linear_dims(x.shape)
        out_shape = (*x.shape[:-1], op.c_out)
        return n, c, s, 1, s, 1, tuple(x.shape), out_shape
    if x.ndim != 4:
        raise PlanError(f"pw input must be NCHW, got shape {tuple(x.shape)}")
    n, c, h, w = x.shape
    ho, wo = conv_out_hw(op, h, w)
    if (ho, wo) != tuple(op.hw_out):
        raise PlanError(f"op {op.name}: input {h}x{w} gives a {ho}x{wo} output, the op says {op.hw_out}")
    return n, c, h, w, ho, wo, (n, op.c_in, h, w), (n, op.c_out, ho, wo)


def _check_pw_offsets(name: str, tile: Tile, cl: bool, c_in, h, w, c_out, ho, wo, sh, sw) -> None:
    """pw.cu's chunk copies address a weight matrix or one image with 32-bit element offsets,
    including the rows and columns of the last (partial) tile: refuse shapes whose largest offset does
    not fit, before launch."""
    k_pad = cdiv(c_in, tile.tc) * tile.tc
    largest = {
        "the weight matrix": cdiv(c_out, tile.tf) * tile.tf * c_in + k_pad,
        "one image": cdiv(ho, tile.th * tile.tw) * tile.th * tile.tw * c_in + k_pad if cl
        else k_pad * h * w + cdiv(ho, tile.th) * tile.th * sh * w + cdiv(wo, tile.tw) * tile.tw * sw,
    }
    for what, elems in largest.items():
        if elems >= 2**31:
            raise PlanError(f"op {name}: {what} needs element offsets up to {elems}, past the pw kernel's 32-bit offsets")


def prepare_pw(ops: Sequence[Op], tile: Tile, x, params, *, dtype: str = "fp32", precision: str = "fp32",
               residual=None, out=None, kind: str = "pw") -> Launch:
    """Prepare a 1x1 convolution (NCHW) or, with kind="linear", a linear layer over channel-last tokens."""
    cp = _build.require_device()
    check_precision(dtype, precision)
    (op,) = ops
    if kind == "pw" and (op.kind != "pw" or op.groups != 1 or tuple(op.kernel) != (1, 1) or any(op.pads)):
        raise PlanError(f"op {op.name} is not an unpadded 1x1 convolution with groups=1")
    if kind == "linear" and op.kind != "linear":
        raise PlanError(f"op {op.name} is a {op.kind} op, not linear")
    n, c_in, h, w, ho, wo, xshape, oshape = _pw_shapes(op, kind, x)
    if c_in != op.c_in:
        raise PlanError(f"x has {c_in} channels, op {op.name} expects {op.c_in}")
    if kind == "linear" and ho != op.hw_out[0]:
        raise PlanError(f"x has {ho} tokens per sequence, op {op.name} expects {op.hw_out[0]}")
    x = check_array(cp, x, xshape, dtype, "x")
    c_out = op.c_out
    wt, b = params[0]
    wt = weight_as(cp, wt, (c_out, c_in), dtype, f"{op.name} weight")
    variant = tiles.pw_variant(tile, dtype, precision, kind, wo, c_in)
    if variant["USE_TC"] == 1:  # the TF32 path feeds the weights' bits to the tensor cores as they are
        wt = tf32_rounded(cp, wt)
    b = bias_as(cp, b, c_out, f"{op.name} bias")
    out = output_array(cp, out, oshape, dtype)
    if residual is not None:
        residual = check_array(cp, residual, oshape, dtype, "residual")
    th, tw, tf, tc, threads = tile.th, tile.tw, tile.tf, tile.tc, tile.threads
    sh, sw = (1, 1) if kind == "linear" else op.stride
    cl = kind == "linear"
    _check_pw_offsets(op.name, tile, cl, c_in, h, w, c_out, ho, wo, sh, sw)
    e = dtype_bytes(dtype)
    kpad = tiles.PW_KPAD_BYTES // e
    stages = tiles.pw_stages(kind, tile, dtype)
    split = tiles.cluster_split(kind, ops, tile, n, device_props(cp), dtype)
    xs_off = stages * tf * (tc + kpad) * e  # byte offset of the X stages (pw.cu)
    xld = tc + kpad if cl else th * tw + tiles.PW_XPAD
    wu = vector_elems(wt.data.ptr, dtype, lambda u: c_in % u == 0 and tc % u == 0)
    if cl:
        xu = vector_elems(x.data.ptr, dtype, lambda u: c_in % u == 0 and tc % u == 0 and xs_off % (u * e) == 0)
    else:
        xu = vector_elems(
            x.data.ptr, dtype,
            lambda u: u == 1 or (sw == 1 and tw % u == 0 and w % u == 0 and xld % u == 0 and xs_off % (u * e) == 0),
        )
    defines = {
        **dtype_defines(dtype),
        **epilogue_defines(op, b is not None, residual is not None),
        **variant,
        "TH": th, "TW": tw, "TF": tf, "TC": tc, "THREADS": threads, "SH": sh, "SW": sw, "CL": int(cl),
        "XU": xu, "WU": wu, "STAGES": stages, "KS": split,
    }
    kernel = _build.compile_kernel(*PW.source(kind), defines)
    tiles_w = math.ceil(wo / tw)
    grid = (math.ceil(ho / th) * tiles_w * split, math.ceil(c_out / tf), n)
    nul = null_ptr(cp)
    args = (x, wt, b if b is not None else nul, residual if residual is not None else nul, out,
            *i32(c_in, h, w, c_out, ho, wo, tiles_w))
    smem = tiles.smem_bytes(kind, ops, tile, dtype)
    return Launch(kernel, grid, threads, smem, args, out, defines, (x, wt, b, residual))


def prepare_linear(ops, tile, x, params, **kw) -> Launch:
    """Prepare a linear layer over channel-last tokens (x: (..., C_in))."""
    return prepare_pw(ops, tile, x, params, kind="linear", **kw)


def run_pw(ops, tile, x, params, *, dtype="fp32", precision="fp32", residual=None, out=None):
    """Run a 1x1 convolution layer; returns the output array (NCHW)."""
    return prepare_pw(ops, tile, x, params, dtype=dtype, precision=precision, residual=residual, out=out)()


def run_linear(ops, tile, x, params, *, dtype="fp32", precision="fp32", residual=None, out=None):
    """Run a linear layer over channel-last tokens; returns (..., C_out)."""
    return prepare_linear(ops, tile, x, params, dtype=dtype, precision=precision, residual=residual, out=out)()
