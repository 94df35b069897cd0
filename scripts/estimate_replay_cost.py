"""Estimate `graph_replay_s` (what one CUDA-graph replay costs once between the events that time it) from
saved whole results whose graph-mode step times were taken by one replay (`graph_step_timing` "replay").

    python scripts/estimate_replay_cost.py \
        data/records/h100/whole/*_b1/{mobilenet_v1,mobilenet_v2,mobilenet_v3_large,mnasnet1_0,efficientnet_b0,mobilevit_xxs}.json.gz

(the H100 spec's value: the six bundled models, batch 1, the three precisions)

Such a step time is the step's spacing plus 1/n of the replay's once cost c (n = `whole.REPLAY_COPIES`
copies per replay). A whole replay is its steps' spacings, plus c, plus what the model's data costs in
a whole replay that steps replayed alone do not pay (E). At batch 1 every activation stays in L2, so E
is taken to be the same for a model planned and unfused, and per model

    (replay_planned - sum of planned steps) - (replay_unfused - sum of unfused steps) = (N_unfused - N_planned) x c / n

with N the steps timed. The script prints c / n as the least-squares slope through the origin over the
results, and c. Only pass the models a fit may see (never the held-out list, `models/holdout.toml`).
"""

from __future__ import annotations

import argparse

import numpy as np

from fuseplanner.frontend.holdout import holdout_models
from fuseplanner.validation.whole import REPLAY_COPIES, read


def pairs(paths: list[str]) -> list[tuple[int, float]]:
    """(N_unfused - N_planned, the difference of the two replays' excess over their step sums in seconds)
    of each result timed by one replay."""
    held = {m.name for m in holdout_models()}
    out = []
    for path in paths:
        for r in read(path):
            if r.model in held:
                raise SystemExit(f"{path}: {r.model} is a held-out model: no fit may see it")
            if r.graph_step_timing != "replay" or r.step_mode != "graph":
                raise SystemExit(f"{path}: its steps were not timed by one replay in graph mode")
            planned = r.measured_planned.median_s - sum(s.measured_s for s in r.steps)
            unfused = r.measured_unfused.median_s - sum(s.measured_s for s in r.unfused_steps)
            out.append((len(r.unfused_steps) - len(r.steps), planned - unfused))
    return out


def per_step_share(rows: list[tuple[int, float]]) -> float:
    """The least-squares slope through the origin of the excess difference on the step difference."""
    dn = np.array([n for n, _ in rows], dtype=float)
    dy = np.array([y for _, y in rows])
    if not dn.any():
        raise SystemExit("every result has as many planned as unfused steps: nothing to estimate from")
    return float(dn @ dy / (dn @ dn))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", help="whole.json files (plain or .gz) of batch-1 runs a fit may see")
    rows = pairs(ap.parse_args().results)
    share = per_step_share(rows)
    print(f"{len(rows)} results: {share * 1e6:.3f} us per step timed, graph_replay_s = {share * REPLAY_COPIES:.3g} s")


if __name__ == "__main__":
    main()
