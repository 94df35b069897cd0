"""Parsing of Nsight Compute CSV output (saved fixtures) and the ncu subprocess wrapper (a fake ncu)."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from fuseplanner.core.errors import DeviceError
from fuseplanner.validation import ncu

FIX = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("118,897", 118897.0),
        ("1,822,720", 1822720.0),
        ("1.82", 1.82),
        ("0", 0.0),
        ("9,5", 9.5),  # decimal comma of some locales
        ("1 822 720", 1822720.0),
        ("n/a", None),
        ("", None),
    ],
)
def test_parse_number(text, expected):
    assert ncu.parse_number(text) == expected


@pytest.mark.parametrize(
    ("value", "unit", "expected"),
    [
        ("1.82", "Mbyte", 1.82e6),
        ("56.45", "Kbyte", 56450.0),  # ncu's byte prefixes are decimal
        ("2", "KiB", 2048.0),
        ("3", "MB", 3e6),
        ("5.63", "usecond", 5.63e-6),
        ("5,632", "nsecond", 5.632e-6),
        ("1.25", "msecond", 1.25e-3),
        ("4", "us", 4e-6),
        ("118,897", "sector", 118897.0),
        ("1.5", "Ksector", 1500.0),
    ],
)
def test_to_base_units(value, unit, expected):
    assert ncu.to_base(value, unit) == pytest.approx(expected, rel=1e-12)


def test_unknown_unit_is_none():
    assert ncu.to_base("3", "furlong") is None


def test_parse_base_units_fixture():
    recs = ncu.parse_csv((FIX / "ncu_base_units.csv").read_text())
    assert [r.id for r in recs] == list(range(8))
    dw = recs[2]
    assert dw.kernel == "dw3x3_kernel"
    assert dw.grid == "(4, 4, 144)"
    # 118,897 read sectors x 32 B = 3,804,704 B; 56,448 write sectors x 32 = 1,806,336 B
    assert dw.gma_read_bytes == 3_804_704
    assert dw.gma_write_bytes == 1_806_336
    assert dw.dram_read_bytes == 1_822_720
    assert dw.dram_write_bytes == 0
    assert dw.time_s == pytest.approx(5.632e-6)
    # a templated name with commas survives CSV quoting
    assert recs[5].kernel == "pw_kernel<float, 8, 8, 32, 16>"


def test_parse_auto_units_fixture_and_missing_values():
    recs = ncu.parse_csv((FIX / "ncu_auto_units.csv").read_text())
    assert len(recs) == 2
    a, b = recs
    assert a.dram_read_bytes == pytest.approx(1.82e6)
    assert a.dram_write_bytes == pytest.approx(56_450)
    assert a.time_s == pytest.approx(12.29e-6)
    assert b.dram_read_bytes == pytest.approx(2.05e9)
    assert b.time_s == pytest.approx(1.25e-3)
    assert b.gma_read_bytes == 64_000_000 * 32
    assert b.gma_write_bytes is None  # "n/a"
    assert ncu.total([a, b]).gma_bytes is None  # a sum with a missing counter is missing


def test_split_by_markers_drops_outside_kernels():
    recs = ncu.parse_csv((FIX / "ncu_base_units.csv").read_text())
    regions = ncu.split_by_markers(recs)
    assert [[r.kernel for r in reg] for reg in regions] == [
        ["dw3x3_kernel"],
        ["pw_kernel<float, 8, 8, 32, 16>", "dw_kernel<float, 3, 1>"],
    ]
    t = ncu.total(regions[1])
    # GMA: (40,128 + 41,300) reads + (18,816 + 37,632) writes = 137,876 sectors x 32 = 4,412,032 B
    assert t.gma_bytes == 4_412_032
    # DRAM: 1,216,512 + 301,056 + 602,112 = 2,119,680 B
    assert t.dram_bytes == 2_119_680
    assert t.time_s == pytest.approx((9216 + 7040) * 1e-9)
    assert t.kernels == 2


def test_no_header_gives_no_records():
    assert ncu.parse_csv("==PROF== Disconnected from process 1\n") == []


def test_counters_problem_detected():
    text = (FIX / "ncu_no_permission.txt").read_text()
    reason = ncu.counters_problem(text)
    assert reason is not None and "ERR_NVGPUCTRPERM" in reason
    assert ncu.counters_problem((FIX / "ncu_base_units.csv").read_text()) is None


def test_command_line():
    cmd = ncu.command(["python3", "w.py"], log_file="/tmp/x.csv", cache="none", kernel_regex="fused|mark")
    assert cmd[0] == "ncu" and cmd[-2:] == ["python3", "w.py"]
    assert cmd[cmd.index("--cache-control") + 1] == "none"
    assert cmd[cmd.index("--print-units") + 1] == "base"
    assert cmd[cmd.index("-k") + 1] == "regex:fused|mark"
    assert set(cmd[cmd.index("--metrics") + 1].split(",")) == set(ncu.METRICS)
    with pytest.raises(ValueError):
        ncu.command(["x"], log_file="y", cache="warm")


def _fake_ncu(tmp_path: Path, fixture: str, exit_code: int = 0) -> str:
    """An executable that behaves like ncu: writes a saved output to --log-file."""
    exe = tmp_path / "ncu"
    exe.write_text(
        f"#!{sys.executable}\n"
        "import shutil, sys\n"
        "args = sys.argv[1:]\n"
        f"shutil.copy({str(FIX / fixture)!r}, args[args.index('--log-file') + 1])\n"
        f"sys.exit({exit_code})\n"
    )
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe)


def test_profile_with_fake_ncu(tmp_path):
    exe = _fake_ncu(tmp_path, "ncu_base_units.csv")
    recs = ncu.profile(["python3", "-c", "pass"], ncu=exe, timeout_s=30)
    assert len(recs) == 8 and recs[2].dram_read_bytes == 1_822_720


def test_profile_reports_missing_permission(tmp_path):
    exe = _fake_ncu(tmp_path, "ncu_no_permission.txt", exit_code=1)
    with pytest.raises(ncu.CountersUnavailable, match="ERR_NVGPUCTRPERM"):
        ncu.profile(["python3", "-c", "pass"], ncu=exe, timeout_s=30)


def test_profile_missing_ncu(tmp_path):
    with pytest.raises(ncu.CountersUnavailable):
        ncu.profile(["true"], ncu=str(tmp_path / "no-such-ncu"), timeout_s=5)
    assert issubclass(ncu.CountersUnavailable, DeviceError)


class _FakeCupy:
    """What `ncu.Markers` touches of CuPy, logging each launch and synchronisation in order."""

    def __init__(self):
        self.log: list[str] = []
        log = self.log

        class Module:
            def __init__(self, code):
                assert ncu.MARK_BEGIN in code and ncu.MARK_END in code

            def get_function(self, name):
                return lambda grid, block, args: log.append(name)

        class Stream:
            def synchronize(self):
                log.append("sync")

        class Cuda:
            @staticmethod
            def get_current_stream():
                return Stream()

        self.RawModule, self.cuda = Module, Cuda


def test_marked_region_brackets_the_run_between_synchronised_markers():
    cp = _FakeCupy()
    markers = ncu.Markers(cp)
    markers.region(lambda: cp.log.append("work"))
    markers.region(None)  # an item that failed to run still leaves an (empty) region
    assert cp.log == ["sync", ncu.MARK_BEGIN, "work", ncu.MARK_END, "sync",
                      "sync", ncu.MARK_BEGIN, ncu.MARK_END, "sync"]
