"""Fitting the kernel-efficiency fields to saved validation records (`fuseplanner.validation.fit`,
`fuseplanner calibrate --from-results`), on real H100 runs of the curated record set (data/records; CPU only)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from fuseplanner.cli.main import main
from fuseplanner.core.errors import FusePlannerError
from fuseplanner.hw.kernel_fit import PARAMS
from fuseplanner.hw.spec import gpu
from fuseplanner.validation import fit, report
from fuseplanner.validation.microbench import apply_measured

ROOT = Path(__file__).resolve().parent.parent
RECORDS = ROOT / "data" / "records" / "h100"
RUN = RECORDS / "fit" / "efficientnet_b0-fp32-b1-sweep.json.gz"
BATCH8 = RECORDS / "fit" / "mobilenet_v3_large-fp32-b8-sweep.json.gz"
SPEC = RECORDS / "calibrate.toml"


@pytest.fixture(scope="module")
def samples():
    return fit.load_samples([RUN])


def test_samples_follow_the_records(samples):
    records = report.load_results(RUN).records
    usable = [r for r in records if r.cold_s and r.check.ok]
    assert len(samples) == len(usable) > 10
    for s, r in zip(samples, usable, strict=True):
        assert s.time_s == r.measured.time_cold_s
        assert tuple(op.name for st in s.steps for op in st.ops) == r.nodes
        # a group is one fused launch, its unfused run one launch per member
        assert len(s.steps) == (1 if r.role in ("layer", "group", "tile") else len(r.nodes))
        assert s.gma_bytes == r.measured.gma_bytes  # this run had counters


def test_batch_8_records_replay_with_the_batch_they_ran_at():
    # `validate --batch 8` loads the model with batch 8: the classifier Gemm then has 8 tokens, which
    # Op.with_batch on a batch-1 graph would not give (its planned 8-token tile would be infeasible)
    spec = gpu(str(SPEC))
    batch8 = fit.load_samples([BATCH8])
    gemm = next(s for s in batch8 if s.kind == "linear")
    assert gemm.steps[0].ops[0].input_shapes[0][0] == 8 and gemm.steps[0].tile.th == 8
    kept, dropped = fit.feasible(spec, batch8)
    assert len(kept) + len(dropped) == len(batch8) == 152
    times = [fit.predict(spec, s)[0] for s in kept]  # every kept launch is feasible again
    assert all(t > 0 for t in times) and gemm in kept
    # two dw_pw tiles of this run (14x14 pixels, 64 filters, 64 threads) ran, but the model as it
    # stands refuses them: they are dropped, not predicted
    assert len(dropped) == 2
    for sid in dropped:
        s = next(x for x in batch8 if x.id == sid)
        assert s.kind == "dw_pw"
        with pytest.raises(FusePlannerError, match="infeasible"):
            fit.predict(spec, s)


def test_records_of_unfolded_patch_sequences_replay_at_the_size_they_ran():
    # MobileViT's transformer linears run over batch x 4 patch-pixel sequences (Op.images). Records
    # saved before ops counted images were measured with the leading dimension set to the batch:
    # batch 8 -> (8, 256, 64), 2 x 8 x 256 x 64 x 192 = 50,331,648 FLOPs for the qkv projection,
    # a quarter of the (32, 256, 64) the model runs. Their saved FLOPs say so and they replay at that size.
    path = RECORDS / "fit" / "mobilevit_xxs-fp32-b8-sweep.json.gz"
    rec = next(r for r in report.load_results(path).records if r.nodes == ("node_MatMul_225",) and r.role == "layer")
    graph = fit.results_graph(path, "mobilevit_xxs", 8, {})
    (step,) = fit.record_steps(rec, graph, 8)
    assert rec.flops == 2 * 8 * 256 * 64 * 192 == 50_331_648
    assert step.ops[0].in_shape == (8, 256, 64) and step.ops[0].flops == rec.flops
    assert graph.op("node_MatMul_225").in_shape == (32, 256, 64)  # what the model runs
    # a record of the model's own size is rebuilt as it is
    now = rec.model_copy(update={"flops": 4.0 * rec.flops})
    assert fit.record_steps(now, graph, 8)[0].ops[0].in_shape == (32, 256, 64)


def test_decision_pairs_match_group_and_unfused_records(samples):
    pairs = fit.decision_pairs(samples)
    assert pairs
    for i, j in pairs:
        assert samples[i].role == "group" and samples[j].role == "unfused"
        assert samples[i].group == samples[j].group
        assert [op.name for op in samples[i].steps[0].ops] == [op.name for st in samples[j].steps for op in st.ops]


def test_decision_agreement_counts_outcomes(samples):
    spec = gpu(str(SPEC))
    pairs = fit.decision_pairs(samples)
    slower = sum(samples[i].time_s >= samples[j].time_s for i, j in pairs)  # fused measured no faster
    # a threshold no prediction reaches fuses nothing: it agrees exactly where fusing did not pay
    assert fit.decision_agreement(spec, samples, 1e9) == (slower, len(pairs))
    # fusing every group agrees exactly where it paid
    assert fit.decision_agreement(spec, samples, 0.0) == (len(pairs) - slower, len(pairs))


def test_fit_moves_only_kernel_parameters_and_keeps_them_valid(samples):
    spec = gpu(str(SPEC))
    result = fit.fit_spec(spec, samples, max_iter=30)
    assert set(result.values) <= set(PARAMS)
    assert "fuse_min_speedup" in result.values and result.values["fuse_min_speedup"] in fit.THRESHOLDS
    assert "fused_weight_l2_fraction" in result.values  # fused groups with counters are present
    assert "fused_weight_l2_fraction_fp16" not in result.values  # no fp16 records: left as it was
    for name in fit.EXPONENT_FIELDS:
        if name in result.values:
            assert 0 < result.values[name] <= 1
    fitted = apply_measured(spec, result.values)  # the values form a valid spec
    assert fitted.eff("fuse_min_speedup") == result.values["fuse_min_speedup"]
    # the chosen threshold agrees with the measurements at least as often as fusing at any gain
    at_one = fit.decision_agreement(fitted, samples, 1.0)[0]
    assert fit.decision_agreement(fitted, samples, result.values["fuse_min_speedup"])[0] >= at_one


def test_fit_only_moves_the_named_fields(samples):
    spec = gpu(str(SPEC))
    only = ["fused_pw_warp_flops_per_cycle_fp32", "coresident_exponent"]
    result = fit.fit_spec(spec, samples, max_iter=30, only=only)
    assert set(result.values) == set(only)  # no threshold, no L2 fraction, no other rate
    assert 0 <= result.values["coresident_exponent"] <= 1
    # the fitted fields lower the loss the fit minimises, the others as the spec has them
    names = list(result.values)
    loss = fit._time_loss(spec, names, samples)
    start = [math.log(max(float(spec.eff(n)), 0.05)) for n in names]
    assert loss([math.log(result.values[n]) for n in names]) <= loss(start)
    with pytest.raises(FusePlannerError, match="cannot fit clock_hz"):
        fit.fit_spec(spec, samples, only=["clock_hz"])


def test_calibrate_fit_needs_results(capsys):
    assert main(["calibrate", "--fit", "coresident_exponent"]) != 0
    assert "--from-results" in capsys.readouterr().err


def test_calibrate_from_results_writes_a_loadable_spec(tmp_path, capsys):
    out = tmp_path / "fitted.toml"
    assert main(["calibrate", "--from-results", str(RUN), "--gpu", str(SPEC), "--out", str(out), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    spec = gpu(str(out))
    assert not spec.fit.borrowed and spec.fit_from is None  # the written spec has a fit of its own
    for name, value in shown["values"].items():
        assert getattr(spec.fit, name) == value
        assert "calibrate --from-results" in spec.fit.sources[name]
    # the starting spec borrows the H100 fit: what was not fitted is kept, with a note saying so
    start = gpu(str(SPEC))
    kept = next(n for n in PARAMS if n not in shown["values"])
    assert getattr(spec.fit, kept) == getattr(start.fit, kept) and "kept from the fit of h100" in spec.fit.sources[kept]
    # provenance: the GPU and driver of the results, the record set and count
    assert spec.fit.source_gpu == "NVIDIA H100 80GB HBM3" and spec.fit.record_count == shown["n_time"]
    assert str(RUN) in spec.fit.records and spec.fit.date
    assert spec.sm_count == 132 and spec.measured == start.measured  # the starting spec's facts are kept
    assert spec.warnings() == [w for w in start.warnings() if "kernel fit" not in w]


def test_calibrate_from_results_over_a_refitting_spec_writes_a_loadable_spec(tmp_path, capsys):
    # h200 borrows the H100 fit with a [refit] table (its graph terms): the written fit of its own holds
    # those values with their notes, and no [refit] table (which a fit of its own refuses)
    out = tmp_path / "fitted.toml"
    assert main(["calibrate", "--from-results", str(RUN), "--gpu", "h200", "--out", str(out),
                 "--fit", "pw_warp_flops_per_cycle_fp32"]) == 0  # fmt: skip
    capsys.readouterr()
    spec, start = gpu(str(out)), gpu("h200")
    assert not spec.fit.borrowed and spec.refit == {} and start.refit
    for name, value in start.refit.items():
        assert getattr(spec.fit, name) == value and spec.fit.sources[name] == start.sources[f"refit.{name}"]
    assert "calibrate --from-results" in spec.fit.sources["pw_warp_flops_per_cycle_fp32"]


def test_calibrate_from_results_bad_file_is_one_error_line(tmp_path, capsys):
    bad = tmp_path / "results.json"
    bad.write_text("{not json")
    assert main(["calibrate", "--from-results", str(bad), "--gpu", "h100", "--out", str(tmp_path / "x.toml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "results.json" in err[0]
    assert not (tmp_path / "x.toml").exists()


def test_fit_sm_issue_cap_only_on_request(samples):
    spec = gpu(str(SPEC))
    result = fit.fit_spec(spec, samples, max_iter=20, only=["fused_sm_issue_warps"])
    assert set(result.values) == {"fused_sm_issue_warps"} and result.values["fused_sm_issue_warps"] > 0
    unasked = fit.fit_spec(spec, samples, max_iter=5, only=["fused_pw_warp_flops_per_cycle_fp32"])
    assert "fused_sm_issue_warps" not in unasked.values


def test_fit_chunk_step_only_on_request_from_its_start(samples, monkeypatch):
    import scipy.optimize

    starts = []
    real = scipy.optimize.minimize
    monkeypatch.setattr(scipy.optimize, "minimize", lambda f, x0, **k: starts.append(x0) or real(f, x0, **k))
    spec = gpu(str(SPEC))
    assert spec.fit.pw_chunk_cycles == 0.0  # off in the spec: the fit starts at CHUNK_START cycles
    result = fit.fit_spec(spec, samples, max_iter=20, only=["pw_chunk_cycles"])
    assert set(result.values) == {"pw_chunk_cycles"} and result.values["pw_chunk_cycles"] != fit.CHUNK_START  # moved by the records
    assert len(starts) == 1 and starts[0] == pytest.approx([math.log(fit.CHUNK_START)])
    unasked = fit.fit_spec(spec, samples, max_iter=5, only=["pw_warp_flops_per_cycle_fp32"])
    assert "pw_chunk_cycles" not in unasked.values


def test_fit_restarts_along_the_exponents_only_when_it_fits_one(samples, monkeypatch):
    import scipy.optimize

    calls = []
    real = scipy.optimize.minimize
    monkeypatch.setattr(scipy.optimize, "minimize", lambda *a, **k: calls.append(1) or real(*a, **k))
    spec = gpu(str(SPEC))
    fit.fit_spec(spec, samples, max_iter=3, only=["fused_sm_issue_warps"])
    assert len(calls) == 1  # no exponent fitted: one start (the loss is not flat along anything fitted)
    calls.clear()
    fit.fit_spec(spec, samples, max_iter=3, only=["fused_sm_issue_warps", "fused_block_warp_exponent"])
    assert len(calls) == 1 + len(fit.EXPONENT_STARTS)  # the spec's exponent, then each start


def _doc(pred_planned: float, pred_alt: float, pred_unfused: float) -> dict:
    def rec(role, planned, t_pred, t_meas, tile):
        return {"id": f"{role}{tile}", "role": role, "group": "g0", "planned": planned, "tiles": [{"th": tile, "tw": 1, "tf": 1, "tc": 1}],
                "predicted": {"ours": {"time_s": t_pred, "feasible": True}},
                "measured": {"time_cold_s": t_meas}, "check": {"ok": True}, "error": None}
    return {"meta": {}, "groups": {"g0": {"planner_fused": True, "planned_tile": {"th": 1, "tw": 1, "tf": 1, "tc": 1}}},
            "records": [rec("group", True, pred_planned, 9e-6, 1), rec("tile", False, pred_alt, 6e-6, 2),
                        rec("unfused", False, pred_unfused, 8e-6, 0)]}


def test_replan_moves_the_planned_mark_to_the_least_predicted_tile():
    # predictions 10 us (the old plan's tile), 7 us (a swept tile), unfused 8 us: the planner would now
    # take the swept tile, and 8 / 7 = 1.14 is a fuse at 1.1 but not at 1.2
    doc = _doc(10e-6, 7e-6, 8e-6)
    recs, times = fit.replan(doc["records"])
    assert [r.planned for r in recs[:2]] == [False, True]
    assert times == {("g0", "group"): 7e-6, ("g0", "unfused"): 8e-6}
    # when the old plan's tile stays the least predicted, nothing moves
    doc = _doc(5e-6, 7e-6, 8e-6)
    recs, times = fit.replan(doc["records"])
    assert times[("g0", "group")] == 5e-6
    assert [r.planned for r in recs[:2]] == [True, False]
