"""Leave-one-model-out accuracy (`analysis.loo`, `analyze generalisation`), cross-model deduplication
(`generalisation.layer_key`) and bootstrap identifiability of record fits (`validation.bootstrap`,
`validation.fit_records`, `calibrate --from-results --resamples`); CPU only, on curated H100 runs and
synthetic measurements."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from fuseplanner.analysis import loo
from fuseplanner.analysis.generalisation import dedup, layer_key
from fuseplanner.analysis.runs import Run
from fuseplanner.cli.main import main
from fuseplanner.hw import spec as specs
from fuseplanner.validation import bootstrap as boot
from fuseplanner.validation import fit, fit_records, report
from fuseplanner.validation.microbench import apply_measured

ROOT = Path(__file__).resolve().parent.parent
FIT = ROOT / "data" / "records" / "h100" / "fit"
HOLD = ROOT / "data" / "records" / "h100" / "holdout"
TRAIN = {"mobilenet_v1": FIT / "mobilenet_v1-fp32-b1-sweep.json.gz",
         "mobilenet_v2": FIT / "mobilenet_v2-fp32-b1-sweep.json.gz",
         "mnasnet1_0": FIT / "mnasnet1_0-fp32-b1-sweep.json.gz"}  # fmt: skip
TEST = [HOLD / "mobilenet_v2-fp32-b1-sweep.json.gz"]
DW_RATE = "dw_warp_flops_per_cycle_fp32"


def _group_paths(samples) -> set[str]:
    """The results files the samples came from (a grouped sample's group is "<file>:<group id>")."""
    return {s.group.rsplit(":", 1)[0] for s in samples if s.group}


def test_loo_fits_each_model_on_the_others_only():
    seen: list[tuple[int, set[str]]] = []

    def probe(spec, samples, stages, max_iter):
        seen.append((len(samples), _group_paths(samples)))
        return {DW_RATE: 2.0 * float(spec.eff(DW_RATE))}  # a refit that visibly moves DW predictions

    spec = specs.gpu("h100")
    result = loo.leave_one_model_out(spec, TEST, list(TRAIN.values()), max_iter=3, fitter=probe)
    n = {m: len(fit.feasible(spec, fit.load_samples([p]))[0]) for m, p in TRAIN.items()}
    models = sorted(TRAIN)  # folds in model order
    assert [r.model for r in result.refit] == [*models, "all"]
    for model, (count, paths), row in zip(models, seen, result.refit[:-1], strict=True):
        assert paths == {str(p) for m, p in TRAIN.items() if m != model}  # the left-out model's runs are absent
        assert count == sum(v for m, v in n.items() if m != model) == row.fit_records
    # mobilenet_v2 is scored on its training run and its test run, the others on their training run:
    # every record the current kernels can launch and that was timed
    n["mobilenet_v2"] += len(fit.feasible(spec, fit.load_samples(TEST))[0])
    assert {r.model: r.records for r in result.bundled[:-1]} == n
    assert result.bundled[-1].records == result.refit[-1].records == sum(n.values())
    # doubling the DW rate moves the refit scores away from the spec's own
    assert all(a.time.median != b.time.median for a, b in zip(result.refit, result.bundled, strict=True))
    assert dict(result.values)["mnasnet1_0"] == ((DW_RATE, 2.0 * float(spec.eff(DW_RATE))),)


def test_layer_key_dedups_the_same_layers_of_another_model():
    a = Run(str(TEST[0]), "a", report.load_results(TEST[0]))
    graph = fit.results_graph(a.path, "mobilenet_v2", 1, {})
    keys = [layer_key(a, r, graph) for r in a.records]
    # MobileNetV2 repeats blocks: two records of different nodes with the same shapes, dtype, batch and tiles
    i, j = next((i, j) for i in range(len(keys)) for j in range(i + 1, len(keys))
                if keys[i] == keys[j] and a.records[i].nodes != a.records[j].nodes)  # fmt: skip
    renamed = a.data.meta.model_copy(update={"model": "renamed"})
    b = Run("b", "b", a.data.model_copy(update={"meta": renamed, "records": (a.records[i],)}))
    seen = {layer_key(b, r, graph) for r in b.records}
    kept = [r for r, k in zip(a.records, keys, strict=True) if k not in seen]
    assert a.records[i] not in kept and a.records[j] not in kept  # j: other nodes, same layers
    assert len(kept) == len(a.records) - keys.count(keys[i]) > 0
    assert len(dedup([a], [b])) == len(a.records)  # the model-named key sees no overlap


def _replicated(n: int, noise: float, seed: int) -> list[fit.Sample]:
    """`n` DW samples of the synthetic sweep fixture's layers, timed by the cost model with the h100 DW
    rate x 1.25 and log-normal noise `noise`."""
    from fuseplanner.validation import sweep
    from tests.sweep_fixture import PATH

    dw = [s for s in sweep.records_to_samples(sweep.load(PATH)["records"]) if s.kind == "dw"]
    true = apply_measured(specs.gpu("h100"), {DW_RATE: 1.25 * float(specs.gpu("h100").eff(DW_RATE))})
    rng = np.random.default_rng(seed)
    return [dataclasses.replace(dw[i % len(dw)], time_s=fit.predict(true, dw[i % len(dw)])[0]
                                * math.exp(rng.normal(0.0, noise))) for i in range(n)]  # fmt: skip


def test_record_bootstrap_interval_holds_the_point_fit():
    spec = specs.gpu("h100")
    samples = _replicated(48, 0.05, seed=0)
    value = fit.fit_spec(spec, samples, only=[DW_RATE]).values
    ident = fit_records.record_identifiability(spec, samples, [DW_RATE], value, resamples=20)
    (s,) = ident.spreads
    assert s.name == DW_RATE and s.lo <= value[DW_RATE] <= s.hi and s.lo < s.hi
    assert ident.resamples == 20 and ident.pairs == ()


def _toy(n: int, seed: int) -> list[tuple[float, float, float]]:
    """(x, y1, y2): y1 = 6 x and y2 = 3 x, each with 5% log-normal noise."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(1, 10, n)
    return [(xi, 6.0 * xi * math.exp(rng.normal(0, 0.05)), 3.0 * xi * math.exp(rng.normal(0, 0.05))) for xi in x]


def _toy_refit(sub) -> np.ndarray:
    """(a, b, c) by least squares in their logarithms: y1 = a * b * x (only a * b matters), y2 = c * x."""
    from scipy.optimize import least_squares

    arr = np.array(sub)

    def res(p):
        return np.concatenate([p[0] + p[1] + np.log(arr[:, 0]) - np.log(arr[:, 1]),
                               p[2] + np.log(arr[:, 0]) - np.log(arr[:, 2])])  # fmt: skip

    return np.exp(least_squares(res, np.log([1.0, 4.0, 1.0])).x)


def test_bootstrap_interval_holds_the_fit_and_shrinks_with_more_samples():
    widths = []
    for n in (25, 400):
        data = _toy(n, seed=n)
        c = _toy_refit(data)[2]
        lo, hi = boot.intervals(["c"], boot.resample_draws(data, lambda s: _toy_refit(s)[2:], 20))["c"]
        assert lo <= c <= hi
        widths.append(hi - lo)
    # 16x the samples: the interval narrows about 4x (1 / sqrt(n)); certainly by half
    assert widths[1] < 0.5 * widths[0]


def test_a_product_only_pair_is_flagged_and_an_identified_parameter_is_not():
    data = _toy(200, seed=1)
    names = ["a", "b", "c"]
    values = dict(zip(names, _toy_refit(data), strict=True))
    ident = boot.identifiability(names, values, boot.resample_draws(data, _toy_refit, 20, seed=0))
    # the data fix log a + log b: the refits trade one for the other (r near -1)
    assert [(p.a, p.b) for p in ident.pairs] == [("a", "b")] and ident.pairs[0].r < -0.9
    assert ident.flagged == ("a", "b")
    c = ident.spreads[2]
    assert c.lo <= values["c"] <= c.hi and not c.wide
    assert "not identified by these records: a, b" in boot.report_lines(ident)[-1]


def test_spread_flags_an_interval_wider_than_its_factor():
    assert boot.Spread("p", 1.0, 0.8, 1.2).wide is False  # width 0.4 <= 0.5 x 1.0
    assert boot.Spread("p", 1.0, 0.6, 1.2).wide is True  # width 0.6 > 0.5 x 1.0
    assert boot.Spread("p", 0.0, 0.0, 0.1).wide is True


def test_bundled_stages_are_the_fields_the_h100_fit_names():
    sources = specs.gpu("h100").fit.sources
    for stage in fit_records.BUNDLED_STAGES:
        for name in stage:
            assert name in sources and "schema default 0" not in sources[name], name
            if name != fit.THRESHOLD_FIELD:  # each value's note names the command that fitted it, with it
                assert name in sources[name].split("--fit", 1)[-1] or "--fit" not in sources[name], name


def test_calibrate_from_results_writes_intervals_and_flags(tmp_path, capsys):
    out = tmp_path / "f.toml"
    rc = main(["calibrate", "--from-results", str(TRAIN["mobilenet_v2"]), "--gpu", "h100", "--out", str(out),
               "--fit", "fused_sm_issue_warps,fused_kernel_fixed_s", "--resamples", "3"])  # fmt: skip
    assert rc == 0
    text = capsys.readouterr().out
    assert "bootstrap over 3 resamples" in text and "not identified by these records:" in text
    ci = specs.gpu(str(out)).fit.ci
    assert set(ci) >= {"fused_sm_issue_warps", "fused_kernel_fixed_s"}
    assert all(lo <= hi for lo, hi in ci.values())


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


@pytest.mark.parametrize(("argv", "message"), [
    (["analyze", "generalisation", str(TEST[0]), "--train", str(TRAIN["mobilenet_v1"])], "at least two models"),
    (["analyze", "generalisation", str(TEST[0]), "--train", "no/such.json.gz", str(TRAIN["mobilenet_v1"])],
     "no such results file"),
    (["analyze", "generalisation", str(TEST[0]), "--train", str(TEST[0]), "--jobs", "0"], "--jobs"),
    (["analyze", "generalisation", str(TEST[0])], "--train"),
    (["calibrate", "--from-results", str(TEST[0]), "--fit", "fused_sm_issue_warps", "--resamples", "1"],
     "at least 2 resamples"),
])  # fmt: skip
def test_bad_input_is_one_error_line_and_exit_2(argv, message, capsys):
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's own errors
        rc = exc.code
    assert rc == 2
    assert message in _one_error_line(capsys)


def test_generalisation_without_loo_prints_the_in_sample_table(capsys):
    rc = main(["analyze", "generalisation", str(TEST[0]), "--train", *map(str, TRAIN.values()), "--markdown", "-"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "In sample" in out and "Leave one model out" not in out
    assert "| mobilenet_v2 | - |" in out and "| all | - |" in out
