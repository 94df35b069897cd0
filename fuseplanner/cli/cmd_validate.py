"""`fuseplanner validate MODEL`: run the plan's kernels on this GPU and report predicted vs measured."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from fuseplanner.cli.common import parse_input_shapes, positive_int
from fuseplanner.core.errors import FusePlannerError
from fuseplanner.core.kinds import CONTEXTS, DEFAULT_CONTEXT, DTYPES, OBJECTIVES, PRECISIONS


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "validate",
        help="measure every planned layer and fused group on this GPU against the cost models",
        description="Plan MODEL for this GPU, run every unfused layer and fused group (and, with --tiles sweep, "
        "alternative tiles and the unfused alternatives) on random data, check each result against a float64 "
        "reference, time it with CUDA events (cold and warm L2), read traffic counters with Nsight Compute when "
        "allowed, and write records.jsonl, report.md and plots to --out. Needs a CUDA GPU and CuPy.",
    )
    p.add_argument("model", nargs="?", help="ONNX file or bundled model name (omit with --from-results)")
    p.add_argument("--gpu", default="auto", help="GPU spec name or TOML path; 'auto' detects this GPU (default)")
    p.add_argument("--dtype", choices=DTYPES, default="fp32", help="storage dtype (default fp32)")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help="fp32 pointwise arithmetic: exact fp32 or TF32 tensor cores (default fp32)")
    p.add_argument("--batch", type=positive_int, default=None, help="batch size (default: the model's)")
    p.add_argument("--objective", choices=OBJECTIVES, default="time", help="planner objective")
    p.add_argument("--tiles", choices=("planned", "sweep", "layers"), default="planned",
                   help="planned: the plan's tiles; sweep: also alternative tiles of each group and rejected candidates; "
                   "layers: also alternative tiles of every tiled layer run alone")
    p.add_argument("--out", default=None, help="output folder (default validation/MODEL-GPU-DTYPE-bBATCH; with "
                   "--from-results the results' folder, where the results file read is never overwritten)")
    p.add_argument("--no-ncu", action="store_true", help="do not read traffic counters (counter-free run)")
    p.add_argument("--require-ncu", action="store_true", help="fail when Nsight Compute counters cannot be read")
    p.add_argument("--ncu-timeout", type=positive_int, default=600, metavar="S",
                   help="seconds allowed for each Nsight Compute pass before falling back to counter-free")
    p.add_argument("--calibrate", nargs="?", const="now", default=None, metavar="TOML",
                   help="predict with measured GPU values: measured now (no value) or the [measured] table of a "
                   "TOML from `fuseplanner calibrate`; the report shows accuracy before and after")
    p.add_argument("--repeat", type=positive_int, default=100, help="timed runs per measurement (median; default 100)")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=DIMS",
                   help="pin a graph input shape, e.g. input=1x3x224x224 (repeatable)")
    p.add_argument("--from-results", nargs="+", metavar="RESULTS_JSON",
                   help="regenerate report.md and plots from a saved records.jsonl or results.json (no GPU needed); "
                   "with --whole: one or more whole.json files")
    p.add_argument("--repredict", action="store_true",
                   help="with --from-results: recompute our model's predictions with the current cost model and --gpu "
                   "(default: the spec the results name), re-plan each group among its measured tiles, then report")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.add_argument("--whole", action="store_true",
                   help="run the whole model with the executor, planned and unfused, as CUDA-graph replays and per "
                   "step (each step replayed alone in a CUDA graph), and compare with the whole-inference prediction in the "
                   "graph context; with Nsight Compute (unless --no-ncu) also the DRAM and L2 bytes of one whole "
                   "replay, cold and warm, against the prediction; writes whole.json and whole.md to --out")
    p.add_argument("--context", choices=CONTEXTS, default=None,
                   help=f"with --whole: the execution context the plan's time objective decides in (default "
                   f"{DEFAULT_CONTEXT}, as `plan` and `run`); with --from-results, for a result saved without its "
                   "plan: the context it was planned in (default isolated)")
    p.add_argument("--replays", type=positive_int, default=200, help="with --whole: CUDA-graph replays timed (default 200)")
    p.add_argument("--decisions", action="store_true",
                   help="with --whole: also compile and time the model planned in the other context, so every group "
                   "either context fuses is measured; with --whole --from-results: print (and write decisions.md) only "
                   "the fuse decisions of both contexts scored against the saved step times, decided again with the "
                   "current cost model and --gpu (default: the spec each result names)")
    p.add_argument("--as-saved", action="store_true",
                   help="with --whole --decisions --from-results: score the decisions saved in the results (made at "
                   "measurement time) instead of deciding again")
    p.set_defaults(func=run)


def _repredicted(args: argparse.Namespace, out: Path) -> dict:
    from fuseplanner.hw import spec as specs
    from fuseplanner.validation import fit
    from fuseplanner.validation.report import load_results, write_report

    run = load_results(args.from_results[0])
    spec = specs.gpu(run.meta.gpu) if args.gpu == "auto" else resolve_gpu(args.gpu)
    return write_report(fit.repredict(run, spec), out, source=args.from_results[0])


def resolve_gpu(name: str):
    """The GpuSpec for --gpu: for 'auto' the local GPU's bundled spec, else one built from its
    properties (with a note on stderr that it is uncalibrated); else by name or TOML path."""
    from fuseplanner.core.errors import SpecError
    from fuseplanner.hw import spec as specs

    if name != "auto":
        return specs.gpu(name)
    from fuseplanner.hw.device_spec import local_spec

    found, note = local_spec()
    if found is None:
        raise SpecError("no CUDA GPU found to detect: pass --gpu NAME or a TOML path (see `fuseplanner gpus`)")
    if note:
        sys.stderr.write(note + "\n")
    return found


def _default_out(model: str, gpu: str, dtype: str, batch: int) -> Path:
    stem = Path(model).stem if model.endswith(".onnx") else model
    return Path("validation") / f"{stem}-{gpu}-{dtype}-b{batch}"


def _print_summary(summary: dict, out: Path | None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    t = Table(title="Prediction error (absolute %, median / p90)")
    t.add_column("metric")
    for m in summary["models"]:
        t.add_column(m)
    for metric in ("gma", "dram", "time"):
        cells = []
        for m in summary["models"]:
            e = summary["errors"][m][metric]
            cells.append("n/a" if not e["n"] else f"{e['median']:.1f} / {e['p90']:.1f} (n={e['n']})")
        t.add_row(metric.upper(), *cells)
    console.print(t)
    tt = Table(title="Targets (our model)")
    for col in ("target", "limit", "achieved", "met"):
        tt.add_column(col)
    for x in summary["targets"]:
        v = "n/a" if x["value"] is None else f"{x['value']:.1f}%"
        met = "n/a" if x["met"] is None else ("yes" if x["met"] else f"no, by {x['miss_by']:.1f}")
        tt.add_row(x["what"], f"{x['limit']:.0f}%", v, met)
    console.print(tt)
    console.print(f"{summary['correct']}/{summary['checked']} results correct, {summary['failed']} failed to run")
    if out is not None:
        console.print(f"report: {out / 'report.md'}")


def run(args: argparse.Namespace) -> int:
    from fuseplanner.validation.report import report_from_results

    if args.decisions and not args.whole:
        raise FusePlannerError("--decisions goes with --whole")
    if args.as_saved and not (args.decisions and args.from_results):
        raise FusePlannerError("--as-saved goes with --whole --decisions --from-results")
    if args.from_results:
        out = Path(args.out or Path(args.from_results[0]).parent)
        if args.whole:
            return _decisions_from_results(args, out) if args.decisions else _whole_from_results(args, out)
        if len(args.from_results) > 1:
            raise FusePlannerError("--from-results takes one records.jsonl or results.json (several only with --whole)")
        if args.repredict:
            summary = _repredicted(args, out)
            _emit(args, summary, out)
            return 0
        summary = report_from_results(args.from_results[0], out)
        _emit(args, summary, out)
        return 0
    if not args.model:
        raise FusePlannerError("validate needs MODEL (an ONNX file or bundled model name) or --from-results")
    from fuseplanner.kernels import require_device

    require_device()  # fail fast, before loading or planning, when there is no GPU
    return _validate_whole(args) if args.whole else _validate(args)


def _validate_whole(args: argparse.Namespace) -> int:
    from fuseplanner.validation.whole import measure, write

    gpu = resolve_gpu(args.gpu)
    result = measure(args.model, gpu, dtype=args.dtype, precision=args.precision, batch=args.batch,
                     replays=args.replays, context=args.context or DEFAULT_CONTEXT, decisions=args.decisions,
                     counters=not args.no_ncu, require_counters=args.require_ncu,
                     input_shapes=parse_input_shapes(args.input_shape) or None,
                     progress=lambda line: sys.stderr.write(line + "\n"))  # fmt: skip
    out = Path(args.out) if args.out else _default_out(args.model, gpu.name, args.dtype, result.batch)
    js, md = write([result], out)
    if args.json:
        sys.stdout.write(result.model_dump_json(indent=1) + "\n")
    else:
        sys.stdout.write(md.read_text(encoding="utf-8") + f"\nwrote {js} and {md}\n")
    return 0


def _whole_from_results(args: argparse.Namespace, out: Path) -> int:
    """Saved `--whole` measurements against the current cost model and `--gpu` (default: the spec each
    result names), without a GPU; whole.json and whole.md written to `out` (never over the input)."""
    from fuseplanner.hw import spec as specs
    from fuseplanner.validation.whole import read, repredict, write

    if any((out / "whole.json").resolve() == Path(f).resolve() for f in args.from_results):
        raise FusePlannerError(f"--out {out} would overwrite the results read: give another folder")
    results = [repredict(r, specs.gpu(r.gpu) if args.gpu == "auto" else specs.gpu(args.gpu), args.model,
                         args.context or "isolated") for f in args.from_results for r in read(f)]  # fmt: skip
    js, md = write(results, out)
    sys.stdout.write(md.read_text(encoding="utf-8") + f"\nwrote {js} and {md}\n")
    return 0


def _decisions_from_results(args: argparse.Namespace, out: Path) -> int:
    """The fuse decisions of both contexts for saved `--whole` results, scored against their saved step
    times without a GPU: decided again with the current cost model and `--gpu` (default: the spec each
    result names), or with `--as-saved` those saved in the results; printed and written to
    `out`/decisions.md."""
    from fuseplanner.frontend.holdout import holdout_models
    from fuseplanner.hw import spec as specs
    from fuseplanner.validation.whole import net_of_replay, read
    from fuseplanner.validation.whole_decisions import to_markdown
    from fuseplanner.validation.whole_redecide import redecide

    results = [r for f in args.from_results for r in read(f)]
    if not any(r.decisions is not None for r in results):
        raise FusePlannerError("no result in these files has decision measurements: measure with a current "
                               "`fuseplanner validate MODEL --whole`")  # fmt: skip
    def spec_of(r):
        return specs.gpu(r.gpu if args.gpu == "auto" else args.gpu)

    if args.as_saved:
        results = [net_of_replay(r, spec_of(r)) for r in results]
        note = ("Decisions as saved in the results (decided at measurement time); step times net of the replay's "
                "once cost where one replay timed them.")
    else:
        results = [redecide(r, spec_of(r), args.model) for r in results]
        name = "the spec each result names" if args.gpu == "auto" else f"spec `{specs.gpu(args.gpu).name}`"
        note = (f"Decisions re-decided with {name} and the current cost model; step times as saved (net of the "
                "replay's once cost where one replay timed them).")
    text = to_markdown(results, note, frozenset(m.name for m in holdout_models()))
    out.mkdir(parents=True, exist_ok=True)
    (out / "decisions.md").write_text(text, encoding="utf-8")
    sys.stdout.write(text + f"\nwrote {out / 'decisions.md'}\n")
    return 0


def _validate(args: argparse.Namespace) -> int:
    from fuseplanner.frontend.load import load_model
    from fuseplanner.planning.search import plan as make_plan
    from fuseplanner.validation.validate import validate

    gpu = resolve_gpu(args.gpu)
    datasheet = None
    if args.calibrate:
        from fuseplanner.validation.microbench import apply_measured, calibrate

        measured = calibrate().measured() if args.calibrate == "now" else resolve_gpu(args.calibrate).measured
        datasheet, gpu = gpu, apply_measured(gpu, measured)
    graph = load_model(args.model, parse_input_shapes(args.input_shape) or None, args.batch)
    plan = make_plan(graph, gpu, dtype=args.dtype, batch=args.batch, objective=args.objective,
                     precision=args.precision)
    out = Path(args.out) if args.out else _default_out(args.model, gpu.name, args.dtype, plan.batch)
    ncu = False if args.no_ncu else (True if args.require_ncu else "auto")
    results = validate(graph, gpu, plan, tiles=args.tiles, dtype=args.dtype, batch=plan.batch, out_dir=out,
                       ncu=ncu, progress=not args.json, repeat=args.repeat, datasheet_gpu=datasheet,
                       command=_command(args), ncu_timeout_s=args.ncu_timeout)
    _emit(args, results.summary, out)
    return 0


def _command(args: argparse.Namespace) -> str:
    """The command line that reproduces this run (recorded in the results)."""
    parts = ["fuseplanner", "validate", args.model, "--gpu", args.gpu, "--dtype", args.dtype, "--tiles", args.tiles]
    if args.precision != "fp32":
        parts += ["--precision", args.precision]
    if args.batch:
        parts += ["--batch", str(args.batch)]
    if args.objective != "time":
        parts += ["--objective", args.objective]
    for s in args.input_shape:
        parts += ["--input-shape", s]
    parts += [f for f, on in (("--no-ncu", args.no_ncu), ("--require-ncu", args.require_ncu)) if on]
    if args.calibrate:
        parts += ["--calibrate"] + ([] if args.calibrate == "now" else [args.calibrate])
    if args.repeat != 100:
        parts += ["--repeat", str(args.repeat)]
    return " ".join(shlex.quote(p) for p in parts)


def _emit(args: argparse.Namespace, summary: dict, out: Path | None) -> None:
    if args.json:
        sys.stdout.write(json.dumps(summary, indent=1, default=float) + "\n")
    else:
        _print_summary(summary, out)
