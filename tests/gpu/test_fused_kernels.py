"""Fused kernels (pw_dw, dw_pw, pw_pw incl. linear->linear, pw_dw_pw) on the GPU against float64 NumPy.

Seeded random sweep of shapes (odd, non-square maps, channel tails), DW kernels 3/5/7, strides 1/2,
batches, activations, biases, residuals, dtypes and precisions, with tiles drawn from
`tiles.candidates`; outputs poisoned with NaN before each run. Infeasible tiles must be refused with
the cost model's reason before launch.
"""

from __future__ import annotations

import numpy as np
import pytest

cp = pytest.importorskip("cupy", reason="CuPy is not installed: GPU kernel tests need a CUDA machine")
if not cp.cuda.is_available():
    pytest.skip("no CUDA device visible: GPU kernel tests skipped", allow_module_level=True)

from fuseplanner import kernels  # noqa: E402
from fuseplanner.core.errors import TileError  # noqa: E402
from fuseplanner.core.ir import Op, Tile  # noqa: E402
from fuseplanner.kernels import device_spec, tiles  # noqa: E402
from fuseplanner.validation.reference import random_params, reference  # noqa: E402

TOL = {("fp32", "fp32"): 1e-5, ("fp32", "tf32"): 2e-3, ("fp16", "fp32"): 1e-2}
MODES = [("fp32", "fp32"), ("fp32", "tf32"), ("fp16", "fp32")]
ACTS = ("relu6", "relu", "hardswish", "silu", "gelu", "sigmoid", "hardsigmoid", "leakyrelu", None)
GPU = device_spec(cp)


def conv_op(name: str, kind: str, c_in: int, c_out: int, h: int, w: int, k: int = 1, s: int = 1,
            pad: int | None = None, act: str | None = None, batch: int = 1, bias: bool = True,
            residual: bool = False) -> Op:
    pad = (k - 1) // 2 if pad is None else pad
    ho, wo = (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1
    epi = tuple(e for e in (("bias" if bias else None), act, ("add" if residual else None)) if e)
    return Op(name=name, op_type="Conv", kind=kind, index=0, inputs=(name + "_x",), outputs=(name + "_y",),
              input_shapes=((batch, c_in, h, w),), output_shapes=((batch, c_out, ho, wo),), kernel=(k, k),
              stride=(s, s), pads=(pad, pad, pad, pad), groups=c_in if kind == "dw" else 1, epilogue=epi,
              has_bias=bias)


def linear_op(name: str, c_in: int, c_out: int, tokens: int, batch: int, act: str | None, bias: bool) -> Op:
    epi = tuple(e for e in (("bias" if bias else None), act) if e)
    return Op(name=name, op_type="MatMul", kind="linear", index=0, inputs=(name + "_x",), outputs=(name + "_y",),
              input_shapes=((batch, tokens, c_in),), output_shapes=((batch, tokens, c_out),), epilogue=epi,
              has_bias=bias)


def group(kind: str, rng: np.random.Generator, batch: int) -> tuple[Op, ...]:
    """Random member ops of a fused group of `kind` (odd, non-square maps; channel tails)."""
    h, w = int(rng.integers(5, 40)), int(rng.integers(5, 40))
    k, s = int(rng.choice([3, 5, 7])), int(rng.choice([1, 2]))
    acts = [ACTS[int(rng.integers(len(ACTS)))] for _ in range(3)]
    bias = [bool(rng.random() < 0.85) for _ in range(3)]
    c1, c2, c3 = (int(rng.integers(1, 100)) for _ in range(3))
    if kind == "pw_dw":
        pw = conv_op("e", "pw", c1, c2, h, w, act=acts[0], batch=batch, bias=bias[0])
        return pw, conv_op("d", "dw", c2, c2, h, w, k, s, act=acts[1], batch=batch, bias=bias[1])
    if kind == "dw_pw":
        dw = conv_op("d", "dw", c1, c1, h, w, k, s, act=acts[0], batch=batch, bias=bias[0])
        ho, wo = dw.hw_out
        return dw, conv_op("p", "pw", c1, c2, ho, wo, act=acts[1], batch=batch, bias=bias[1])
    if kind == "pw_pw":
        if rng.random() < 0.4:
            t = int(rng.integers(1, 120))
            return (linear_op("fc1", c1, c2, t, batch, acts[0], bias[0]),
                    linear_op("fc2", c2, c3, t, batch, acts[1], bias[1]))
        return (conv_op("p1", "pw", c1, c2, h, w, act=acts[0], batch=batch, bias=bias[0]),
                conv_op("p2", "pw", c2, c3, h, w, act=acts[1], batch=batch, bias=bias[1]))
    pe = conv_op("e", "pw", c1, c2, h, w, act=acts[0], batch=batch, bias=bias[0])
    dw = conv_op("d", "dw", c2, c2, h, w, k, s, act=acts[1], batch=batch, bias=bias[1])
    ho, wo = dw.hw_out
    return pe, dw, conv_op("p", "pw", c2, c3, ho, wo, act=acts[2], batch=batch, bias=bias[2])


def rel_err(out: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref))


def run_case(kind, ops, tile, dtype, precision, seed, residual=False):
    rng = np.random.default_rng(seed)
    np_dt = np.float16 if dtype == "fp16" else np.float32
    x = rng.standard_normal(ops[0].in_shape).astype(np_dt)
    params = random_params(ops, rng, bias=True)
    params = [(w, b if "bias" in op.epilogue else None) for op, (w, b) in zip(ops, params, strict=True)]
    res = rng.standard_normal(ops[-1].out_shape).astype(np_dt) if residual else None
    out = cp.full(ops[-1].out_shape, np.nan, dtype=np_dt)
    got = kernels.run(kind, ops, tile, cp.asarray(x), [(cp.asarray(w), None if b is None else cp.asarray(b))
                                                       for w, b in params],
                      dtype=dtype, precision=precision, residual=None if res is None else cp.asarray(res), out=out)
    assert got is out
    host = cp.asnumpy(out)
    assert np.isfinite(host).all(), f"{np.isnan(host).sum()} outputs not written (NaN) for tile {tile}"
    ref = reference(kind, ops, x.astype(np.float64), params, residual=res)
    err = rel_err(host, ref)
    assert err < TOL[(dtype, precision)], f"rel err {err:.2e} for tile {tile}"
    return err


def _cases(seed: int = 4321, per_kind: int = 12):
    rng = np.random.default_rng(seed)
    out = []
    for kind in tiles.FUSED_KINDS:
        for i in range(per_kind):
            dtype, precision = MODES[i % 3]
            cands = []
            while not cands:  # tiny odd maps can have no candidate tile at all: draw another group
                batch = int(rng.choice([1, 2, 3]))
                ops = group(kind, rng, batch)
                cands = tiles.candidates(kind, ops, dtype, GPU)
            residual = bool(rng.random() < 0.3)
            j = int(rng.integers(len(cands)))
            out.append(pytest.param(kind, ops, cands[j], dtype, precision, residual, id=f"{kind}-{i}-{dtype}-{precision}"))
    return out


@pytest.mark.parametrize("kind,ops,tile,dtype,precision,residual", _cases())
def test_random_sweep(kind, ops, tile, dtype, precision, residual):
    run_case(kind, ops, tile, dtype, precision, seed=abs(hash((str(tile), ops[0].in_shape))) % 2**32, residual=residual)


def _mbv2_block(batch: int, c_in: int, ce: int, c_out: int, h: int, s: int) -> tuple[Op, ...]:
    pe = conv_op("e", "pw", c_in, ce, h, h, act="relu6", batch=batch)
    dw = conv_op("d", "dw", ce, ce, h, h, 3, s, act="relu6", batch=batch)
    ho = dw.hw_out[0]
    return pe, dw, conv_op("p", "pw", ce, c_out, ho, ho, act=None, batch=batch)


BLOCKS = [(16, 96, 24, 112, 2), (24, 144, 24, 56, 1), (160, 960, 160, 7, 1)]


@pytest.mark.parametrize("dtype,precision", MODES)
@pytest.mark.parametrize("kind", tiles.FUSED_KINDS)
def test_mobilenetv2_layers_tile_spread(kind, dtype, precision):
    """First, last and evenly spaced feasible tiles of real MobileNetV2 groups launch and are correct."""
    for bi, (c_in, ce, c_out, h, s) in enumerate(BLOCKS):
        pe, dw, pp = _mbv2_block(2, c_in, ce, c_out, h, s)
        ops = {"pw_dw": (pe, dw), "dw_pw": (dw, pp), "pw_dw_pw": (pe, dw, pp),
               "pw_pw": (conv_op("q", "pw", ce, c_in, h, h, batch=2), pe)}[kind]
        cands = tiles.candidates(kind, ops, dtype, GPU)
        for i in sorted({0, len(cands) - 1, *np.linspace(0, len(cands) - 1, 2).astype(int).tolist()}):
            run_case(kind, ops, cands[i], dtype, precision, seed=bi * 100 + i,
                     residual=kind == "pw_dw_pw" and s == 1 and c_in == c_out)


@pytest.mark.parametrize("dtype,precision", MODES)
@pytest.mark.parametrize("kind", tiles.FUSED_KINDS)
def test_single_buffered_ring(kind, dtype, precision):
    """Tiles whose ring stage exceeds the ring budget run with one stage (copies after the math):
    wide real groups of EfficientNet-B0 (its 1152 -> 320 -> 1280 head, its 5x5 1152-channel block)."""
    pe = conv_op("e", "pw", 192, 1152, 7, 7, act="silu", batch=2)
    dw = conv_op("d", "dw", 1152, 1152, 7, 7, 5, 1, act="silu", batch=2)
    pp = conv_op("p", "pw", 1152, 192, 7, 7, act=None, batch=2)
    ops = {"pw_dw": (pe, dw), "dw_pw": (dw, pp), "pw_dw_pw": (pe, dw, pp),
           "pw_pw": (conv_op("q", "pw", 1152, 320, 7, 7, act=None, batch=2),
                     conv_op("r", "pw", 320, 1280, 7, 7, act="silu", batch=2))}[kind]
    single = [t for t in tiles.candidates(kind, ops, dtype, GPU) if tiles.fused_stages(kind, ops, t, dtype) == 1]
    if not single:  # fp16 stages are half as large: only pw_pw's reach the budget
        assert dtype == "fp16" and kind != "pw_pw"
        pytest.skip(f"no {dtype} {kind} tile of this group has a stage over the ring budget")
    for i in sorted({0, len(single) // 2, len(single) - 1}):
        run_case(kind, ops, single[i], dtype, precision, seed=700 + i, residual=kind == "pw_dw_pw")


def test_pw_dw_pads_the_pw_output_with_zeros():
    """With a large PW bias and no activation the halo must still be 0 (not bias) at the map border."""
    pw = conv_op("e", "pw", 8, 16, 9, 11, act=None)
    dw = conv_op("d", "dw", 16, 16, 9, 11, 3, 1, act=None)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(pw.in_shape).astype(np.float32)
    w1, w2 = rng.standard_normal((16, 8, 1, 1)).astype(np.float32), np.ones((16, 1, 3, 3), np.float32)
    b1, b2 = np.full(16, 5.0, np.float32), np.zeros(16, np.float32)
    params = [(w1, b1), (w2, b2)]
    out = kernels.run("pw_dw", (pw, dw), Tile(3, 4, 16, 8, 64), cp.asarray(x),
                      [(cp.asarray(w), cp.asarray(b)) for w, b in params])
    ref = reference("pw_dw", (pw, dw), x.astype(np.float64), params)
    assert rel_err(cp.asnumpy(out), ref) < 1e-5


@pytest.mark.parametrize("kind", tiles.FUSED_KINDS)
def test_infeasible_tiles_refused_with_cost_model_reason(kind):
    pe, dw, pp = _mbv2_block(1, 24, 144, 32, 28, 1)
    ops = {"pw_dw": (pe, dw), "dw_pw": (dw, pp), "pw_dw_pw": (pe, dw, pp), "pw_pw": (pp.with_batch(1), pe)}[kind]
    if kind == "pw_pw":
        ops = (conv_op("q", "pw", 144, 24, 28, 28), pe)
    bad = [Tile(64, 4, 8, 8, 64), Tile(4, 4, 4096, 8, 64), Tile(4, 4, 8, 8, 48), Tile(2, 2, 8, 8, 64),
           Tile(28, 28, 144, 64, 256), Tile(4, 4, 16, 8, 2048)]
    x = cp.ones(ops[0].in_shape, dtype=cp.float32)
    params = [(cp.ones(1, cp.float32), None)] * len(ops)
    seen = 0
    for t in bad:
        reason = tiles.check(kind, ops, t, "fp32", GPU)
        if reason is None:
            continue
        seen += 1
        with pytest.raises(TileError) as exc:
            kernels.run(kind, ops, t, x, params)
        assert str(exc.value) == reason
    assert seen >= 4


def test_strided_pointwise_member_refused():
    pw = conv_op("e", "pw", 8, 16, 9, 9, s=2)
    dw = conv_op("d", "dw", 16, 16, 5, 5, 3, 1)
    reason = tiles.check("pw_dw", (pw, dw), Tile(4, 4, 16, 8, 64), "fp32", GPU)
    assert reason is not None and "stride-1" in reason


@pytest.mark.parametrize("ks", [1, 2, 4, 8])
@pytest.mark.parametrize("dtype,precision", MODES)
def test_dw_pw_every_cluster_split(ks, dtype, precision, monkeypatch):
    """The split reduction is right for every cluster size, also with more blocks than chunks (KS 8 over
    6 chunks: two blocks of each cluster own none), whatever tiles.cluster_split would pick."""
    dw = conv_op("d", "dw", 45, 45, 15, 13, 3, 1, act="relu6")
    ops = (dw, conv_op("p", "pw", 45, 37, 15, 13, act=None))  # 45 channels in chunks of 8 -> 6 chunks
    monkeypatch.setattr(tiles, "cluster_split", lambda kind, *a: ks if kind == "dw_pw" else 1)
    run_case("dw_pw", ops, Tile(4, 4, 16, 8, 128), dtype, precision, seed=900 + ks, residual=True)


def _staged(arr: np.ndarray, offset: int):
    """`arr` on the GPU starting `offset` elements into a larger buffer (offset 1 of fp16: an x that is
    not 4-byte aligned)."""
    buf = cp.empty(arr.size + offset, dtype=arr.dtype)
    view = buf[offset:].reshape(arr.shape)
    view[...] = cp.asarray(arr)
    return view


ODD = [(3, 1, 1), (5, 1, 2), (7, 1, 3), (3, 2, 1), (5, 2, 0), (3, 1, 0)]


@pytest.mark.parametrize("kind", ["pw_dw", "dw_pw"])
@pytest.mark.parametrize("k,s,pad", ODD)
@pytest.mark.parametrize("offset", [0, 1])
def test_fp16_odd_width_halo(kind, k, s, pad, offset):
    """fp16 halos of odd-width maps: 4-byte copies from each row's aligned start, realigned in shared
    memory (XA 2, x aligned) or through registers (XA 0, x one element off), with an odd C x H x W so
    that the images of a batch start alternately aligned and not, on every tile of the map (left and
    right border pairs, paddings 0-3, strides 1 and 2) and on tiles of several widths."""
    from fuseplanner.kernels.families.fused.launch import kernel_defines

    batch, c1, c2, h, w = 3, 25, 41, 23, 21  # 25 x 23 x 21 and 41 x 23 x 21 are odd
    if kind == "pw_dw":
        ops = (conv_op("e", "pw", c1, c2, h, w, act="relu6", batch=batch),
               conv_op("d", "dw", c2, c2, h, w, k, s, pad=pad, act="hardswish", batch=batch))
    else:
        dw = conv_op("d", "dw", c2, c2, h, w, k, s, pad=pad, act="relu6", batch=batch)
        ho, wo = dw.hw_out
        ops = (dw, conv_op("p", "pw", c2, c1, ho, wo, act=None, batch=batch))
    cands = tiles.candidates(kind, ops, "fp16", GPU)
    assert cands, f"no fp16 {kind} tile for an {h}x{w} map"
    picks = {min(cands, key=lambda t: t.tw), max(cands, key=lambda t: t.tw), cands[len(cands) // 2],
             next((t for t in cands if t.tw % 2), cands[0])}
    rng = np.random.default_rng(1000 * k + 10 * s + pad + offset)
    x = rng.standard_normal(ops[0].in_shape).astype(np.float16)
    params = random_params(ops, rng, bias=True)
    xd = _staged(x, offset)
    assert (xd.data.ptr % 4 == 0) == (offset == 0)
    for tile in sorted(picks, key=str):
        xa = kernel_defines(kind, ops, tile, "fp16", "fp32", [True, True], False, aligned=offset == 0)["XA"]
        assert xa == (2 if offset == 0 else 0)
        out = cp.full(ops[-1].out_shape, np.nan, dtype=np.float16)
        kernels.run(kind, ops, tile, xd, [(cp.asarray(wt), cp.asarray(b)) for wt, b in params], dtype="fp16", out=out)
        host = cp.asnumpy(out)
        assert np.isfinite(host).all(), f"{np.isnan(host).sum()} outputs not written for tile {tile}"
        err = rel_err(host, reference(kind, ops, x.astype(np.float64), params))
        assert err < TOL[("fp16", "fp32")], f"rel err {err:.2e} for tile {tile} (XA {xa})"


@pytest.mark.parametrize("dtype,precision", MODES)
def test_squeeze_excite_pair_on_a_one_pixel_map(dtype, precision):
    """MobileNetV3's squeeze-excite pairs (1x1 maps) at one-column tiles: fp16 stages them through
    registers; the kernel once also compiled the 4-byte copy path there and failed to build."""
    ops = (conv_op("q", "pw", 480, 120, 1, 1, act="relu", batch=2),
           conv_op("r", "pw", 120, 480, 1, 1, act="hardsigmoid", batch=2))
    ran = 0
    for i, tile in enumerate((Tile(1, 1, 256, 64, 256), Tile(1, 1, 64, 16, 64))):
        if tiles.check("pw_pw", ops, tile, dtype, GPU) is None:  # fp32's 256 filters need too much shared memory
            run_case("pw_pw", ops, tile, dtype, precision, seed=900 + i)
            ran += 1
    assert ran


def test_pw_pw_stages_only_the_tiles_pixels_through_registers():
    """fp16 PW->PW on an odd-width map stages its input tile through registers (XA 0): only the tile's
    th x tw pixels are loaded and the padding columns up to the GEMM's 8 are zeroed apart (a tile of
    1, 3, 7 and 49 pixels), outputs poisoned with NaN first."""
    from fuseplanner.kernels.families.fused.launch import kernel_defines

    ops = (conv_op("q", "pw", 96, 40, 7, 7, act="relu", batch=2), conv_op("r", "pw", 40, 96, 7, 7, act=None, batch=2))
    ran = 0
    for i, tile in enumerate((Tile(1, 1, 64, 8, 64), Tile(1, 3, 64, 8, 64), Tile(1, 7, 64, 16, 64),
                              Tile(7, 7, 64, 8, 64))):  # fmt: skip
        if tiles.check("pw_pw", ops, tile, "fp16", GPU) is None:
            assert kernel_defines("pw_pw", ops, tile, "fp16", "fp32", [True, True], False)["XA"] == 0
            run_case("pw_pw", ops, tile, "fp16", "fp32", seed=950 + i)
            ran += 1
    assert ran >= 3
