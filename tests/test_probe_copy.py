"""The copy probe's patterns and its report from saved counters (benchmarks/probe_copy.py; CPU)."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import probe_copy  # noqa: E402

RECORDS = Path(__file__).parent / "fixtures" / "probe_copy"  # two configs of an H100 copy-probe run


def test_parametric_patterns():
    # c15.15.960: 15 blocks, all reading one 960 KB region as 3,840 rows of 256 B
    blocks, seg, rows, pitch, region, div, ndist, _ = probe_copy.pattern("c15.15.960")
    assert (blocks, seg, rows, pitch, region, div, ndist) == (15, 256, 3840, 256, 983_040, 15, 1)
    assert probe_copy.asked_sectors("c15.15.960") == 15 * 3840 * 8  # 8 sectors per 256-byte row
    assert probe_copy.distinct_sectors("c15.15.960") == 3840 * 8
    # s8.224.16: block b reads 16 KB region b % 8: 8 regions of 512 sectors
    assert probe_copy.distinct_sectors("s8.224.16") == 8 * 512
    assert probe_copy.pattern("c16") == probe_copy.pattern("c16.264.4")[:-1] + (probe_copy.pattern("c16")[-1],)
    for bad in ("c0", "c300", "c4.2.4", "x8.16.4", "c4.16"):
        with pytest.raises(KeyError):
            probe_copy.pattern(bad)


def test_parse_cluster_option():
    assert probe_copy.parse("s8.224.16:ca:16:pad16:ks8")[-1] == 8
    with pytest.raises(SystemExit, match="bad copy probe config"):
        probe_copy.parse("s8.100.16:ca:16:ks8")  # 100 blocks are not whole clusters of 8


def test_reader_units_by_hand():
    # c4.8.1: blocks 0-3 read region 0, blocks 4-7 region 1 (1 KB: 4 rows of 8 sectors = 32 sectors).
    # SMs 0,1,2,3 | 0,0,4,5: region 0 has 4 SMs in 2 TPCs (0-1, 2-3), region 1 has 3 SMs (0, 4, 5) in
    # 2 TPCs (0, 2): per SM (4 + 3) x 32 = 224 sectors, per TPC (2 + 2) x 32 = 128
    sms = [0, 1, 2, 3, 0, 0, 4, 5]
    assert probe_copy.reader_units("c4.8.1", sms, 1) == 224
    assert probe_copy.reader_units("c4.8.1", sms, 2) == 128


def test_report_from_saved_counters(capsys):
    probe_copy.report(RECORDS)
    out = capsys.readouterr().out
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| s8.") or line.startswith("| c")}
    # 28 cluster ranks 8 apart (224 blocks in clusters of 8) read each of 4,096 sectors 8 times
    cells = [c.strip() for c in rows["s8.224.16:ca:16:pad16:ks8:kb60"].split("|")]
    assert cells[7] == "32,768" and cells[8] == "0.29"
    # 16 consecutive readers of a 16-block launch: 10 reads per sector
    cells = [c.strip() for c in rows["c16.16.64:ca:16:pad16:kb200"].split("|")]
    assert cells[7] == "20,480" and cells[4] == "2,048"
