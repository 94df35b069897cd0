"""Scan one GPU-spec field over fixed values, refitting other fields at each (no GPU): for each value, the
fields named by --fit are fitted (`fit.fit_spec`, as `fuseplanner calibrate --from-results --fit` does)
on the --train records with the scanned field held at that value, and the fitted spec is scored on the
train and --test records: median / p90 absolute time error over all launches and over the fused ones,
and agreeing fuse decisions (fit.decision_agreement's planned-tile pairs). How `fused_epilogue_weight`
was chosen:

    python3 scripts/field_scan.py --gpu h100 --field fused_epilogue_weight --values 0,2,4,8,16,24,48 \\
        --fit fused_pw_warp_flops_per_cycle_fp32,fused_pw_warp_flops_per_cycle_fp16,fused_dw_warp_flops_per_cycle,fused_block_warp_exponent,coresident_exponent,fused_sm_issue_warps,fused_kernel_fixed_s,fuse_min_speedup \\
        --train 'data/records/h100/fit/*.json.gz' --test 'data/records/h100/holdout/*.json.gz' --json scan.json

Each value replaces the field in the spec (schema value and any measured one), so 0 switches a term off.
The fitted fields start from the spec's values: a re-run after those were refitted starts elsewhere.
"""

from __future__ import annotations

import argparse
import glob
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fuseplanner import fit, specs  # noqa: E402
from fuseplanner.calibrate import apply_measured  # noqa: E402
from fuseplanner.specs import GpuSpec  # noqa: E402


def paths(patterns: list[str]) -> list[str]:
    out = sorted({p for pat in patterns for p in glob.glob(pat)})
    if not out:
        sys.exit(f"field_scan: no results.json matches {' '.join(patterns)}")
    return out


def with_value(spec: GpuSpec, field: str, value: float) -> GpuSpec:
    """`spec` with `field` set to `value`, whatever its measured table held."""
    d = spec.model_dump()
    d["measured"] = {k: v for k, v in d["measured"].items() if k != field}
    return GpuSpec.model_validate({**d, field: value})


def score(spec, samples: list, tau: float) -> dict[str, float]:
    """Median / p90 absolute time error (%), of all and of fused samples, and agreeing decisions."""
    pred = fit._predictions(spec, samples)
    meas = np.array([s.time_s for s in samples])
    err = np.abs(pred[:, 0] - meas) / meas * 100
    fused = np.array([s.fused for s in samples])
    ratios = fit._pair_ratios(pred[:, 0], samples)
    return {"time": float(np.median(err)), "time_p90": float(np.percentile(err, 90)),
            "fused": float(np.median(err[fused])), "fused_p90": float(np.percentile(err[fused], 90)),
            "agree": int(fit._agreeing(ratios, tau)), "pairs": len(ratios)}  # fmt: skip


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--field", required=True)
    ap.add_argument("--values", required=True, help="comma-separated values of --field")
    ap.add_argument("--fit", required=True, help="comma-separated fields refitted at each value")
    ap.add_argument("--train", nargs="+", required=True, help="results.json globs the fits use")
    ap.add_argument("--test", nargs="+", default=[], help="results.json globs scored out of sample")
    ap.add_argument("--max-iter", type=int, default=400)
    ap.add_argument("--json", help="write every value's fitted fields and scores here")
    a = ap.parse_args(argv)
    base = specs.gpu(a.gpu)
    only = a.fit.split(",")
    train_all = fit.load_samples(paths(a.train))
    test_all = fit.load_samples(paths(a.test)) if a.test else []
    rows = []
    print("| value | train time med / p90 | fused med / p90 | decisions | test time med / p90 | fused med / p90 | decisions |")
    print("|---:|---|---|---|---|---|---|")
    for value in (float(v) for v in a.values.split(",")):
        spec = with_value(base, a.field, value)
        train, _ = fit.feasible(spec, train_all)
        test, _ = fit.feasible(spec, test_all)
        fitted = fit.fit_spec(spec, train, max_iter=a.max_iter, only=only)
        after = apply_measured(spec, fitted.values)
        tau = float(after.eff(fit.THRESHOLD_FIELD))
        row = {"value": value, "fitted": fitted.values, "train": score(after, train, tau),
               "test": score(after, test, tau) if test else None}  # fmt: skip
        rows.append(row)
        cells = []
        for part in ("train", "test"):
            s = row[part]
            cells += ([f"{s['time']:.1f} / {s['time_p90']:.1f}", f"{s['fused']:.1f} / {s['fused_p90']:.1f}",
                       f"{s['agree']} / {s['pairs']}"] if s else ["", "", ""])  # fmt: skip
        print(f"| {value:g} | " + " | ".join(cells) + " |", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
