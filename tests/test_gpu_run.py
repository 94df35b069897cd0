"""scripts/gpu_run.py, the one GPU-machine script: task parsing, the steps each task runs, progress,
the summary and the archive (CPU: the steps run here are plain Python commands)."""

from __future__ import annotations

import json
import sys
import tarfile
from pathlib import Path

import pytest
from script_module import load

ROOT = Path(__file__).resolve().parents[1]


gr = load(ROOT / "scripts" / "gpu_run.py")


def test_fields_split_into_positionals_and_options():
    assert gr.split_fields("validate:m:fp16:planned:batch=8:no-ncu") == (
        "validate", ["m", "fp16", "planned", "no-ncu"], {"batch": "8"})


def test_validate_uses_an_earlier_calibration_and_passes_options(tmp_path):
    cal, val, plain = gr.parse_tasks(["calibrate", "validate:mobilenet_v2:fp16:planned:batch=8:no-ncu",
                                      "validate:mnasnet1_0:fp32:sweep:gpu=h100"], tmp_path)  # fmt: skip
    (step,) = val.steps
    argv = list(step.argv)
    assert argv[argv.index("--dtype") + 1] == "fp16" and argv[argv.index("--batch") + 1] == "8" and "--no-ncu" in argv
    assert argv[argv.index("--gpu") + 1] == "auto" and argv[argv.index("--out") + 1].startswith(val.folder)
    assert step.optional == ("--calibrate", f"{cal.folder}/calibrated.toml")
    argv = list(plain.steps[0].argv)
    assert argv.count("--gpu") == 1 and argv[argv.index("--gpu") + 1] == "h100"
    # a validate without an earlier calibrate has none
    assert gr.parse_tasks(["validate:m:fp32:planned"], tmp_path)[0].steps[0].optional is None


def test_each_wrappers_work_is_a_task(tmp_path):
    tasks = gr.parse_tasks(["tests", "kernels:only=pw_960_320:batches=1", "pairs:pw_dw", "ab:fuseplanner/kernels/families/pw/pw.cu:old.cu",
                            "plans:mobilenet_v2:fp32:8:specs=h100,b.toml", "ncu-fused:dw_pw:b7:1:fp32:2x4/f32/c64/t256",
                            "probe-reads", "probe-copy:once:cg:16", "placement:blocks=132", "plan-speed"], tmp_path)  # fmt: skip
    byname = {t.spec.split(":")[0]: t for t in tasks}
    assert "tests/gpu" in byname["tests"].steps[0].argv
    kernels = list(byname["kernels"].steps[0].argv)
    assert kernels[kernels.index("--only") + 1] == "pw_960_320" and kernels[kernels.index("--batches") + 1] == "1"
    assert byname["pairs"].steps[0].argv[-2:] == ("--kinds", "pw_dw")
    # ab: copy the tree, old then new benchmark of the model's tile only, compare, clean up
    ab = byname["ab"].steps
    assert [s.label for s in ab][-2:] == ["compare", "remove the copied tree"] and "--candidates" in ab[2].argv
    assert ab[2].argv[ab[2].argv.index("--candidates") + 1] == "0"
    plans = byname["plans"].steps
    assert [s.argv[s.argv.index("--gpu") + 1] for s in plans[:2]] == ["h100", "b.toml"] and plans[2].fn is not None
    # the config keeps its own colons
    assert byname["ncu-fused"].steps[0].argv[-1] == "dw_pw:b7:1:fp32:2x4/f32/c64/t256"
    assert byname["ncu-fused"].steps[1].argv[0] == "ncu"
    assert byname["placement"].steps[0].argv[-2:] == ("--blocks", "132")
    assert len({t.folder for t in tasks}) == len(tasks)  # one folder each


@pytest.mark.parametrize(("tasks", "message"), [
    (["nope"], "unknown task 'nope'"),
    (["validate:mobilenet_v2"], "validate takes MODEL:DTYPE:TILES"),
    (["ab:fuseplanner/kernels/families/pw/pw.cu"], "ab takes TARGET:OLD"),
    (["ab:kernels/pw.cu:old.cu"], "ab: TARGET kernels/pw.cu is not a file of this tree"),
    (["ncu-fused"], "ncu-fused takes CONFIG"),
    ([], "give at least one task"),
])  # fmt: skip
def test_bad_tasks_are_one_error_line_and_exit_2(tasks, message, tmp_path, capsys):
    assert gr.main([str(tmp_path), *tasks]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]
    assert not (tmp_path / "gpu_run").exists()


def test_steps_run_with_progress_summary_and_archive(tmp_path, capsys):
    run_dir = tmp_path / "r"
    ok = gr.Step("hello", (sys.executable, "-c", "print('hello from a step')"))
    bad = gr.Step("fails", (sys.executable, "-c", "import sys; sys.exit(3)"))
    late = gr.Step("slow", (sys.executable, "-c", "import time; time.sleep(5)"), timeout=1)
    tasks = [gr.Task("one", str(run_dir / "01-one"), (ok, bad)), gr.Task("two", str(run_dir / "02-two"), (late,))]
    run_dir.mkdir()
    rows = gr.run_tasks(tasks, run_dir, tmp_path / "r.tar.gz", {})
    assert [(r["task"], r["exit"]) for r in rows] == [("one", 0), ("one", 3), ("two", 124)]  # a failure does not stop the rest
    out = capsys.readouterr().out
    assert "[1/2] one: hello: exit 0" in out and "hello from a step" in out and "[2/2] two: slow: exit 124" in out
    assert json.loads((run_dir / "summary.json").read_text()) == rows
    assert "| two | slow | 124 |" in (run_dir / "summary.md").read_text()
    with tarfile.open(tmp_path / "r.tar.gz") as tar:
        names = tar.getnames()
    assert {"r/summary.md", "r/01-one/step1.log", "r/02-two/step1.log"} <= set(names)


def test_old_tree_replaces_a_file_or_lays_a_folder_over(tmp_path):
    root = tmp_path / "root"
    src = root / "fuseplanner" / "kernels" / "families" / "pw"
    src.mkdir(parents=True)
    (src / "pw.cu").write_text("new")
    (root / "fuseplanner" / "a.py").write_text("new")
    old = tmp_path / "pw_old.cu"
    old.write_text("old")
    gr.make_old_tree(root, tmp_path / "t1", gr.AB_EXAMPLE, old)
    assert (tmp_path / "t1" / gr.AB_EXAMPLE).read_text() == "old"
    over = tmp_path / "over"
    (over / "fuseplanner").mkdir(parents=True)
    (over / "fuseplanner" / "a.py").write_text("old")
    gr.make_old_tree(root, tmp_path / "t2", gr.AB_EXAMPLE, over)
    assert (tmp_path / "t2" / "fuseplanner" / "a.py").read_text() == "old"
    assert (tmp_path / "t2" / gr.AB_EXAMPLE).read_text() == "new"


def test_dry_run_prints_the_commands_and_runs_nothing(tmp_path, capsys):
    assert gr.main([str(tmp_path), "--dry-run", "calibrate", "validate:mobilenet_v2:fp32:planned"]) == 0
    out = capsys.readouterr().out
    assert "calibrate --gpu auto" in out and "[--calibrate" in out
    assert not (tmp_path / "gpu_run").exists()
