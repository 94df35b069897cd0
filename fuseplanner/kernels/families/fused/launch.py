"""Launchers of the fused kernels: PW->DW, DW->PW, PW->PW (also linear->act->linear) and PW->DW->PW
(fused_<kind>.cu beside this module).

Each `prepare_<kind>` checks the arrays against the member ops, derives the kernel's compile-time
configuration from the tile (layout per `fuseplanner.kernels.tiles`, the GEMM back end from dtype and
precision, the per-thread or per-warp work split) and returns a `Launch`; `run_<kind>` prepares and
runs. The tile must already have passed `tiles.check` (`fuseplanner.kernels.run` does that).

Back ends (define PREC): 0 exact fp32 FMA (fp32, precision "fp32"), 1 TF32 tensor cores (fp32,
precision "tf32"), 2 fp16 tensor cores with fp32 accumulation (fp16 storage). PW weights are packed by
the launcher in the storage dtype (`pack_pw_weights`, TF32-rounded for "tf32") and copied to shared
memory as they are; DW weights and all biases stay float32.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fuseplanner.core.errors import PlanError
from fuseplanner.core.ir import Op, Tile, math_mode
from fuseplanner.core.tf32 import tf32_rounded
from fuseplanner.kernels import _build, tiles
from fuseplanner.kernels._common import (
    ACT_CODES,
    Launch,
    activation,
    bias_as,
    check_array,
    check_precision,
    conv_out_hw,
    device_props,
    dtype_defines,
    i32,
    linear_dims,
    null_ptr,
    output_array,
    weight_as,
)
from fuseplanner.kernels.families.fused import FUSED
from fuseplanner.kernels.tiles import fma_group, mma_group


def _rup(a: int, b: int) -> int:
    return -(-a // b) * b


def precision_code(dtype: str, precision: str) -> int:
    """PREC define: 0 exact fp32 FMA, 1 TF32 tensor cores, 2 fp16 tensor cores."""
    check_precision(dtype, precision)
    return math_mode(dtype, precision)


def gemm_defines(prefix: str, m: int, n: int, mp: int, np_: int, threads: int, prec: int,
                 resident: bool) -> dict[str, int]:
    """G<prefix>M/N and ME/NE<prefix> defines for a block GEMM of real extents m x n whose shared
    buffers are padded to mp (multiple of 16) x np_ (multiple of 8)."""
    if prec == 0:
        gm, gn, me, ne = fma_group(m, n, threads, resident)
    else:
        gm, gn, me, ne = mma_group(mp, np_, threads // 32, resident)
    return {f"G{prefix}M": gm, f"G{prefix}N": gn, f"ME{prefix}": me, f"NE{prefix}": ne}


def _act(op: Op) -> int:
    a = activation(op)
    return ACT_CODES[a] if a else 0


def _geometry_defines(dw: Op) -> dict[str, int]:
    (kh, kw), (sh, sw), (dh, dwl) = dw.kernel, dw.stride, dw.dilation
    return {"KH": kh, "KW": kw, "SH": sh, "SW": sw, "DLH": dh, "DLW": dwl}


def _nchw(x, what: str = "x") -> tuple[int, int, int, int]:
    if x.ndim != 4:
        raise PlanError(f"{what} must be NCHW, got shape {tuple(x.shape)}")
    n, c, h, w = (int(s) for s in x.shape)
    if c * h * w >= 2**31:
        raise PlanError(f"{what}: one image of {c}x{h}x{w} elements is too large for the kernels' 32-bit offsets")
    return n, c, h, w


def _expect(ops: Sequence[Op], kinds: Sequence[str], name: str) -> None:
    got = tuple(o.kind for o in ops)
    if len(ops) != len(kinds) or any(g not in (k, "linear" if k == "pw" else k) for g, k in zip(got, kinds, strict=False)):
        raise PlanError(f"{name} takes ops of kinds {'->'.join(kinds)}, got {'->'.join(got) or 'none'}")
    for a, b in zip(ops, ops[1:], strict=False):
        if a.c_out != b.c_in:
            raise PlanError(f"op {a.name} gives {a.c_out} channels but {b.name} takes {b.c_in}")


def _dw_checked(op: Op, h: int, w: int) -> tuple[int, int]:
    if op.multiplier != 1 or op.c_out != op.c_in:
        raise PlanError(f"op {op.name} is not a depthwise convolution with channel multiplier 1")
    ho, wo = conv_out_hw(op, h, w)
    if (ho, wo) != tuple(op.hw_out):
        raise PlanError(f"op {op.name}: input {h}x{w} gives a {ho}x{wo} output, the op says {op.hw_out}")
    return ho, wo


def _pw_checked(op: Op) -> None:
    if op.kind == "pw" and (tuple(op.stride) != (1, 1) or any(op.pads) or tuple(op.kernel) != (1, 1)):
        raise PlanError(f"op {op.name}: fused kernels need stride-1 unpadded 1x1 pointwise members")


def _launch(kind: str, ops, tile: Tile, dtype: str, precision: str, biases: Sequence[bool], residual,
            grid: tuple[int, int, int], args: tuple, out, keep: tuple, **extra) -> Launch:
    defines = kernel_defines(kind, ops, tile, dtype, precision, biases, residual is not None, **extra)
    source, name = SOURCES[kind]
    kernel = _build.compile_kernel(source, name, defines)
    return Launch(kernel, grid, tile.threads, defines["SMEM_TOTAL"], args, out, defines, keep)


def _res(cp, residual, shape, dtype):
    return None if residual is None else check_array(cp, residual, shape, dtype, "residual")


SOURCES = {kind: FUSED.source(kind) for kind in FUSED.kinds}


def kernel_defines(kind: str, ops: Sequence[Op], tile: Tile, dtype: str, precision: str,
                   biases: Sequence[bool], residual: bool, split: int = 1, aligned: bool = True) -> dict[str, int]:
    """Every #define of fused_<kind>.cu for this group, tile, dtype and precision (pure).

    `biases` says which member ops have a bias; `residual` whether a residual is added. `aligned` says
    whether the input pointer allows 4-byte copies (the halo or input tile then goes through cp.async
    where its rows allow); dw_pw: `split` is the cluster split of its reduction (`tiles.cluster_split`).
    """
    prec = precision_code(dtype, precision)
    th, tw, tf, tc, threads = tile.th, tile.tw, tile.tf, tile.tc, tile.threads
    d = {**dtype_defines(dtype), "PREC": prec, "THREADS": threads, "TH": th, "TW": tw, "TF": tf, "TC": tc,
         "HAS_RES": int(residual), "SMEM_TOTAL": tiles.smem_bytes(kind, ops, tile, dtype)}
    for i, (op, b) in enumerate(zip(ops, biases, strict=True), start=1):
        d[f"ACT{i}"] = _act(op)
        d[f"HAS_B{i}"] = int(b)
    if kind in ("pw_dw", "dw_pw", "pw_dw_pw"):
        d.update(_geometry_defines(ops[0] if kind == "dw_pw" else ops[1]))
        # output rows per DW item (dw_window): the DW runs over the filter tile in pw_dw, a chunk otherwise
        d["DWV"] = tiles.dw_rows_per_item(tf if kind == "pw_dw" else tc, th, tw, threads)
    if kind in ("pw_pw", "pw_dw_pw"):
        d.update({"C1": ops[0].c_in, "STAGES": tiles.fused_stages(kind, ops, tile, dtype),
                  "TCP": packed_width(tc, dtype), "TFP": packed_width(tf, dtype),
                  "XA": int(aligned and _input_pairs_ok(kind, ops, tile, dtype))})
    if kind == "pw_pw":
        d["CL"] = int(ops[0].channel_last)
    for prefix, g in tiles.block_gemms(kind, ops, tile, 2 if dtype == "fp16" else 4).items():
        d.update(gemm_defines(prefix, g.m, g.n, g.mp, g.np_, threads, prec, g.resident))
    if kind in ("pw_dw", "dw_pw"):
        w = ops[0].in_shape[3]
        d.update({"STAGES": tiles.fused_stages(kind, ops, tile, dtype), "TFP": packed_width(tf, dtype),
                  "XA": halo_copy_mode(dtype, w, aligned)})
    if kind == "dw_pw":
        d["KS"] = split
    return d


def halo_copy_mode(dtype: str, w: int, aligned: bool) -> int:
    """How pw_dw and dw_pw stage their halo windows (XA): 1, 4-byte cp.async of elements (fp32) or of
    pairs from an even column (fp16, even W); 2, fp16 on an odd W, whose rows alternate between aligned
    and unaligned starts: 4-byte cp.async of whole rows from each row's aligned start, realigned in
    shared memory by the copying thread; 0, `x` not 4-byte aligned: registers, one chunk ahead."""
    if not aligned:
        return 0
    return 1 if dtype != "fp16" or w % 2 == 0 else 2


def _input_pairs_ok(kind: str, ops: Sequence[Op], tile: Tile, dtype: str) -> bool:
    """Whether 4-byte copies can stage the input of pw_pw / pw_dw_pw (XA, pointer alignment aside): fp32
    always (one element per copy, pw_pw's channel-last tokens transposed element by element); fp16
    only as pairs of one NCHW row that never straddle the map border, so an even W (pw_dw_pw's window
    starts at an even column) and, for pw_pw, whose tile starts at column tile_x * TW, an even TW."""
    if dtype != "fp16":
        return True
    if ops[0].channel_last:
        return False
    return ops[0].in_shape[3] % 2 == 0 and (kind == "pw_dw_pw" or tile.tw % 2 == 0)


def packed_width(tf: int, dtype: str) -> int:
    """Row length of a packed PW weight copy (`pack_pw_weights`): tf rounded up to whole 16-byte copies."""
    return _rup(tf, 16 // (2 if dtype == "fp16" else 4))


def pack_pw_weights(cp, w, tf: int, dtype: str, precision: str):
    """PW weights [N, C] as wp[N / tf tiles][C][TFP] in the storage dtype (zero padded; TF32-rounded for
    precision "tf32"), so that a block's chunk rows are contiguous 16-byte runs. `tf` is the filter
    tile of pw_dw, dw_pw and the last PW of pw_pw and pw_dw_pw; the first PW of pw_pw and pw_dw_pw
    is packed by the channel chunk tc, so that chunk i's weights At[C][TCP] are the block wp[i]."""
    nf, c = (int(v) for v in w.shape)
    tiles_f, tfp = -(-nf // tf), packed_width(tf, dtype)
    full = cp.zeros((tiles_f * tf, c), dtype=cp.float32)
    full[:nf] = w
    packed = cp.zeros((tiles_f, c, tfp), dtype=cp.float32)
    packed[:, :, :tf] = full.reshape(tiles_f, tf, c).transpose(0, 2, 1)
    if dtype == "fp16":
        return cp.ascontiguousarray(packed.astype(cp.float16))
    if precision == "tf32":
        packed = tf32_rounded(cp, packed)
    return cp.ascontiguousarray(packed)


# ---- PW -> DW ----------------------------------------------------------------------------------------
def prepare_pw_dw(ops: Sequence[Op], tile: Tile, x, params, *, dtype: str = "fp32", precision: str = "fp32",
                  residual=None, out=None) -> Launch:
    """Prepare a fused expansion 1x1 -> depthwise pair on NCHW `x`."""
    cp = _build.require_device()
    precision_code(dtype, precision)
    _expect(ops, ("pw", "dw"), "pw_dw")
    pw, dw = ops
    _pw_checked(pw)
    n, c, h, w = _nchw(x)
    x = check_array(cp, x, (n, pw.c_in, h, w), dtype, "x")
    ce = pw.c_out
    ho, wo = _dw_checked(dw, h, w)
    (w1, b1), (w2, b2) = params
    w1 = weight_as(cp, w1, (ce, c), None, f"{pw.name} weight")
    wp = pack_pw_weights(cp, w1, tile.tf, dtype, precision)
    b1 = bias_as(cp, b1, ce, f"{pw.name} bias")
    w2 = weight_as(cp, w2, (ce, dw.kernel[0] * dw.kernel[1]), None, f"{dw.name} weight")
    b2 = bias_as(cp, b2, ce, f"{dw.name} bias")
    shape = (n, ce, ho, wo)
    out = output_array(cp, out, shape, dtype)
    residual = _res(cp, residual, shape, dtype)
    tiles_w = math.ceil(wo / tile.tw)
    grid = (math.ceil(ho / tile.th) * tiles_w, math.ceil(ce / tile.tf), n)
    nul = null_ptr(cp)
    args = (x, wp, _or(b1, nul), w2, _or(b2, nul), _or(residual, nul), out,
            *i32(c, ce, h, w, ho, wo, dw.pads[0], dw.pads[1], tiles_w))
    return _launch("pw_dw", ops, tile, dtype, precision, (b1 is not None, b2 is not None), residual, grid, args,
                   out, (x, wp, b1, w2, b2, residual), aligned=x.data.ptr % 4 == 0)


# ---- DW -> PW ----------------------------------------------------------------------------------------
def prepare_dw_pw(ops: Sequence[Op], tile: Tile, x, params, *, dtype: str = "fp32", precision: str = "fp32",
                  residual=None, out=None) -> Launch:
    """Prepare a fused depthwise -> projection 1x1 pair on NCHW `x`."""
    cp = _build.require_device()
    precision_code(dtype, precision)
    _expect(ops, ("dw", "pw"), "dw_pw")
    dw, pw = ops
    _pw_checked(pw)
    n, c, h, w = _nchw(x)
    x = check_array(cp, x, (n, dw.c_in, h, w), dtype, "x")
    ho, wo = _dw_checked(dw, h, w)
    nf = pw.c_out
    (w1, b1), (w2, b2) = params
    w1 = weight_as(cp, w1, (c, dw.kernel[0] * dw.kernel[1]), None, f"{dw.name} weight")
    b1 = bias_as(cp, b1, c, f"{dw.name} bias")
    w2 = weight_as(cp, w2, (nf, c), None, f"{pw.name} weight")
    wp = pack_pw_weights(cp, w2, tile.tf, dtype, precision)
    b2 = bias_as(cp, b2, nf, f"{pw.name} bias")
    shape = (n, nf, ho, wo)
    out = output_array(cp, out, shape, dtype)
    residual = _res(cp, residual, shape, dtype)
    split = tiles.cluster_split("dw_pw", ops, tile, n, device_props(cp))
    tiles_w = math.ceil(wo / tile.tw)
    grid = (math.ceil(ho / tile.th) * tiles_w * split, math.ceil(nf / tile.tf), n)
    nul = null_ptr(cp)
    args = (x, w1, _or(b1, nul), wp, _or(b2, nul), _or(residual, nul), out,
            *i32(c, nf, h, w, ho, wo, dw.pads[0], dw.pads[1], tiles_w))
    return _launch("dw_pw", ops, tile, dtype, precision, (b1 is not None, b2 is not None), residual, grid, args,
                   out, (x, w1, b1, wp, b2, residual), split=split, aligned=x.data.ptr % 4 == 0)


# ---- PW -> PW (or linear -> linear) --------------------------------------------------------------------
def prepare_pw_pw(ops: Sequence[Op], tile: Tile, x, params, *, dtype: str = "fp32", precision: str = "fp32",
                  residual=None, out=None) -> Launch:
    """Prepare two fused 1x1 convolutions on NCHW `x`, or linear -> act -> linear on channel-last
    tokens `x` of shape (..., C1) when the ops are linear."""
    cp = _build.require_device()
    precision_code(dtype, precision)
    _expect(ops, ("pw", "pw"), "pw_pw")
    a, b = ops
    cl = a.channel_last
    if cl != b.channel_last:
        raise PlanError("pw_pw needs two 1x1 convolutions or two linear ops, not a mix")
    for op in ops:
        _pw_checked(op)
    c1, c2, c3 = a.c_in, a.c_out, b.c_out
    if cl:
        n, tokens, cx = linear_dims(x.shape)
        h, w = tokens, 1
        xshape, shape = tuple(x.shape), (*x.shape[:-1], c3)
    else:
        n, cx, h, w = _nchw(x)
        xshape, shape = (n, c1, h, w), (n, c3, h, w)
    if cx != c1:
        raise PlanError(f"x has {cx} channels, op {a.name} expects {c1}")
    if (h, w) != tuple(b.hw_out):
        raise PlanError(f"x gives a {h}x{w} map, op {b.name} says {b.hw_out}")
    x = check_array(cp, x, xshape, dtype, "x")
    (w1, b1), (w2, b2) = params
    w1 = weight_as(cp, w1, (c2, c1), None, f"{a.name} weight")
    w1p = pack_pw_weights(cp, w1, tile.tc, dtype, precision)  # chunk i of tc mid channels is w1p[i]
    b1 = bias_as(cp, b1, c2, f"{a.name} bias")
    w2 = weight_as(cp, w2, (c3, c2), None, f"{b.name} weight")
    w2p = pack_pw_weights(cp, w2, tile.tf, dtype, precision)
    b2 = bias_as(cp, b2, c3, f"{b.name} bias")
    out = output_array(cp, out, shape, dtype)
    residual = _res(cp, residual, shape, dtype)
    tiles_w = math.ceil(w / tile.tw)
    grid = (math.ceil(h / tile.th) * tiles_w, math.ceil(c3 / tile.tf), n)
    nul = null_ptr(cp)
    args = (x, w1p, _or(b1, nul), w2p, _or(b2, nul), _or(residual, nul), out, *i32(c2, c3, h, w, tiles_w))
    return _launch("pw_pw", ops, tile, dtype, precision, (b1 is not None, b2 is not None), residual, grid, args,
                   out, (x, w1p, b1, w2p, b2, residual), aligned=x.data.ptr % 4 == 0)


# ---- PW -> DW -> PW --------------------------------------------------------------------------------------
def prepare_pw_dw_pw(ops: Sequence[Op], tile: Tile, x, params, *, dtype: str = "fp32", precision: str = "fp32",
                     residual=None, out=None) -> Launch:
    """Prepare a whole fused inverted-residual block (expansion, depthwise, projection) on NCHW `x`;
    `residual` (e.g. `x` itself) is added to the output when given."""
    cp = _build.require_device()
    precision_code(dtype, precision)
    _expect(ops, ("pw", "dw", "pw"), "pw_dw_pw")
    pe, dw, pp = ops
    _pw_checked(pe)
    _pw_checked(pp)
    n, c1, h, w = _nchw(x)
    x = check_array(cp, x, (n, pe.c_in, h, w), dtype, "x")
    ce, c3 = pe.c_out, pp.c_out
    ho, wo = _dw_checked(dw, h, w)
    (w1, b1), (w2, b2), (w3, b3) = params
    w1 = weight_as(cp, w1, (ce, c1), None, f"{pe.name} weight")
    w1p = pack_pw_weights(cp, w1, tile.tc, dtype, precision)  # chunk i of tc expanded channels is w1p[i]
    b1 = bias_as(cp, b1, ce, f"{pe.name} bias")
    w2 = weight_as(cp, w2, (ce, dw.kernel[0] * dw.kernel[1]), None, f"{dw.name} weight")
    b2 = bias_as(cp, b2, ce, f"{dw.name} bias")
    w3 = weight_as(cp, w3, (c3, ce), None, f"{pp.name} weight")
    w3p = pack_pw_weights(cp, w3, tile.tf, dtype, precision)
    b3 = bias_as(cp, b3, c3, f"{pp.name} bias")
    shape = (n, c3, ho, wo)
    out = output_array(cp, out, shape, dtype)
    residual = _res(cp, residual, shape, dtype)
    tiles_w = math.ceil(wo / tile.tw)
    grid = (math.ceil(ho / tile.th) * tiles_w, math.ceil(c3 / tile.tf), n)
    nul = null_ptr(cp)
    args = (x, w1p, _or(b1, nul), w2, _or(b2, nul), w3p, _or(b3, nul), _or(residual, nul), out,
            *i32(ce, c3, h, w, ho, wo, dw.pads[0], dw.pads[1], tiles_w))
    return _launch("pw_dw_pw", ops, tile, dtype, precision, (b1 is not None, b2 is not None, b3 is not None),
                   residual, grid, args, out, (x, w1p, b1, w2, b2, w3p, b3, residual),
                   aligned=x.data.ptr % 4 == 0)


def _or(a, default):
    return default if a is None else a


def run_pw_dw(ops, tile, x, params, *, dtype="fp32", precision="fp32", residual=None, out=None):
    """Run a fused PW->DW pair; returns the (N, C_exp, Ho, Wo) output."""
    return prepare_pw_dw(ops, tile, x, params, dtype=dtype, precision=precision, residual=residual, out=out)()


def run_dw_pw(ops, tile, x, params, *, dtype="fp32", precision="fp32", residual=None, out=None):
    """Run a fused DW->PW pair; returns the (N, C_out, Ho, Wo) output."""
    return prepare_dw_pw(ops, tile, x, params, dtype=dtype, precision=precision, residual=residual, out=out)()


def run_pw_pw(ops, tile, x, params, *, dtype="fp32", precision="fp32", residual=None, out=None):
    """Run two fused PW (or linear) layers; returns the output in the input's layout."""
    return prepare_pw_pw(ops, tile, x, params, dtype=dtype, precision=precision, residual=residual, out=out)()


def run_pw_dw_pw(ops, tile, x, params, *, dtype="fp32", precision="fp32", residual=None, out=None):
    """Run a fused inverted-residual block; returns the (N, C_out, Ho, Wo) output."""
    return prepare_pw_dw_pw(ops, tile, x, params, dtype=dtype, precision=precision, residual=residual, out=out)()
