"""Layer-by-layer kernels (dw, pw, linear) on the GPU against the float64 NumPy reference.

Seeded random sweep of shapes, strides, kernel sizes, batches, dtypes, precisions and tiles drawn from
`tiles.candidates`; outputs poisoned with NaN before each run; infeasible tiles must be refused with
the cost model's reason before launch.
"""

from __future__ import annotations

import math

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
ACTS = ("relu6", "relu", "hardswish", "silu", "gelu", "sigmoid", "hardsigmoid", "leakyrelu", None)
GPU = device_spec(cp)


def conv_op(kind: str, c_in: int, c_out: int, h: int, w: int, k: int = 1, s: int = 1, pad: int | None = None,
            act: str | None = None, batch: int = 1, bias: bool = True, residual: bool = False) -> Op:
    """A dw or pw Op record for an NCHW input of batch x c_in x h x w."""
    pad = (k - 1) // 2 if pad is None else pad
    ho, wo = (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1
    epi = tuple(e for e in (("bias" if bias else None), act, ("add" if residual else None)) if e)
    return Op(name=f"{kind}{k}s{s}", op_type="Conv", kind=kind, index=0, inputs=("x",), outputs=("y",),
              input_shapes=((batch, c_in, h, w),), output_shapes=((batch, c_out, ho, wo),), kernel=(k, k),
              stride=(s, s), pads=(pad, pad, pad, pad), groups=c_in if kind == "dw" else 1, epilogue=epi,
              has_bias=bias)


def linear_op(c_in: int, c_out: int, tokens: int, batch: int = 1, act: str | None = None, bias: bool = True,
              residual: bool = False) -> Op:
    epi = tuple(e for e in (("bias" if bias else None), act, ("add" if residual else None)) if e)
    return Op(name="fc", op_type="MatMul", kind="linear", index=0, inputs=("x",), outputs=("y",),
              input_shapes=((batch, tokens, c_in),), output_shapes=((batch, tokens, c_out),), epilogue=epi,
              has_bias=bias)


def rel_err(out: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref))


def run_case(kind, op, tile, dtype, precision, seed, residual=False):
    rng = np.random.default_rng(seed)
    np_dt = np.float16 if dtype == "fp16" else np.float32
    x = rng.standard_normal(op.in_shape).astype(np_dt)
    params = random_params([op], rng, bias="bias" in op.epilogue)
    res = rng.standard_normal(op.out_shape).astype(np_dt) if residual else None
    out = cp.full(op.out_shape, np.nan, dtype=np_dt)
    got = kernels.run(kind, [op], tile, cp.asarray(x), [(cp.asarray(w), None if b is None else cp.asarray(b))
                                                        for w, b in params],
                      dtype=dtype, precision=precision, residual=None if res is None else cp.asarray(res), out=out)
    assert got is out
    host = cp.asnumpy(out)
    assert np.isfinite(host).all(), f"{np.isnan(host).sum()} outputs not written (NaN) for tile {tile}"
    ref = reference(kind, [op], x.astype(np.float64), params, residual=res)
    err = rel_err(host, ref)
    assert err < TOL[(dtype, precision)], f"rel err {err:.2e} for tile {tile}"
    return err


def _cases(seed: int = 1234, n: int = 48):
    """Seeded random (kind, op, tile, dtype, precision, residual) cases."""
    rng = np.random.default_rng(seed)
    out = []
    modes = [("fp32", "fp32"), ("fp32", "tf32"), ("fp16", "fp32")]
    for i in range(n):
        kind = ("dw", "pw", "linear")[i % 3]
        dtype, precision = modes[int(rng.integers(3))]
        if kind == "dw" and precision == "tf32":
            precision = "fp32"
        act = ACTS[int(rng.integers(len(ACTS)))]
        batch = int(rng.choice([1, 2, 3]))
        residual = bool(rng.random() < 0.25)
        bias = bool(rng.random() < 0.85)
        h, w = int(rng.integers(3, 40)), int(rng.integers(3, 40))
        if kind == "dw":
            k = int(rng.choice([3, 5, 7]))
            s = int(rng.choice([1, 2]))
            pad = int(rng.integers(0, k // 2 + 2))
            if h + 2 * pad < k or w + 2 * pad < k:
                pad = k // 2 + 1
            c = int(rng.integers(1, 70))
            op = conv_op("dw", c, c, h, w, k, s, pad, act, batch, bias, residual)
        elif kind == "pw":
            s = int(rng.choice([1, 1, 2]))
            op = conv_op("pw", int(rng.integers(1, 200)), int(rng.integers(1, 200)), h, w, 1, s, 0, act, batch,
                         bias, residual)
        else:
            op = linear_op(int(rng.integers(1, 300)), int(rng.integers(1, 300)), int(rng.integers(1, 150)), batch,
                           act, bias, residual)
        cands = tiles.candidates(kind, [op], dtype, GPU)
        if not cands:  # e.g. 3 tokens x 43 filters: no tile splits evenly over whole warps
            continue
        for j in rng.choice(len(cands), size=min(2, len(cands)), replace=False):
            out.append(pytest.param(kind, op, cands[int(j)], dtype, precision, residual, id=f"{i}-{kind}-{j}"))
    return out


@pytest.mark.parametrize("kind,op,tile,dtype,precision,residual", _cases())
def test_random_sweep(kind, op, tile, dtype, precision, residual):
    run_case(kind, op, tile, dtype, precision, seed=hash((str(tile), op.in_shape)) % 2**32, residual=residual)


MBV2 = [  # (kind, c_in, c_out, H, k, s): MobileNetV2 layers at 224
    ("dw", 32, 32, 112, 3, 1), ("pw", 32, 16, 112, 1, 1), ("pw", 16, 96, 112, 1, 1), ("dw", 96, 96, 112, 3, 2),
    ("pw", 144, 24, 56, 1, 1), ("dw", 144, 144, 56, 3, 1), ("dw", 192, 192, 28, 3, 2),
    ("pw", 384, 64, 14, 1, 1), ("dw", 576, 576, 14, 3, 2), ("pw", 960, 160, 7, 1, 1), ("pw", 320, 1280, 7, 1, 1),
]


@pytest.mark.parametrize("dtype,precision", [("fp32", "fp32"), ("fp32", "tf32"), ("fp16", "fp32")])
@pytest.mark.parametrize("layer", MBV2, ids=lambda layer: f"{layer[0]}{layer[1]}-{layer[2]}@{layer[3]}s{layer[5]}")
def test_mobilenetv2_layers_every_feasible_tile_sample(layer, dtype, precision):
    """A spread of feasible tiles (first, last and evenly spaced) of real layers runs and is correct."""
    kind, c_in, c_out, h, k, s = layer
    if kind == "dw" and precision == "tf32":
        pytest.skip("tf32 applies to the pointwise part only")
    op = conv_op(kind, c_in, c_out, h, h, k, s, None, "relu6", 2)
    cands = tiles.candidates(kind, [op], dtype, GPU)
    picks = sorted({0, len(cands) - 1, *np.linspace(0, len(cands) - 1, 4).astype(int).tolist()})
    for i in picks:
        run_case(kind, op, cands[i], dtype, precision, seed=i)


@pytest.mark.parametrize("kind", ["dw", "pw", "linear"])
def test_infeasible_tiles_refused_with_cost_model_reason(kind):
    if kind == "linear":
        op = linear_op(64, 96, 50)
    else:
        op = conv_op(kind, 64, 64 if kind == "dw" else 96, 20, 20, 3 if kind == "dw" else 1)
    bad = [
        Tile(64, 4, 8, 8, 64),  # taller than the map
        Tile(4, 1, 512, 512 if kind == "dw" else 8, 64),  # more filters than channels
        Tile(4, 1, 8, 8, 48),  # not whole warps
        Tile(2, 1, 8, 8, 64) if kind != "dw" else Tile(2, 1, 8, 8, 64),  # 16 outputs over 64 threads
        Tile(16, 1, 64, 64, 2048),  # too many threads
    ]
    x = cp.ones(op.in_shape, dtype=cp.float32)
    params = [(cp.ones(math.prod(op.in_shape[1:2]) * 1, dtype=cp.float32), None)]
    seen = 0
    for t in bad:
        reason = tiles.check(kind, [op], t, "fp32", GPU)
        if reason is None:
            continue
        seen += 1
        with pytest.raises(TileError) as exc:
            kernels.run(kind, [op], t, x, params)
        assert str(exc.value) == reason
    assert seen >= 3


def test_smem_overflow_refused():
    op = conv_op("pw", 512, 512, 64, 64)
    t = Tile(32, 32, 256, 64, 256)
    reason = tiles.check("pw", [op], t, "fp32", GPU)
    assert reason is not None and "shared memory" in reason or "registers" in reason
    with pytest.raises(TileError):
        kernels.run("pw", [op], t, cp.ones(op.in_shape, cp.float32), [(cp.ones((512, 512), cp.float32), None)])


def test_linear_2d_tokens_and_no_bias():
    op = Op(name="fc", op_type="Gemm", kind="linear", index=0, inputs=("x",), outputs=("y",),
            input_shapes=((77, 40),), output_shapes=((77, 24),), epilogue=("gelu",))
    tile = tiles.candidates("linear", [op], "fp32", GPU)[0]
    run_case("linear", op, tile, "fp32", "fp32", seed=3)


@pytest.mark.parametrize("ks", [2, 4, 8])
@pytest.mark.parametrize("dtype,precision", [("fp32", "fp32"), ("fp32", "tf32"), ("fp16", "fp32")])
@pytest.mark.parametrize("kind", ["pw", "linear"])
def test_pw_every_cluster_split(kind, ks, dtype, precision, monkeypatch):
    """The pw/linear split reduction is right for every cluster size, also with more blocks than chunks
    (KS 8 over 6 chunks: two blocks of each cluster own none), on an odd map with a residual, whatever
    tiles.cluster_split would pick; the launch carries KS and KS times the pixel tiles."""
    if kind == "pw":
        op = conv_op("pw", 45, 37, 5, 7, act="relu6", batch=2, residual=True)
    else:
        op = linear_op(45, 37, 13, batch=2, act="gelu", residual=True)
    cands = [t for t in tiles.candidates(kind, [op], dtype, GPU)
             if tiles.split_partial_bytes(t) <= tiles.smem_bytes(kind, [op], t, dtype)]
    tile = min(cands, key=lambda t: (t.tc, -t.threads))  # 45 channels in chunks of 8 -> 6 chunks
    monkeypatch.setattr(tiles, "cluster_split", lambda k, *a: ks if k == kind else 1)
    np_dt = np.float16 if dtype == "fp16" else np.float32
    x = cp.asarray(np.random.default_rng(ks).standard_normal(op.in_shape).astype(np_dt))
    params = [(cp.asarray(np.ones((37, 45), np_dt)), None)]
    from fuseplanner.kernels.families.pw import launch as lbl

    launch = lbl.prepare_pw([op], tile, x, params, dtype=dtype, precision=precision, kind=kind)
    tiles_x = math.ceil(op.hw_out[0] / tile.th) * math.ceil(op.hw_out[1] / tile.tw)
    assert launch.defines["KS"] == ks and launch.grid[0] == tiles_x * ks
    run_case(kind, op, tile, dtype, precision, seed=700 + ks, residual=True)


SQUEEZE_EXCITE = [  # (c_in, c_out, batch): 1x1 maps with fewer outputs than a 64-thread block
    (32, 8, 1), (8, 32, 2), (96, 4, 3), (1152, 48, 1), (1152, 48, 4), (20, 40, 2), (40, 40, 2),
]


@pytest.mark.parametrize("dtype,precision", [("fp32", "fp32"), ("fp32", "tf32"), ("fp16", "fp32")])
@pytest.mark.parametrize("c_in,c_out,batch", SQUEEZE_EXCITE, ids=lambda v: str(v))
def test_squeeze_excite_uneven_tiles(c_in, c_out, batch, dtype, precision):
    """Squeeze-excite 1x1 convs over a 1x1 map run only as uneven tiles (tiles.UNEVEN_KINDS: the FLAT
    path's threads past the outputs idle); every candidate is correct, residual and cluster split
    (1152 input channels) included; every output written (NaN poison) and none past it."""
    op = conv_op("pw", c_in, c_out, 1, 1, act="silu", batch=batch, residual=c_in == c_out)
    cands = tiles.candidates("pw", [op], dtype, GPU)
    assert cands and all((t.tf * t.th * t.tw) % t.threads for t in cands)
    for i in _spread(len(cands)):
        run_case("pw", op, cands[i], dtype, precision, seed=i, residual=c_in == c_out)


def _spread(n: int, k: int = 8) -> list[int]:
    """Indices of k candidates of n, first and last included, evenly spaced."""
    return sorted({0, n - 1, *np.linspace(0, n - 1, k).astype(int).tolist()})


@pytest.mark.parametrize("dtype,precision", [("fp32", "fp32"), ("fp32", "tf32"), ("fp16", "fp32")])
def test_small_classifier_linear_uneven_tiles(dtype, precision):
    """A 10-class head over one token and a 2-D Gemm of 3 rows x 12 outputs: uneven tiles only."""
    for op in (linear_op(256, 10, 1, batch=2), Op(name="fc", op_type="Gemm", kind="linear", index=0, inputs=("x",),
                                                  outputs=("y",), input_shapes=((3, 40),), output_shapes=((3, 12),),
                                                  epilogue=("bias",), has_bias=True)):  # fmt: skip
        cands = tiles.candidates("linear", [op], dtype, GPU)
        assert cands and all((t.tf * t.th * t.tw) % t.threads for t in cands)
        for i in _spread(len(cands)):
            run_case("linear", op, cands[i], dtype, precision, seed=i)
