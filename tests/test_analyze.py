"""`fuseplanner analyze` and the `fuseplanner.analysis` library on small saved runs (CPU only).

Fixtures: results_small.json (hand-made records of a tiny model that is not bundled, so its predictions
are read as recorded: --stored) and results_layers_small.json (trimmed from a layer-sweep validation run
of MobileNetV1, fp16, batch 4, on an H100: groups g0, g2, g3 fused and unfused, layers L1, M0, M1 swept
alone with six alternative tiles each, Nsight Compute counters and compiled-kernel resources).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path

import pytest

from fuseplanner.analysis import accuracy as acc
from fuseplanner.analysis import decisions as dec
from fuseplanner.analysis import plan_totals, register_checks, tile_choices
from fuseplanner.analysis.runs import Run, fuse_threshold, load_runs
from fuseplanner.analysis.tables import Table, markdown
from fuseplanner.cli.main import main
from fuseplanner.core.errors import AnalysisError
from fuseplanner.core.ir import Tile
from fuseplanner.hw import spec as specs
from fuseplanner.validation import fit, report

FIX = Path(__file__).parent / "fixtures"
SMALL = str(FIX / "results_small.json")
LAYERS = str(FIX / "results_layers_small.json")


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


# ---- accuracy -----------------------------------------------------------------------------------------


def test_accuracy_of_recorded_predictions_is_hand_computed():
    rows = acc.accuracy(load_runs([SMALL]))
    run, pooled = rows
    assert run.run == "tiny_inverted_residual fp32 b1" and pooled.run == "all"
    # time APE of the 7 measured records (L3 failed): L0 |12-10|/10 = 20, g0 0, g0.t1 |13.2-12|/12 = 10,
    #   g0.t2 |12-15|/15 = 20, g0.u |15-20|/20 = 25, g1 |20-30|/30 = 33.3, g1.u |30-25|/25 = 20
    #   sorted 0 10 20 20 20 25 33.3: median 20; p90 at rank 0.9 x 6 = 5.4: 25 + 0.4 x 8.33 = 28.33
    assert run.time.n == 7 and run.time.median == pytest.approx(20.0)
    assert run.time.p90 == pytest.approx(25 + 0.4 * (100 / 3 - 25))
    # GMA APE: 10, 0, 20, 30, 40, 50, 60 -> median 30, p90 50 + 0.4 x 10 = 54
    assert (run.gma.median, run.gma.p90) == (pytest.approx(30.0), pytest.approx(54.0))
    # g0: best fused 10 us < unfused 20 us and fused: agrees; g1: fused 30 us > unfused 25 us yet fused:
    #   disagrees. Chosen 10 + 30 = 40 us against the best 10 + 25 = 35 us: 14.29% more, g1 over 5%
    assert (run.agreeing, run.groups, run.over_5pct) == (1, 2, 1)
    assert run.time_lost_percent == pytest.approx(100 * 5 / 35)
    assert pooled == acc.AccuracyRow(**{**run.__dict__, "run": "all"})


def test_work_bias_bands_the_single_layer_launches():
    # only L0 is one measured layer-by-layer launch (dw, 903,168 FLOPs): predicted 12 us, measured 10 us,
    # ratio 1.2; the groups are fused kinds, the unfused runs two launches, and L3 failed to run
    bands = acc.work_bias(load_runs([SMALL]))
    assert [(b.lo, b.hi) for b in bands] == [(0.0, 1e7), (1e7, 1e8), (1e8, 3e8), (3e8, 1e9), (1e9, None)]
    assert bands[0].ratios == pytest.approx((1.2,)) and all(not b.ratios for b in bands[1:])
    split = acc.work_bias(load_runs([SMALL]), bands=(5e5,))  # L0 lands in the open band above 0.5 MFLOP
    assert (len(split[0].ratios), len(split[1].ratios)) == (0, 1)
    table = acc.work_bias_table(bands, "h100")
    assert table.rows[0] == ("< 10 MFLOP", "1", "1.20", "1.20", "1.20")
    assert table.rows[-1] == (">= 1 GFLOP", "0", "-", "-", "-")


def test_accuracy_by_work_prints_the_band_table(capsys):
    assert main(["analyze", "accuracy", SMALL, "--stored", "--by-work", "--markdown", "-"]) == 0
    out = capsys.readouterr().out
    assert "Layer-by-layer launches by work" in out and "| < 10 MFLOP | 1 | 1.20 | 1.20 | 1.20 |" in out


def test_block_bias_bands_the_pw_launches_by_outputs_per_thread(capsys):
    def rec(i, kind, tile, pred_us, meas_us):
        return {"id": f"L{i}", "role": "layer", "kind": kind, "step_kinds": [kind], "tiles": [asdict(tile)],
                "predicted": {"ours": {"time_s": pred_us * 1e-6}}, "measured": {"time_cold_s": meas_us * 1e-6}}

    # outputs per thread = filters x pixels / threads: 64 x 32 / 256 = 8 (band 8 - 32), 16 x 32 / 256 = 2
    # (under 8), a linear tile of 32 token rows x 256 filters over 128 threads = 64 (32 and over); the DW
    # layer and the fused launch are not PW/linear layers and stay out
    data = {"meta": {"dtype": "fp32"}, "records": [
        rec(0, "pw", Tile(4, 8, 64, 8, 256), 12, 10), rec(1, "pw", Tile(4, 8, 16, 8, 256), 9, 10),
        rec(2, "linear", Tile(32, 1, 256, 8, 128), 30, 10), rec(3, "dw", Tile(4, 8, 16, 16, 256), 20, 10),
        rec(4, "pw_dw", Tile(4, 8, 16, 8, 256), 20, 10)]}  # fmt: skip
    bands = acc.block_bias([Run("x", "x", data)])
    assert [(b.lo, b.hi) for b in bands] == [(0.0, 8.0), (8.0, 32.0), (32.0, None)]
    assert [b.ratios for b in bands] == [pytest.approx((0.9,)), pytest.approx((1.2,)), pytest.approx((3.0,))]
    table = acc.block_bias_table(bands)
    assert table.rows == (("< 8", "1", "0.90", "0.90", "0.90"), ("8 - 32", "1", "1.20", "1.20", "1.20"),
                          (">= 32", "1", "3.00", "3.00", "3.00"))  # fmt: skip
    assert main(["analyze", "accuracy", LAYERS, "--stored", "--by-block", "--markdown", "-"]) == 0
    assert "by outputs per thread" in capsys.readouterr().out


def test_kind_bias_groups_the_one_launch_records_by_kernel_kind(capsys):
    def rec(i, kind, steps, pred_us, meas_us, error=""):
        return {"id": f"R{i}", "role": "layer", "kind": kind, "step_kinds": steps, "error": error,
                "predicted": {"ours": {"time_s": pred_us * 1e-6}}, "measured": {"time_cold_s": meas_us * 1e-6}}

    # pw: 12/10 = 1.2 and 9/10 = 0.9; pw_pw: 26/20 = 1.3; the unfused pw_dw (two launches: pw then dw) and
    # the failed dw stay out, so no dw row; kinds come in KERNEL_KINDS order (pw before the fused kinds)
    data = {"meta": {"dtype": "fp32"}, "records": [
        rec(0, "pw_pw", ["pw_pw"], 26, 20), rec(1, "pw", ["pw"], 12, 10), rec(2, "pw", ["pw"], 9, 10),
        rec(3, "pw_dw", ["pw", "dw"], 30, 10), rec(4, "dw", ["dw"], 20, 10, error="launch failed")]}  # fmt: skip
    rows = acc.kind_bias([Run("x", "x", data)])
    assert [k for k, _ in rows] == ["pw", "pw_pw"]
    assert rows[0][1] == pytest.approx((1.2, 0.9)) and rows[1][1] == pytest.approx((1.3,))
    # pw quantiles of (0.9, 1.2): p10 0.9 + 0.1 x 0.3 = 0.93, median 1.05, p90 1.17
    assert acc.kind_bias_table(rows).rows == (("pw", "2", "0.93", "1.05", "1.17"), ("pw_pw", "1", "1.30", "1.30", "1.30"))
    assert main(["analyze", "accuracy", SMALL, "--stored", "--by-kind", "--markdown", "-"]) == 0
    assert "One-launch records by kernel kind" in capsys.readouterr().out


def test_accuracy_pools_records_and_groups_over_runs():
    run, pooled = acc.accuracy(load_runs([SMALL]))[0], acc.accuracy(load_runs([SMALL, SMALL]))[-1]
    assert pooled.time.n == 2 * run.time.n and pooled.time.median == run.time.median
    assert (pooled.agreeing, pooled.groups, pooled.over_5pct) == (2, 4, 2)
    assert pooled.time_lost_percent == pytest.approx(run.time_lost_percent)


def test_repredicted_accuracy_agrees_with_the_validation_report():
    spec = specs.gpu("h100")
    run = acc.accuracy(load_runs([LAYERS], spec))[0]
    summary = report.summarize(fit.repredict(report.load_results(LAYERS), spec))
    for metric in acc.METRICS:
        want = summary["errors"]["ours"][metric]
        got = getattr(run, metric)
        assert (got.n, got.median, got.p90) == (want["n"], want["median"], want["p90"])
    assert run.groups == summary["decisions"]["fuse"]["n"] == 3
    assert 100 * run.agreeing / run.groups == pytest.approx(summary["decisions"]["fuse"]["percent"])


def test_accuracy_markdown_is_the_docs_table(tmp_path, capsys):
    out = tmp_path / "acc.md"
    assert main(["analyze", "accuracy", "--stored", SMALL, "--markdown", str(out)]) == 0
    lines = out.read_text().splitlines()
    head = lines.index("| run | n | GMA | DRAM | time | fuse decisions | plan's extra time (groups > 5%) |")
    assert lines[head + 1] == "|---|---:|---|---|---|---|---|"
    assert lines[head + 2] == "| tiny_inverted_residual fp32 b1 | 7 | 30.0 / 54.0 | 10.0 / 28.0 | 20.0 / 28.3 | 1 of 2 | 14.3% (1) |"
    assert lines[head + 3].startswith("| all | 7 |") and "| 1 of 2 (50.0%) |" in lines[head + 3]
    assert "Accuracy per run and pooled" in capsys.readouterr().out  # the rich table too


# ---- decisions ----------------------------------------------------------------------------------------


def test_group_decisions_read_the_planned_tile_and_the_best_fused_time():
    g0, g1 = dec.group_decisions(load_runs([SMALL])[0])
    # g0: predicted unfused 15 us / planned 10 us = 1.5; measured unfused 20 / best fused 10 = 2.0
    assert (g0.group, g0.tile, g0.layers) == ("g0", "8x8/f32/c16/t256", ("conv_pw1", "conv_dw1"))
    assert (g0.predicted, g0.measured, g0.fusion_wins) == (pytest.approx(1.5), pytest.approx(2.0), True)
    # g1: predicted 30 / 20 = 1.5; measured 25 / 30 = 0.833: fusing loses
    assert (g1.predicted, g1.measured, g1.fusion_wins) == (pytest.approx(1.5), pytest.approx(25 / 30), False)
    assert g0.agrees(1.05) and not g1.agrees(1.05) and g1.agrees(1.6) and not g0.agrees(1.6)


def _group(predicted: float, wins: bool) -> dec.GroupDecision:
    return dec.GroupDecision("r", "g", "pw_dw", ("a", "b"), "-", 1e-5, predicted * 1e-5, 1e-5, 1e-5 if wins else 3e-5, 2e-5)


def test_threshold_scan_counts_agreeing_decisions():
    groups = [_group(0.9, False), _group(1.2, True), _group(1.6, False)]
    rows = dec.threshold_scan(groups, 1.0, 2.0, 0.5)
    # t = 1.0: fuse F T T vs wins F T F -> 2; t = 1.5: F F T -> 1; t = 2.0: F F F -> 2
    assert [(r.threshold, r.agreeing, r.groups) for r in rows] == [(1.0, 2, 3), (1.5, 1, 3), (2.0, 2, 3)]
    table = dec.scan_table(rows, 1.5)
    assert [r[0] for r in table.rows] == ["1.00", "1.50 *", "2.00"] and table.rows[1][2] == "33.3"


def test_decisions_command_lists_the_disagreeing_groups(capsys):
    tau = fuse_threshold(specs.gpu("h100"))
    assert 1.0 < tau < 1.5  # both fixture groups are predicted to fuse (ratio 1.5)
    assert main(["analyze", "decisions", "--stored", SMALL, "--markdown", "-"]) == 0
    out = capsys.readouterr().out
    assert "| tiny_inverted_residual fp32 b1 | g1 | dw_pw | conv_dw2, conv_pw2 | 7x7/f32/c16/t256 | 1.50 | 0.83 |" in out
    assert "| g0 |" not in out and "1 of 2 groups disagree" in out
    assert f"| {tau:.2f} * | 1 | 50.0 |" in out


def test_decisions_on_repredicted_runs_match_the_report():
    spec = specs.gpu("h100")
    run = load_runs([LAYERS], spec)[0]
    groups = dec.group_decisions(run)
    fuse = report.decisions(run.data)["groups"]
    assert [g.group for g in groups] == ["g0", "g2", "g3"]
    tau = fuse_threshold(spec)
    # the repredicted plan fuses exactly where the predicted ratio reaches the threshold
    assert all(g.agrees(tau) == fuse[g.group]["fuse_agrees"] for g in groups)


# ---- tiles --------------------------------------------------------------------------------------------


def test_layer_tile_choices_are_hand_computed():
    row = tile_choices.layer_choices(load_runs([LAYERS])[0])
    # L1: planned 10.368 us, best 10.112 us (1.025: within 5%); M0: 16.256 vs 15.424 (1.054: not);
    #   M1: the planned tile is the best (11.840 us). 2 of 3 = 66.7%; lost (38.464 - 37.376) / 37.376 = 2.91%
    assert row.layers == 3 and row.planner_percent == pytest.approx(200 / 3)
    assert row.planner_lost_percent == pytest.approx(100 * (38.464 - 37.376) / 37.376, rel=1e-4)


def test_tiles_command_tables(capsys):
    assert main(["analyze", "tiles", LAYERS, "--markdown", "-"]) == 0
    out = capsys.readouterr().out
    assert "| mobilenet_v1 fp16 b4 | 3 | 66.7% | 2.9% |" in out
    ratios = tile_choices.time_ratios(load_runs([LAYERS])[0].records)
    n_alt = sum(len(v) for (_, side), v in ratios.items() if side == "alternative")
    assert n_alt == 18  # six alternatives of each of the three layers
    assert "| all | dw |" in out and "| all | pw |" in out


def test_tiles_without_layer_sweeps_is_one_error_line(capsys):
    assert main(["analyze", "tiles", "--stored", SMALL]) == 2
    assert "--tiles layers" in _one_error_line(capsys)


# ---- registers ----------------------------------------------------------------------------------------


def test_register_fit_recovers_a_linear_table():
    rows = []
    for n, base in ((64, 60), (128, 70), (256, 90)):
        for tf in (8, 16, 32, 64, 128):
            t, acc = Tile(4, 8, tf, 8, n), tf * 32 / n
            rows.append(register_checks.Launch("pw", "fp16", t, acc, round(base + 1.5 * acc), 4096, 1, (str(t), n)))
    # left out: the compiler's ceiling, not the slope
    rows.append(register_checks.Launch("pw", "fp16", Tile(32, 32, 64, 8, 64), 1024.0, 255, 4096, 1, ("capped",)))
    slope, base = register_checks.fit_table(rows)[("pw", "fp16")]
    assert slope == pytest.approx(1.5, abs=0.02)
    assert base == {64: 60, 128: 70, 256: 90}
    assert "('pw', 'fp16'): (1.5, {64: 60, 128: 70, 256: 90})," in register_checks.python_source({("pw", "fp16"): (slope, base)})


def test_launches_read_the_recorded_kernels():
    run = load_runs([LAYERS])[0]
    rows = register_checks.launches([run])
    assert len(rows) == sum(len(r.measured.kernels or ()) for r in run.records if r.measured) > 20
    # each launch's accumulators are its family's, over the member ops of the run's model
    fused = [r for r in rows if r.kind in ("pw_dw", "dw_pw", "pw_dw_pw")]
    assert fused and all(r.acc > 0 and r.mode == "fp16" for r in fused)
    hw = specs.gpu("h100").hw
    # a table fitted to these launches gets at least as many blocks per SM right as the accumulator estimate
    assert register_checks.matches(rows, register_checks.fit_table(rows), hw) >= register_checks.matches(rows, {}, hw)


def test_spill_scan_splits_launches_at_the_ceiling():
    from opfactory import dw, pw

    from fuseplanner.validation.validate import Step

    big, small = Tile(28, 14, 128, 32, 256), Tile(4, 4, 16, 16, 256)
    ops = (dw(128, 56, 56).with_batch(8), pw(128, 128, 56, 56).with_batch(8))
    # dw_pw fp16 (tensor cores), 28 x 14 x 128: the 128 x 392 GEMM in 64 x 56 warp groups, (128 / 64) x
    #   (392 / 56) = 14 groups over 8 warps -> 2 a warp x (4 x 7 mma tiles x 4) = 224 accumulators:
    #   55 + 1.12 x 224 = 305.9 -> 306 registers: over 255; 4 x 4 x 16: one 16 x 16 group, 8 accumulators
    #   in one warp (registers.COMPILED, dw_pw fp16 at 256 threads)
    assert register_checks.over_ceiling(Step("dw_pw", ops, big), "fp16", "fp32") is True
    assert register_checks.over_ceiling(Step("dw_pw", ops, small), "fp16", "fp32") is False

    def rec(i, tile, meas, pred, frame):
        return {"id": f"g0.t{i}", "role": "tile", "group": "g0", "kind": "dw_pw", "step_kinds": ["dw_pw"],
                "nodes": ["node_Conv_459", "node_Conv_462"],
                "tiles": [asdict(tile)], "predicted": {"ours": {"time_s": pred}},
                "measured": {"time_cold_s": meas, "kernels": [{"kind": "dw_pw", "blocks": 1, "threads": 256, "smem_bytes": 0,
                                                       "regs": 255, "local_bytes": frame, "blocks_per_sm": 1,
                                                       "limiter": "registers"}]}}  # fmt: skip

    # MobileNetV1's 128 -> 128 DW->PW pair on 56 x 56 at batch 8
    data = {"meta": {"model": "mobilenet_v1", "dtype": "fp16", "batch": 8},
            "records": [rec(0, big, 6e-5, 1e-5, 2144), rec(1, small, 2e-5, 1e-5, 0)]}
    scan = register_checks.spill_scan([Run("x", "x", data)])
    assert scan.ratios == {True: [pytest.approx(6.0)], False: [pytest.approx(2.0)]}
    assert scan.frames == {(True, True): 1, (False, False): 1} and scan.best == {False: 1}


def test_registers_command_prints_the_fit_and_the_spill_table(capsys):
    assert main(["analyze", "registers", LAYERS, "--markdown", "-", "--python"]) == 0
    out = capsys.readouterr().out
    assert "blocks per SM as compiled: fitted table" in out and "| over 255 registers |" in out
    assert "COMPILED = {" in out


@pytest.mark.skipif(shutil.which("nvcc") is not None, reason="nvcc is on PATH")
def test_registers_compile_without_nvcc_is_one_error_line(capsys):
    assert main(["analyze", "registers", LAYERS, "--compile"]) == 2
    assert "nvcc" in _one_error_line(capsys)


# ---- plans --------------------------------------------------------------------------------------------


def _plan_doc(gpu, items):
    recs = [{"id": f"x{i}", "role": "layer", "planned": planned, "error": err,
             "predicted": {"ours": {"time_s": p * 1e-6}},
             "measured": {"time_cold_s": c * 1e-6, "time_warm_s": c * 0.9e-6}}
            for i, (planned, err, p, c) in enumerate(items)]  # fmt: skip
    return {"schema": report.SCHEMA, "records": recs, "groups": {},
            "meta": {"model": "m", "dtype": "fp32", "batch": 8, "gpu": gpu}}


def test_plan_totals_sum_the_planned_items_and_compare_with_the_first_run(tmp_path, capsys):
    # planned 10 + 20 us measured (the unplanned 99 us and the failed item are left out) ...
    a = _plan_doc("h100", [(True, None, 9, 10), (True, None, 18, 20), (False, None, 99, 99), (True, "boom", 5, 5)])
    # ... against 12 + 15 us: 27 / 30 = 0.900
    b = _plan_doc("other", [(True, None, 11, 12), (True, None, 14, 15)])
    t = plan_totals.plan_total(Run("a", "m fp32 b8", a))
    assert (t.items, t.failed) == (2, 1)
    assert t.cold_s == pytest.approx(30e-6) and t.predicted_s == pytest.approx(27e-6)
    paths = []
    for name, d in (("a", a), ("b", b)):
        p = tmp_path / f"{name}.json"
        p.write_text(json.dumps(d))
        paths.append(str(p))
    assert main(["analyze", "plans", *paths, "--markdown", "-"]) == 0
    rows = [r for r in capsys.readouterr().out.splitlines() if r.startswith("| m fp32 b8 |")]
    assert rows[0].endswith("| 1.000 |") and "(1 failed)" in rows[0] and rows[1].endswith("| 0.900 |")


# ---- bad input and tables -----------------------------------------------------------------------------


@pytest.mark.parametrize(("argv", "message"), [
    (["accuracy", "no/such/results.json"], "no such results file: no/such/results.json"),
    (["accuracy", "--gpu", "no_such_gpu", SMALL], "no_such_gpu"),
    (["accuracy", SMALL], "cannot load model 'tiny_inverted_residual'"),  # not bundled: --stored or --model
    (["decisions", "--stored", "--step", "0", SMALL], "--step must be positive"),
    (["accuracy", "--stored", SMALL, "--markdown", "no/such/dir/a.md"], "does not exist"),
    (["plans", str(FIX / "ncu_no_permission.txt")], "cannot read results"),
    (["plans", str(FIX / "ncu_base_units.csv")], "cannot read results"),
])  # fmt: skip
def test_bad_input_is_one_error_line_and_exit_2(argv, message, capsys):
    assert main(["analyze", *argv]) == 2
    assert message in _one_error_line(capsys)


def test_analyze_without_an_analysis_exits_2(capsys):
    assert main(["analyze"]) == 2
    assert "accuracy" in capsys.readouterr().err
    with pytest.raises(AnalysisError, match="at least one"):
        load_runs([])


def test_markdown_escapes_pipes_and_tables_check_their_rows():
    t = Table("T", ("a", "b"), (("x|y", "1"),), (False, True), note="n")
    assert markdown(t) == "**T**\n\n| a | b |\n|---|---:|\n| x\\|y | 1 |\n\nn\n"
    with pytest.raises(ValueError, match="1 cells for 2 columns"):
        Table("T", ("a", "b"), (("x",),))


def test_compiled_registers_set_the_compiler_against_the_estimate():
    from fuseplanner.analysis import nvcc_registers as nv
    from fuseplanner.kernels import tiles

    spec = specs.gpu("h100")
    jobs = nv.distinct_fused_steps(load_runs([LAYERS]), spec)
    assert sorted(st.kind for st, _, _ in jobs) == ["dw_pw", "pw_dw", "pw_dw_pw"]  # one planned tile per group

    def twice(nvcc, step, dtype, precision, workdir):  # a compiler allocating twice the estimate, failing on dw_pw
        return None if step.kind == "dw_pw" else 2 * tiles.regs_per_thread(step.kind, step.ops, step.tile, dtype, precision)

    rows = nv.compiled_registers(jobs, spec, "nvcc", compile_fn=twice)
    assert sorted(r.kind for r in rows) == ["pw_dw", "pw_dw_pw"] and all(r.allocated == 2 * r.estimated for r in rows)
    # twice the registers never allows more blocks per SM than the estimate
    assert all(r.bps_allocated <= r.bps_estimated for r in rows)
    table = nv.compiled_table(rows, len(jobs))
    assert [row[3] for row in table.rows] == ["2.00", "2.00"] and table.note.startswith("2 of 3 distinct fused tiles")
    assert nv.USED.findall("ptxas info    : Used 64 registers, 384 bytes cmem[0]") == ["64"]
