"""Fuse decisions of saved validation runs, re-predicted with a spec, split by the DW kernel size of
each group (no GPU): `fit.repredict` re-plans every group among its measured tiles and
`report.decisions` says whether each plan agrees with the measured outcome.

    python3 scripts/decisions_by_dw_kernel.py --gpu h100 data/records/h100/*/*-fp16-b8-*.json.gz
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import saved_runs  # noqa: E402

from fuseplanner import fit, report  # noqa: E402
from fuseplanner.onnx_import import load_model  # noqa: E402


def main(argv=None) -> int:
    spec, results = saved_runs.parse(__doc__, argv)
    print("| run | DW kernel | groups | decisions agreeing |\n|---|---|---:|---:|")
    for path in results:
        data = fit.repredict(report.load_results(path), spec)
        graph = load_model(data["meta"]["model"], None, 1)  # kernel sizes do not depend on the batch
        tally: collections.Counter = collections.Counter()
        for g, entry in report.decisions(data)["groups"].items():
            dws = [graph.op(n).kernel for n in data["groups"][g]["nodes"] if graph.op(n).kind == "dw"]
            key = "x".join(map(str, dws[0])) if dws else "none"
            tally[(key, "n")] += 1
            tally[(key, "ok")] += entry["fuse_agrees"]
        for key in sorted({k for k, _ in tally}):
            print(f"| {Path(path).parent.name} | {key} | {tally[(key, 'n')]} | {tally[(key, 'ok')]} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
