"""How well each share of the filter tiles' input re-reads fits saved counter records, per kernel kind (no
GPU): `model.coresident` scales the re-reads (`Work.in_read`) by the co-resident blocks' L1 share and
by L2's merging (`coalesced`); this replays every single-kernel counter record with both factors, each
alone and neither, and prints the median and 90th percentile of |log(predicted / measured reads)|.
Cluster launches are left out (their re-reads are never scaled).

    python3 scripts/input_merging.py --gpu h100 data/records/h100/*/*.json.gz
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import saved_runs  # noqa: E402

from fuseplanner.cost import model  # noqa: E402
from fuseplanner.cost.traffic import coresident_share  # noqa: E402

VARIANTS = ("both", "co-residency only", "merging only", "neither")


def errors(spec, path: str) -> dict[str, list[list[float]]]:
    """Per kind, |log(predicted / measured reads)| of each record under the four VARIANTS."""
    hw = spec.hw
    out: dict[str, list[list[float]]] = {}
    for _, r, st, w, bps, ks in saved_runs.launched_records(spec, path):
        if not w.in_read or ks > 1:
            continue
        core = coresident_share(w.nsp, w.nf, hw.sm_count, bps, w.blocks if st.kind in model.FIRST_WAVE_KINDS else 0)
        merge = model.coalesced(w.nf, w.nsp, w.blocks, 1, hw)
        rest, floor = w.gma_read - w.in_read, 1.0 / max(w.nf, 1)
        got = r["measured"]["gma_read_bytes"]
        row = [
            abs(float(np.log((rest + w.in_read * max(s, floor)) / got)))
            for s in (core * merge, core, merge, 1.0)
        ]
        out.setdefault(st.kind, []).append(row)
    return out


def main(argv=None) -> None:
    spec, paths = saved_runs.parse(__doc__, argv)
    kinds: dict[str, list[list[float]]] = {}
    for p in paths:
        for kind, rows in errors(spec, p).items():
            kinds.setdefault(kind, []).extend(rows)
    print("| kind | records | " + " | ".join(VARIANTS) + " |")
    print("|---|---:|" + "---|" * len(VARIANTS))
    for kind, rows in sorted(kinds.items()):
        a = np.array(rows)
        cells = [f"{np.median(a[:, i]):.3f} / {np.percentile(a[:, i], 90):.3f}" for i in range(len(VARIANTS))]
        print(f"| {kind} | {len(a)} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
