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
Held-out models (`models/holdout.toml`) are refused. The scan is step 3 of `fuseplanner calibrate
--from-whole` (`fuseplanner.validation.fit_whole`), here alone with the spec's other values as they are.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fuseplanner.core.errors import FusePlannerError  # noqa: E402
from fuseplanner.hw.kernel_fit import GRAPH_THRESHOLD_FIELD  # noqa: E402
from fuseplanner.hw.spec import gpu  # noqa: E402
from fuseplanner.validation.fit_whole import THRESHOLDS, best_threshold, check_fit_set, scan_threshold  # noqa: E402
from fuseplanner.validation.whole import read  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h100", help="spec whose other values are kept")
    ap.add_argument("--jobs", type=int, default=2, help="processes")
    ap.add_argument("--values", type=lambda v: tuple(float(x) for x in v.split(",")), default=THRESHOLDS,
                    help="thresholds to score, comma-separated (default: fit_whole.THRESHOLDS)")
    ap.add_argument("results", nargs="+", help="whole.json(.gz) files of `validate --whole --decisions`")
    args = ap.parse_args()
    for path in args.results:
        try:
            check_fit_set(read(path), path)
        except FusePlannerError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    scores = scan_threshold(args.results, gpu(args.gpu), args.values, args.jobs, lambda line: print(line, flush=True))
    print(f"chosen: {GRAPH_THRESHOLD_FIELD} = {best_threshold(scores).value:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
