"""Hand-built `Op` records for tests: no ONNX needed.

    dw(c, h, w, k=3, s=1)        depthwise conv, "same" padding (k // 2), NCHW, batch 1
    pw(cin, cout, h, w, s=1)     1x1 conv; h, w are the input map
    linear(tokens, cin, cout)    token-major matmul over (1, tokens, cin)
    conv(cin, cout, h, w, k, s)  dense conv, "same" padding

Each accepts `epilogue=(...)` and `dtype="float32"`; bytes, FLOPs and params are filled in as the
importer would (fp32 itemsize unless dtype is float16).
"""

from __future__ import annotations

import itertools
import math

from fuseplanner.core.ir import Op

_ids = itertools.count()


def _itemsize(dtype: str) -> int:
    return 2 if dtype == "float16" else 4


def _op(kind: str, op_type: str, ins: tuple[int, ...], outs: tuple[int, ...], params: int, macs: int, **kw) -> Op:
    i = next(_ids)
    dtype = kw.pop("dtype", "float32")
    e = _itemsize(dtype)
    return Op(
        name=kw.pop("name", f"{kind}{i}"),
        op_type=op_type,
        kind=kind,
        index=i,
        inputs=(f"t{i}",),
        outputs=(f"t{i + 1}",),
        input_shapes=(ins,),
        output_shapes=(outs,),
        dtype=dtype,
        params=params,
        flops=2 * macs,
        input_bytes=math.prod(ins) * e,
        output_bytes=math.prod(outs) * e,
        weight_bytes=params * e,
        **kw,
    )


def dw(c: int, h: int, w: int, k: int = 3, s: int = 1, *, epilogue: tuple[str, ...] = ("bn", "relu6"), **kw) -> Op:
    p = k // 2
    ho, wo = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    return _op(
        "dw", "Conv", (1, c, h, w), (1, c, ho, wo), c * k * k, c * k * k * ho * wo,
        kernel=(k, k), stride=(s, s), pads=(p, p, p, p), groups=c, epilogue=epilogue, **kw,
    )  # fmt: skip


def pw(cin: int, cout: int, h: int, w: int, s: int = 1, *, epilogue: tuple[str, ...] = ("bn", "relu6"), **kw) -> Op:
    ho, wo = (h - 1) // s + 1, (w - 1) // s + 1
    return _op(
        "pw", "Conv", (1, cin, h, w), (1, cout, ho, wo), cin * cout, cin * cout * ho * wo,
        stride=(s, s), epilogue=epilogue, **kw,
    )  # fmt: skip


def linear(tokens: int, cin: int, cout: int, *, epilogue: tuple[str, ...] = ("bias",), **kw) -> Op:
    return _op(
        "linear", "MatMul", (1, tokens, cin), (1, tokens, cout), cin * cout, tokens * cin * cout,
        has_bias="bias" in epilogue, epilogue=epilogue, **kw,
    )  # fmt: skip


def conv(cin: int, cout: int, h: int, w: int, k: int = 3, s: int = 1, **kw) -> Op:
    p = k // 2
    ho, wo = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    return _op(
        "conv", "Conv", (1, cin, h, w), (1, cout, ho, wo), cin * cout * k * k, cin * cout * k * k * ho * wo,
        kernel=(k, k), stride=(s, s), pads=(p, p, p, p), epilogue=kw.pop("epilogue", ("bn", "relu6")), **kw,
    )  # fmt: skip
