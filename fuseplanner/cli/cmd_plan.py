"""`fuseplanner plan MODEL`: which DW/PW layers to fuse on a GPU, with which tiles, and what it saves."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fuseplanner.cli.common import add_model_arguments, load_from_args, parse_input_shapes
from fuseplanner.core.errors import PlanError
from fuseplanner.core.kinds import (
    CONTEXTS,
    COST_MODELS,
    DEFAULT_CONTEXT,
    DTYPES,
    GROUP_KINDS,
    OBJECTIVES,
    PRECISIONS,
)

DEFAULT_GPU = "h100"
#: How to read a tile (in `plan --help` and the README).
TILE_HELP = (
    "Tiles read THxTW/fTF/cTC/tTHREADS: 8x28/f16/c8/t256 means each thread block computes 8x28 output "
    "pixels (rows x columns) of the kernel's last layer for 16 of its output channels (filters), loops over "
    "channels in chunks of 8, and runs 256 threads. 'library' marks a layer run by a library kernel."
)


# ---- options shared with `compare` ----------------------------------------------------------------


def kinds_list(text: str) -> list[str]:
    """argparse type: comma-separated fused kinds (``none`` or empty for no fusion)."""
    items = [k.strip() for k in text.split(",") if k.strip()]
    if items == ["none"]:
        return []
    bad = [k for k in items if k not in GROUP_KINDS]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown fusion kind {bad[0]!r}: use any of {','.join(GROUP_KINDS)} or none")
    return list(dict.fromkeys(items))


def add_plan_options(p: argparse.ArgumentParser) -> None:
    """--dtype, --objective, --kinds, --model, --precision, --context (MODEL, --input-shape, --batch come from
    common)."""
    p.add_argument("--dtype", choices=DTYPES, default="fp32", help="storage dtype (default fp32)")
    p.add_argument(
        "--objective", choices=OBJECTIVES, default="time",
        help="what the plan minimises over the whole model: predicted time (default), GMA bytes (L2 level) or DRAM bytes",
    )
    p.add_argument(
        "--kinds", type=kinds_list, default=None, metavar="K,K",
        help=f"fused kinds allowed (default all: {','.join(GROUP_KINDS)}; e.g. pw_dw,dw_pw,pw_pw for the paper's pairs)",
    )
    p.add_argument("--model", dest="cost_model", choices=COST_MODELS, default="ours",
                   help="cost model: ours (sectors, L2/DRAM, time) or paper (the published GMA formulas)")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help="fp32 pointwise math, or TF32 tensor cores for fp32 storage")
    add_context_option(p)


def add_context_option(p: argparse.ArgumentParser) -> None:
    """--context: the execution context the plan's time objective decides in (`plan`, `compare`, `run`)."""
    p.add_argument("--context", choices=CONTEXTS, default=DEFAULT_CONTEXT,
                   help="execution context the time objective decides in: back-to-back launches in a CUDA graph "
                   "as the executor runs the model (default; spec graph facts, L2 residency) or isolated launches "
                   "after an L2 flush; either way the plan's costs are isolated-context")


def plan_kwargs(args: argparse.Namespace) -> dict:
    """Keyword arguments of `planner.plan` from parsed options."""
    return {
        "dtype": args.dtype,
        "batch": args.batch,
        "objective": args.objective,
        "kinds": args.kinds,
        "model": args.cost_model,
        "precision": args.precision,
        "context": args.context,
    }


def resolve_gpu(name: str | None):
    """(GpuSpec, note) for --gpu; without it (or 'auto') the local GPU (a spec built from its properties,
    with a note, when none is bundled), else h100 with a note saying so."""
    from fuseplanner.hw import spec as specs

    if name and name != "auto":
        return specs.gpu(name), ""
    from fuseplanner.hw.device_spec import local_spec

    found, note = local_spec()
    if found is not None:
        return found, note
    return specs.gpu(DEFAULT_GPU), f"note: no CUDA GPU detected here; planned for {DEFAULT_GPU} (choose one with --gpu NAME|PATH)"


def print_notes(result) -> None:
    """One `note:` line on stderr per warning of a plan (what limits trust in its predictions)."""
    for w in result.warnings:
        sys.stderr.write(f"note: {w}\n")


def check_output_path(text: str | None, option: str, allow_stdout: bool = False) -> None:
    """Refuse an output path whose folder does not exist (before any work is done)."""
    if text is None or (allow_stdout and text == "-"):
        return
    p = Path(text)
    if p.is_dir():
        raise PlanError(f"{option} {text!r} is a directory: give a file path")
    if not p.parent.is_dir():
        raise PlanError(f"{option} {text!r}: folder {str(p.parent)!r} does not exist")


def _print_whole(w) -> None:
    """One line: the whole inference planned and unfused in the graph context (`predict_whole`)."""
    sys.stdout.write(f"graph context (whole inference, CUDA-graph replay): planned {w.planned.time_s * 1e6:.1f} us, "
                     f"unfused {w.unfused.time_s * 1e6:.1f} us, saving {w.saving:.1%}; DRAM "
                     f"{w.planned.dram_bytes / 1e6:.2f} MB planned ({w.planned.saved_read_bytes / 1e6:.2f} MB of reads "
                     "served from L2)\n")


# ---- the command --------------------------------------------------------------------------------


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "plan",
        help="choose the fusion groups and tiles for a model on a GPU",
        description="Find the legal DW/PW fusion groups of an ONNX model, search every feasible tile of "
        "each group and layer, and choose the set of groups that minimises the whole model's predicted "
        "time (or traffic) exactly. Prints a table and a summary line.",
        epilog=TILE_HELP,
    )
    add_model_arguments(p)
    p.add_argument("--gpu", default=None, metavar="NAME|PATH",
                   help="GPU spec name (see `fuseplanner gpus`) or TOML file; default: the local GPU, else h100")
    add_plan_options(p)
    p.add_argument("--json", default=None, metavar="PATH|-", help="write the plan as JSON ('-': stdout, nothing else)")
    p.add_argument("--onnx", default=None, metavar="PATH",
                   help="write the model with each fused group replaced by one ai.fuseplanner FusedConv node")
    p.add_argument("--markdown", default=None, metavar="PATH", help="write the report as markdown")
    p.add_argument("--schema", action="store_true", help="print the JSON schema of a plan and exit (MODEL is ignored)")
    p.set_defaults(func=run)
    # MODEL is optional only with --schema: make it optional and check in run()
    for action in p._actions:
        if action.dest == "model" and not action.option_strings:
            action.nargs = "?"


def run(args: argparse.Namespace) -> int:
    from fuseplanner.planning.result import Plan

    if args.schema:
        sys.stdout.write(json.dumps(Plan.model_json_schema(), indent=2) + "\n")
        return 0
    if not args.model:
        raise PlanError("give a MODEL (an ONNX file or a bundled name such as mobilenet_v2)")
    for text, opt in ((args.json, "--json"), (args.onnx, "--onnx"), (args.markdown, "--markdown")):
        check_output_path(text, opt, allow_stdout=opt == "--json")
    from fuseplanner.planning import export
    from fuseplanner.planning.search import plan, shared_searches
    from fuseplanner.planning.whole import predict_whole

    shapes = parse_input_shapes(args.input_shape)
    spec, note = resolve_gpu(args.gpu)
    graph = load_from_args(args)
    with shared_searches():  # the graph-context line's unfused plan reuses this plan's searches
        result = plan(graph, spec, **plan_kwargs(args))
        whole = predict_whole(graph, spec, result, "graph")
    # build every output in memory first: nothing is written unless all of them succeed
    outputs: list[tuple[str, str]] = []
    json_text = result.to_json()
    if args.json and args.json != "-":
        outputs.append((args.json, json_text))
    if args.markdown:
        outputs.append((args.markdown, export.to_markdown(result)))
    onnx_model = None
    if args.onnx:
        onnx_model = export.rewrite_onnx(result, args.model, shapes, args.batch)
        export.check_onnx(onnx_model, Path(args.onnx).parent)
    for path, text in outputs:
        export.write_text(text, path)
    if onnx_model is not None:
        export.save_onnx(onnx_model, args.onnx, args.model)
    if note:
        sys.stderr.write(note + "\n")
    print_notes(result)
    if args.json == "-":
        sys.stdout.write(json_text + "\n")
        return 0
    from fuseplanner.cli.plan_table import print_plan

    print_plan(result)
    _print_whole(whole)
    for path, what in ((args.json, "plan JSON"), (args.markdown, "markdown report"), (args.onnx, "rewritten ONNX")):
        if path:
            sys.stdout.write(f"wrote {what} to {path}\n")
    return 0
