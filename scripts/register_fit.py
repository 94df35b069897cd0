"""Fit the compiled-register table (`fuseplanner.registers.COMPILED`) to the kernel resources that
`fuseplanner validate` records on a GPU (`measured.kernels`: the registers CuPy's NVRTC allocated to
every launch). No GPU needed.

    python3 scripts/register_fit.py data/records/h100/*/*.json.gz

Per (kernel kind, storage dtype): registers = base(threads per block) + slope x outputs per thread,
the slope by least squares over the distinct compiled kernels (clipped to 0..MAX_SLOPE: an
accumulator costs about one register; kernels the compiler capped at 255 registers are left out),
each base the median residual of its thread count (the pooled median where a thread count has fewer
than MIN_SAMPLES kernels). Prints the table as Python and how often the blocks per SM it implies
match those of the compiled kernels, against the current table.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fuseplanner import registers, report, specs  # noqa: E402
from fuseplanner.cost.time import blocks_per_sm  # noqa: E402
from fuseplanner.ir import Tile  # noqa: E402

MAX_SLOPE = 2.0
MIN_SAMPLES = 3


def launches(paths: list[str]) -> list[dict]:
    """Every recorded launch: kind, dtype, tile, compiled registers, shared memory, blocks per SM."""
    out = []
    for path in paths:
        data = report.load_results(path)
        dtype = data["meta"]["dtype"]
        for rec in data["records"]:
            for k, t in zip((rec.get("measured") or {}).get("kernels") or [], rec["tiles"], strict=False):
                out.append({"kind": k["kind"], "dtype": dtype, "tile": Tile(**t), "regs": k["regs"],
                            "smem": k["smem_bytes"], "bps": k["blocks_per_sm"],
                            "key": (json.dumps(t, sort_keys=True), tuple(rec["nodes"]), dtype)})  # fmt: skip
    return out


def fit(rows: list[dict]) -> dict:
    """The table: (kind, dtype) -> (slope, {threads: base})."""
    cells = defaultdict(dict)
    for r in rows:
        if r["regs"] < 255:
            cells[(r["kind"], r["dtype"])][r["key"]] = (r["tile"].threads, registers.outputs_per_thread(r["tile"]),
                                                        r["regs"])  # fmt: skip
    table = {}
    for key, kernels in sorted(cells.items()):
        a = np.array(list(kernels.values()), float)
        thr = sorted({int(n) for n in a[:, 0]})
        x = np.column_stack([a[:, 1]] + [(a[:, 0] == n).astype(float) for n in thr])
        slope = float(np.clip(np.linalg.lstsq(x, a[:, 2], rcond=None)[0][0], 0.0, MAX_SLOPE))
        resid = a[:, 2] - slope * a[:, 1]
        pooled = float(np.median(resid))
        base = {n: round(float(np.median(resid[a[:, 0] == n])) if (a[:, 0] == n).sum() >= MIN_SAMPLES else pooled)
                for n in (64, 128, 256)}  # fmt: skip
        table[key] = (round(slope, 2), base)
    return table


def matches(rows: list[dict], table: dict, hw) -> int:
    """Launches whose blocks per SM under `table` equal the compiled kernel's."""
    return sum(blocks_per_sm(r["smem"], r["tile"].threads, registers.allocated(r["kind"], r["tile"], r["dtype"], table),
                             hw)[0] == r["bps"] for r in rows)  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h100", help="spec name or TOML path (for blocks per SM)")
    ap.add_argument("results", nargs="+", help="results.json(.gz) of validation runs with measured.kernels")
    args = ap.parse_args(argv)
    rows = launches(args.results)
    if not rows:
        print("no record carries measured.kernels", file=sys.stderr)
        return 1
    table = fit(rows)
    hw = specs.gpu(args.gpu).hw
    print("COMPILED = {")
    for (kind, dtype), (slope, base) in table.items():
        print(f"    ({kind!r}, {dtype!r}): ({slope}, {base}),")
    print("}")
    print(f"\n{len(rows)} launches; blocks per SM as compiled: fitted table {matches(rows, table, hw)}, "
          f"current table {matches(rows, registers.COMPILED, hw)}, "
          f"accumulator estimate {matches(rows, {}, hw)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
