"""`fuseplanner gpus`: table and JSON output."""

from __future__ import annotations

import json

from fuseplanner.cli.main import main


def test_gpus_json(capsys):
    assert main(["gpus", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    by = {d["name"]: d for d in data}
    assert by["h100"]["sm_count"] == 132 and by["h100"]["l2_bytes"] == 52428800
    assert by["h100"]["smem_per_block_bytes"] == 232448
    assert by["rtx_a4000"]["sm_count"] == 48
    assert by["h100"]["effective"]["dram_bw_bytes_per_s"] == 3.009e12  # [measured] overrides the 3.35e12 datasheet value
    assert len(data) == 10 and all("sources" not in d for d in data)


def test_gpus_json_named_with_sources(capsys):
    assert main(["gpus", "t4", "l4", "--json", "--sources"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["name"] for d in data] == ["t4", "l4"]
    assert "sm_count" in data[0]["sources"]


def test_gpus_table(capsys):
    assert main(["gpus"]) == 0
    out = capsys.readouterr().out
    assert "h100" in out and "rtx_a4000" in out and "3009*" in out


def test_gpus_unknown(capsys):
    assert main(["gpus", "h300", "--json"]) == 2
    err = capsys.readouterr()
    assert err.out == "" and err.err.startswith("error: unknown GPU 'h300'")
