"""`fuseplanner plan` and `fuseplanner compare`: outputs, pure JSON, --onnx checker, bad options."""

from __future__ import annotations

import json

import fakes
import graphs as G
import onnx
import pytest

from fuseplanner.cli.main import main
from fuseplanner.hw import spec as specs
from fuseplanner.planning import search as planner
from fuseplanner.planning.export import check_onnx
from fuseplanner.planning.result import Plan


@pytest.fixture(autouse=True)
def bytes_model(monkeypatch):
    monkeypatch.setattr(planner, "_cost_functions", lambda: (fakes.bytes_estimate, fakes.bytes_estimate_op))


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "blocks.onnx"
    onnx.save_model(G.onnx_blocks(), str(path))
    return str(path)


def _run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_plan_prints_table_and_summary(capsys, model_file):
    rc, out, err = _run(capsys, "plan", model_file, "--gpu", "h100")
    assert rc == 0, err
    assert "Fused groups (2)" in out
    assert "pw_dw_pw" in out
    out = out.replace("\n", " ")
    assert "blocks on h100 (fp32, batch 1, objective time decided in the graph context): 2 fused groups covering 6 layers" in out


def test_json_stdout_is_pure_json(capsys, model_file):
    rc, out, err = _run(capsys, "plan", model_file, "--gpu", "a100_80gb", "--json", "-", "--objective", "dram", "--dtype", "fp16")
    assert rc == 0, err
    p = Plan.from_json(out)
    assert (p.gpu, p.objective, p.dtype) == ("a100_80gb", "dram", "fp16")
    assert json.loads(out)["groups"][0]["nodes"] == ["b0.pw1", "b0.dw", "b0.pw2"]


def test_default_gpu_is_h100_with_a_note(capsys, model_file, monkeypatch):
    monkeypatch.setattr(specs, "detect", lambda: None)
    rc, out, err = _run(capsys, "plan", model_file, "--json", "-")
    assert rc == 0
    assert json.loads(out)["gpu"] == "h100"
    assert "no CUDA GPU detected" in err and "h100" in err


def test_files_are_written_and_onnx_passes_the_checker(capsys, model_file, tmp_path):
    j, m, o = tmp_path / "p.json", tmp_path / "p.md", tmp_path / "p.onnx"
    rc, out, err = _run(capsys, "plan", model_file, "--gpu", "h100", "--json", str(j), "--markdown", str(m), "--onnx", str(o))
    assert rc == 0, err
    p = Plan.from_json(j.read_text())
    assert m.read_text().startswith("# Fusion plan: blocks on h100")
    model = onnx.load(str(o))
    onnx.checker.check_model(model)
    assert sum(n.op_type == "FusedConv" for n in model.graph.node) == len(p.groups) == 2
    assert f"wrote rewritten ONNX to {o}" in out


def test_bundled_structure_only_model_onnx(capsys, tmp_path):
    o = tmp_path / "v2.onnx"
    rc, out, err = _run(capsys, "plan", "mobilenet_v2_legacy_op17", "--gpu", "h100", "--onnx", str(o), "--kinds", "pw_dw,dw_pw")
    assert rc == 0, err
    model = onnx.load(str(o), load_external_data=False)
    check_onnx(model, tmp_path)
    assert any(n.op_type == "FusedConv" for n in model.graph.node)
    kinds = {a.s.decode() for n in model.graph.node if n.op_type == "FusedConv" for a in n.attribute if a.name == "kind"}
    assert kinds <= {"pw_dw", "dw_pw"}


def test_schema(capsys):
    rc, out, _ = _run(capsys, "plan", "--schema")
    assert rc == 0
    s = json.loads(out)
    assert s["title"] == "Plan" and "groups" in s["properties"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--dtype", "int8"], "invalid choice"),
        (["--objective", "speed"], "invalid choice"),
        (["--kinds", "pw_dw,dw_dw"], "dw_dw"),
        (["--batch", "0"], "positive integer"),
        (["--model", "mine"], "invalid choice"),
        (["--precision", "fp64"], "invalid choice"),
        (["--gpu", "no_such_gpu"], "no_such_gpu"),
        (["--input-shape", "x=1xAx8"], "input-shape"),
        (["--precision", "tf32", "--dtype", "fp16"], "tf32"),
    ],
)
def test_bad_options_exit_2_with_error_line(capsys, model_file, tmp_path, argv, message):
    j = tmp_path / "p.json"
    rc = None
    try:
        rc, out, err = _run(capsys, "plan", model_file, "--json", str(j), *argv)
    except SystemExit as exc:  # argparse errors
        rc = exc.code
        out, err = capsys.readouterr()
    assert rc == 2
    assert err.startswith("error:") and message in err
    assert err.count("\n") == 1
    assert not j.exists()


def test_missing_model_and_bad_paths(capsys, model_file, tmp_path):
    rc, _, err = _run(capsys, "plan", str(tmp_path / "nope.onnx"))
    assert rc == 2 and err.startswith("error:") and "does not exist" in err
    md = tmp_path / "r.md"
    rc, _, err = _run(capsys, "plan", model_file, "--gpu", "h100", "--markdown", str(md), "--onnx", str(tmp_path / "no" / "x.onnx"))
    assert rc == 2 and "does not exist" in err
    assert not md.exists()  # nothing written when any output is refused
    rc, _, err = _run(capsys, "plan")
    assert rc == 2 and "MODEL" in err


def test_not_an_onnx_file(capsys, tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_text("hello, I am text")
    rc, _, err = _run(capsys, "plan", str(bad), "--gpu", "h100")
    assert rc == 2 and err.startswith("error:")


def test_compare_side_by_side(capsys, model_file):
    rc, out, err = _run(capsys, "compare", model_file, "--gpus", "h100,orin,gtx1660")
    assert rc == 0, err
    for name in ("h100", "orin", "gtx1660"):
        assert name in out
    rc, out, err = _run(capsys, "compare", model_file, "--gpus", "h100,orin", "--json", "-")
    assert rc == 0, err
    d = json.loads(out)
    assert d["gpus"] == ["h100", "orin"]
    assert set(d["savings"]["orin"]) == {"time", "gma", "dram"}
    assert [Plan.model_validate(p).gpu for p in d["plans"]] == ["h100", "orin"]


def test_compare_bad_gpu(capsys, model_file):
    rc, _, err = _run(capsys, "compare", model_file, "--gpus", "h100,nope")
    assert rc == 2 and err.startswith("error:") and "nope" in err


def test_real_cost_model_end_to_end(capsys, model_file, tmp_path, monkeypatch):
    monkeypatch.undo()  # the real cost model, not the stand-in
    o = tmp_path / "real.onnx"
    rc, out, err = _run(capsys, "plan", model_file, "--gpu", "h100", "--json", "-", "--onnx", str(o))
    assert rc == 0, err
    p = Plan.from_json(out)
    assert p.totals.planned.time_s <= p.totals.unfused.time_s
    onnx.checker.check_model(onnx.load(str(o)))
    assert sum(n.op_type == "FusedConv" for n in onnx.load(str(o)).graph.node) == len(p.groups)
