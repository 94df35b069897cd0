"""`fuseplanner compare MODEL --gpus a,b,c`: the same model planned on several GPUs, savings side by side."""

from __future__ import annotations

import argparse
import json
import sys

from fuseplanner.cli.cmd_plan import add_plan_options, check_output_path, plan_kwargs, print_notes
from fuseplanner.cli.common import add_model_arguments, load_from_args
from fuseplanner.core.errors import PlanError
from fuseplanner.core.kinds import OBJECTIVES

DEFAULT_GPUS = "h100,a100_80gb,gtx1660,orin"


def gpu_list(text: str) -> list[str]:
    """argparse type: comma-separated GPU names or TOML paths."""
    items = list(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
    if not items:
        raise argparse.ArgumentTypeError("give at least one GPU, e.g. h100,a100_80gb")
    return items


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "compare",
        help="plan one model on several GPUs and show the savings side by side",
        description="Plan the same model for each GPU and compare the predicted savings (time, GMA, DRAM, "
        "launches) and which fusion kinds each plan uses.",
    )
    add_model_arguments(p)
    p.add_argument("--gpus", type=gpu_list, default=gpu_list(DEFAULT_GPUS), metavar="A,B,...",
                   help=f"GPU names or TOML paths (default {DEFAULT_GPUS}; see `fuseplanner gpus`)")
    add_plan_options(p)
    p.add_argument("--json", default=None, metavar="PATH|-", help="write all plans as one JSON object ('-': stdout)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fuseplanner.hw.spec import gpu
    from fuseplanner.planning.search import plan

    check_output_path(args.json, "--json", allow_stdout=True)
    specs = [gpu(name) for name in args.gpus]
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise PlanError(f"--gpus names the same GPU twice ({', '.join(names)}): give each once")
    graph = load_from_args(args)
    kwargs = plan_kwargs(args)
    plans = [plan(graph, s, **kwargs) for s in specs]
    for p in plans:
        print_notes(p)
    if args.json:
        doc = {
            "model": graph.name,
            "gpus": names,
            "savings": {
                p.gpu: {m: p.totals.saving(m) for m in OBJECTIVES} for p in plans
            },
            "plans": [json.loads(p.to_json(indent=None)) for p in plans],
        }
        text = json.dumps(doc, indent=2)
        if args.json == "-":
            sys.stdout.write(text + "\n")
            return 0
        from fuseplanner.planning.export import write_text

        write_text(text, args.json)
    from rich.console import Console

    from fuseplanner.cli.plan_table import compare_table, kinds_table

    con = Console(highlight=False)
    con.print(compare_table(plans))
    con.print(kinds_table(plans))
    if args.json:
        con.print(f"wrote comparison JSON to {args.json}")
    return 0
