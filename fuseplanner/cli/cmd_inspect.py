"""`fuseplanner inspect MODEL`: the operator graph fuseplanner sees (kinds, shapes, epilogues, costs)."""

from __future__ import annotations

import argparse
import json
import sys

from ..ir import ModelGraph, Op
from .common import add_model_arguments, load_from_args


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "inspect",
        help="list the layers of an ONNX model as fuseplanner sees them",
        description="Read an ONNX model and list its operators: DW/PW/conv/linear kinds, shapes, "
        "kernel/stride, absorbed epilogues, parameters, FLOPs and bytes.",
    )
    add_model_arguments(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--kinds", default=None, metavar="K,K",
                   help="only list these kinds in the table (dw,pw,conv,linear,opaque)")
    p.set_defaults(func=run)


def _io(name: str, shape: tuple[int, ...]) -> dict:
    return {"name": name, "shape": list(shape)}


def layer_record(op: Op) -> dict:
    """One layer as a JSON-ready dict."""
    return {
        "name": op.name,
        "op_type": op.op_type,
        "kind": op.kind,
        "inputs": [_io(t, s) for t, s in zip(op.inputs, op.input_shapes, strict=False)],
        "output": _io(op.outputs[0], op.output_shapes[0]) if op.outputs and op.output_shapes else None,
        "kernel": list(op.kernel) if op.is_conv else None,
        "stride": list(op.stride) if op.is_conv else None,
        "pads": list(op.pads) if op.is_conv else None,
        "dilation": list(op.dilation) if op.is_conv else None,
        "groups": op.groups if op.is_conv else None,
        "epilogue": list(op.epilogue),
        "epilogue_nodes": list(op.epilogue_nodes),
        "has_bias": op.has_bias,
        "dtype": op.dtype,
        "params": op.params,
        "flops": op.flops,
        "input_bytes": op.input_bytes,
        "output_bytes": op.output_bytes,
        "weight_bytes": op.weight_bytes,
    }


def totals(graph: ModelGraph) -> dict:
    ops = graph.ops()
    return {
        "layers": len(ops),
        "params": sum(o.params for o in ops),
        "flops": sum(o.flops for o in ops),
        "weight_bytes": sum(o.weight_bytes for o in ops),
        "activation_bytes": sum(o.input_bytes + o.output_bytes for o in ops),
    }


def report(graph: ModelGraph) -> dict:
    """The JSON object `inspect --json` prints."""
    return {
        "model": graph.name,
        "source": graph.source,
        "opset": graph.opset,
        "inputs": [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype} for t in graph.inputs],
        "outputs": [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype} for t in graph.outputs],
        "layers": [layer_record(op) for op in graph.ops()],
        "counts": graph.counts(),
        "totals": totals(graph),
    }


def _shape(s: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in s) if s else "?"


def _human(n: float, unit: str = "") -> str:
    for factor, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= factor:
            return f"{n / factor:.2f}{suffix}{unit}"
    return f"{n:.0f}{unit}"


def _print_table(graph: ModelGraph, kinds: set[str] | None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=sys.stdout, width=None if sys.stdout.isatty() else 200)
    table = Table(title=f"{graph.name}: {len(graph)} layers", show_lines=False)
    for col, justify in (("#", "right"), ("name", "left"), ("kind", "left"), ("op", "left"), ("input", "left"),
                         ("output", "left"), ("k/s", "left"), ("g", "right"), ("epilogue", "left"),
                         ("params", "right"), ("FLOPs", "right"), ("bytes", "right")):
        table.add_column(col, justify=justify, overflow="fold" if col == "name" else "ellipsis")
    for i, op in enumerate(graph.ops()):
        if kinds and op.kind not in kinds:
            continue
        ks = f"{op.kernel[0]}x{op.kernel[1]}/{op.stride[0]}" if op.is_conv else ""
        table.add_row(
            str(i), op.name, op.kind, op.op_type,
            " ".join(_shape(s) for s in op.input_shapes), " ".join(_shape(s) for s in op.output_shapes),
            ks, str(op.groups) if op.is_conv else "", "+".join(op.epilogue),
            _human(op.params), _human(op.flops), _human(op.input_bytes + op.output_bytes + op.weight_bytes, "B"),
        )
    console.print(table)
    c, t = graph.counts(), totals(graph)
    ins = ", ".join(f"{x.name} {_shape(x.shape)} {x.dtype}" for x in graph.inputs)
    console.print(
        f"[bold]{graph.name}[/bold] (opset {graph.opset}; inputs {ins}): "
        f"{c['dw']} dw, {c['pw']} pw, {c['conv']} conv, {c['linear']} linear, {c['other']} other; "
        f"{_human(t['params'])} params, {_human(t['flops'])}FLOPs, weights {_human(t['weight_bytes'], 'B')}, "
        f"activation traffic layer by layer {_human(t['activation_bytes'], 'B')}"
    )


def run(args: argparse.Namespace) -> int:
    graph = load_from_args(args)
    if args.json:
        sys.stdout.write(json.dumps(report(graph)) + "\n")
        return 0
    kinds = {k.strip() for k in args.kinds.split(",")} if args.kinds else None
    _print_table(graph, kinds)
    return 0
