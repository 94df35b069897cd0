"""`fuseplanner validate` / `calibrate` on a machine without a GPU, and report regeneration (CPU)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fuseplanner.cli.main import main
from fuseplanner.core.errors import DeviceError

ROOT = Path(__file__).resolve().parent.parent
FIX = Path(__file__).parent / "fixtures" / "results_small.json"


def _has_gpu() -> bool:
    from fuseplanner.kernels import require_device

    try:
        require_device()
    except DeviceError:
        return False
    return True


needs_no_gpu = pytest.mark.skipif(_has_gpu(), reason="a CUDA device is present: the no-GPU error cannot occur")


@needs_no_gpu
@pytest.mark.parametrize("argv", [
    ["validate", "models/mobilenet_v2.onnx"],
    ["validate", "mobilenet_v2", "--tiles", "sweep", "--no-ncu"],
    ["calibrate", "--out", "x.toml"],
])
def test_no_gpu_is_one_error_line(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    assert "CuPy" in err[0] or "CUDA" in err[0]


@needs_no_gpu
def test_no_gpu_exit_code_from_the_console_script(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "fuseplanner.cli.main", "validate", "models/mobilenet_v2.onnx",
                           "--out", str(tmp_path / "v")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1
    assert not (tmp_path / "v").exists()  # nothing written


def test_validate_needs_a_model(capsys):
    assert main(["validate"]) == 2
    assert "MODEL" in capsys.readouterr().err


def test_report_regenerated_from_results_without_gpu(tmp_path, capsys):
    out = tmp_path / "rep"
    assert main(["validate", "--from-results", str(FIX), "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["errors"]["ours"]["gma"]["median"] == pytest.approx(30.0)
    assert (out / "report.md").is_file() and (out / "traffic.png").stat().st_size > 0


def test_report_regenerated_from_gzipped_results(tmp_path, capsys):
    packed = tmp_path / "results.json.gz"
    packed.write_bytes(gzip.compress(FIX.read_bytes()))
    assert main(["validate", "--from-results", str(packed), "--out", str(tmp_path / "rep"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["errors"]["ours"]["gma"]["median"] == pytest.approx(30.0)
    assert (tmp_path / "rep" / "report.md").is_file()


def test_from_results_rejects_other_json(tmp_path, capsys):
    bad = tmp_path / "plan.json"
    bad.write_text("{}")
    assert main(["validate", "--from-results", str(bad)]) == 2
    assert capsys.readouterr().err.startswith("error: ")
