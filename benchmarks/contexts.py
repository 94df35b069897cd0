"""Plans decided in each execution context, run whole: does the graph-context plan (the default of
`plan`, `run` and `compile`) run faster than the isolated-context plan, and is each predicted right?

For each model, precision mode and batch, in one process on one GPU: the model planned with the time
objective decided in the isolated context and in the graph context (`planning.search.plan`), each
compiled with `fuseplanner.compile` (seeded weights), and the unfused model (`fuse=False`). The three
are replayed as whole CUDA graphs in interleaved rounds (`validation.tune.fastest`: `--rounds` rounds of
`--replays` replays, warm L2, CUDA events; the median over rounds), and each once more with the L2
flushed before every replay (cold); all of it `--builds` times, each time compiled afresh (two builds
of one plan can differ by several percent in whole-model latency), and averaged. Beside them, each plan's whole-inference prediction in the graph
context (`planning.whole.predict_whole`). The graph-context plan's outputs are checked against
onnxruntime (CPU) on fresh data, its arena poisoned with NaN first. Kernels are compiled first by `--jobs`
worker processes (CuPy's on-disk kernel cache), so the timed process only loads them. Writes
results.jsonl and results.md to --out; prints a line per configuration as it goes.

    python3 benchmarks/contexts.py --gpu h200 --out DIR --configs mobilenet_v2:fp32:1 efficientnet_b0:fp16:8 ...
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

MODES = {"fp32": ("fp32", "fp32"), "tf32": ("fp32", "tf32"), "fp16": ("fp16", "fp32")}
PLANS = ("isolated", "graph")  # the contexts a plan is decided in


@dataclass(frozen=True)
class Config:
    model: str
    mode: str
    batch: int

    @classmethod
    def parse(cls, text: str) -> Config:
        model, mode, batch = text.split(":")
        if mode not in MODES:
            raise SystemExit(f"error: bad mode {mode!r} in {text!r}: use one of {', '.join(MODES)}")
        return cls(model, mode, int(batch))


@dataclass(frozen=True)
class Row:
    """One configuration: per plan ("isolated", "graph", "unfused") its groups, measured warm and cold
    latency (us; the mean over builds of each build's median) and graph-context prediction (us); the
    graph plan's check against onnxruntime."""

    model: str
    mode: str
    batch: int
    groups: dict
    warm_us: dict
    cold_us: dict
    predicted_us: dict
    same_plan: bool
    check_error: float | None
    check_tolerance: float | None
    error: str = ""
    spread_us: dict | None = None  # warm latency, largest less smallest build


def _plans(cfg: Config, spec) -> tuple:
    """(graph, {plan name: Plan}) of one configuration: the plans of both contexts and the unfused one."""
    from fuseplanner.frontend.load import load_model
    from fuseplanner.planning.search import plan as make_plan

    dtype, precision = MODES[cfg.mode]
    graph = load_model(cfg.model, None, cfg.batch)
    plans = {c: make_plan(graph, spec, dtype=dtype, precision=precision, context=c) for c in PLANS}
    plans["unfused"] = make_plan(graph, spec, dtype=dtype, precision=precision, kinds=[], workers=1)
    return graph, plans


def _compile(cfg: Config, spec, plan):
    import fuseplanner

    dtype, precision = MODES[cfg.mode]
    return fuseplanner.compile(cfg.model, spec, plan, dtype=dtype, precision=precision, batch=cfg.batch, seed=0,
                               avoid_spills=False)  # fmt: skip


def warm_compile(job: tuple[Config, str]) -> str:
    """Worker: plan and compile every plan of one configuration (filling CuPy's kernel cache); '' or an error line."""
    from fuseplanner.hw.spec import gpu

    cfg, spec_name = job
    try:
        spec = gpu(spec_name)
        _, plans = _plans(cfg, spec)
        for p in plans.values():
            _compile(cfg, spec, p)
        return ""
    except Exception as exc:  # reported in the table, never fatal
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def _check(cfg: Config, model) -> tuple[float, float]:
    import numpy as np

    from fuseplanner.run.check import check
    from fuseplanner.run.compiled import onnx_model

    rng = np.random.default_rng(7)
    x = {s.name: rng.standard_normal(s.shape).astype(np.float32) for s in model.program.inputs}
    model._bound.arena.fill(255)  # NaN in every activation: a step that writes nothing shows
    c = check(model, onnx_model(cfg.model, None, cfg.batch), x)
    return c.error, c.tolerance


def _mean(d: dict[str, list[float]]) -> dict[str, float]:
    return {k: statistics.fmean(v) for k, v in d.items()}


def measure(cfg: Config, spec, replays: int, rounds: int, builds: int) -> Row:
    from fuseplanner.planning.whole import predict_whole
    from fuseplanner.validation.tune import fastest

    graph, plans = _plans(cfg, spec)
    same = plans["isolated"].tiles() == plans["graph"].tiles()
    warm: dict[str, list[float]] = {name: [] for name in plans}
    cold: dict[str, list[float]] = {name: [] for name in plans}
    err = tol = None
    for _ in range(builds):  # two builds of one plan can differ by several %: average them
        models = {"unfused": _compile(cfg, spec, plans["unfused"]), "graph": _compile(cfg, spec, plans["graph"])}
        models["isolated"] = models["graph"] if same else _compile(cfg, spec, plans["isolated"])
        if err is None:
            err, tol = _check(cfg, models["graph"])
        for name, s in fastest(models, replays, rounds).items():
            warm[name].append(s)
        cold_by_id = {id(m): m.bench(replays, cold_l2=True).median_s for m in {id(m): m for m in models.values()}.values()}
        for name, m in models.items():
            cold[name].append(cold_by_id[id(m)])
        del models
    pred = {name: predict_whole(graph, spec, p, "graph", unfused_plan=plans["unfused"]).planned.time_s
            for name, p in plans.items()}  # fmt: skip
    us = lambda d: {k: v * 1e6 for k, v in d.items()}  # noqa: E731
    return Row(cfg.model, cfg.mode, cfg.batch, {k: len(p.groups) for k, p in plans.items()}, us(_mean(warm)),
               us(_mean(cold)), us(pred), same, err, tol, spread_us={k: (max(v) - min(v)) * 1e6 for k, v in warm.items()})


def _saving(d: dict, name: str) -> float:
    return 100 * (d["unfused"] - d[name]) / d["unfused"]


def markdown(rows: list[Row], device: str) -> str:
    lines = [f"GPU: {device}", "",
             "| model | mode | batch | groups isolated / graph | unfused us | isolated plan us | graph plan us | "
             "saving isolated / graph % | predicted saving isolated / graph % | cold L2: saving isolated / graph % | "
             "build spread us | check |", "|---|---|---|---|---:|---:|---:|---|---|---|---:|---|"]  # fmt: skip
    for r in rows:
        if r.error:
            lines.append(f"| {r.model} | {r.mode} | {r.batch} | error: {r.error} |||||||")
            continue
        w, c, p = r.warm_us, r.cold_us, r.predicted_us
        chk = f"{r.check_error:.2e} {'<=' if r.check_error <= r.check_tolerance else '>'} {r.check_tolerance:.0e}"
        lines.append(f"| {r.model} | {r.mode} | {r.batch} | {r.groups['isolated']} / {r.groups['graph']}"
                     f"{' (same)' if r.same_plan else ''} | {w['unfused']:.1f} | {w['isolated']:.1f} | {w['graph']:.1f} | "
                     f"{_saving(w, 'isolated'):.1f} / {_saving(w, 'graph'):.1f} | {_saving(p, 'isolated'):.1f} / "
                     f"{_saving(p, 'graph'):.1f} | {_saving(c, 'isolated'):.1f} / {_saving(c, 'graph'):.1f} | "
                     f"{max(r.spread_us.values()):.1f} | {chk} |")
    ok = [r for r in rows if not r.error]
    if ok:
        gain = [100 * (r.warm_us["isolated"] - r.warm_us["graph"]) / r.warm_us["isolated"] for r in ok]
        lines += ["", f"Graph-context plan against isolated-context plan (warm): median {statistics.median(gain):+.1f}%, "
                      f"range {min(gain):+.1f} to {max(gain):+.1f}% over {len(ok)} configurations (+: graph plan faster)."]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", required=True, help="GPU spec name or TOML the plans are made with")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--configs", nargs="+", required=True, type=Config.parse, metavar="MODEL:MODE:BATCH",
                    help=f"MODE one of {', '.join(MODES)}")
    ap.add_argument("--replays", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--builds", type=int, default=2, help="times each plan is compiled and timed (mean)")
    ap.add_argument("--jobs", type=int, default=8, help="processes compiling kernels first (0: none)")
    args = ap.parse_args()

    import cupy

    from fuseplanner.hw.spec import gpu

    spec = gpu(args.gpu)
    args.out.mkdir(parents=True, exist_ok=True)
    errors: dict[Config, str] = {}
    if args.jobs:
        t = time.time()
        with ProcessPoolExecutor(args.jobs) as ex:
            errors = {c: e for c, e in zip(args.configs, ex.map(warm_compile, [(c, args.gpu) for c in args.configs]), strict=True) if e}
        print(f"compiled {len(args.configs)} configurations in {time.time() - t:.0f} s", flush=True)
    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    rows = []
    with (args.out / "results.jsonl").open("w") as f:
        for cfg in args.configs:
            try:
                row = measure(cfg, spec, args.replays, args.rounds, args.builds) if cfg not in errors else None
            except Exception as exc:  # reported in the table, never fatal
                errors[cfg] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                row = None
            row = row or Row(cfg.model, cfg.mode, cfg.batch, {}, {}, {}, {}, False, None, None, errors[cfg])
            rows.append(row)
            f.write(json.dumps(asdict(row)) + "\n")
            f.flush()
            print(markdown([row], device).splitlines()[4], flush=True)
    md = markdown(rows, device)
    (args.out / "results.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
