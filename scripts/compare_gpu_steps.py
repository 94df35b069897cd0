"""The same executor steps timed on two GPUs: how their graph-mode step times compare, by step kind.

    python scripts/compare_gpu_steps.py --gpus h100 h200 \
        --a data/records/h100/whole/*/*.json.gz --b data/records/h200/whole/*/*.json.gz

Whole results (`fuseplanner validate --whole`) of the same model, dtype, precision and batch are paired
across the two sets; their unfused runs launch the same steps whatever either spec planned, so every
unfused step measured in both is a sample of B's time over A's. Step times taken by one replay are
read net of the replay's once cost first (`whole.net_of_replay`, with the spec of each set's GPU), so
the comparison also checks that netting: GPUs whose kernels run alike give a ratio near 1 only if
both sets time a step the same way. Prints, per step kind, the steps paired and the 10th, 50th and
90th percentile of the ratio, then the ratio of the whole unfused replays.
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import numpy as np

from fuseplanner.hw.spec import gpu
from fuseplanner.validation.whole import WholeResult, net_of_replay, read


def _key(r: WholeResult) -> tuple:
    return r.model, r.dtype, r.precision, r.batch


def results(paths: list[str], spec) -> dict[tuple, WholeResult]:
    """The results of `paths` by (model, dtype, precision, batch), step times net of the replay's once cost."""
    return {_key(r): r for path in paths for r in (net_of_replay(x, spec) for x in read(path))}


def step_ratios(a: dict[tuple, WholeResult], b: dict[tuple, WholeResult]) -> dict[str, list[float]]:
    """B / A of every unfused step timed in both (matched by label within a paired result), by step kind."""
    out: dict[str, list[float]] = defaultdict(list)
    for key in sorted(a.keys() & b.keys()):
        times = {s.label: s.measured_s for s in a[key].unfused_steps if s.measured_s > 0}
        for s in b[key].unfused_steps:
            if s.measured_s > 0 and s.label in times:
                out[s.kind].append(s.measured_s / times[s.label])
    return dict(out)


def replay_ratios(a: dict[tuple, WholeResult], b: dict[tuple, WholeResult]) -> list[float]:
    """B / A of the unfused whole replay (median) of each paired result."""
    return [b[k].measured_unfused.median_s / a[k].measured_unfused.median_s for k in sorted(a.keys() & b.keys())]


def _line(label: str, values: list[float]) -> str:
    p10, p50, p90 = np.percentile(values, [10, 50, 90])
    return f"{label:<10} {len(values):>6}  {p50:.3f}  [{p10:.3f}, {p90:.3f}]"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", nargs=2, metavar=("A", "B"), required=True, help="the spec of each set's GPU (netting)")
    ap.add_argument("--a", nargs="+", required=True, help="whole.json files (plain or .gz) measured on GPU A")
    ap.add_argument("--b", nargs="+", required=True, help="whole.json files measured on GPU B")
    args = ap.parse_args(argv)
    a, b = results(args.a, gpu(args.gpus[0])), results(args.b, gpu(args.gpus[1]))
    steps = step_ratios(a, b)
    if not steps:
        raise SystemExit("error: no unfused step was timed in both sets (same model, dtype, precision, batch)")
    print(f"{len(a.keys() & b.keys())} paired results; {args.gpus[1]} / {args.gpus[0]} step time: n, median [p10, p90]")
    for kind in sorted(steps):
        print(_line(kind, steps[kind]))
    print(_line("all steps", [x for v in steps.values() for x in v]))
    print(_line("replays", replay_ratios(a, b)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
