"""`fuseplanner calibrate --from-whole` (`validation.fit_whole`): the graph context's terms fitted to
saved whole runs and written into a spec (CPU only, committed H100 whole runs of MobileNetV1)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest

from fuseplanner.cli.main import main
from fuseplanner.hw.kernel_fit import GRAPH_THRESHOLD_FIELD
from fuseplanner.hw.spec import gpu
from fuseplanner.validation import fit_whole
from fuseplanner.validation.fit_whole import ThresholdScore

WHOLE = Path(__file__).resolve().parents[1] / "data" / "records" / "h100" / "whole"
RUNS = [str(WHOLE / "fp32fp32_b1" / "mobilenet_v1.json.gz"), str(WHOLE / "fp32fp32_b1" / "mobilevit_xxs.json.gz")]


@pytest.fixture(scope="module")
def fitted():
    spec = gpu("h100")
    return spec, fit_whole.fit(RUNS, spec, resamples=4, thresholds=(0.9, 1.0))


def test_the_best_threshold_is_most_right_then_least_lost_then_smallest():
    s = [ThresholdScore(0.9, 10, 12, 5e-6), ThresholdScore(1.0, 10, 12, 3e-6), ThresholdScore(1.1, 9, 12, 0.0)]
    assert fit_whole.best_threshold(s).value == 1.0  # 10 right at 0.9 and 1.0; 1.0 loses 3 us, 0.9 loses 5
    s.append(ThresholdScore(0.95, 10, 12, 3e-6))
    assert fit_whole.best_threshold(s).value == 0.95  # the same right and loss: the smaller value


def test_only_the_library_fields_some_step_depends_on_are_fitted():
    spec = gpu("h100")
    steps = fit_whole.library_steps(fit_whole.runs(RUNS[:1], spec), spec)
    free = fit_whole.identified(steps, spec)
    # MobileNetV1 runs no LayerNorm or Softmax: the row kernels' cycles are not seen
    assert "library_row_iter_cycles" not in free and free
    got = fit_whole.fit_library(steps, spec)
    assert set(got) == set(free)
    now = {f: getattr(spec.hw, f) for f in fit_whole.LIBRARY_FIELDS}

    def sq(values):
        x = [values.get(f, now[f]) for f in fit_whole.LIBRARY_FIELDS]
        pred = fit_whole.library_seconds(steps, spec, x)
        return float(np.sum(np.log(pred / np.array([s.measured_s for s in steps])) ** 2))

    assert sq(got) <= sq({}) + 1e-12


def test_fit_reports_every_value_with_a_note(fitted):
    spec, result = fitted
    assert set(fit_whole.TERM_FIELDS) <= set(result.values) and GRAPH_THRESHOLD_FIELD in result.values
    assert result.values[GRAPH_THRESHOLD_FIELD] in (0.9, 1.0)
    assert set(result.notes) == set(result.values)
    assert all("calibrate --from-whole" in n and "mobilenet_v1" in n for n in result.notes.values())
    assert set(result.ci) == set(fit_whole.TERM_FIELDS)
    assert all(lo <= hi for lo, hi in result.ci.values())
    assert any(line.startswith("own-kernel steps") for line in result.lines)


def test_a_spec_with_its_own_fit_gets_the_values_in_it(fitted, tmp_path):
    from fuseplanner.validation.microbench import to_toml

    spec, result = fitted
    path = tmp_path / "h100_graph.toml"
    path.write_text(to_toml(fit_whole.spec_with(spec, result), {}))
    again = gpu(str(path))
    assert not again.fit.borrowed and "refit" not in tomllib.loads(path.read_text())
    for k, v in result.values.items():
        assert getattr(again.fit, k) == pytest.approx(v)
    assert again.fit.sources["graph_pw_kernel_s"] == result.notes["graph_pw_kernel_s"]
    assert again.fit.dw_warp_flops_per_cycle_fp32 == spec.fit.dw_warp_flops_per_cycle_fp32  # the rest kept


def test_a_spec_that_borrows_its_fit_gets_the_values_in_its_refit_table(fitted, tmp_path):
    from fuseplanner.validation.microbench import to_toml

    _, result = fitted
    h200 = gpu("h200")
    assert h200.fit.borrowed
    path = tmp_path / "h200_graph.toml"
    path.write_text(to_toml(fit_whole.spec_with(h200, result), {}))
    again = gpu(str(path))
    assert again.fit.borrowed and again.fit.source_gpu == h200.fit.source_gpu
    raw = tomllib.loads(path.read_text())
    assert set(result.values) <= set(raw["refit"]) and "fit" not in raw
    assert raw["sources"]["refit.graph_fused_kernel_s"] == result.notes["graph_fused_kernel_s"]
    for k, v in result.values.items():
        assert getattr(again.fit, k) == pytest.approx(v)


def test_cli_from_whole_writes_a_loadable_spec(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(fit_whole, "THRESHOLDS", (0.95, 1.0))
    out = tmp_path / "g.toml"
    assert main(["calibrate", "--from-whole", RUNS[0], "--gpu", "h100", "--out", str(out), "--resamples", "2"]) == 0
    text = capsys.readouterr().out
    assert f"wrote {out}" in text and "graph_fused_kernel_s = " in text
    spec = gpu(str(out))
    assert spec.fit.graph_fuse_min_speedup in (0.95, 1.0)


def test_cli_from_whole_refuses_held_out_models_and_other_sources(tmp_path, capsys):
    held = str(WHOLE / "fp32fp32_b1" / "mobilenet_v3_small.json.gz")
    assert main(["calibrate", "--from-whole", held, "--gpu", "h100", "--out", str(tmp_path / "x.toml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "held-out" in err[0]
    assert main(["calibrate", "--from-whole", RUNS[0], "--from-sweep", "x.json.gz"]) == 2
    assert "one of" in capsys.readouterr().err
    assert not (tmp_path / "x.toml").exists()
