"""Out-of-sample scan of two time-model variants (experiment; neither is in the cost model).

For each value: refit the named fields on the TRAIN records (`fit.fit_spec(..., only=FIELDS)`), then
re-predict TRAIN and TEST and print fuse decisions agreeing and the median time APE, batch 1 and 8.

  --exponent E,...  the fused kernels' `fused_block_warp_exponent` set to E before the refit
  --sm-cap S,...    a wave of fused blocks takes at least their issued work at S warps' rates per SM
                    (an SM issue cap; 0 = none), on top of the bundled model

    python3 scripts/model_scan.py --exponent 0.908,0.8,0.7,0.6,0.5 \\
        --train 'docs/validation/coresident-2026-11-23/*/*/results.json' \\
        --test 'docs/validation/live-2026-11-23b/b[18]/runs/*/results.json'
    python3 scripts/model_scan.py --sm-cap 0,4,8 --fit fused_pw_warp_flops_per_cycle_fp32,\\
fused_pw_warp_flops_per_cycle_fp16,fused_block_warp_exponent,coresident_exponent --train ... --test ...
"""

from __future__ import annotations

import argparse
import glob
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fuseplanner.cost as cost_pkg  # noqa: E402
import fuseplanner.cost.model as cost_model  # noqa: E402
import fuseplanner.cost.time as cost_time  # noqa: E402
from fuseplanner import fit, report, specs  # noqa: E402

CAP = [0.0]    # the SM issue cap in warps (0: none)
WARPS = [0.0]  # the current launch's warps ** exponent while the cap applies to it, else 0
_kernel_time, _wave = cost_time.kernel_time, cost_time._wave


def capped_time(w, dram_bytes, bps, threads, hw, mma, rates, depth=1, sms=0):
    """`cost.time.kernel_time`, its waves capped (`capped_wave`) for fused launches (those with mma issue)."""
    WARPS[0] = (-(-threads // hw.warp_size)) ** rates[2] if CAP[0] and w.mma_issue else 0.0
    return _kernel_time(w, dram_bytes, bps, threads, hw, mma, rates, depth, sms)


def capped_wave(per_sm, active, c_blk, mem_blk, t_own, t_ld, t_lat, lat, share):
    """`cost.time._wave` whose SM-compute floor is at least each block's issued work at CAP[0] warps'
    rates (t_own x warps ** exponent is the block's work at one warp's rate)."""
    if WARPS[0]:
        c_blk = max(c_blk, t_own * WARPS[0] / CAP[0])
    return _wave(per_sm, active, c_blk, mem_blk, t_own, t_ld, t_lat, lat, share)


def score(spec, paths: list[str]) -> dict[str, str]:
    out = {}
    for label, sel in (("b1", [p for p in paths if "/b8/" not in p]), ("b8", [p for p in paths if "/b8/" in p])):
        agree = total = 0
        apes: list[float] = []
        for path in sel:
            data = fit.repredict(report.load_results(path), spec)
            groups = report.decisions(data)["groups"].values()
            agree += sum(1 for g in groups if g["fuse_agrees"])
            total += len(groups)
            apes += [report.ape(p, m) for p, m in report.pairs(data["records"], "ours", "time")]
        if total:
            out[label] = f"{agree}/{total} decisions, time {statistics.median(apes):.1f}%"
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exponent", default="", help="fused_block_warp_exponent values")
    ap.add_argument("--sm-cap", default="", help="SM issue caps in warps (0: none)")
    ap.add_argument("--fit", default="fused_pw_warp_flops_per_cycle_fp32,fused_pw_warp_flops_per_cycle_fp16")
    ap.add_argument("--train", required=True, help="glob of results.json files to fit on")
    ap.add_argument("--test", required=True, help="glob of results.json files to score out of sample")
    args = ap.parse_args(argv)
    train, test = sorted(glob.glob(args.train)), sorted(glob.glob(args.test))
    cost_model.kernel_time = cost_pkg.kernel_time = capped_time
    cost_time._wave = capped_wave  # kernel_time looks it up in its module
    base = specs.gpu("h100")
    samples = fit.load_samples(train)
    runs = [("exponent", float(v)) for v in args.exponent.split(",") if v]
    runs += [("sm-cap", float(v)) for v in args.sm_cap.split(",") if v]
    for what, value in runs:
        spec = base
        CAP[0] = value if what == "sm-cap" else 0.0
        if what == "exponent":
            spec = fit.apply_measured(base, {"fused_block_warp_exponent": value})
        f = fit.fit_spec(spec, samples, only=args.fit.split(","))
        spec = fit.apply_measured(spec, f.values)
        print(f"{what} {value}: fitted {f.values}; train {score(spec, train)}; test {score(spec, test)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
