"""Typed measurement records: the JSON-lines format round trip, the old results.json conversion, and
version and content errors as one line."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from fuseplanner.cli.main import main
from fuseplanner.core.errors import RecordsError
from fuseplanner.core.ir import Tile
from fuseplanner.validation import records, validate
from fuseplanner.validation.ncu import Traffic

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "results_small.json"
CURATED = ROOT / "data" / "records" / "h100" / "fit" / "mobilenet_v1-fp32-b1-sweep.json.gz"


def test_old_fixture_converts_field_by_field():
    doc = json.loads(FIX.read_text())
    run = records.read_run(FIX)
    assert run.meta.model == doc["meta"]["model"] and run.meta.batch == 1 and run.meta.traffic_source == "ncu"
    assert run.meta.timing.repeat == 100 and run.meta.peaks.dram_Bps == 3.35e12
    assert set(run.groups) == set(doc["groups"]) and run.groups["g0"].planned_tile == Tile(8, 8, 32, 16, 256)
    assert len(run.records) == len(doc["records"]) == 8
    for rec, d in zip(run.records, doc["records"], strict=True):
        assert (rec.id, rec.role, rec.kind, rec.group, list(rec.nodes)) == (
            d["id"], d["role"], d["kind"], d["group"], d["nodes"])
        assert [t.as_dict() for t in rec.tiles] == d["tiles"]
        assert rec.error == d["error"] and rec.ok == (not d["error"] and bool(d["measured"]))
        if d["measured"]:
            assert rec.measured.time_cold_s == d["measured"]["time_cold_s"]
            assert rec.measured.gma_bytes == d["measured"].get("gma_bytes")
        else:  # the failed record: an old empty `measured` becomes None
            assert rec.measured is None
        assert rec.prediction("ours").time_s == d["predicted"]["ours"]["time_s"]


def test_curated_record_file_converts():
    raw = json.loads(gzip.decompress(CURATED.read_bytes()))
    run = records.read_run(CURATED)
    assert len(run.records) == len(raw["records"]) > 100
    r, d = run.records[0], raw["records"][0]
    assert r.measured.kernels[0].regs == d["measured"]["kernels"][0]["regs"]
    assert r.measured.dram_warm_bytes == d["measured"]["dram_warm_bytes"]
    assert r.check.rel_err == d["check"]["rel_err"] and r.step_kinds == tuple(d["step_kinds"])
    assert run.meta.versions == raw["meta"]["versions"]


@pytest.mark.parametrize("name", ["records.jsonl", "records.jsonl.gz"])
@pytest.mark.parametrize("source", [FIX, CURATED], ids=["fixture", "curated"])
def test_round_trip(tmp_path, name, source):
    run = records.read_run(source)
    path = records.write_run(run, tmp_path / name)
    assert records.read_run(path) == run
    lines = (gzip.decompress(path.read_bytes()) if name.endswith(".gz") else path.read_bytes()).decode().splitlines()
    head = json.loads(lines[0])
    # the first line is the run header, then one record a line
    assert (head["format"], head["version"]) == (records.FORMAT, records.VERSION) and "records" not in head
    assert len(lines) == 1 + len(run.records) and json.loads(lines[1])["id"] == run.records[0].id


def test_infinite_prediction_survives_the_round_trip(tmp_path):
    rec = records.record({"id": "x", "role": "tile", "predicted": {"ours": {"time_s": float("inf")}}})
    run = records.ValidationRun(records=(rec,))
    assert records.read_run(records.write_run(run, tmp_path / "r.jsonl")).records[0].predicted["ours"].time_s == float("inf")


def test_other_version_is_one_error_line(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps({"format": records.FORMAT, "version": records.VERSION + 1, "meta": {}}) + "\n")
    with pytest.raises(RecordsError) as exc:
        records.read_run(path)
    msg = str(exc.value)
    assert len(msg.splitlines()) == 1 and f"version {records.VERSION + 1}" in msg and str(path) in msg


def test_other_version_through_the_cli_is_one_error_line(tmp_path, capsys):
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps({"format": records.FORMAT, "version": 99}) + "\n")
    assert main(["analyze", "accuracy", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "version 99" in err[0]


def test_unknown_record_field_is_one_error_line(tmp_path):
    doc = json.loads(FIX.read_text())
    doc["records"][2]["measured"]["gma_bytez"] = 1.0
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(RecordsError) as exc:
        records.read_run(path)
    assert len(str(exc.value).splitlines()) == 1 and "record 2" in str(exc.value) and "gma_bytez" in str(exc.value)


def test_validate_builds_typed_records_and_adds_counters():
    ops = ()
    step = validate.Step("dw", ops, Tile(4, 4, 32, 32, 128))
    item = validate.Item(id="L0", role="layer", kind="dw", ops=ops, steps=(step,), planned=True)
    pred = {"ours": records.Prediction(gma_bytes=2e6, dram_bytes=1e6, time_s=2e-6, flops=10.0), "paper": None}
    rec = validate._record(item, pred, {"time_cold_s": 4e-6, "time_warm_s": 3e-6}, {"rel_err": 0.0, "tol": 1e-5,
                                                                                   "ok": True}, None)
    # counter-free: effective bandwidths = modelled bytes / cold time: 1e6 / 4e-6 = 2.5e11, 2e6 / 4e-6 = 5e11
    assert rec.measured.traffic == "counter-free" and rec.measured.eff_dram_Bps == pytest.approx(2.5e11)
    assert rec.measured.eff_gma_Bps == pytest.approx(5e11) and rec.flops == 10.0 and rec.launches == 1
    cold = Traffic(gma_read_bytes=3e6, gma_write_bytes=1e6, dram_read_bytes=2e6, dram_write_bytes=1e6, time_s=3e-6,
                   kernels=2)
    warm = Traffic(gma_read_bytes=1e6, gma_write_bytes=1e6, dram_read_bytes=0.0, dram_write_bytes=0.0, time_s=2e-6,
                   kernels=2)
    out = validate._apply_traffic(rec, cold, warm)
    assert rec.measured.traffic == "counter-free"  # records are frozen: a new one comes back
    assert (out.measured.traffic, out.measured.gma_bytes, out.measured.dram_bytes) == ("ncu", 4e6, 3e6)
    assert out.measured.gma_warm_bytes == 2e6 and "2 kernels for 1 planned launches" in out.measured.ncu_note
