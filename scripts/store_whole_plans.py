"""Store in saved whole results the plan each one measured (`WholeResult.plan`), for results saved
before whole results carried it (no GPU).

The plan is made again as `validate --whole` made it (the time objective decided in the isolated
context with the spec given, which must be the spec the run was measured with); a result whose
measured steps that plan does not reproduce is left without a plan and reported, so `repredict`
keeps refusing it rather than costing a plan nobody measured. Files are rewritten in place (gzip
when their name ends in .gz).

    python3 scripts/store_whole_plans.py --gpu h100 data/records/h100/whole/*/*.json.gz data/records/h100/traffic/*/*.json.gz
"""

from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fuseplanner.core.errors import PlanError  # noqa: E402
from fuseplanner.hw.spec import gpu  # noqa: E402
from fuseplanner.validation.whole import read, repredict, to_json  # noqa: E402


def with_plan(result, spec):
    """`result` with the plan that reproduces its measured steps (`repredict` plans it again and checks
    the steps), or None when that plan does not."""
    try:
        return result.model_copy(update={"plan": repredict(result, spec).plan})
    except PlanError:
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", required=True, help="the spec the runs were measured with")
    ap.add_argument("files", nargs="+", type=Path)
    args = ap.parse_args()
    spec, failed = gpu(args.gpu), 0
    for path in args.files:
        results = read(path)
        out = []
        for r in results:
            new = r if r.plan is not None else with_plan(r, spec)
            if new is None:
                failed += 1
                print(f"{path}: {r.model} {r.dtype}/{r.precision} b{r.batch}: the plan of {args.gpu} does not reproduce "
                      "the measured steps; left without a plan")  # fmt: skip
            out.append(new or r)
        text = to_json(out).encode()
        path.write_bytes(gzip.compress(text, mtime=0) if path.suffix == ".gz" else text)
        print(f"{path}: {len(out)} results", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
