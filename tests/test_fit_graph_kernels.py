"""The graph context's per-class launch terms fitted on saved graph-mode step times
(`validation.fit_whole`, step 2 of `calibrate --from-whole`; CPU only, a committed whole run of MobileNetV1)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fuseplanner.core.errors import RecordsError
from fuseplanner.hw.spec import gpu
from fuseplanner.planning.whole import predict_whole
from fuseplanner.validation import fit_whole
from fuseplanner.validation.microbench import apply_measured

ROOT = Path(__file__).resolve().parents[1]
WHOLE = ROOT / "data" / "records" / "h100" / "whole"
RUN = str(WHOLE / "fp32fp32_b1" / "mobilenet_v1.json.gz")


@pytest.fixture(scope="module")
def fitted():
    spec = gpu("h100")
    rows = fit_whole.runs([RUN], spec)
    return fit_whole, spec, rows, fit_whole.samples(rows, spec)


def test_a_held_out_model_is_refused():
    with pytest.raises(RecordsError, match="held-out"):
        fit_whole.runs([str(WHOLE / "fp32fp32_b1" / "mobilenet_v3_small.json.gz")], gpu("h100"))


def test_the_terms_sit_in_the_fit_only():
    s = apply_measured(gpu("h100"), fit_whole.term_values([1e-7, 2e-7, 4e-7, 3e-7]))
    got = (s.fit.graph_dw_kernel_s, s.fit.graph_pw_kernel_s, s.fit.graph_linear_kernel_s, s.fit.graph_fused_kernel_s)
    assert got == (1e-7, 2e-7, 4e-7, 3e-7)
    assert (s.hw.graph_dw_kernel_s, s.hw.graph_pw_kernel_s, s.hw.graph_linear_kernel_s, s.hw.graph_fused_kernel_s) == got


def test_samples_reproduce_the_graph_prediction_with_the_bundled_terms(fitted):
    """A sample's prediction (its zero-term time plus its classes' terms) is the graph context's step
    time with those terms: the sum over the planned and unfused steps matches `predict_whole` with the
    bundled spec, step for step where no step sits at the launch interval."""
    mod, spec, rows, samples = fitted
    x = np.array([getattr(spec.fit, f) for f in mod.TERM_FIELDS])
    base = np.array([s.base_s for s in samples])
    launches = np.array([s.launches for s in samples], dtype=float)
    least = np.array([s.least_s for s in samples])
    ours = np.maximum(least, base + launches @ x)
    run = rows[0]
    w = predict_whole(run.graph, spec, run.plans[0], "graph", unfused_plan=run.plans[1])
    want = [p.time_s for side, measured in ((w.planned, run.measured[0]), (w.unfused, run.measured[1]))
            for p in side.steps if p.kind in mod.KERNEL_KINDS and measured.get(p.label, 0) > 0]  # fmt: skip
    assert len(want) == len(samples) > 20
    assert ours == pytest.approx(want, rel=1e-9)
    # MobileNetV1's steps: its DW and PW layers unfused, its fused groups planned; every class is there (its classifier is the linear one)
    assert launches.sum(axis=0).min() > 0


def test_the_fit_lowers_the_robust_loss(fitted):
    mod, spec, rows, samples = fitted
    data = mod.arrays(samples)

    def loss(x):  # soft L1 at scale 0.1, as least_squares minimises it
        r = mod.step_residuals(data, x) / 0.1
        return float(np.sum(2 * (np.sqrt(1 + r * r) - 1)))

    x = mod.fit_terms(data)
    assert loss(x) < loss(np.zeros(len(mod.TERM_FIELDS)))
    # a term moved by 1 us off the optimum costs more
    assert loss(x + np.array([0, 1e-6, 0, 0])) > loss(x)


def test_bootstrap_intervals_hold_the_fit_of_the_runs_given(fitted):
    """Two runs (MobileNetV1 fp32 batch 1 and 8): every resample of them is one of three sets of
    runs (each run once, or one of them twice), so the intervals lie within the fits of the single
    runs and of both."""
    mod, spec, _, _ = fitted
    runs_ = mod.runs([RUN, str(WHOLE / "fp32fp32_b8" / "mobilenet_v1.json.gz")], spec)
    s = mod.samples(runs_, spec)
    assert {v.run for v in s} == {0, 1}
    ci = mod.intervals(s, 12)
    fits = np.array([mod.fit_terms(mod.arrays([v for v in s if v.run in keep])) for keep in ({0}, {1}, {0, 1})])
    assert ci.shape == (len(mod.TERM_FIELDS), 2) and (ci[:, 0] <= ci[:, 1]).all()
    assert (ci[:, 0] >= fits.min(axis=0) - 1e-9).all() and (ci[:, 1] <= fits.max(axis=0) + 1e-9).all()
