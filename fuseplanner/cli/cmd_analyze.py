"""`fuseplanner analyze accuracy|decisions|tiles|registers|plans RESULTS...`: saved validation runs,
analysed without a GPU (the logic lives in `fuseplanner.analysis`; this module parses and prints)."""

from __future__ import annotations

import argparse
import shutil
import sys

from fuseplanner.cli.cmd_plan import check_output_path

HELP = {
    "accuracy": "prediction errors (GMA, DRAM, time) and fuse decisions, per run and pooled",
    "decisions": "fuse decisions against the threshold, rank correlation, and the groups that disagree",
    "tiles": "the tiles the planner gives layers swept alone (--tiles layers) against the measured best",
    "registers": "the compiled-register table refitted to recorded launches, and launches over the ceiling",
    "plans": "whole plans' summed predicted and measured time (compare specs' plans on one GPU)",
    "generalisation": "each training model's records scored with the spec, and with --loo refitted without that model",
}


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "analyze", help="analyse saved validation runs (records.jsonl or results.json) without a GPU",
        description="Analyse the records.jsonl (or older results.json) files of `fuseplanner validate` runs (plain or .gz). By default "
        "the `ours` predictions and fuse decisions are recomputed with --gpu's spec; the measurements are the "
        "recorded ones. Prints tables; --markdown writes them as markdown.",
    )  # fmt: skip
    sub = p.add_subparsers(dest="analysis", metavar="ANALYSIS", parser_class=type(p))
    for name, text in HELP.items():
        sp = sub.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        sp.add_argument("results", nargs="+", metavar="RESULTS", help="records.jsonl or results.json files of validation runs (plain or .gz)")
        sp.add_argument("--gpu", default="h100", metavar="NAME|PATH", help="GPU spec name or TOML file (default h100)")
        sp.add_argument("--markdown", default=None, metavar="PATH|-", help="write the tables as markdown ('-': stdout)")
        if name in ("accuracy", "decisions", "tiles"):
            sp.add_argument("--stored", action="store_true",
                            help="use the predictions recorded in the runs instead of recomputing them")
            sp.add_argument("--model", default=None, metavar="PATH",
                            help="the ONNX model the runs measured, when not the bundled model they name")
        sp.set_defaults(func=RUNNERS[name])
    _options(sub.choices)
    p.set_defaults(func=lambda args: _missing(p))


def _options(parsers: dict) -> None:
    d = parsers["decisions"]
    d.add_argument("--from", dest="lo", type=float, default=0.8, help="lowest threshold scanned (default 0.8)")
    d.add_argument("--to", dest="hi", type=float, default=2.0, help="highest threshold scanned (default 2.0)")
    d.add_argument("--step", type=float, default=0.05, help="threshold step (default 0.05)")
    a = parsers["accuracy"]
    a.add_argument("--by-work", action="store_true", help="also the layer-by-layer launches' predicted / measured "
                   "time by work (FLOP bands): whether the model runs slow or fast with size")
    a.add_argument("--by-block", action="store_true", help="also the layer-by-layer PW/linear launches' predicted / "
                   "measured time by outputs per thread (the register block a thread accumulates)")
    a.add_argument("--by-kind", action="store_true", help="also the one-launch records' predicted / measured time "
                   "per kernel kind (dw, pw, linear and the fused kinds): where a kind's bias sits")
    a.add_argument("--train", nargs="+", default=None, metavar="RESULTS",
                   help="the runs the spec was fitted on: also score RESULTS without the records whose (model, dtype, "
                   "batch, nodes, tile) a training record has, and each model's records alone")
    g = parsers["generalisation"]
    g.add_argument("--train", nargs="+", required=True, metavar="RESULTS",
                   help="the runs the spec's kernel fields were fitted on (each model's are scored too)")
    g.add_argument("--loo", action="store_true", help="leave one model out: refit the kernel fields (the bundled "
                   "fit's stages, fit_records.BUNDLED_STAGES) on the other models' training runs and score the model")
    g.add_argument("--max-iter", type=int, default=400, metavar="N",
                   help="Nelder-Mead iterations per fitted stage with --loo (default 400, as the bundled fit)")
    g.add_argument("--jobs", type=int, default=1, metavar="N", help="left-out models refitted at once (default 1)")
    r = parsers["registers"]
    r.add_argument("--python", action="store_true", help="also print the fitted table as Python (registers.COMPILED)")
    r.add_argument("--compile", action="store_true", help="compile the runs' fused tiles with nvcc (on PATH; "
                   "no GPU) and compare the registers it allocates with the cost model's estimate")
    r.add_argument("--jobs", type=int, default=2, help="parallel nvcc compiles with --compile (default 2)")


def _missing(p: argparse.ArgumentParser) -> int:
    p.print_help(sys.stderr)
    return 2


def _load(args, predicted: bool = True):
    from fuseplanner.analysis.runs import load_runs
    from fuseplanner.hw.spec import gpu

    check_output_path(args.markdown, "--markdown", allow_stdout=True)
    spec = gpu(args.gpu)
    keep = not predicted or getattr(args, "stored", False)
    return spec, load_runs(args.results, None if keep else spec, getattr(args, "model", None))


def _show(tables, args, extra: str = "") -> int:
    from fuseplanner.analysis.tables import markdown_all

    if args.markdown == "-":
        sys.stdout.write(markdown_all(tables) + extra)
        return 0
    from rich.console import Console
    from rich.table import Table as RichTable

    con = Console(highlight=False, markup=False)  # cells are plain text
    for t in tables:
        rt = RichTable(title=t.title)
        for i, c in enumerate(t.columns):
            rt.add_column(c, justify="right" if t.is_numeric(i) else "left")
        for row in t.rows:
            rt.add_row(*row)
        con.print(rt)
        if t.note:
            con.print(t.note)
    if extra:
        con.print(extra)
    if args.markdown:
        from fuseplanner.planning.export import write_text

        write_text(markdown_all(tables) + extra, args.markdown)
        con.print(f"wrote {args.markdown}")
    return 0


def run_accuracy(args: argparse.Namespace) -> int:
    from fuseplanner.analysis.accuracy import accuracy, accuracy_table

    spec, runs = _load(args)
    if args.train:
        _print_generalisation(runs, args)
    name = None if args.stored else spec.name
    tables = [accuracy_table(accuracy(runs), name)]
    if args.by_work:
        from fuseplanner.analysis.accuracy import work_bias, work_bias_table

        tables.append(work_bias_table(work_bias(runs), name))
    if args.by_block:
        from fuseplanner.analysis.accuracy import block_bias, block_bias_table

        tables.append(block_bias_table(block_bias(runs), name))
    if args.by_kind:
        from fuseplanner.analysis.accuracy import kind_bias, kind_bias_table

        tables.append(kind_bias_table(kind_bias(runs), name))
    return _show(tables, args)


def _print_generalisation(runs, args: argparse.Namespace) -> None:
    """Time errors of every test record, of those no training record repeats, and per model."""
    from fuseplanner.analysis.generalisation import dedup_accuracy, per_model
    from fuseplanner.analysis.runs import load_runs

    s = dedup_accuracy(runs, load_runs(args.train))

    def cell(e) -> str:
        return "n/a" if not e.n else f"median {e.median:.1f}%, p90 {e.p90:.1f}% (n={e.n})"

    sys.stdout.write(f"time error, all test records: {cell(s.all['time'])}\n"
                     f"time error, deduplicated against training ({s.kept} of {s.records} kept): "
                     f"{cell(s.deduplicated['time'])}\n")
    for model, errs in per_model(runs).items():
        sys.stdout.write(f"  {model}: {cell(errs['time'])}\n")


def run_decisions(args: argparse.Namespace) -> int:
    from fuseplanner.analysis.decisions import decision_tables
    from fuseplanner.analysis.runs import fuse_threshold

    spec, runs = _load(args)
    return _show(decision_tables(runs, fuse_threshold(spec), args.lo, args.hi, args.step), args)


def run_tiles(args: argparse.Namespace) -> int:
    from fuseplanner.analysis.tile_choices import tile_tables

    return _show(tile_tables(_load(args)[1]), args)


def run_registers(args: argparse.Namespace) -> int:
    from fuseplanner.analysis import register_checks as rc
    from fuseplanner.core.errors import AnalysisError

    nvcc = shutil.which("nvcc") if args.compile else None
    if args.compile and nvcc is None:
        raise AnalysisError("--compile needs nvcc on PATH (the CUDA toolkit; no GPU)")
    spec, runs = _load(args, predicted=False)
    tables, fitted = rc.register_tables(runs, spec.hw, getattr(args, "model", None))
    if nvcc:
        from fuseplanner.analysis import nvcc_registers as nv

        jobs = nv.distinct_fused_steps(runs, spec)
        tables.append(nv.compiled_table(nv.compiled_registers(jobs, spec, nvcc, max(1, args.jobs)), len(jobs)))
    return _show(tables, args, "\n" + rc.python_source(fitted) if args.python else "")


def run_plans(args: argparse.Namespace) -> int:
    from fuseplanner.analysis.plan_totals import plan_total, totals_table

    _, runs = _load(args, predicted=False)
    return _show([totals_table([plan_total(r) for r in runs])], args)


def run_generalisation(args: argparse.Namespace) -> int:
    from fuseplanner.analysis import loo
    from fuseplanner.core.errors import AnalysisError
    from fuseplanner.hw.spec import gpu

    if args.jobs < 1 or args.max_iter < 1:
        raise AnalysisError("--jobs and --max-iter must be at least 1")
    check_output_path(args.markdown, "--markdown", allow_stdout=True)
    spec = gpu(args.gpu)
    fitter = loo.staged_fit if args.loo else loo.no_refit
    result = loo.leave_one_model_out(spec, args.results, args.train, max_iter=args.max_iter, jobs=args.jobs,
                                     fitter=fitter)  # fmt: skip
    tables = loo.loo_tables(result, spec.name)
    return _show(tables if args.loo else tables[1:], args)


RUNNERS = {"accuracy": run_accuracy, "decisions": run_decisions, "tiles": run_tiles, "registers": run_registers,
           "plans": run_plans, "generalisation": run_generalisation}  # fmt: skip
