"""How repeatable a fuse decision's measured saving is: the candidates of saved `validate --whole
--decisions` results that two planned runs (the isolated and the graph context's plans) both fused,
each measured in each run against the same unfused steps.

    python scripts/decision_noise.py data/records/h100/whole/*/*.json.gz

Prints how many such candidates there are, in how many the two savings agree in sign, and the median
and 90th percentile of their absolute difference: the part of a decision's error that is measurement,
not model. Step times are used as saved (netting subtracts the same from both runs' steps).
"""

from __future__ import annotations

import argparse

import numpy as np

from fuseplanner.validation.whole import read
from fuseplanner.validation.whole_decisions import measure_candidate


def twice_measured(results) -> list[tuple[float, float]]:
    """(saving in the first run, saving in the second) of every candidate two runs have a kernel step for
    (results whose second run repeats the first, the two plans having the same kernels, left out)."""
    out = []
    for r in results:
        if r.decisions is None or len(r.decisions.runs) < 2 or r.decisions.runs[0].steps == r.decisions.runs[1].steps:
            continue
        for c in r.decisions.candidates:
            got = [m for m in (measure_candidate(c.label, run.steps, r.unfused_steps) for run in r.decisions.runs) if m]
            if len(got) >= 2:
                out.append((got[0].saving_s, got[1].saving_s))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", help="whole.json files (plain or .gz) with decision measurements")
    pairs = twice_measured([r for path in ap.parse_args().results for r in read(path)])
    if not pairs:
        raise SystemExit("no candidate was measured in two planned runs")
    a = np.array(pairs)
    agree = int(np.sum(np.sign(a[:, 0]) == np.sign(a[:, 1])))
    diff = np.abs(a[:, 0] - a[:, 1]) * 1e6
    print(f"{len(a)} candidates measured in two runs: savings agree in sign in {agree}; |difference| median "
          f"{np.median(diff):.2f} us, p90 {np.percentile(diff, 90):.2f} us")


if __name__ == "__main__":
    main()
