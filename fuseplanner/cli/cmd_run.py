"""`fuseplanner run MODEL`: run the whole planned model (CuPy, CUDA graph), check it, time it.

The check's metric is the relative L2 error ||out - ref||_2 / ||ref||_2 of each output against
onnxruntime (CPU) on the same weights and inputs, maximum over outputs; tolerances exact fp32 1e-4,
TF32 5e-3, fp16 2e-2. Exit 1 when the check fails; bad input is one `error:` line and exit 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fuseplanner.cli.cmd_plan import add_context_option
from fuseplanner.cli.common import add_model_arguments, parse_input_shapes, positive_int
from fuseplanner.core.errors import ModelError, PlanError
from fuseplanner.core.kinds import DTYPES, PRECISIONS


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "run",
        help="run the whole planned model on the GPU (CUDA graph), check it against onnxruntime, time it",
        description="Compile the model as planned (fused groups and planned layers on fuseplanner's kernels, "
        "every other node in the operator library), run it, and optionally check its outputs against "
        "onnxruntime (relative L2 error per output, max over outputs) and time CUDA-graph replays. "
        "Structure-only models run with seeded weights at the exporter's initialisation scale "
        "(folded-BN convs scaled on one seeded run).",
    )
    add_model_arguments(p)
    p.add_argument("--gpu", default="auto", metavar="auto|NAME", help="GPU spec (default auto: this GPU)")
    p.add_argument("--plan", default=None, metavar="PLAN.json", help="run this plan (default: plan it now)")
    p.add_argument("--no-fuse", action="store_true", help="no fusion: every dw/pw/linear op on its own kernel")
    add_context_option(p)
    p.add_argument("--dtype", choices=DTYPES, default="fp32", help="storage dtype (default fp32)")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32", help="fp32 exact or TF32 math")
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                   help="an input array (default: seeded standard-normal inputs)")
    p.add_argument("--output", default=None, metavar="OUT.npz", help="write the outputs")
    p.add_argument("--check", action="store_true", help="compare the outputs with onnxruntime (CPU)")
    p.add_argument("--bench", action="store_true", help="time CUDA-graph replays (median, p10, p90)")
    p.add_argument("--nodes", type=positive_int, default=None, metavar="N",
                   help="time every step in stream mode (CUDA events) and print the N slowest, plus totals by kind")
    p.add_argument("--replays", type=positive_int, default=200, metavar="N", help="replays for --bench (default 200)")
    p.add_argument("--device", choices=("gpu", "cpu"), default="gpu",
                   help="gpu (default) or cpu (NumPy, planned kernels by the float64 reference, TF32 operands rounded "
                   "with --precision tf32)")
    p.add_argument("--seed", type=int, default=0, help="seed of generated weights and inputs (default 0)")
    p.add_argument("--tune", action="store_true",
                   help="keep only the fused groups that measure faster than their unfused layers on this GPU (each "
                   "step timed in graph mode; re-planned without the others, at most --tune-rounds times)")
    p.add_argument("--tune-rounds", type=positive_int, default=3, metavar="N", help="rounds of --tune (default 3)")
    p.add_argument("--save-plan", default=None, metavar="PLAN.json",
                   help="write the plan the model ran with (the tuned plan with --tune), for --plan")
    p.set_defaults(func=run)


def _input_files(items: list[str]) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ModelError(f"bad --input {item!r}: write NAME=FILE.npy")
        if not Path(path).is_file():
            raise ModelError(f"--input {name}: file {path!r} does not exist")
        out[name] = Path(path)
    return out


def _check_args(args: argparse.Namespace) -> dict[str, Path]:
    if args.plan and args.no_fuse:
        raise PlanError("give either --plan or --no-fuse, not both")
    if (args.bench or args.nodes or args.tune) and args.device != "gpu":
        raise PlanError("--bench, --nodes and --tune time the GPU: they need --device gpu")
    if args.tune and (args.plan or args.no_fuse):
        raise PlanError("--tune plans the model itself: give it without --plan or --no-fuse")
    from fuseplanner.cli.cmd_plan import check_output_path

    for path, flag in ((args.output, "--output"), (args.save_plan, "--save-plan")):
        if path:
            check_output_path(path, flag)
    return _input_files(args.input)


def _inputs(net, files: dict[str, Path], seed: int) -> dict:
    import numpy as np

    unknown = sorted(set(files) - set(net.input_names))
    if unknown:
        raise ModelError(f"--input names {unknown[0]!r}, but the model's inputs are {', '.join(net.input_names)}")
    rng = np.random.default_rng(seed)
    out = {}
    for spec in net.program.inputs:
        if spec.name in files:
            try:
                out[spec.name] = np.load(files[spec.name], allow_pickle=False)
            except (OSError, ValueError) as exc:
                raise ModelError(f"--input {spec.name}: cannot read {str(files[spec.name])!r} as .npy ({exc})") from None
        else:
            dt = net.program.model_dtypes.get(spec.name, spec.dtype)
            out[spec.name] = rng.standard_normal(spec.shape).astype(dt)
    return out


def run(args: argparse.Namespace) -> int:
    from fuseplanner.run.compiled import compile as compile_model
    from fuseplanner.run.compiled import load_plan

    files = _check_args(args)
    shapes = parse_input_shapes(args.input_shape)
    plan = load_plan(args.plan) if args.plan else None
    tuned = _tuned(args, shapes) if args.tune else None
    net = tuned.compiled if tuned else compile_model(
        args.model, args.gpu, plan, dtype=args.dtype, precision=args.precision, batch=args.batch,
        fuse=not args.no_fuse, seed=args.seed, device=args.device, input_shapes=shapes, context=args.context)  # fmt: skip
    if args.save_plan:
        from fuseplanner.planning.export import to_json, write_text

        print(f"wrote plan to {write_text(to_json(net.plan), args.save_plan)}")
    inputs = _inputs(net, files, args.seed)
    outputs = net(inputs)
    _summary(net)
    if args.output:
        import numpy as np

        np.savez(args.output, **outputs)
        print(f"wrote outputs to {args.output}")
    status = 0
    if args.check:
        status = _check(net, args, shapes, inputs, outputs)
    if args.bench:
        _bench(net, args.replays)
    if args.nodes:
        _nodes(net, inputs, args.nodes)
    return status


def _summary(net) -> None:
    counts = net.program.counts()
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    fallback = sum(1 for s in net.steps if s.reason)
    print(f"{net.program.name}: {len(net.steps)} steps ({kinds}); arena {net.memory / 2**20:.2f} MiB; "
          f"device {'gpu' if net.gpu else 'cpu'}, {net.program.dtype}/{net.program.precision}")  # fmt: skip
    if fallback:
        first = next(s for s in net.steps if s.reason)
        print(f"note: {fallback} planned-op steps run in the operator library (e.g. {first.label}: {first.reason})")
    for spill in net.avoided:
        print(f"note: planned again without the kernel of {spill.label} ({spill.kind} {spill.tile}, and any of the same "
              f"shapes and tile): the compiler spilled registers in it ({spill.regs} registers, {spill.local_bytes} "
              "bytes of local memory per thread)")  # fmt: skip
    for spill in net.spills:
        print(f"note: {spill.message()}")


def _check(net, args, shapes, inputs, outputs) -> int:
    from fuseplanner.run.check import compare, reference_outputs
    from fuseplanner.run.compiled import onnx_model

    proto = onnx_model(args.model, shapes, args.batch, args.seed)
    res = compare(outputs, reference_outputs(proto, inputs), net.program.dtype, net.program.precision)
    verdict = "ok" if res.ok else "FAILED"
    print(f"check vs onnxruntime: max over outputs of ||out-ref||2/||ref||2 = {res.error:.3e} "
          f"(tolerance {res.tolerance:g}): {verdict}")  # fmt: skip
    if not res.ok:
        sys.stderr.write(f"error: outputs differ from onnxruntime by {res.error:.3e} > {res.tolerance:g}\n")
    return 0 if res.ok else 1


def _nodes(net, inputs, top: int) -> None:
    """The slowest steps and the time per step kind (library steps by op type), stream mode."""
    times = net.time_nodes(inputs)
    total = sum(t.seconds for t in times)
    print(f"per-step times, stream mode (CUDA events, median of 20): {len(times)} steps, {total * 1e6:.1f} us in all")
    for t in sorted(times, key=lambda t: -t.seconds)[:top]:
        print(f"  {t.seconds * 1e6:8.1f} us  {t.kind:<9} {t.op_type:<20} {t.label}")
    by: dict[str, list[float]] = {}
    for t in times:
        by.setdefault(t.op_type if t.kind == "library" else t.kind, []).append(t.seconds)
    for key, vals in sorted(by.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {sum(vals) * 1e6:8.1f} us  {len(vals):4d} x {key}")


def _bench(net, replays: int) -> None:
    predicted = net.plan.totals.planned.time_s
    for cold in (False, True):
        r = net.bench(replays, cold_l2=cold)
        print(f"latency, CUDA graph, {r.replays} replays, {r.mode}: median {r.median_s * 1e6:.1f} us, "
              f"p10 {r.p10_s * 1e6:.1f} us, p90 {r.p90_s * 1e6:.1f} us; launch host {r.launch_host_s * 1e6:.1f} us, "
              f"whole call host {r.call_host_s * 1e6:.1f} us (+{r.overhead_s * 1e6:.1f} us), "
              f"zero-copy launch() host {r.bound_host_s * 1e6:.1f} us (+{r.bound_overhead_s * 1e6:.1f} us)")
    print(f"plan's predicted kernel total: {predicted * 1e6:.1f} us")


def _tuned(args, shapes):
    from fuseplanner.validation.tune import tune_model

    tuned = tune_model(args.model, args.gpu, dtype=args.dtype, precision=args.precision, batch=args.batch,
                       seed=args.seed, input_shapes=shapes, rounds=args.tune_rounds, replays=args.replays, context=args.context,
                       say=print)  # fmt: skip
    _tuning_report(tuned)
    return tuned


def _tuning_report(tuned) -> None:
    """One line per group measured, then what the tuning changed and the whole models' latencies."""
    from fuseplanner.validation.tune import LATENCY_ROUNDS

    t = tuned.tuning
    print("tuning: each group's planned steps against the unfused steps over the same nodes, graph mode (medians)")
    for v in t.verdicts:
        if not v.measured:
            print(f"  round {v.round}  {v.kind:<8} {v.tile:<18} not measured (no kernel step of its own)  {v.label}")
            continue
        verdict = "kept" if v.kept else "dropped"
        print(f"  round {v.round}  {v.kind:<8} {v.tile:<18} fused {v.fused_s * 1e6:7.2f} us  unfused "
              f"{v.unfused_s * 1e6:7.2f} us  saves {v.saving_s * 1e6:+7.2f} us  {verdict:<7}  {v.label}")  # fmt: skip
    first, final = len(tuned.first.plan.groups), len(tuned.tuned.plan.groups)
    print(f"tuned plan: {final} groups (first plan {first}); {len(t.dropped)} dropped as measured no faster fused, "
          f"{t.rounds} round(s)")  # fmt: skip
    if t.unmeasured:
        print(f"note: {len(t.unmeasured)} groups of the tuned plan were not measured (last round's re-plan, or run in "
              f"the operator library), e.g. {t.unmeasured[0]}")  # fmt: skip
    lat = ", ".join(f"{name} {s * 1e6:.1f} us" for name, s in tuned.latency.items())
    print(f"whole model, CUDA graph, warm L2, median of {LATENCY_ROUNDS} interleaved rounds: {lat}; running the "
          f"{tuned.chosen} ({len(tuned.compiled.plan.groups)} groups)")  # fmt: skip
