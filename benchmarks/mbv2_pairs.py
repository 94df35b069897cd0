"""MobileNetV2 (224x224) inverted-residual layers as Op records, for the fused-pair benchmark and tests.

Each block: expansion 1x1 (t * C_in, ReLU6) -> depthwise 3x3 stride s (ReLU6) -> projection 1x1
(linear). The first block has no expansion. `pairs(batch)` gives every PW->DW and DW->PW pair, the
PW->PW pairs (projection -> next expansion, where no residual add sits between them), and the whole
blocks (PW->DW->PW, with the residual flag).
"""

from __future__ import annotations

from fuseplanner.core.ir import Op

# (t, c, n, s) of torchvision's MobileNetV2
SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]


def conv(name: str, kind: str, c_in: int, c_out: int, h: int, w: int, k: int = 1, s: int = 1,
         act: str | None = "relu6", batch: int = 1, bias: bool = True, residual: bool = False) -> Op:
    """A dw or pw Op record (NCHW, 'same' padding)."""
    pad = (k - 1) // 2
    ho, wo = (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1
    epi = tuple(e for e in (("bias" if bias else None), act, ("add" if residual else None)) if e)
    return Op(name=name, op_type="Conv", kind=kind, index=0, inputs=(name + "_in",), outputs=(name + "_out",),
              input_shapes=((batch, c_in, h, w),), output_shapes=((batch, c_out, ho, wo),), kernel=(k, k),
              stride=(s, s), pads=(pad, pad, pad, pad), groups=c_in if kind == "dw" else 1, epilogue=epi,
              has_bias=bias)


def blocks(batch: int = 1) -> list[dict]:
    """Every inverted-residual block: {'name', 'ops': (pw, dw, pw) or (dw, pw), 'residual': bool}."""
    out, c_in, h, idx = [], 32, 112, 0
    for t, c, n, s in SETTINGS:
        for i in range(n):
            stride = s if i == 0 else 1
            ce = c_in * t
            ho = (h + 2 - 3) // stride + 1
            res = stride == 1 and c_in == c
            dw = conv(f"b{idx}.dw", "dw", ce, ce, h, h, 3, stride, batch=batch)
            pj = conv(f"b{idx}.project", "pw", ce, c, ho, ho, act=None, batch=batch, residual=res)
            ops = (dw, pj) if t == 1 else (conv(f"b{idx}.expand", "pw", c_in, ce, h, h, batch=batch), dw, pj)
            out.append({"name": f"b{idx}", "ops": ops, "residual": res, "h": h, "c_in": c_in, "ce": ce, "c": c,
                        "s": stride})
            c_in, h, idx = c, ho, idx + 1
    return out


def pairs(batch: int = 1) -> list[dict]:
    """[{'kind', 'name', 'ops', 'residual'}] for every PW->DW, DW->PW, PW->PW pair and PW->DW->PW block."""
    bl = blocks(batch)
    out = []
    for b in bl:
        ops = b["ops"]
        if len(ops) == 3:
            out.append({"kind": "pw_dw", "name": b["name"], "ops": ops[:2], "residual": False})
        out.append({"kind": "dw_pw", "name": b["name"], "ops": ops[-2:], "residual": False})
        if len(ops) == 3:
            out.append({"kind": "pw_dw_pw", "name": b["name"], "ops": ops, "residual": b["residual"]})
    for a, b in zip(bl, bl[1:], strict=False):
        # projection of block a -> expansion of block b: legal only when no residual add sits between
        # them (a adds none) and b's input has no second consumer (b adds none)
        if len(b["ops"]) == 3 and not a["residual"] and not b["residual"]:
            out.append({"kind": "pw_pw", "name": f"{a['name']}-{b['name']}", "ops": (a["ops"][-1], b["ops"][0]),
                        "residual": False})
    return out
