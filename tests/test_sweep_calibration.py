"""The calibration micro-sweep: its design identifies every fitted parameter (design matrix on the CPU
cost model), the fit recovers known values from saved sweep records, with bootstrap intervals, and
`calibrate --from-sweep` writes a spec with its own fit."""

from __future__ import annotations

import numpy as np
import pytest

from fuseplanner.hw import spec as specs
from fuseplanner.hw.kernel_fit import THRESHOLD_FIELD
from fuseplanner.validation import fit, sweep
from fuseplanner.validation.fit_sweep import fit_sweep
from tests.sweep_fixture import FACTORS, PATH, truth

#: RMS of d log(prediction) / d log(parameter) over the sweep below which a parameter counts as unidentified.
MIN_SENSITIVITY = 0.005


@pytest.fixture(scope="module")
def quick_samples():
    return sweep.design_samples(specs.gpu("h100"), quick=True)


def test_quick_design_identifies_every_fitted_parameter(quick_samples):
    names = [n for n in sweep.FIT_FIELDS if n != THRESHOLD_FIELD]
    jac = sweep.sensitivity(specs.gpu("h100"), quick_samples, names)
    rms = np.sqrt((jac**2).mean(axis=0))
    weak = [n for n, v in zip(names, rms, strict=True) if v < MIN_SENSITIVITY]
    assert not weak, f"the sweep barely moves {weak}"
    unit = jac / np.linalg.norm(jac, axis=0)
    sv = np.linalg.svd(unit, compute_uv=False)
    assert np.linalg.matrix_rank(unit, tol=1e-3) == len(names)
    assert sv.min() / sv.max() > 1e-3  # no parameter is (nearly) a combination of the others


def test_quick_design_covers_every_mode_and_decision(quick_samples):
    # every math mode's rate is needed by some launch, and groups are measured fused and unfused
    needed = set(fit._rate_fields(quick_samples))
    assert set(fit.RATE_FIELDS.values()) <= needed
    pairs = fit.decision_pairs(quick_samples)
    assert len(pairs) >= 3 * 4  # 4 blocks in each of the b1 configs (some fused kinds more)
    threads = {s.steps[0].tile.threads for s in quick_samples if s.kind == "dw"}
    assert len(threads) >= 2  # warps per block vary
    assert len(quick_samples) < len(sweep.design_samples(specs.gpu("h100"), quick=False)) / 2


def test_design_matrix_is_the_cost_models_slope():
    # one dw layer: its time scales with 1 / rate when compute-bound; the slope's sign must be negative
    samples = [s for s in sweep.design_samples(specs.gpu("h100"), quick=True) if s.kind == "dw"]
    jac = sweep.sensitivity(specs.gpu("h100"), samples, ["dw_warp_flops_per_cycle_fp32", "launch_overlap_s"])
    assert (jac[:, 0] <= 1e-9).all() and (jac[:, 0] < -1e-3).any()
    assert np.allclose(jac[:, 1], 0.0)  # single launches: no overlap term


def test_records_round_trip_to_samples():
    data = sweep.load(PATH)
    samples = sweep.records_to_samples(data["records"])
    assert len(samples) == len(data["records"]) > 0
    # the stored ops and tiles give back a launch the cost model prices
    assert all(fit.predict(specs.gpu("h100"), s)[0] > 0 for s in samples)
    bad = dict(data["records"][0], check={"ok": False})
    assert sweep.records_to_samples([bad]) == []


def test_fit_recovers_known_values_with_intervals():
    samples = sweep.records_to_samples(sweep.load(PATH)["records"])
    names = [*FACTORS, THRESHOLD_FIELD]
    result = fit_sweep(specs.gpu("h100"), samples, names, resamples=3)
    assert result.after["time"] < result.before["time"]
    for name, value in truth().items():
        assert result.values[name] == pytest.approx(value, rel=0.15), name
        lo, hi = result.ci[name]
        assert lo <= hi
    assert THRESHOLD_FIELD in result.values and THRESHOLD_FIELD not in result.ci


def test_sweep_file_errors(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"schema": "other"}')
    with pytest.raises(Exception, match="not a micro-sweep file"):
        sweep.load(bad)
    with pytest.raises(Exception, match="cannot read sweep file"):
        sweep.load(tmp_path / "missing.json.gz")


def test_calibrate_from_sweep_writes_an_own_fit_with_intervals(tmp_path, capsys):
    from fuseplanner.cli.main import main

    out = tmp_path / "synthetic.toml"
    rc = main(["calibrate", "--from-sweep", str(PATH), "--gpu", "h100", "--out", str(out), "--resamples", "2"])
    assert rc == 0
    text = capsys.readouterr().out
    assert f"wrote {out}" in text and "sweep records: median time APE" in text
    spec = specs.gpu(str(out))
    n = len(sweep.records_to_samples(sweep.load(PATH)["records"]))
    assert not spec.fit.borrowed and spec.fit_from is None
    assert not any("borrowed" in w for w in spec.warnings())
    assert spec.fit.source_gpu == "synthetic (tests/sweep_fixture.py)"
    assert spec.fit.record_count == n and spec.fit.records == str(PATH) and spec.fit.date
    # fp32-only records: the fp16 / tf32 rates are not fitted and keep h100's (no interval)
    assert "pw_warp_flops_per_cycle_fp32" in spec.fit.ci and "pw_warp_flops_per_cycle_fp16" not in spec.fit.ci
    assert spec.fit.pw_warp_flops_per_cycle_fp16 == specs.gpu("h100").fit.pw_warp_flops_per_cycle_fp16
    lo, hi = spec.fit.ci["dw_warp_flops_per_cycle_fp32"]
    assert lo <= hi
    assert "micro-sweep" in spec.fit.sources["dw_warp_flops_per_cycle_fp32"]


def test_a_fit_of_its_own_over_a_refitting_spec_loads(tmp_path, capsys):
    # the bundled h200 spec borrows the H100 fit with a [refit] table (its graph-context terms); a fit of
    # its own (`calibrate` on an H200, from a sweep or from results) holds those values in its [fit]
    # and writes no [refit] table, which a spec with a fit of its own refuses
    from fuseplanner.cli.main import main

    base = specs.gpu("h200")
    assert base.fit.borrowed and base.refit
    out = tmp_path / "mine.toml"
    assert main(["calibrate", "--from-sweep", str(PATH), "--gpu", "h200", "--out", str(out), "--resamples", "0"]) == 0
    capsys.readouterr()
    spec = specs.gpu(str(out))
    assert not spec.fit.borrowed and spec.refit == {} and "\n[refit]\n" not in out.read_text()
    assert all(getattr(spec.fit, k) == v for k, v in base.refit.items())
    assert spec.fit.sources["graph_pw_kernel_s"] == base.sources["refit.graph_pw_kernel_s"]
    assert not any(k.startswith("refit.") for k in spec.sources)


def test_calibrate_from_sweep_bad_file_is_one_error_line(tmp_path, capsys):
    from fuseplanner.cli.main import main

    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main(["calibrate", "--from-sweep", str(bad), "--gpu", "h100", "--out", str(tmp_path / "o.toml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and len(err.strip().splitlines()) == 1
