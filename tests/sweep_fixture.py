"""Writes tests/fixtures/sweep_synthetic.json.gz: a saved micro-sweep whose 'measurements' are
synthetic (no GPU): the quick design's fp32 items, timed by the cost model with the h100 spec whose
fit has the known `TRUTH` values, times 3% log-normal noise (seed 0). Counters: none.

    python tests/sweep_fixture.py
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from fuseplanner.hw import spec as specs
from fuseplanner.validation import sweep
from fuseplanner.validation.microbench import apply_measured
from fuseplanner.validation.validate import steps_cost

PATH = Path(__file__).parent / "fixtures" / "sweep_synthetic.json.gz"
#: h100 fit values scaled by these factors: the parameters the test recovers.
FACTORS = {"dw_warp_flops_per_cycle_fp32": 1.25, "pw_warp_flops_per_cycle_fp32": 0.8,
           "fused_pw_warp_flops_per_cycle_fp32": 1.2, "fused_kernel_fixed_s": 1.5}
NOISE = 0.03


def truth() -> dict[str, float]:
    base = specs.gpu("h100")
    return {k: float(base.eff(k)) * f for k, f in FACTORS.items()}


def build() -> dict:
    true_spec = apply_measured(specs.gpu("h100"), truth())
    rng = np.random.default_rng(0)
    records = []
    for si in sweep.design(specs.gpu("h100"), quick=True):
        c = si.config
        if c.dtype != "fp32" or c.precision != "fp32":
            continue
        cost = steps_cost(si.item.steps, c.dtype, c.batch, true_spec, c.precision)
        if cost is None:
            continue
        t = cost.time_s * math.exp(rng.normal(0.0, NOISE))
        records.append(sweep.record(si, {"time_cold_s": t, "traffic": "counter-free"}, {"ok": True}, None))
    meta = {"gpu": "h100", "device_name": "synthetic (tests/sweep_fixture.py)", "design": "quick, fp32 only",
            "versions": {"driver": "none"}, "truth": truth(), "noise": NOISE, "traffic": "no counters"}
    return {"meta": meta, "records": records}


if __name__ == "__main__":
    d = build()
    sweep.save(PATH, d["meta"], d["records"])
    print(f"wrote {PATH} ({len(d['records'])} records)")
