"""Out-of-sample scan of two time-model settings: refit, then score on other records.

For each value: refit the named fields on the TRAIN records (`fit.fit_spec(..., only=FIELDS)`), then
re-predict TRAIN and TEST and print fuse decisions agreeing and the median time APE, batch 1 and 8
(`fit.repredict`: each group's plan re-chosen among its measured tiles).

  --exponent E,...  the fused kernels' `fused_block_warp_exponent` set to E before the refit
  --sm-cap S,...    the fused SM issue cap `fused_sm_issue_warps` set to S warps before the refit
                    (0: none)

    python3 scripts/model_scan.py --exponent 0.908,0.8,0.7,0.6,0.5 \\
        --train 'data/records/h100/fit/*.json.gz' --test 'data/records/h100/holdout/*.json.gz'
    python3 scripts/model_scan.py --sm-cap 0,8,10,12 --fit fused_pw_warp_flops_per_cycle_fp32,\\
fused_pw_warp_flops_per_cycle_fp16,fused_block_warp_exponent,coresident_exponent --train ... --test ...
"""

from __future__ import annotations

import argparse
import glob
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fuseplanner import fit, report, specs  # noqa: E402


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
    base = specs.gpu("h100")
    samples = fit.load_samples(train)
    runs = [("exponent", float(v)) for v in args.exponent.split(",") if v]
    runs += [("sm-cap", float(v)) for v in args.sm_cap.split(",") if v]
    for what, value in runs:
        field = "fused_block_warp_exponent" if what == "exponent" else "fused_sm_issue_warps"
        measured = {k: v for k, v in base.measured.items() if k != field}
        spec = specs.GpuSpec.model_validate({**base.model_dump(), field: value, "measured": measured})
        f = fit.fit_spec(spec, samples, only=args.fit.split(","))
        spec = fit.apply_measured(spec, f.values)
        print(f"{what} {value}: fitted {f.values}; train {score(spec, train)}; test {score(spec, test)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
