"""Deduplication of test records against training records (fuseplanner.analysis.generalisation)."""

from __future__ import annotations

import json
from pathlib import Path

from fuseplanner.analysis.generalisation import dedup, dedup_accuracy, per_model, record_key
from fuseplanner.analysis.runs import Run

FIX = Path(__file__).parent / "fixtures"


def _run(name="results_small.json", **meta):
    data = json.loads((FIX / name).read_text())
    data["meta"].update(meta)
    return Run(path=name, label=name, data=data)


def test_identical_runs_dedup_to_nothing_and_other_batch_keeps_all():
    a = _run()
    assert dedup([a], [a]) == []
    other = _run(batch=8)  # same nodes and tiles at another batch: a new configuration
    assert len(dedup([other], [a])) == len(other.records)


def test_one_changed_tile_is_kept():
    train = _run()
    test = _run()
    data = json.loads((FIX / "results_small.json").read_text())
    data["records"][0]["tiles"][0]["th"] += 1
    test = Run(path="t", label="t", data=data)
    kept = dedup([test], [train])
    assert len(kept) == 1 and kept[0].id == data["records"][0]["id"]
    assert record_key(test, kept[0]) != record_key(train, train.records[0])


def test_dedup_accuracy_counts_and_per_model():
    a = _run()
    s = dedup_accuracy([a, _run(batch=2)], [a])
    n = len(a.records)
    assert (s.records, s.kept) == (2 * n, n)
    assert s.all["time"].n == 2 * s.deduplicated["time"].n  # both halves measure the same records
    assert list(per_model([a])) == [a.data.meta.model]


def test_cli_accuracy_train(capsys):
    from fuseplanner.cli.main import main

    f = str(FIX / "results_small.json")
    assert main(["analyze", "accuracy", f, "--stored", "--train", f]) == 0
    out = capsys.readouterr().out
    assert "deduplicated against training (0 of" in out
