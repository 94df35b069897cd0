"""`fuseplanner inspect`: table, JSON and error lines, run in-process through cli.main."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from bad_models import BAD, bad_files

from fuseplanner import ModelError, __version__
from fuseplanner.cli.common import parse_input_shapes
from fuseplanner.cli.main import main

ROOT = Path(__file__).resolve().parent.parent


def _run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_json_is_one_object_with_counts(capsys):
    rc, out, err = _run(capsys, "inspect", "mobilenet_v2", "--json")
    assert rc == 0 and err == ""
    data = json.loads(out)
    assert data["model"] == "mobilenet_v2"
    assert data["counts"] == {"dw": 17, "pw": 34, "conv": 1, "linear": 1, "other": 12}
    first = data["layers"][0]
    assert {"name", "op_type", "kind", "inputs", "output", "kernel", "stride", "groups", "epilogue"} <= set(first)
    assert first["kind"] == "conv" and first["kernel"] == [3, 3] and first["stride"] == [2, 2]
    assert first["inputs"] == [{"name": "input", "shape": [1, 3, 224, 224]}]
    assert first["output"]["shape"] == [1, 32, 112, 112] and first["epilogue"] == ["relu6"]
    dw = data["layers"][1]
    assert dw["kind"] == "dw" and dw["groups"] == 32
    assert data["totals"]["params"] == sum(layer["params"] for layer in data["layers"])


def test_json_counts_linear_on_mobilevit(capsys):
    rc, out, _ = _run(capsys, "inspect", "mobilevit_xxs", "--json")
    counts = json.loads(out)["counts"]
    assert rc == 0 and (counts["dw"], counts["pw"], counts["linear"]) == (7, 21, 37)


def test_table_and_summary(capsys):
    rc, out, err = _run(capsys, "inspect", "mobilenet_v3_large")
    assert rc == 0 and err == ""
    assert "15 dw, 46 pw, 1 conv, 2 linear" in out
    assert "hardswish" in out and "5x5/2" in out


def test_table_kind_filter(capsys):
    rc, out, _ = _run(capsys, "inspect", "mobilenet_v2", "--kinds", "dw")
    assert rc == 0 and " pw " not in out and out.count(" dw ") == 17


def test_input_shape_and_batch_options(capsys):
    rc, out, _ = _run(capsys, "inspect", str(ROOT / "models" / "mobilenet_v1_converter_op11.onnx"),
                      "--input-shape", "input=1x3x128x128", "--batch", "4", "--json")
    data = json.loads(out)
    assert rc == 0 and data["inputs"][0]["shape"] == [4, 3, 128, 128]
    assert data["layers"][0]["output"]["shape"] == [4, 8, 64, 64]


@pytest.mark.parametrize("case", BAD)
def test_bad_input_is_one_error_line(tmp_path, capsys, case):
    path, fragment = bad_files(tmp_path)[case]
    rc, out, err = _run(capsys, "inspect", str(path), "--json")
    assert rc == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and fragment in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["--input-shape", "input"], "NAME=DIMS"),
        (["--input-shape", "input=1xax3"], "NAME=DIMS"),
        (["--input-shape", "image=1x3x224x224"], "use one of those names"),
        (["--input-shape", "input=1x3"], "rank 4"),
    ],
)
def test_bad_input_shape_options(capsys, argv, fragment):
    rc, out, err = _run(capsys, "inspect", "mobilenet_v2", *argv)
    assert rc == 2 and out == "" and err.startswith("error: ") and fragment in err


def test_bad_batch_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["inspect", "mobilenet_v2", "--batch", "0"])
    out, err = capsys.readouterr()
    assert info.value.code == 2 and out == "" and err.startswith("error: ")


def test_parse_input_shapes():
    assert parse_input_shapes(["x=1x3x224x224", "y = 2,4"]) == {"x": (1, 3, 224, 224), "y": (2, 4)}
    assert parse_input_shapes(None) == {}
    for bad in (["x"], ["=1x3"], ["x=1x0"], ["x=-1x3"], ["x=1x3", "x=1x3"]):
        with pytest.raises(ModelError):
            parse_input_shapes(bad)


def test_version_subprocess():
    proc = subprocess.run([sys.executable, "-m", "fuseplanner.cli.main", "--version"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == f"fuseplanner {__version__}"


def test_console_script_short_command_flushes_everything_before_its_fast_exit(capsys):
    """Run as the console script, a short command ends the process without the interpreter's teardown
    (`cli.main._exit_now`): all it wrote (here a --json plan piped to a file) arrives, with its exit code,
    and an error still exits 2 with its one line."""
    import subprocess
    import sys

    from fuseplanner.cli.main import main

    assert main(["plan", "mobilenet_v2", "--gpu", "h100", "--json", "-"]) == 0
    want = capsys.readouterr().out
    run = [sys.executable, "-c", "import sys; from fuseplanner.cli.main import main; sys.exit(main())"]
    proc = subprocess.run([*run, "plan", "mobilenet_v2", "--gpu", "h100", "--json", "-"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout == want and len(proc.stdout) > 10000
    proc = subprocess.run([*run, "plan", "no_such_model", "--gpu", "h100"], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("error: model file 'no_such_model' does not exist")
