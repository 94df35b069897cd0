"""The command line shared by the scripts that re-read saved validation runs (scripts/saved_runs.py)."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import saved_runs  # noqa: E402

RUN = ROOT / "docs/validation/ncu-2026-11-24-s20/d/runs/efficientnet_b0-fp32-sweep/results.json"


def test_parse_returns_spec_and_paths():
    spec, paths = saved_runs.parse("doc", ["--gpu", "h100", str(RUN)])
    assert spec.name == "h100" and paths == [str(RUN)]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["docs/validation/nothing-*/results.json"],
            "no such results file: docs/validation/nothing-*/results.json",
        ),
        (["--gpu", "no_such_gpu", str(RUN)], "no_such_gpu"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        saved_runs.parse("doc", argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err.strip().splitlines()[-1] and "Traceback" not in err


def test_parse_with_adds_a_scripts_own_options():
    def options(ap):
        ap.add_argument("--kind", default="")

    spec, paths, args = saved_runs.parse_with("doc", ["--kind", "pw,dw", str(RUN)], options)
    assert spec.name == "h100" and paths == [str(RUN)] and args.kind == "pw,dw"


def test_read_split_parts_add_up_to_the_predicted_reads():
    import read_split

    from fuseplanner import specs

    rows = read_split.split(specs.gpu("h100"), str(RUN), {"pw"})
    assert rows and all(kind == "pw" for _, _, _, kind, *_ in rows)
    for ratio, _, _, _, _, act, wt in rows:
        # both parts are fractions of the same measured reads: together the predicted / measured ratio
        assert act > 0 and wt >= 0 and abs(act + wt - ratio) < 1e-9
    assert len(read_split.split(specs.gpu("h100"), str(RUN), set())) > len(rows)  # no filter: every kind
