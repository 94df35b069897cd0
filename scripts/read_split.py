"""Predicted L2 reads of saved counter records split into activations and weights, each as a share of the
measured reads (no GPU): where a kernel's read error comes from. Per record: the ratio predicted /
measured reads, then the activation (input windows, residual) and weight parts of the prediction after
`model.launched` (L2 merging, cluster split) and `model.coresident` (L1 sharing), as fractions of the
measured reads. A weight share above 1 alone says the model counts more weight reads than L2 saw.

    python3 scripts/read_split.py --gpu h100 --kind pw data/records/h100/fit/*-b4-sweep.json.gz
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import saved_runs  # noqa: E402

from fuseplanner.cost import model  # noqa: E402


def split(spec, path: str, kinds: set[str]) -> list[tuple]:
    """(ratio, run, id, kind, tile, activation share, weight share) of each single-kernel counter record."""
    rows = []
    for run, r, st, w, bps, ks in saved_runs.launched_records(spec, path, kinds):
        w = model.coresident(w, bps, ks, spec.hw, st.kind)
        got = r["measured"]["gma_read_bytes"]
        rows.append(
            (
                w.gma_read / got,
                run,
                r["id"],
                st.kind,
                str(st.tile),
                (w.gma_read - w.w_read) / got,
                w.w_read / got,
            )
        )
    return rows


def main(argv=None) -> None:
    def options(ap):
        ap.add_argument("--kind", default="", help="comma-separated kernel kinds (default: all)")

    spec, paths, args = saved_runs.parse_with(__doc__, argv, options)
    kinds = set(filter(None, args.kind.split(",")))
    rows = sorted((row for p in paths for row in split(spec, p, kinds)), reverse=True)
    print("| predicted / measured reads | run | record | kind | tile | activations | weights |")
    print("|---:|---|---|---|---|---:|---:|")
    for ratio, run, rid, kind, tile, act, wt in rows:
        print(f"| {ratio:.2f} | {run} | {rid} | {kind} | {tile} | {act:.2f} | {wt:.2f} |")


if __name__ == "__main__":
    main()
