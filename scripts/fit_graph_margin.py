"""Choose the graph context's fuse threshold (`graph_fuse_min_speedup` of a spec's fit) on fuse
decisions measured in the executor.

    python scripts/fit_graph_margin.py --gpu h100 data/records/h100/whole/*/{mobilenet_v1,mobilenet_v2,\
mobilenet_v3_large,mnasnet1_0,efficientnet_b0,mobilevit_xxs}.json.gz

(the bundled spec's value: the six bundled models in all six configurations). For each candidate
value the saved `validate --whole --decisions` results are decided again in the graph context
(`whole_redecide.redecide`) and scored against their saved step times (`whole_decisions.score`):
the value with the most right decisions wins, the time the wrong ones lose breaking ties, then the
smaller value. Values below 1 fuse a candidate predicted up to that much slower fused, for a graph
context that under-credits fusion (the H100 spec's source note of the field has its scan).
Only pass the models the choice may see (never the held-out list, `models/holdout.toml`).
"""

from __future__ import annotations

import argparse
from concurrent.futures import ProcessPoolExecutor

from fuseplanner.frontend.holdout import holdout_models
from fuseplanner.hw.kernel_fit import GRAPH_THRESHOLD_FIELD
from fuseplanner.hw.spec import gpu
from fuseplanner.validation.microbench import apply_measured
from fuseplanner.validation.whole import read
from fuseplanner.validation.whole_decisions import score
from fuseplanner.validation.whole_redecide import redecide

VALUES = (0.8, 0.85, 0.9, 0.95, 0.97, 1.0, 1.02, 1.05, 1.1)  # from the schema's least value


def with_threshold(spec, value: float):
    return apply_measured(spec, {GRAPH_THRESHOLD_FIELD: value})  # a fit parameter: it replaces the fit's value


def graph_score(job: tuple[str, str, float]) -> tuple[int, int, float]:
    """(right, scored, seconds lost) of the graph context's decisions in one results file."""
    path, spec_name, value = job
    spec = with_threshold(gpu(spec_name), value)
    right = scored = 0
    lost = 0.0
    for r in read(path):
        for d in score(redecide(r, spec)):
            if d.context == "graph" and d.right is not None:
                right, scored, lost = right + d.right, scored + 1, lost + (d.lost_s or 0.0)
    return right, scored, lost


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h100", help="spec whose other values are kept")
    ap.add_argument("--jobs", type=int, default=2, help="processes")
    ap.add_argument("--values", type=lambda v: tuple(float(x) for x in v.split(",")), default=VALUES,
                    help="thresholds to score, comma-separated (default: VALUES)")
    ap.add_argument("results", nargs="+", help="whole.json(.gz) files of `validate --whole --decisions`")
    args = ap.parse_args()
    held = {m.name for m in holdout_models()}
    for path in args.results:
        if any(r.model in held for r in read(path)):
            raise SystemExit(f"{path}: a held-out model: no choice may see it")
    rows = []
    with ProcessPoolExecutor(args.jobs) as ex:
        for value in args.values:
            parts = list(ex.map(graph_score, [(p, args.gpu, value) for p in args.results]))
            right, scored, lost = (sum(x[i] for x in parts) for i in range(3))
            rows.append((right, -lost, -value))
            print(f"{GRAPH_THRESHOLD_FIELD} {value:g}: {right} of {scored} right ({100 * right / scored:.1f}%), "
                  f"{lost * 1e6:.0f} us lost", flush=True)  # fmt: skip
    best = max(rows)
    print(f"chosen: {GRAPH_THRESHOLD_FIELD} = {-best[2]:g}")


if __name__ == "__main__":
    main()
