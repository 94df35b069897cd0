"""Whole-model latency on one GPU: fuseplanner's executor (planned and unfused) against PyTorch.

For each bundled model, batch and precision mode, in one process on one GPU:
- fuseplanner: `fuseplanner.compile` of the bundled model (seeded weights) with the plan, and with no fusion
  (`fuse=False`); median / p10 / p90 of CUDA-graph replays (CUDA events, warm L2), and the plan's predicted
  total (isolated-launch context);
- PyTorch: the same architecture from torchvision / timm (random init), eval mode, `cudnn.benchmark` on,
  eager and CUDA-graph replay, like for like: exact fp32 (`allow_tf32` off for cuDNN and matmuls) against
  fuseplanner's exact fp32, TF32 on against fuseplanner's tf32, fp16 against fp16.
Kernels are compiled first by `--jobs` worker processes (CuPy's on-disk kernel cache), so the timed
process only loads them. Writes results.jsonl and results.md to --out; prints a table as it goes.

    python3 benchmarks/e2e.py --out DIR [--models mobilenet_v2 ...] [--batches 1 8] [--modes fp32 tf32 fp16]
        [--context isolated|graph]   (the context the plans decide in; default that of `plan`)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fuseplanner.core.kinds import CONTEXTS, DEFAULT_CONTEXT  # noqa: E402

MODELS = ("mobilenet_v1", "mobilenet_v2", "mobilenet_v3_large", "mnasnet1_0", "efficientnet_b0", "mobilevit_xxs")
MODES = {"fp32": ("fp32", "fp32"), "tf32": ("fp32", "tf32"), "fp16": ("fp16", "fp32")}
#: PyTorch modules of the same architecture as each bundled model: (library, constructor name, input side).
TORCH_MODELS = {
    "mobilenet_v1": ("timm", "mobilenetv1_100", 224),
    "mobilenet_v2": ("torchvision", "mobilenet_v2", 224),
    "mobilenet_v3_large": ("torchvision", "mobilenet_v3_large", 224),
    "mnasnet1_0": ("torchvision", "mnasnet1_0", 224),
    "efficientnet_b0": ("torchvision", "efficientnet_b0", 224),
    "mobilevit_xxs": ("timm", "mobilevit_xxs", 256),
}


@dataclass(frozen=True)
class Row:
    model: str
    mode: str
    batch: int
    planned_us: float | None = None
    planned_p10_us: float | None = None
    planned_p90_us: float | None = None
    planned_cold_us: float | None = None
    launch_host_us: float | None = None
    call_host_us: float | None = None
    bound_host_us: float | None = None
    unfused_us: float | None = None
    predicted_planned_us: float | None = None
    predicted_unfused_us: float | None = None
    groups: int | None = None
    torch_eager_us: float | None = None
    torch_graph_us: float | None = None
    check_error: float | None = None
    check_tolerance: float | None = None
    error: str = ""

    @property
    def vs_graph(self) -> float | None:
        if self.planned_us and self.torch_graph_us:
            return self.planned_us / self.torch_graph_us
        return None


# ---- PyTorch -------------------------------------------------------------------------------------------
def _events_median_us(fn, repeat: int) -> float:
    import torch

    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


def torch_times(model: str, mode: str, batch: int, repeat: int) -> tuple[float, float]:
    """(eager, CUDA-graph replay) median latency in us of PyTorch's model in `mode`."""
    import torch

    lib, name, side = TORCH_MODELS[model]
    if lib == "timm":
        import timm

        net = timm.create_model(name, pretrained=False)
    else:
        import torchvision

        net = getattr(torchvision.models, name)(weights=None)
    tf32 = mode == "tf32"
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    dt = torch.float16 if mode == "fp16" else torch.float32
    net = net.eval().cuda().to(dt)
    x = torch.randn(batch, 3, side, side, device="cuda", dtype=dt)
    with torch.inference_mode():
        eager = _events_median_us(lambda: net(x), repeat)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                net(x)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            net(x)
        graph = _events_median_us(g.replay, repeat)
    return eager, graph


# ---- fuseplanner ---------------------------------------------------------------------------------------
def _compile(model: str, mode: str, batch: int, fuse: bool, context: str):
    import fuseplanner

    dtype, precision = MODES[mode]
    return fuseplanner.compile(model, fuseplanner.gpu("h100"), dtype=dtype, precision=precision, batch=batch,
                               fuse=fuse, seed=0, context=context)


def warm_compile(job: tuple[str, str, int, bool, str]) -> str:
    """Worker: build (and so compile every kernel of) one configuration; returns an error line or ''."""
    try:
        _compile(*job)
        return ""
    except Exception as exc:  # reported in the table, never fatal
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def ours(model: str, mode: str, batch: int, replays: int, check: bool, context: str) -> dict:
    out: dict = {}
    cm = _compile(model, mode, batch, True, context)
    plan = cm.plan
    out["groups"] = len(plan.groups)
    out["predicted_planned_us"] = plan.totals.planned.time_s * 1e6
    out["predicted_unfused_us"] = plan.totals.unfused.time_s * 1e6
    b = cm.bench(replays)
    cold = cm.bench(replays, cold_l2=True)
    out.update(planned_us=b.median_s * 1e6, planned_p10_us=b.p10_s * 1e6, planned_p90_us=b.p90_s * 1e6,
               planned_cold_us=cold.median_s * 1e6, launch_host_us=b.launch_host_s * 1e6,
               call_host_us=b.call_host_s * 1e6, bound_host_us=b.bound_host_s * 1e6)
    if check:
        import numpy as np

        from fuseplanner.run.check import check as run_check
        from fuseplanner.run.compiled import onnx_model

        spec = cm.program.inputs[0]
        x = np.random.default_rng(1).standard_normal(spec.shape).astype(np.float32)
        c = run_check(cm, onnx_model(model, batch=batch), {spec.name: x})
        out.update(check_error=c.error, check_tolerance=c.tolerance)
    del cm
    un = _compile(model, mode, batch, False, context)
    out["unfused_us"] = un.bench(replays).median_s * 1e6
    return out


def _fmt(v, spec=".1f") -> str:
    return "-" if v is None else format(v, spec)


def _check_cell(error: float, tolerance: float) -> str:
    """`error <= tolerance`, or `error > tolerance (miss)`, with enough digits to tell which."""
    if error <= tolerance:
        return f"{error:.2e} <= {tolerance:.0e}"
    return f"{error:.3e} > {tolerance:.0e} (miss)"


def markdown(rows: list[Row], device: str) -> str:
    lines = [f"GPU: {device}", "",
             "| model | mode | batch | planned us (p10-p90) | unfused us | predicted planned / unfused us | "
             "PyTorch graph us | PyTorch eager us | planned / PyTorch graph | planned / unfused | check |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        rng = f"{_fmt(r.planned_us)} ({_fmt(r.planned_p10_us)}-{_fmt(r.planned_p90_us)})"
        ratio_u = r.planned_us / r.unfused_us if r.planned_us and r.unfused_us else None
        chk = "-" if r.check_error is None else _check_cell(r.check_error, r.check_tolerance)
        if r.error:
            chk = f"error: {r.error}"
        lines.append(f"| {r.model} | {r.mode} | {r.batch} | {rng} | {_fmt(r.unfused_us)} | "
                     f"{_fmt(r.predicted_planned_us)} / {_fmt(r.predicted_unfused_us)} | {_fmt(r.torch_graph_us)} | "
                     f"{_fmt(r.torch_eager_us)} | {_fmt(r.vs_graph, '.2f')} | {_fmt(ratio_u, '.2f')} | {chk} |")
    ratios = [r.vs_graph for r in rows if r.vs_graph and r.batch == 1]
    if ratios:
        lines += ["", f"Median planned / PyTorch CUDA graph at batch 1: {statistics.median(ratios):.2f} "
                      f"over {len(ratios)} model-precision pairs."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    ap.add_argument("--replays", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--check-batch", type=int, default=1, help="check against onnxruntime at this batch (0: never)")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--context", choices=CONTEXTS, default=DEFAULT_CONTEXT, help="context the plans decide in")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    configs = [(m, mode, b) for b in args.batches for m in args.models for mode in args.modes]
    t0 = time.time()
    if args.jobs > 1:
        jobs = [(m, mode, b, fuse, args.context) for m, mode, b in configs for fuse in (True, False)]
        with ProcessPoolExecutor(args.jobs) as pool:
            for job, err in zip(jobs, pool.map(warm_compile, jobs), strict=True):
                if err:
                    print(f"compile {job}: {err}", flush=True)
        print(f"kernels compiled in {time.time() - t0:.0f} s", flush=True)
    import cupy

    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    rows: list[Row] = []
    with open(args.out / "results.jsonl", "w") as fh:
        for m, mode, b in configs:
            vals: dict = {}
            try:
                vals.update(ours(m, mode, b, args.replays, check=b == args.check_batch, context=args.context))
            except Exception as exc:
                vals["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            if not args.no_torch:
                try:
                    vals["torch_eager_us"], vals["torch_graph_us"] = torch_times(m, mode, b, args.replays)
                except Exception as exc:
                    vals["error"] = (vals.get("error", "") + f" torch: {type(exc).__name__}: {exc}").strip()
            row = Row(model=m, mode=mode, batch=b, **vals)
            rows.append(row)
            fh.write(json.dumps({**asdict(row), "device": device}) + "\n")
            fh.flush()
            print(markdown([row], device).splitlines()[-1], f"[{time.time() - t0:.0f} s]", flush=True)
    text = markdown(rows, device)
    (args.out / "results.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
