"""Measured whole-inference DRAM traffic against a least-recently-used L2 simulation (no GPU needed).

For each `validate --whole` record with Nsight Compute counters, compiles the planned and the unfused
model on the CPU and simulates one cold inference over the executor's addresses
(`fuseplanner.validation.whole_lru`), then prints per record the measured, simulated and graph-context
DRAM bytes, and the |error| of the total per model set and batch.

    python3 scripts/lru_traffic.py data/records/h100/traffic/*/*.json.gz \
        data/records/h100/whole/fp16fp32_b8/*.json.gz --gpu h100
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fuseplanner.core.errors import FusePlannerError  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("records", nargs="+", help="whole.json(.gz) files of `validate --whole` with counters")
    ap.add_argument("--gpu", default="h100", help="bundled GPU spec the runs were measured on (default h100)")
    ap.add_argument("--line-bytes", type=int, default=None, help="simulated L2 line (default 4096)")
    ap.add_argument("--capacity-mb", type=float, default=None,
                    help="simulated L2 capacity in MB (default the spec's l2_bytes x l2_usable_fraction)")
    args = ap.parse_args(argv)
    from fuseplanner.frontend.holdout import holdout_models
    from fuseplanner.hw.spec import gpu
    from fuseplanner.validation import whole_lru
    from fuseplanner.validation.whole import read

    try:
        spec = gpu(args.gpu)
        line = args.line_bytes or whole_lru.LINE_BYTES
        results = [r for path in args.records for r in read(path) if r.traffic is not None and r.traffic.cold]
        if not results:
            raise whole_lru.PlanError("none of the records has whole-inference counters")
        capacity = args.capacity_mb * 1e6 if args.capacity_mb else spec.hw.l2_bytes * spec.hw.l2_usable_fraction
        rows = [whole_lru.evaluate(r, spec, line_bytes=line, capacity_bytes=capacity) for r in results]
        held_out = frozenset(m.name for m in holdout_models())
    except FusePlannerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"LRU L2 of {capacity / 1e6:.1f} MB in {line}-byte lines; "
          "DRAM MB, errors are simulated or predicted / measured - 1 (total of read and write)\n")
    print("\n".join(whole_lru.table(rows)) + "\n")
    print("|error| median / p90 % of total cold DRAM, planned and unfused pooled\n")
    print("\n".join(whole_lru.summary(rows, held_out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
