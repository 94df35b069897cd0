"""`fuseplanner inspect MODEL`: the operator graph fuseplanner sees (kinds, shapes, epilogues, costs)."""

from __future__ import annotations

import argparse
import json
import sys

from fuseplanner.cli.common import add_model_arguments, load_from_args
from fuseplanner.core.ir import ModelGraph, Op


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


def source_opset(graph: ModelGraph) -> int | None:
    """The default-domain opset the model file declares (before any upgrade), when it has a file."""
    if not graph.source:
        return None
    from fuseplanner.frontend.load import read_model
    from fuseplanner.frontend.shapes import default_opset

    return default_opset(read_model(graph.source)[0])


def _opset_text(graph: ModelGraph, declared: int | None) -> str:
    if declared is None or declared == graph.opset:
        return f"opset {graph.opset}"
    return f"opset {declared}, upgraded to {graph.opset}"


def report(graph: ModelGraph, declared: int | None = None) -> dict:
    """The JSON object `inspect --json` prints (`declared`: the file's own opset)."""
    return {
        "model": graph.name,
        "source": graph.source,
        "opset": graph.opset,
        "source_opset": graph.opset if declared is None else declared,
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


#: Columns of the inspect table; the ones marked False are dropped on consoles narrower than WIDE.
COLUMNS = (("#", "right", True), ("name", "left", True), ("kind", "left", True), ("op", "left", False),
           ("input", "left", True), ("output", "left", True), ("k/s", "left", True), ("g", "right", False),
           ("epilogue", "left", True), ("params", "right", True), ("FLOPs", "right", False),
           ("bytes", "right", False))  # fmt: skip
WIDE = 120


def _row(i: int, op: Op) -> list[str]:
    ks = f"{op.kernel[0]}x{op.kernel[1]}/{op.stride[0]}" if op.is_conv else ""
    return [
        str(i), op.name, op.kind, op.op_type,
        " ".join(_shape(s) for s in op.input_shapes), " ".join(_shape(s) for s in op.output_shapes),
        ks, str(op.groups) if op.is_conv else "", "+".join(op.epilogue),
        _human(op.params), _human(op.flops), _human(op.input_bytes + op.output_bytes + op.weight_bytes, "B"),
    ]  # fmt: skip


def layers_table(graph: ModelGraph, kinds: set[str] | None, width: int):
    """The layers as a rich Table that fits `width` columns: narrow consoles drop op, g, FLOPs and
    bytes; names and epilogues wrap; shapes and numbers are never cut."""
    from rich import box
    from rich.table import Table

    keep = [i for i, (_, _, essential) in enumerate(COLUMNS) if essential or width >= WIDE]
    rows = [_row(i, op) for i, op in enumerate(graph.ops()) if not kinds or op.kind in kinds]
    table = Table(title=f"{graph.name}: {len(graph)} layers", show_lines=False,
                  box=box.HEAVY_HEAD if width >= WIDE else box.SIMPLE_HEAD, collapse_padding=width < WIDE,
                  pad_edge=width >= WIDE, padding=(0, 1) if width >= WIDE else (0, 1, 0, 0))
    for i in keep:
        col, justify, _ = COLUMNS[i]
        if col in ("name", "epilogue", "input", "output"):  # wrap between shapes; fold only long names
            longest = max([len(col), *(len(w) for r in rows for w in r[i].split())])
            table.add_column(col, justify=justify, overflow="fold", min_width=min(longest, 10 if col == "name" else 99))
        else:
            cells = [len(r[i]) for r in rows]
            table.add_column(col, justify=justify, no_wrap=True, min_width=max([len(col), *cells]))
    for r in rows:
        table.add_row(*(r[i] for i in keep))
    return table


def _print_table(graph: ModelGraph, kinds: set[str] | None) -> None:
    from rich.console import Console

    console = Console(file=sys.stdout, width=None if sys.stdout.isatty() else 200)
    table = layers_table(graph, kinds, console.width)
    console.print(table)
    c, t = graph.counts(), totals(graph)
    ins = ", ".join(f"{x.name} {_shape(x.shape)} {x.dtype}" for x in graph.inputs)
    console.print(
        f"[bold]{graph.name}[/bold] ({_opset_text(graph, source_opset(graph))}; inputs {ins}): "
        f"{c['dw']} dw, {c['pw']} pw, {c['conv']} conv, {c['linear']} linear, {c['other']} other; "
        f"{_human(t['params'])} params, {_human(t['flops'])}FLOPs, weights {_human(t['weight_bytes'], 'B')}, "
        f"activation traffic layer by layer {_human(t['activation_bytes'], 'B')}"
    )


def run(args: argparse.Namespace) -> int:
    graph = load_from_args(args)
    if args.json:
        sys.stdout.write(json.dumps(report(graph, source_opset(graph))) + "\n")
        return 0
    kinds = {k.strip() for k in args.kinds.split(",")} if args.kinds else None
    _print_table(graph, kinds)
    return 0
