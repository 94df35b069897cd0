"""Launches whose fitted registers (`registers.wanted`, before the 255 ceiling) exceed what a thread
can have, against the others, in saved validation runs (no GPU): measured / recorded predicted time
(10th, 50th, 90th percentile), how many compiled with a stack frame (`local_bytes`), and in how many
groups the measured fastest fused tile is one of them. The evidence for refusing such tiles
(`tiles.check`).

    python3 scripts/spill_check.py data/records/h100/*/*.json.gz
"""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import saved_runs  # noqa: E402

from fuseplanner import registers, report  # noqa: E402
from fuseplanner.ir import Tile  # noqa: E402


def over_ceiling(rec: dict, dtype: str) -> bool | None:
    """Whether the record's (single) kernel wants more than MAX_REGS_PER_THREAD; None when the
    register table has no row for it."""
    if (rec["kind"], dtype) not in registers.COMPILED:
        return None
    return registers.wanted(rec["kind"], Tile(**rec["tiles"][0]), dtype) > registers.MAX_REGS_PER_THREAD


def scan(paths) -> tuple[dict, Counter, Counter]:
    """(time ratios by over/under, stack frames by (over, has frame), groups by whether their
    measured best tile is over)."""
    ratios: dict[bool, list[float]] = defaultdict(list)
    frames: Counter = Counter()
    best: Counter = Counter()
    for path in paths:
        data = report.load_results(path)
        dtype = data["meta"]["dtype"]
        fused = defaultdict(list)
        for r in data["records"]:
            me = r.get("measured") or {}
            ours = (r.get("predicted") or {}).get("ours") or {}
            if not me.get("time_cold_s") or not ours.get("time_s") or len(r["step_kinds"]) != 1 or not r["tiles"]:
                continue
            over = over_ceiling(r, dtype)
            if over is None:
                continue
            ratios[over].append(me["time_cold_s"] / ours["time_s"])
            frames[over, bool((me.get("kernels") or [{}])[0].get("local_bytes"))] += 1
            if r.get("group") and r["role"] != "unfused":
                fused[r["group"]].append((me["time_cold_s"], over))
        for runs in fused.values():
            best[min(runs)[1]] += 1
    return ratios, frames, best


def main(argv=None) -> None:
    _, paths = saved_runs.parse(__doc__, argv)
    ratios, frames, best = scan(paths)
    print("| launches | n | measured / predicted time p10 / median / p90 | with a stack frame | groups whose fastest tile |")
    print("|---|---:|---|---:|---:|")
    for over in (True, False):
        v = sorted(ratios[over])
        n = len(v)
        q = " / ".join(f"{v[int(f * (n - 1))]:.2f}" for f in (0.1, 0.5, 0.9)) if n else "-"
        name = "over 255 registers" if over else "within 255"
        print(f"| {name} | {n} | {q} | {frames[over, True]} | {best[over]} |")


if __name__ == "__main__":
    main()
