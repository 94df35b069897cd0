"""Hand-built ModelGraphs of known topology for planner tests (chain, diamond, residual, branch, MLP).

Ops are built as the importer would: conv epilogues (BN, activations) already absorbed, shapes NCHW,
opaque nodes for everything else. Names are short and fixed so tests can state expected groups.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import networkx as nx

from fuseplanner.core.ir import ModelGraph, Op, TensorInfo


def conv(
    name: str,
    kind: str,
    inp: str,
    out: str,
    cin: int,
    cout: int,
    h: int,
    w: int | None = None,
    k: int = 1,
    s: int = 1,
    batch: int = 1,
    epilogue: tuple[str, ...] = ("bn", "relu6"),
    index: int = 0,
) -> Op:
    """A Conv op: kind "pw" (1x1), "dw" (groups = cin) or "conv" (dense k x k)."""
    w = h if w is None else w
    p = k // 2
    ho, wo = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    groups = cin if kind == "dw" else 1
    cpg = cin // groups
    params = cout * cpg * k * k + cout
    ins, outs = (batch, cin, h, w), (batch, cout, ho, wo)
    return Op(
        name=name,
        op_type="Conv",
        kind=kind,
        index=index,
        inputs=(inp,),
        outputs=(out,),
        input_shapes=(ins,),
        output_shapes=(outs,),
        kernel=(k, k),
        stride=(s, s),
        pads=(p, p, p, p),
        groups=groups,
        epilogue=("bias", *epilogue),
        epilogue_nodes=tuple(f"{name}.{e}" for e in epilogue),
        has_bias=True,
        params=params,
        flops=2 * batch * cout * ho * wo * cpg * k * k,
        input_bytes=4 * math.prod(ins),
        output_bytes=4 * math.prod(outs),
        weight_bytes=4 * params,
    )


def linear(
    name: str, inp: str, out: str, tokens: int, cin: int, cout: int, batch: int = 1, epilogue: tuple[str, ...] = (), index: int = 0
) -> Op:
    """A MatMul+bias over tokens: (batch, tokens, cin) -> (batch, tokens, cout)."""
    ins, outs = (batch, tokens, cin), (batch, tokens, cout)
    params = cin * cout + cout
    return Op(
        name=name,
        op_type="MatMul",
        kind="linear",
        index=index,
        inputs=(inp,),
        outputs=(out,),
        input_shapes=(ins,),
        output_shapes=(outs,),
        epilogue=("bias", *epilogue),
        epilogue_nodes=tuple(f"{name}.{e}" for e in ("bias", *epilogue)),
        has_bias=True,
        params=params,
        flops=2 * batch * tokens * cin * cout,
        input_bytes=4 * math.prod(ins),
        output_bytes=4 * math.prod(outs),
        weight_bytes=4 * params,
    )


def opaque(name: str, op_type: str, inputs: Sequence[str], out: str, shape: tuple[int, ...], index: int = 0) -> Op:
    """An opaque node whose inputs all have `shape` (elementwise) and whose output has `shape`."""
    n = math.prod(shape)
    return Op(
        name=name,
        op_type=op_type,
        kind="opaque",
        index=index,
        inputs=tuple(inputs),
        outputs=(out,),
        input_shapes=tuple(shape for _ in inputs),
        output_shapes=(shape,),
        input_bytes=4 * n * len(inputs),
        output_bytes=4 * n,
    )


def make_graph(name: str, ops: Iterable[Op], inputs: Mapping[str, tuple[int, ...]], outputs: Sequence[str]) -> ModelGraph:
    """A ModelGraph from ops in execution order; edges follow tensor names."""
    from dataclasses import replace

    ops = [replace(op, index=i) for i, op in enumerate(ops)]
    g = nx.DiGraph()
    tensors: dict[str, TensorInfo] = {t: TensorInfo(t, s) for t, s in inputs.items()}
    prod: dict[str, str] = {}
    for op in ops:
        g.add_node(op.name, op=op)
        for t, s in zip(op.outputs, op.output_shapes, strict=True):
            prod[t] = op.name
            tensors[t] = TensorInfo(t, s)
    for op in ops:
        for t in op.inputs:
            if t in prod:
                g.add_edge(prod[t], op.name, tensor=t, bytes=tensors[t].bytes)
    return ModelGraph(
        name=name,
        graph=g,
        order=tuple(op.name for op in ops),
        inputs=tuple(tensors[t] for t in inputs),
        outputs=tuple(tensors[t] for t in outputs),
        tensors=tensors,
    )


# ---- the graphs -----------------------------------------------------------------------------------


def chain(h: int = 28, cin: int = 16, exp: int = 96, cout: int = 24, batch: int = 1) -> ModelGraph:
    """x -> pw1 (expand) -> dw (3x3) -> pw2 (project) -> y: an inverted residual block without the skip."""
    ops = [
        conv("pw1", "pw", "x", "a", cin, exp, h, batch=batch),
        conv("dw", "dw", "a", "b", exp, exp, h, k=3, batch=batch),
        conv("pw2", "pw", "b", "y", exp, cout, h, batch=batch, epilogue=("bn",)),
    ]
    return make_graph("chain", ops, {"x": (batch, cin, h, h)}, ["y"])


def residual(h: int = 28, c: int = 24, exp: int = 144, batch: int = 1) -> ModelGraph:
    """x -> pw1 -> dw -> pw2 -> add(., x) -> y: an inverted residual block with its skip."""
    ops = [
        conv("pw1", "pw", "x", "a", c, exp, h, batch=batch),
        conv("dw", "dw", "a", "b", exp, exp, h, k=3, batch=batch),
        conv("pw2", "pw", "b", "c", exp, c, h, batch=batch, epilogue=("bn",)),
        opaque("add", "Add", ["c", "x"], "y", (batch, c, h, h)),
    ]
    return make_graph("residual", ops, {"x": (batch, c, h, h)}, ["y"])


def diamond(h: int = 14, c: int = 32, batch: int = 1) -> ModelGraph:
    """x -> pw0 -> t; t -> dw1 -> pw1 -> a; t -> dw2 -> pw2 -> b; concat(a, b) -> pw3 -> y.

    pw0's output has two consumers, so pw0 fuses with neither branch; each branch is a DW->PW pair.
    """
    ops = [
        conv("pw0", "pw", "x", "t", c, c, h, batch=batch),
        conv("dw1", "dw", "t", "t1", c, c, h, k=3, batch=batch),
        conv("pw1", "pw", "t1", "a", c, c, h, batch=batch),
        conv("dw2", "dw", "t", "t2", c, c, h, k=5, batch=batch),
        conv("pw2", "pw", "t2", "b", c, c, h, batch=batch),
        Op(
            name="cat",
            op_type="Concat",
            kind="opaque",
            index=0,
            inputs=("a", "b"),
            outputs=("ab",),
            input_shapes=((batch, c, h, h), (batch, c, h, h)),
            output_shapes=((batch, 2 * c, h, h),),
        ),
        conv("pw3", "pw", "ab", "y", 2 * c, c, h, batch=batch),
    ]
    return make_graph("diamond", ops, {"x": (batch, c, h, h)}, ["y"])


def branch(h: int = 14, c: int = 32, exp: int = 96, batch: int = 1) -> ModelGraph:
    """x -> pw1 -> e; e -> dw -> pw2 -> y1; e is also a graph output (a side branch taps it).

    Because `e` must reach memory, pw1 cannot fuse with the DW; DW->PW stays legal.
    """
    ops = [
        conv("pw1", "pw", "x", "e", c, exp, h, batch=batch),
        conv("dw", "dw", "e", "d", exp, exp, h, k=3, batch=batch),
        conv("pw2", "pw", "d", "y1", exp, c, h, batch=batch),
    ]
    return make_graph("branch", ops, {"x": (batch, c, h, h)}, ["y1", "e"])


def mlp(tokens: int = 64, dim: int = 96, hidden: int = 192, batch: int = 1, separate_act: bool = False) -> ModelGraph:
    """x -> ln -> fc1 (+GELU) -> fc2 -> add(., x) -> y: a transformer MLP with its skip.

    With `separate_act` the GELU is an opaque node between fc1 and fc2 (not absorbed by the importer).
    """
    shp, hid = (batch, tokens, dim), (batch, tokens, hidden)
    ops = [opaque("ln", "LayerNormalization", ["x"], "n", shp)]
    if separate_act:
        ops += [
            linear("fc1", "n", "h0", tokens, dim, hidden, batch),
            opaque("gelu", "Gelu", ["h0"], "h", hid),
        ]
    else:
        ops.append(linear("fc1", "n", "h", tokens, dim, hidden, batch, epilogue=("gelu",)))
    ops += [linear("fc2", "h", "o", tokens, hidden, dim, batch), opaque("add", "Add", ["o", "x"], "y", shp)]
    return make_graph("mlp", ops, {"x": shp}, ["y"])


def pw_chain(n: int = 4, h: int = 14, channels: Sequence[int] | None = None, batch: int = 1) -> ModelGraph:
    """x -> p0 -> p1 -> ... -> p{n-1} -> y: a chain of pointwise convolutions (PW->PW candidates)."""
    chans = list(channels) if channels is not None else [32] * (n + 1)
    ops = [
        conv(f"p{i}", "pw", "x" if i == 0 else f"t{i}", "y" if i == n - 1 else f"t{i + 1}", chans[i], chans[i + 1], h, batch=batch)
        for i in range(n)
    ]
    return make_graph("pw_chain", ops, {"x": (batch, chans[0], h, h)}, ["y"])


def cycle_trap(h: int = 14, c: int = 32, batch: int = 1) -> ModelGraph:
    """x -> pw1 -> a; a -> sm (Softmax, opaque) -> b; b -> pw2 -> y.

    pw1 and pw2 are not adjacent: fusing them would need the opaque node between them inside the
    kernel, i.e. a path pw1 -> sm -> pw2 leaving and re-entering the group.
    """
    ops = [
        conv("pw1", "pw", "x", "a", c, c, h, batch=batch),
        opaque("sm", "Softmax", ["a"], "b", (batch, c, h, h)),
        conv("pw2", "pw", "b", "y", c, c, h, batch=batch),
    ]
    return make_graph("cycle_trap", ops, {"x": (batch, c, h, h)}, ["y"])


# ---- tiny ONNX models -----------------------------------------------------------------------------


def onnx_blocks(h: int = 8, c: int = 8, exp: int = 24, blocks: int = 2, seed: int = 0):
    """An onnx.ModelProto: `blocks` inverted residual blocks (PW+ReLU6, DW 3x3+ReLU6, PW, Add) on a
    1 x c x h x h input, then a global average pool. Real random weights, opset 18."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def weight(name, shape):
        inits.append(numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.1, name))
        return name

    inits.append(numpy_helper.from_array(np.array(0.0, np.float32), "zero"))
    inits.append(numpy_helper.from_array(np.array(6.0, np.float32), "six"))
    x = "x"
    for b in range(blocks):
        p = f"b{b}"
        nodes += [
            helper.make_node("Conv", [x, weight(f"{p}.w1", (exp, c, 1, 1)), weight(f"{p}.b1", (exp,))], [f"{p}.e"], name=f"{p}.pw1"),
            helper.make_node("Clip", [f"{p}.e", "zero", "six"], [f"{p}.e6"], name=f"{p}.clip1"),
            helper.make_node(
                "Conv", [f"{p}.e6", weight(f"{p}.wd", (exp, 1, 3, 3)), weight(f"{p}.bd", (exp,))], [f"{p}.d"],
                name=f"{p}.dw", group=exp, pads=[1, 1, 1, 1], kernel_shape=[3, 3],
            ),
            helper.make_node("Clip", [f"{p}.d", "zero", "six"], [f"{p}.d6"], name=f"{p}.clip2"),
            helper.make_node("Conv", [f"{p}.d6", weight(f"{p}.w2", (c, exp, 1, 1)), weight(f"{p}.b2", (c,))], [f"{p}.o"], name=f"{p}.pw2"),
            helper.make_node("Add", [f"{p}.o", x], [f"{p}.y"], name=f"{p}.add"),
        ]
        x = f"{p}.y"
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["y"], name="pool"))
    graph = helper.make_graph(
        nodes, "blocks",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, h])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 1, 1])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], producer_name="tests", ir_version=9)
    onnx.checker.check_model(model)
    return model
