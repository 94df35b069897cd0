"""`fuseplanner calibrate`: measure this GPU and write a GPU spec TOML with a [measured] table, or fit
the kernel parameters to validation results and write a spec with its own [fit] table."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fuseplanner.core.errors import FusePlannerError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "calibrate",
        help="measure DRAM/L2 bandwidth, launch overhead and FP32/FP16 throughput of this GPU",
        description="Measure this GPU (device-to-device copy, L2-resident reads, empty-kernel launches, FMA loops, "
        "CUDA graphs of back-to-back empty kernels, spin kernels and operator-library ops for the graph context's "
        "launch interval, kernel tail and opaque-operator floor; CUDA-event medians) and write a GPU spec TOML whose [measured] table the cost model prefers over "
        "datasheet values. Use it with `--gpu PATH` in plan/validate; `fuseplanner validate --calibrate` "
        "reports accuracy before and after. Then (unless --no-sweep) it runs a built-in micro-sweep of fuseplanner's "
        "DW, PW, linear and fused kernels and fits every kernel parameter to it, each with a bootstrap interval, into "
        "the spec's own [fit] table (records saved beside it as FILE.sweep.json.gz). Needs a CUDA GPU and CuPy. "
        "With --from-sweep or --from-results it needs no GPU: --from-results "
        "fits the kernel parameters (achieved FLOPs per warp per clock of fuseplanner's kernels, the L2 "
        "fraction of fused kernels' weight re-reads, the fuse threshold) to the measurements in validation "
        "results files and writes the spec with them as its own [fit] table (GPU, driver, date, records); "
        "--from-whole fits the graph context's terms (operator-library costs, per-class launch terms, graph fuse "
        "threshold) to whole-model runs of `fuseplanner validate --whole`.",
    )
    p.add_argument("--gpu", default="auto", help="spec to start from: 'auto' detects this GPU (default), or a name/path")
    p.add_argument("--out", default=None, help="TOML to write (default: SPEC_calibrated.toml)")
    p.add_argument("--device", type=int, default=0, help="CUDA device index (default 0)")
    p.add_argument("--json", action="store_true", help="print the measurements as JSON on stdout")
    p.add_argument("--from-results", nargs="+", metavar="RESULTS_JSON", default=None,
                   help="fit the kernel-efficiency fields to these `fuseplanner validate` results (no GPU); "
                   "--gpu then names the spec they were measured with (default: the one in the first file)")
    p.add_argument("--model", default=None, help="with --from-results: the ONNX model the results were "
                   "measured on, when not the bundled model they name")
    p.add_argument("--quick", action="store_true", help="the quick micro-sweep (about a quarter of the launches, "
                   "fewer tiles and timed runs): about 2 minutes instead of about 10, wider intervals")
    p.add_argument("--from-scratch", action="store_true",
                   help="start the kernel fit from generic values (validation.sweep.SCRATCH_START) instead of the "
                   "spec's own or borrowed fit, so that no fitted value of another run leaks in")
    p.add_argument("--no-sweep", action="store_true", help="measure the GPU facts only (no micro-sweep, no kernel fit)")
    p.add_argument("--ncu", action="store_true", help="read Nsight Compute L2 counters of the sweep too, to fit the "
                   "fused kernels' L2 weight fractions (slower; without it they are kept from the starting fit)")
    p.add_argument("--resamples", type=int, default=None, metavar="N",
                   help="bootstrap resamples for each fitted value's interval (default 8 for the micro-sweep, 0 with "
                   "--from-results: there each resample is a full refit, and the report flags values the records "
                   "cannot identify; 0: none)")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="with --from-results --resamples: bootstrap refits run at once; with --from-whole: processes "
                   "scoring the fuse thresholds (default 1)")
    p.add_argument("--from-sweep", default=None, metavar="SWEEP_JSON",
                   help="fit the kernel parameters to a saved micro-sweep (FILE.sweep.json.gz, written by "
                   "`calibrate --out FILE`) instead of measuring (no GPU); --gpu names the spec to start from")
    p.add_argument("--from-whole", nargs="+", default=None, metavar="WHOLE_JSON",
                   help="fit the graph context's terms to these `fuseplanner validate --whole` runs (no GPU): the "
                   "operator-library costs, the per-class launch terms (with bootstrap intervals, --resamples, "
                   "default 50) and, from runs measured with --decisions, the graph fuse threshold (--jobs "
                   "processes); --gpu names the spec they were measured with (default: the one the first run "
                   "names). A spec with a fit of its own gets the values in it, one that borrows a fit in its "
                   "[refit] table. Held-out models (models/holdout.toml) are refused")
    p.add_argument("--fit", default=None, metavar="FIELDS",
                   help="with --from-results: fit only these comma-separated fields (the others keep the "
                   "spec's values), e.g. fused_pw_warp_flops_per_cycle_fp32,fused_pw_warp_flops_per_cycle_fp16")
    p.set_defaults(func=run)


def _table(cal, base) -> None:
    from rich.console import Console
    from rich.table import Table

    from fuseplanner.validation.microbench import datasheet_values

    sheet = datasheet_values(base)
    t = Table(title=f"Calibration of {cal.device_name}")
    for col in ("quantity", "measured", "datasheet spec", "measured / spec"):
        t.add_column(col)
    rows = (("DRAM bandwidth", "dram_bw_bytes_per_s", 1e-12, "TB/s"), ("L2 bandwidth", "l2_bw_bytes_per_s", 1e-12, "TB/s"),
            ("launch overhead", "launch_overhead_s", 1e6, "us"), ("FP32 FMA", "fp32_flops", 1e-12, "TFLOP/s"),
            ("FP16 FMA (no TC)", "fp16_flops", 1e-12, "TFLOP/s"))
    m = cal.measured()
    for label, key, scale, unit in rows:
        s = sheet.get(key)
        ratio = f"{m[key] / s:.2f}" if s else "-"
        t.add_row(label, f"{m[key] * scale:.3g} {unit}", "-" if s is None else f"{s * scale:.3g} {unit}", ratio)
    t.add_row("back-to-back launch interval", f"{cal.launch_interval_s * 1e6:.3g} us", "-", "-")
    for label, key in (("graph launch interval", "graph_launch_interval_s"), ("graph kernel tail", "graph_kernel_tail_s"),
                       ("opaque op floor (graph)", "opaque_op_floor_s"), ("reduction floor (graph)", "reduce_op_floor_s"),
                       ("graph replay, once", "graph_replay_s")):
        if key in m:
            s = getattr(base, key, None)
            mark = " (estimate)" if key in getattr(base, "estimated", ()) else ""
            t.add_row(label, f"{m[key] * 1e6:.3g} us", "-" if s is None else f"{s * 1e6:.3g} us{mark}",
                      f"{m[key] / s:.2f}" if s else "-")
    Console().print(t)


def _library_ops(cp) -> list:
    """The executor's operator-library kernels (fuseplanner.run.ops) for Add, Relu and GlobalAveragePool
    on a small float32 tensor, bound to their arrays, for the graph probe's opaque-operator floor."""
    from fuseplanner.run import ops
    from fuseplanner.run.ops.node import Node
    from fuseplanner.validation.graph_probe import OPAQUE_SHAPE, LibraryOp

    shape, pooled = OPAQUE_SHAPE, OPAQUE_SHAPE[:2] + (1, 1)
    x = cp.random.random(shape, dtype=cp.float32)
    out = []
    for op, n_in, out_shape in (("Add", 2, shape), ("Relu", 1, shape), ("GlobalAveragePool", 1, pooled)):
        node = Node(name=f"probe_{op}", op_type=op, attrs={}, input_shapes=(shape,) * n_in,
                    input_dtypes=("float32",) * n_in, output_shapes=(out_shape,), output_dtypes=("float32",),
                    consts=(None,) * n_in)  # fmt: skip
        kernel, y = ops.prepare(cp, node), cp.empty(out_shape, dtype=cp.float32)
        out.append(LibraryOp(op, lambda k=kernel, y=y, n=n_in: k([x] * n, [y]), y))
    return out


def _from_results(args: argparse.Namespace) -> int:
    from fuseplanner.hw import spec as specs
    from fuseplanner.validation import fit
    from fuseplanner.validation.microbench import to_toml, with_own_fit
    from fuseplanner.validation.report import load_results

    meta = load_results(args.from_results[0]).meta
    base = specs.gpu(meta.gpu if args.gpu == "auto" else args.gpu)
    samples = _launchable(base, fit.load_samples(args.from_results, args.model), "these results")
    only = [f.strip() for f in args.fit.split(",") if f.strip()] if args.fit else None
    result = fit.fit_spec(base, samples, only=only)
    ident = _record_intervals(args, base, samples, only, result.values)
    out = Path(args.out or f"{base.name}_fitted.toml")
    kf = fit.kernel_fit(base, result, args.from_results, meta)
    if ident is not None:
        kf = kf.model_copy(update={"ci": {**kf.ci, **{s.name: (s.lo, s.hi) for s in ident.spreads}}})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(to_toml(with_own_fit(base, kf), {}))
    if args.json:
        extra = {"ci": kf.ci, "flagged": list(ident.flagged)} if ident is not None else {}
        sys.stdout.write(json.dumps({**result.as_dict(), **extra, "spec": str(out)}, indent=1, default=float) + "\n")
        return 0
    for k, v in result.values.items():
        sys.stdout.write(f"{k} = {v:g}\n")
    if ident is not None:
        from fuseplanner.validation.bootstrap import report_lines

        sys.stdout.write("\n".join(report_lines(ident)) + "\n")
    b, a = result.before, result.after
    dec = f", fuse decisions agreeing {b['decisions']:.1f}% -> {a['decisions']:.1f}%" if "decisions" in a else ""
    sys.stdout.write(f"{result.n_time} records: median time APE {b['time']:.1f}% -> {a['time']:.1f}%, "
                     f"GMA {b['gma']:.1f}% -> {a['gma']:.1f}%{dec}\nwrote {out}\n")
    return 0


def _record_intervals(args: argparse.Namespace, base, samples, only, values: dict):
    """Bootstrap spreads of a --from-results fit (None without --resamples)."""
    from fuseplanner.validation.fit_records import record_identifiability

    if not args.resamples:
        return None
    if args.resamples < 2 or args.jobs < 1:
        raise FusePlannerError("--resamples needs at least 2 resamples and --jobs at least 1")
    return record_identifiability(base, samples, only, values, args.resamples, jobs=args.jobs)


def _fit_report(result, kf, out: Path) -> None:
    """Each fitted value with its interval, the accuracy on the sweep, the file written."""
    for k, v in result.values.items():
        lo_hi = kf.ci.get(k)
        sys.stdout.write(f"{k} = {v:g}" + (f"  [{lo_hi[0]:g}, {lo_hi[1]:g}]" if lo_hi else "") + "\n")
    b, a = result.before, result.after
    dec = f", fuse decisions agreeing {b['decisions']:.0f}% -> {a['decisions']:.0f}%" if "decisions" in a else ""
    sys.stdout.write(f"{result.n_time} sweep records: median time APE {b['time']:.1f}% -> {a['time']:.1f}%{dec}\n"
                     f"wrote {out}\n")


def _write_fitted(out: Path, base, measured: dict, notes: dict, kf) -> None:
    from fuseplanner.validation.microbench import to_toml, with_own_fit

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(to_toml(with_own_fit(base, kf), measured, notes))


def _launchable(spec, samples: list, source: str) -> list:
    """The samples whose every launch the current kernels and register table admit with `spec`; the others
    (measured with an earlier kernel, or a tile now known to spill) are skipped with a note on stderr."""
    from fuseplanner.validation import fit

    keep, dropped = fit.feasible(spec, samples)
    if dropped:
        sys.stderr.write(f"skipped {len(dropped)} records that the current kernels cannot launch with spec "
                         f"{spec.name} (measured with an earlier kernel, or over the register ceiling), e.g. "
                         f"{dropped[0]}\n")  # fmt: skip
    if not keep:
        raise FusePlannerError(f"no record of {source} can be launched with the current kernels: nothing to fit")
    return keep


def _sweep_fit(args: argparse.Namespace, start, records: list[dict], meta: dict, path: Path):
    """(fit result, KernelFit) of `start` fitted to sweep `records`."""
    from fuseplanner.validation import sweep
    from fuseplanner.validation.fit_sweep import fit_sweep, sweep_kernel_fit

    samples = sweep.records_to_samples(records)
    if not samples:
        raise FusePlannerError(f"{path}: no sweep record ran correctly: nothing to fit")
    samples = _launchable(start, samples, str(path))
    if args.from_scratch:
        start = sweep.scratch(start)
    resamples = 8 if args.resamples is None else max(0, args.resamples)
    result = fit_sweep(start, samples, sweep.FIT_FIELDS, resamples=resamples)
    return result, sweep_kernel_fit(start, result, str(path), meta)


def _from_sweep(args: argparse.Namespace) -> int:
    from fuseplanner.hw import spec as specs
    from fuseplanner.validation import sweep

    data = sweep.load(args.from_sweep)
    base = specs.gpu(data["meta"]["gpu"] if args.gpu == "auto" else args.gpu)
    result, kf = _sweep_fit(args, base, data["records"], data["meta"], Path(args.from_sweep))
    out = Path(args.out or f"{base.name}_calibrated.toml")
    _write_fitted(out, base, {}, {}, kf)
    _fit_report(result, kf, out)
    return 0


def _from_whole(args: argparse.Namespace) -> int:
    from fuseplanner.hw import spec as specs
    from fuseplanner.validation import fit_whole
    from fuseplanner.validation.microbench import to_toml
    from fuseplanner.validation.whole import read

    first = read(args.from_whole[0])
    if not first:
        raise FusePlannerError(f"{args.from_whole[0]}: no whole run in it")
    base = specs.gpu(first[0].gpu if args.gpu == "auto" else args.gpu)
    say = (lambda _: None) if args.json else (lambda line: sys.stderr.write(line + "\n"))
    result = fit_whole.fit(args.from_whole, base, resamples=50 if args.resamples is None else max(0, args.resamples),
                           jobs=max(1, args.jobs), thresholds=fit_whole.THRESHOLDS, say=say)  # fmt: skip
    out = Path(args.out or f"{base.name}_graph.toml")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(to_toml(fit_whole.spec_with(base, result), {}))
    specs.gpu(str(out))  # what was written loads
    if args.json:
        sys.stdout.write(json.dumps({"values": result.values, "ci": result.ci, "report": list(result.lines),
                                     "spec": str(out)}, indent=1) + "\n")  # fmt: skip
        return 0
    for k, v in result.values.items():
        band = f"  (5-95%: {result.ci[k][0]:.4g} .. {result.ci[k][1]:.4g})" if k in result.ci else ""
        sys.stdout.write(f"{k} = {v:.6g}{band}\n")
    sys.stdout.write("\n".join(result.lines) + f"\nwrote {out}\n")
    return 0


def _measure_sweep(args: argparse.Namespace, spec, out: Path) -> tuple[list[dict], dict, Path]:
    """Run the micro-sweep on this GPU with `spec` (facts measured); save and return its records."""
    from fuseplanner.kernels import require_device
    from fuseplanner.validation import sweep

    items = sweep.design(spec, args.quick)
    repeat = 15 if args.quick else 30
    with require_device().cuda.Device(args.device):
        records = sweep.measure(spec, items, repeat=repeat, progress=not args.json)
    traffic = sweep.counters(spec, items, records) if args.ncu else "no counters (--ncu not given)"
    meta = sweep.meta(spec, "quick" if args.quick else "full", repeat, traffic)
    path = out.with_name(out.stem + ".sweep.json.gz")
    sweep.save(path, meta, records)
    return records, meta, path


def run(args: argparse.Namespace) -> int:
    if args.fit and not args.from_results:
        raise FusePlannerError("--fit selects fields to fit to --from-results: give the results files too")
    if sum(bool(x) for x in (args.from_results, args.from_sweep, args.from_whole)) > 1:
        raise FusePlannerError("give one of --from-results, --from-sweep and --from-whole")
    if args.from_whole:
        return _from_whole(args)
    if args.from_results:
        return _from_results(args)
    if args.from_sweep:
        return _from_sweep(args)
    from fuseplanner.kernels import require_device
    from fuseplanner.validation.microbench import apply, calibrate, measurement_notes, write_spec

    require_device()
    from fuseplanner.cli.cmd_validate import resolve_gpu

    base = resolve_gpu(args.gpu)
    cal = calibrate(args.device, library_ops=_library_ops)
    out = Path(args.out or f"{getattr(base, 'name', 'gpu')}_calibrated.toml")
    write_spec(out, base, cal)  # the facts first: a sweep that fails later leaves them written
    if not args.json:
        _table(cal, base)
    if args.no_sweep:
        if args.json:
            sys.stdout.write(json.dumps({**cal.as_dict(), "spec": str(out)}, indent=1) + "\n")
        else:
            sys.stdout.write(f"wrote {out}\n")
        return 0
    measured = apply(base, cal)
    records, meta, path = _measure_sweep(args, measured, out)
    result, kf = _sweep_fit(args, measured, records, meta, path)
    _write_fitted(out, base, cal.measured(), measurement_notes(cal), kf)
    if args.json:
        sys.stdout.write(json.dumps({**cal.as_dict(), "fit": {**result.values}, "ci": kf.ci, "spec": str(out),
                                     "sweep": str(path), "before": result.before, "after": result.after},
                                    indent=1, default=float) + "\n")  # fmt: skip
    else:
        _fit_report(result, kf, out)
    return 0
