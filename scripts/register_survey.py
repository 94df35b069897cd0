"""Registers nvcc allocates to the fused kernels of saved validation records, against the cost model's
estimate (`tiles.regs_per_thread`) and the blocks per SM each implies. Needs nvcc on PATH (no GPU).

    python3 scripts/register_survey.py data/records/h100/holdout/*.json.gz [--jobs 2] [--json OUT]

Prints, per kernel kind and storage dtype, the median ratio of allocated to estimated registers and how
many distinct tiles the estimate gives more blocks per SM than the compiler's count allows.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import re
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from fuseplanner import fit, specs, tiles
from fuseplanner.cost.time import blocks_per_sm
from fuseplanner.kernels import kernel_source, nvcc_report
from fuseplanner.kernels.fused import SOURCES, kernel_defines

USED = re.compile(r"Used (\d+) registers")


def allocated(nvcc: str, step, dtype: str, precision: str, workdir: str) -> int | None:
    """Registers ptxas reports for the kernel of one fused step (None when it does not compile)."""
    defines = kernel_defines(step.kind, step.ops, step.tile, dtype, precision, [True] * len(step.ops), False)
    rc, rep = nvcc_report(nvcc, kernel_source(SOURCES[step.kind][0], defines), workdir, timeout=600)
    found = USED.findall(rep)
    return int(found[-1]) if rc == 0 and found else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+")
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", help="write every surveyed tile here")
    args = ap.parse_args()
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        print("error: nvcc is not on PATH", file=sys.stderr)
        return 2
    spec = specs.gpu(args.gpu)
    hw = spec.hw
    jobs = {}
    for s in fit.load_samples(args.results):
        for st in s.steps:
            if st.kind in tiles.FUSED_KINDS and not tiles.check(st.kind, st.ops, st.tile, s.dtype, spec):
                key = (st.kind, s.dtype, str(st.tile), tuple((o.c_in, o.c_out, o.kernel, o.stride) for o in st.ops))
                jobs.setdefault(key, (st, s.dtype, s.precision))
    with tempfile.TemporaryDirectory() as tmp, concurrent.futures.ThreadPoolExecutor(args.jobs) as ex:
        regs = list(ex.map(lambda j: allocated(nvcc, j[0], j[1], j[2], tmp), jobs.values()))
    rows = []
    for (st, dtype, _), got in zip(jobs.values(), regs, strict=True):
        if got is None:
            continue
        est = tiles.regs_per_thread(st.kind, st.tile, dtype)
        smem = tiles.smem_bytes(st.kind, st.ops, st.tile, dtype)
        rows.append({"kind": st.kind, "dtype": dtype, "tile": str(st.tile), "allocated": got, "estimated": est,
                     "bps_estimated": blocks_per_sm(smem, st.tile.threads, est, hw)[0],
                     "bps_allocated": blocks_per_sm(smem, st.tile.threads, got, hw)[0]})  # fmt: skip
    print(f"{len(rows)} of {len(jobs)} distinct fused tiles compiled")
    print("| kind | dtype | tiles | allocated / estimated (median) | blocks per SM overstated |")
    print("|---|---|---:|---:|---:|")
    for kind, dtype in sorted({(r["kind"], r["dtype"]) for r in rows}):
        sel = [r for r in rows if r["kind"] == kind and r["dtype"] == dtype]
        ratio = statistics.median(r["allocated"] / r["estimated"] for r in sel)
        over = sum(r["bps_estimated"] > r["bps_allocated"] for r in sel)
        print(f"| {kind} | {dtype} | {len(sel)} | {ratio:.2f} | {over} |")
    print(f"all: blocks per SM overstated in {sum(r['bps_estimated'] > r['bps_allocated'] for r in rows)} of {len(rows)}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
