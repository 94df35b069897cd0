"""Accuracy statistics on known inputs, plots, and report generation from a saved results file."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from fuseplanner.core.errors import FusePlannerError
from fuseplanner.validation import records, report

FIX = Path(__file__).parent / "fixtures" / "results_small.json"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def results() -> dict:
    return json.loads(FIX.read_text())


@pytest.fixture(scope="module")
def summary(results) -> dict:
    return report.summarize(results)


def test_ape():
    assert report.ape(110.0, 100.0) == pytest.approx(10.0)
    assert report.ape(90.0, 100.0) == pytest.approx(10.0)
    assert report.ape(1.0, 0.0) is None  # nothing measured
    assert report.ape(None, 5.0) is None


def test_error_summary_linear_percentile():
    # sorted [10, 20, 30, 40, 50]: median 30; p90 at index 0.9 * 4 = 3.6 -> 40 + 0.6 * 10 = 46
    s = report.error_summary([50, 10, None, 30, 20, 40])
    assert s == {"n": 5, "median": 30.0, "p90": pytest.approx(46.0)}
    assert report.error_summary([]) == {"n": 0, "median": None, "p90": None}


def test_model_errors_from_fixture(summary):
    ours, paper = summary["errors"]["ours"], summary["errors"]["paper"]
    # GMA APEs of the 7 measured records: 10, 0, 20, 30, 40, 50, 60 -> median 30,
    # p90 at index 5.4 of the sorted list -> 50 + 0.4 * 10 = 54; the failed record is skipped
    assert ours["gma"] == {"n": 7, "median": pytest.approx(30.0), "p90": pytest.approx(54.0)}
    # DRAM APEs 5, 5, 10, 10, 20, 20, 40 -> median 10, p90 = 20 + 0.4 * 20 = 28
    assert ours["dram"]["median"] == pytest.approx(10.0)
    assert ours["dram"]["p90"] == pytest.approx(28.0)
    # time APEs 20, 0, 10, 20, 25, 33.33, 20 -> sorted 0 10 20 20 20 25 33.33: median 20,
    # p90 = 25 + 0.4 * 8.333 = 28.333
    assert ours["time"]["median"] == pytest.approx(20.0)
    assert ours["time"]["p90"] == pytest.approx(28.0 + 1 / 3)
    # paper GMA APEs 20, 40, 50, 60, 80, 100, 10 -> median 50, p90 = 80 + 0.4 * 20 = 88
    assert paper["gma"]["median"] == pytest.approx(50.0)
    assert paper["gma"]["p90"] == pytest.approx(88.0)
    assert paper["time"]["n"] == 0  # the paper model predicts no time


def test_rank_correlation(summary):
    g0 = summary["rank"]["groups"]["g0"]
    # tiles A, B, C: predicted time 10, 13.2, 12 -> ranks 1 3 2; measured 10, 12, 15 -> ranks 1 2 3;
    # d = 0, 1, -1 -> rho = 1 - 6 * 2 / (3 * 8) = 0.5
    assert g0["tiles"] == 3
    assert g0["ours"] == pytest.approx(0.5)
    # paper GMA 1.2, 1.0, 0.4 MB -> ranks 3 2 1 against 1 2 3: rho = -1
    assert g0["paper"] == pytest.approx(-1.0)
    assert "g1" not in summary["rank"]["groups"]  # one tile only


def test_decisions(summary):
    d = summary["decisions"]
    # g0: best fused 10 us < unfused 20 us and the planner fused -> agrees; planned tile is the best
    assert d["groups"]["g0"]["fuse_agrees"] is True
    assert d["groups"]["g0"]["tile_agrees"] is True
    # g1: fused 30 us > unfused 25 us but the planner fused -> disagrees
    assert d["groups"]["g1"]["fuse_agrees"] is False
    assert "tile_agrees" not in d["groups"]["g1"]
    assert d["fuse"] == {"n": 2, "percent": 50.0}
    assert d["tile"] == {"n": 1, "percent": 100.0}
    # regret: g0 chose its planned tile (10 us, the best of 10 vs 20); g1 chose fused 30 us over
    # unfused 25 us: (10 + 30) - (10 + 25) = 5 us lost over 35 us = 14.29%; one group loses > 5%
    assert d["regret"]["n"] == 2 and d["regret"]["over_5pct"] == 1
    assert d["regret"]["time_lost_percent"] == pytest.approx(100 * 5 / 35)
    # g1 is the one disagreement, and 30 us vs 25 us (1.2x) is no near tie (<= 1.05x)
    assert d["ties"] == {"disagree": 1, "near_ties": 0}


def test_near_ties_are_counted_beside_the_strict_decisions():
    recs = [
        {"id": "a", "role": "group", "group": "g", "kind": "pw_dw", "planned": True,
         "measured": {"time_cold_s": 10.4e-6}},
        {"id": "u", "role": "unfused", "group": "g", "kind": "pw_dw", "measured": {"time_cold_s": 10.0e-6}},
    ]
    res = {"groups": {"g": {"planner_fused": True}}, "records": recs}
    d = report.decisions(res)
    # fused 10.4 us > unfused 10.0 us: the planner's fuse disagrees, but within 5% (10.4 <= 10.5)
    assert d["fuse"]["percent"] == 0.0
    assert d["ties"] == {"disagree": 1, "near_ties": 1}
    assert "1 of the 1 disagreeing groups are near ties" in "\n".join(report._decision_lines(
        {"decisions": d, "rank": {"median_ours": None, "median_paper": None, "groups": {}}}))
    recs[0]["measured"]["time_cold_s"] = 10.6e-6  # 1.06x: a real miss
    assert report.decisions(res)["ties"] == {"disagree": 1, "near_ties": 0}


def test_tile_slack():
    recs = [
        {"id": "a", "role": "group", "group": "g", "kind": "pw_dw", "planned": True,
         "measured": {"time_cold_s": 10.4e-6}},
        {"id": "b", "role": "tile", "group": "g", "kind": "pw_dw", "measured": {"time_cold_s": 10.0e-6}},
        {"id": "u", "role": "unfused", "group": "g", "kind": "pw_dw", "measured": {"time_cold_s": 30e-6}},
    ]
    res = {"groups": {"g": {"planner_fused": True}}, "records": recs}
    e = report.decisions(res)["groups"]["g"]
    assert e["tile_agrees"] is True and e["tile_is_best"] is False  # 10.4 <= 1.05 * 10.0
    recs[0]["measured"]["time_cold_s"] = 10.6e-6
    assert report.decisions(res)["groups"]["g"]["tile_agrees"] is False  # 10.6 > 10.5


def _layer_sweep_records():
    """A standalone layer L0 (planned tile 12 us) and a group member M0 alone (its tile 8 us), each with
    alternatives; predicted times in us give ranks to compare."""
    def rec(rid, role, group, pred, meas, planned=False):
        return {"id": rid, "role": role, "group": group, "kind": "pw", "planned": planned,
                "predicted": {"ours": {"time_s": pred * 1e-6}, "paper": {"gma_bytes": pred}},
                "measured": {"time_cold_s": meas * 1e-6}}
    return [
        rec("L0", "layer", "L0", 11, 12, planned=True), rec("L0.t1", "layer_tile", "L0", 10, 10),
        rec("L0.t2", "layer_tile", "L0", 14, 16),
        rec("M0", "member", "M0", 7, 8), rec("M0.t1", "layer_tile", "M0", 9, 8.2),
    ]


def test_layer_sweeps_give_tile_choices_and_ranks():
    recs = _layer_sweep_records()
    lt = report.layer_tile_choices(recs)
    # L0: its planned tile 12 us vs the best 10 us (1.2x > 1.05) -> disagrees; M0: 8 us is the best
    assert lt["layers"]["L0"]["agrees"] is False and lt["layers"]["M0"]["agrees"] is True
    assert lt["n"] == 2 and lt["percent"] == 50.0
    # chosen 12 + 8 = 20 us against best 10 + 8 = 18 us: 11.1% more
    assert lt["time_lost_percent"] == pytest.approx(100 * 2 / 18)
    rk = report.rank_correlation(recs)
    # L0: predicted 11, 10, 14 -> ranks 2 1 3; measured 12, 10, 16 -> 2 1 3: rho = 1; M0 has 2 tiles only
    assert rk["groups"]["L0"]["ours"] == pytest.approx(1.0) and "M0" not in rk["groups"]
    # layer groups are no fuse decisions, and the planned-layer table keeps to planned standalone layers
    d = report.decisions({"groups": {}, "records": recs})
    assert d["fuse"]["n"] == 0 and d["layer_tile"]["n"] == 2
    assert [r["label"] for r in report.layer_rows({"groups": {}, "records": [
        {**r, "nodes": [r["id"]]} for r in recs]})] == ["L0"]
    lines = "\n".join(report._decision_lines({"decisions": d, "rank": rk}))
    assert "within 5% of its measured best in 50.0% of 2 layers" in lines


def test_layer_tile_choices_by_prediction_pick_the_tile_the_model_ranks_first():
    recs = _layer_sweep_records()
    lt = report.layer_tile_choices(recs, "ours")
    # L0: ours predicts L0.t1 fastest (10 us < 11, 14): measured 10 us, the best -> agrees;
    # M0: ours predicts M0 itself fastest (7 < 9): measured 8 us, the best -> agrees
    assert lt["layers"]["L0"]["chosen_s"] == pytest.approx(10e-6) and lt["percent"] == 100.0
    assert lt["time_lost_percent"] == pytest.approx(0.0)
    # with the predictions swapped in M0, ours picks M0.t1 (8.2 us against the best 8: 2.5%, within 5%)
    swapped = [{**r, "predicted": {"ours": {"time_s": 9e-6 if r["id"] == "M0" else r["predicted"]["ours"]["time_s"]}}}
               if r["group"] == "M0" else r for r in recs]
    swapped[-1]["predicted"] = {"ours": {"time_s": 7e-6}}
    m0 = report.layer_tile_choices(swapped, "ours")["layers"]["M0"]
    assert m0["chosen_s"] == pytest.approx(8.2e-6) and m0["agrees"] is True


def test_targets(summary):
    t = {x["what"]: x for x in summary["targets"]}
    assert t["GMA median APE"]["met"] is False and t["GMA median APE"]["miss_by"] == pytest.approx(20.0)
    assert t["GMA p90 APE"]["miss_by"] == pytest.approx(29.0)
    assert t["DRAM median APE"]["met"] is True
    assert t["TIME median APE"]["met"] is True
    assert t["fuse decisions agree"]["miss_by"] == pytest.approx(40.0)


def test_summary_counts(summary):
    assert summary["records"] == 8
    assert summary["failed"] == 1
    assert (summary["correct"], summary["checked"]) == (7, 7)


def test_report_from_saved_results(tmp_path):
    out = tmp_path / "rep"
    s = report.report_from_results(FIX, out)
    for name in report.PLOTS:
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000, name
    md = (out / "report.md").read_text()
    assert "| GMA | 30.0% / 54.0% (7) | 50.0% / 88.0% (7) |" in md
    assert "no (by 40.0 points)" in md
    assert "![traffic](traffic.png)" in md
    # the old results.json is written again as records (JSON lines), which regenerate the same report
    assert report.load_results(out / report.RECORDS_FILE) == records.as_run(json.loads(FIX.read_text()))
    s2 = report.report_from_results(out / report.RECORDS_FILE, tmp_path / "rep2")
    assert s2 == s


def test_counter_free_report(tmp_path, results):
    doc = json.loads(json.dumps(results))
    doc["meta"]["traffic_source"] = "counter-free"
    for r in doc["records"]:
        if r["measured"]:
            r["measured"]["gma_bytes"] = r["measured"]["dram_bytes"] = None
    s = report.write_report(doc, tmp_path)
    assert s["errors"]["ours"]["gma"]["n"] == 0
    assert s["errors"]["ours"]["time"]["n"] == 7
    assert "Counter-free run" in (tmp_path / "report.md").read_text()
    assert (tmp_path / "traffic.png").read_bytes().startswith(PNG_MAGIC)


def test_bad_results_file(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"records": []}))
    with pytest.raises(FusePlannerError, match="not a fuseplanner validation results"):
        report.load_results(bad)
    shutil.copy(FIX, tmp_path / "ok.json")
    assert report.load_results(tmp_path / "ok.json").meta.model == "tiny_inverted_residual"


def test_load_results_reads_gzip(tmp_path, results):
    # the curated records in data/records are gzip-compressed results documents
    plain, packed = tmp_path / "results.json", tmp_path / "results.json.gz"
    shutil.copy(FIX, plain)
    packed.write_bytes(gzip.compress(FIX.read_bytes()))
    assert report.load_results(packed) == report.load_results(plain) == records.as_run(results)
    # a report regenerates from the compressed file as from the plain one
    assert report.report_from_results(packed, tmp_path / "rep") == report.summarize(results)


def _bad_deflate() -> bytes:
    data = bytearray(gzip.compress(FIX.read_bytes()))
    data[10] |= 0x06  # the first deflate block's type bits set to 11, which no block has
    return bytes(data)


@pytest.mark.parametrize("data", [
    pytest.param(b"{not gzip", id="not-gzip"),
    pytest.param(gzip.compress(FIX.read_bytes())[:200], id="truncated"),
    pytest.param(_bad_deflate(), id="bad-deflate"),
    pytest.param(gzip.compress(FIX.read_bytes())[:-8] + b"\0" * 8, id="bad-crc"),
    pytest.param(gzip.compress(b"{not json"), id="not-json"),
    pytest.param(gzip.compress(b'{"schema": "\xff"}'), id="not-utf8"),
])
def test_corrupt_gzip_results_is_one_error_line(tmp_path, data):
    bad = tmp_path / "results.json.gz"
    bad.write_bytes(data)
    with pytest.raises(FusePlannerError, match="cannot read results") as exc:
        report.load_results(bad)
    assert len(str(exc.value).splitlines()) == 1 and str(bad) in str(exc.value)


def test_layer_rows_follow_the_plan(results):
    doc = json.loads(json.dumps(results))
    rows = report.layer_rows(doc)
    # L0 alone; g0 fused 10 us vs unfused 20 us; g1 fused 30 us vs unfused 25 us; the failed L3 is left out
    assert [(r["label"], r["unfused_s"], r["fused_s"]) for r in rows] == [
        ("conv_dw0", 10e-6, None), ("g0 pw_dw", 20e-6, 10e-6), ("g1 dw_pw", 25e-6, 30e-6)]
    doc["groups"]["g1"]["planner_fused"] = False  # a rejected candidate is not a planned layer
    assert [r["label"] for r in report.layer_rows(doc)] == ["conv_dw0", "g0 pw_dw"]


def _kernel(kind, regs, model_regs, bps, model_bps, local=0):
    return {"kind": kind, "blocks": 64, "threads": 128, "smem_bytes": 0, "cluster": 1, "regs": regs,
            "local_bytes": local, "static_smem_bytes": 0, "blocks_per_sm": bps, "limiter": "registers",
            "model_regs": model_regs, "model_blocks_per_sm": model_bps}


def test_occupancy_modelled_vs_compiled(tmp_path, results):
    doc = json.loads(json.dumps(results))
    recs = {r["id"]: r for r in doc["records"]}
    recs["L0"]["measured"]["kernels"] = [_kernel("dw", 40, 40, 8, 8)]
    recs["g0"]["measured"]["kernels"] = [_kernel("pw_dw", 120, 60, 2, 4, local=16)]
    recs["g0.t1"]["measured"]["kernels"] = [_kernel("pw_dw", 90, 60, 4, 4)]
    recs["g0.u"]["measured"]["kernels"] = [_kernel("pw", 48, 40, 6, 8), _kernel("dw", 40, 40, 8, 8)]
    o = report.occupancy(doc["records"])
    assert (o["n"], o["fewer"], o["spills"]) == (5, 2, 1)
    # pw_dw registers compiled / modelled: 120/60 = 2.0 and 90/60 = 1.5, median 1.75; dw: 40/40 twice
    assert o["kinds"]["pw_dw"] == {"n": 2, "fewer": 1, "spills": 1, "regs_ratio_median": 1.75}
    assert o["kinds"]["dw"]["regs_ratio_median"] == 1.0 and o["kinds"]["pw"]["fewer"] == 1
    # predicted / measured time: as modelled L0 12/10 = 1.2 and g0.t1 13.2/12 = 1.1 -> median 1.15;
    # with fewer blocks g0 10/10 = 1.0 and g0.u 15/20 = 0.75 -> median 0.875
    assert o["time_ratio"]["as_modelled"] == pytest.approx(1.15)
    assert o["time_ratio"]["fewer"] == pytest.approx(0.875)
    assert o["records"] == {"as_modelled": 2, "fewer": 2}
    report.write_report(doc, tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "## Occupancy: modelled vs compiled" in md
    assert "| pw_dw | 2 | 1.75 | 1 | 1 |" in md


def test_no_occupancy_section_without_compiled_kernels(tmp_path, results):
    assert report.occupancy(results["records"])["n"] == 0
    report.write_report(json.loads(json.dumps(results)), tmp_path)
    assert "Occupancy" not in (tmp_path / "report.md").read_text()
