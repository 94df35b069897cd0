"""Graph-mode step times taken two ways, against the whole model's CUDA-graph replay.

- by one replay: the step captured 10 times in one CUDA graph, one replay between CUDA events / 10 (how
  the saved whole results with `graph_step_timing` "replay" were timed): each step time holds a tenth
  of what a replay costs once (the host submitting the graph, the graph's start);
- by spacing: `CompiledModel.time_nodes(mode="graph")`, (t_2n - t_n) / n of graphs of 10 and 20
  copies behind a GPU-side wait, which that cost does not reach.

    python3 benchmarks/step_timing.py --out DIR [--gpu h100]

For each configuration below, planned (isolated context) and unfused: the replay median (200 replays,
warm L2), the two step sums, the per-step median difference, and the plan's saving by each. Writes
DIR/step_timing.json. The question it answers (docs/validation.md, whole models): how much of a step
time taken by one replay is the replay's once cost, and what it does to a plan's saving counted
step by step.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CONFIGS = (("mobilenet_v2", "fp32", 1), ("mnasnet1_0", "fp32", 1), ("mobilenet_v1", "fp16", 1), ("mobilenet_v2", "fp32", 8))
COPIES = 10


def by_one_replay(model, repeats: int = 20) -> list[float]:
    """Each step's time as one replay of `COPIES` copies / `COPIES` (median of `repeats`), arrays from the
    model's pool as in its own capture."""
    import cupy as cp

    from fuseplanner.validation.timing import capture_graph, replay_median

    stream = model._stream
    out = []
    with cp.cuda.using_allocator(model._pool.malloc):
        for fn in [fn for _, fn in model._bound.runners if fn is not None]:
            graph = capture_graph(stream, fn, COPIES)
            out.append(replay_median(stream, graph, repeats, warmup=2) / COPIES)
    return out


def measure(name: str, dtype: str, batch: int, spec) -> dict:
    import fuseplanner
    from fuseplanner.frontend.load import load_model
    from fuseplanner.planning.search import plan as make_plan

    plan = make_plan(load_model(name, None, batch), spec, dtype=dtype, context="isolated")
    row: dict = {"model": name, "dtype": dtype, "batch": batch}
    for what, kw in (("planned", {"plan": plan}), ("unfused", {"fuse": False})):
        m = fuseplanner.compile(name, spec, dtype=dtype, batch=batch, avoid_spills=False, **kw)
        replay = m.bench(replays=200)
        old = by_one_replay(m)
        new = [t.seconds for t in m.time_nodes(repeats=20, mode="graph")]
        row[what] = {"replay_s": replay.median_s, "launch_host_s": replay.launch_host_s, "steps": len(new),
                     "sum_one_replay_s": sum(old), "sum_spacing_s": sum(new),
                     "median_difference_s": float(np.median(np.array(old) - np.array(new)))}  # fmt: skip
        print(name, dtype, batch, what, json.dumps(row[what]), flush=True)
    for key in ("replay_s", "sum_one_replay_s", "sum_spacing_s"):
        row[f"saving_{key[:-2]}"] = 1 - row["planned"][key] / row["unfused"][key]
    return row


def main() -> None:
    from fuseplanner.hw import spec as specs

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--gpu", default="h100", help="the spec the plans are made with (default h100)")
    args = ap.parse_args()
    spec = specs.gpu(args.gpu)
    rows = [measure(name, dtype, batch, spec) for name, dtype, batch in CONFIGS]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "step_timing.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
