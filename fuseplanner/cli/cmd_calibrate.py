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
        description="Measure this GPU (device-to-device copy, L2-resident reads, empty-kernel launches, FMA loops; "
        "CUDA-event medians) and write a GPU spec TOML whose [measured] table the cost model prefers over "
        "datasheet values. Use it with `--gpu PATH` in plan/validate; `fuseplanner validate --calibrate` "
        "reports accuracy before and after. Needs a CUDA GPU and CuPy. With --from-results it needs no GPU: it "
        "fits the kernel parameters (achieved FLOPs per warp per clock of fuseplanner's kernels, the L2 "
        "fraction of fused kernels' weight re-reads, the fuse threshold) to the measurements in validation "
        "results files and writes the spec with them as its own [fit] table (GPU, driver, date, records).",
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
    Console().print(t)


def _from_results(args: argparse.Namespace) -> int:
    from fuseplanner.hw import spec as specs
    from fuseplanner.validation import fit
    from fuseplanner.validation.microbench import spec_dict, to_toml
    from fuseplanner.validation.report import load_results

    meta = load_results(args.from_results[0]).meta
    base = specs.gpu(meta.gpu if args.gpu == "auto" else args.gpu)
    samples, dropped = fit.feasible(base, fit.load_samples(args.from_results, args.model))
    if dropped:
        sys.stderr.write(f"skipped {len(dropped)} records that the current kernels cannot launch with spec "
                         f"{base.name} (measured with an earlier kernel), e.g. {dropped[0]}\n")
    if not samples:
        raise FusePlannerError("no record of these results can be launched with the current kernels: nothing to fit")
    only = [f.strip() for f in args.fit.split(",") if f.strip()] if args.fit else None
    result = fit.fit_spec(base, samples, only=only)
    out = Path(args.out or f"{base.name}_fitted.toml")
    d = spec_dict(base)
    for key in ("name", "fit_from"):
        d.pop(key, None)
    d["fit"] = fit.kernel_fit(base, result, args.from_results, meta).model_dump(mode="json", exclude={"borrowed"})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(to_toml(d, {}))
    if args.json:
        sys.stdout.write(json.dumps({**result.as_dict(), "spec": str(out)}, indent=1) + "\n")
        return 0
    for k, v in result.values.items():
        sys.stdout.write(f"{k} = {v:g}\n")
    b, a = result.before, result.after
    dec = f", fuse decisions agreeing {b['decisions']:.1f}% -> {a['decisions']:.1f}%" if "decisions" in a else ""
    sys.stdout.write(f"{result.n_time} records: median time APE {b['time']:.1f}% -> {a['time']:.1f}%, "
                     f"GMA {b['gma']:.1f}% -> {a['gma']:.1f}%{dec}\nwrote {out}\n")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.fit and not args.from_results:
        raise FusePlannerError("--fit selects fields to fit to --from-results: give the results files too")
    if args.from_results:
        return _from_results(args)
    from fuseplanner.kernels import require_device
    from fuseplanner.validation.microbench import calibrate, write_spec

    require_device()
    from fuseplanner.cli.cmd_validate import resolve_gpu

    base = resolve_gpu(args.gpu)
    cal = calibrate(args.device)
    out = Path(args.out or f"{getattr(base, 'name', 'gpu')}_calibrated.toml")
    write_spec(out, base, cal)
    if args.json:
        sys.stdout.write(json.dumps({**cal.as_dict(), "spec": str(out)}, indent=1) + "\n")
    else:
        _table(cal, base)
        sys.stdout.write(f"wrote {out}\n")
    return 0
