"""`fuseplanner run` bad-input paths (one `error:` line, exit 2, nothing run) and a CPU run with --check."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import run_ops_standin as standin
from onnx import TensorProto, helper

from fuseplanner.cli.main import main
from fuseplanner.planning.search import plan
from fuseplanner.run import program


@pytest.fixture(autouse=True)
def _standin(monkeypatch):
    monkeypatch.setattr(program, "lib_module", lambda: standin)


def _err(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def test_unsupported_ops_named_with_counts(tmp_path, capsys):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    nodes = [helper.make_node("Softsign", ["x"], ["a"]), helper.make_node("Softsign", ["a"], ["b"]),
             helper.make_node("Celu", ["b"], ["y"])]  # fmt: skip
    path = tmp_path / "odd.onnx"
    onnx.save(helper.make_model(helper.make_graph(nodes, "odd", [x], [y])), path)
    assert main(["run", str(path), "--device", "cpu", "--gpu", "h100"]) == 2
    line = _err(capsys)
    assert "Celu (1 node)" in line and "Softsign (2 nodes)" in line


def test_missing_npy(capsys):
    assert main(["run", "mobilenet_v2", "--device", "cpu", "--input", "input=/nonexistent/x.npy"]) == 2
    assert "does not exist" in _err(capsys)


def test_plan_and_no_fuse_together(tmp_path, capsys):
    assert main(["run", "mobilenet_v2", "--device", "cpu", "--plan", "p.json", "--no-fuse"]) == 2
    assert "not both" in _err(capsys)


def test_plan_for_another_model(tmp_path, capsys):
    from fuseplanner import load_model

    path = tmp_path / "plan.json"
    path.write_text(plan(load_model("mobilenet_v1"), "h100", model="paper", workers=1).to_json())
    assert main(["run", "mobilenet_v2", "--device", "cpu", "--gpu", "h100", "--plan", str(path)]) == 2
    assert "made for model mobilenet_v1" in _err(capsys)
    assert main(["run", "mobilenet_v1", "--device", "cpu", "--gpu", "a100_80gb", "--plan", str(path)]) == 2
    assert "GPU" in _err(capsys)


def test_gpu_without_cupy_or_cuda(capsys):
    try:
        import cupy

        if cupy.cuda.is_available():
            pytest.skip("a CUDA device is visible here")
    except ImportError:
        pass
    assert main(["run", "mobilenet_v2", "--gpu", "h100"]) == 2
    line = _err(capsys)
    assert "CuPy" in line or "CUDA" in line


def test_cpu_run_with_check_and_output(tmp_path, capsys):
    from fuseplanner.frontend import zoo

    model = tmp_path / "tiny.onnx"
    onnx.save(zoo.mobilenet_v2(width=0.35, resolution=32, num_classes=10, bn=True), model)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out.npz"
    argv = ["run", str(model), "--device", "cpu", "--gpu", "h100", "--input", f"input={tmp_path / 'x.npy'}",
            "--output", str(out), "--check"]  # fmt: skip
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "check vs onnxruntime" in text and ": ok" in text
    assert np.load(out)["logits"].shape == (1, 10)


@pytest.fixture
def no_inference(monkeypatch):
    """Fail the test if any inference runs (the CPU model's step loop)."""
    from fuseplanner.run import runtime

    def boom(self):
        raise AssertionError("an inference ran despite bad input")

    monkeypatch.setattr(runtime.Bound, "run", boom)


def _tiny(tmp_path):
    from fuseplanner.frontend import zoo

    model = tmp_path / "tiny.onnx"
    onnx.save(zoo.mobilenet_v2(width=0.35, resolution=32, num_classes=10), model)
    return model


def _run_tiny(tmp_path, array, *extra) -> int:
    model = _tiny(tmp_path)
    np.save(tmp_path / "x.npy", array)
    argv = ["run", str(model), "--device", "cpu", "--gpu", "h100", "--input", f"input={tmp_path / 'x.npy'}",
            "--output", str(tmp_path / "out.npz"), *extra]  # fmt: skip
    return main(argv)


@pytest.mark.parametrize("shape,dtype,words", [
    ((1, 3, 33, 32), np.float32, ("shape (1, 3, 33, 32)", "(1, 3, 32, 32)")),
    ((3, 32, 32), np.float32, ("shape (3, 32, 32)",)),
    ((1, 3, 32, 32), np.float64, ("float64", "float32")),
    ((1, 3, 32, 32), np.int64, ("int64", "float32")),
])  # fmt: skip
def test_input_of_wrong_shape_or_dtype(tmp_path, capsys, no_inference, shape, dtype, words):
    assert _run_tiny(tmp_path, np.zeros(shape, dtype)) == 2
    line = _err(capsys)
    assert all(w in line for w in words), line
    assert not (tmp_path / "out.npz").exists()


def test_input_file_that_is_not_npy(tmp_path, capsys, no_inference):
    model = _tiny(tmp_path)
    (tmp_path / "x.npy").write_bytes(b"not an array")
    argv = ["run", str(model), "--device", "cpu", "--gpu", "h100", "--input", f"input={tmp_path / 'x.npy'}"]
    assert main(argv) == 2
    assert "cannot read" in _err(capsys)


def test_input_named_for_another_model(tmp_path, capsys, no_inference):
    np.save(tmp_path / "y.npy", np.zeros((1, 3, 32, 32), np.float32))
    argv = ["run", str(_tiny(tmp_path)), "--device", "cpu", "--gpu", "h100", "--input", f"image={tmp_path / 'y.npy'}"]
    assert main(argv) == 2
    assert "'image'" in _err(capsys)


@pytest.mark.parametrize("text,words", [(None, "does not exist"), ("{}", "not a fuseplanner plan"),
                                        ("garbage", "not a fuseplanner plan")])  # fmt: skip
def test_plan_file_missing_or_not_a_plan(tmp_path, capsys, text, words):
    path = tmp_path / "plan.json"
    if text is not None:
        path.write_text(text)
    assert main(["run", "mobilenet_v2", "--device", "cpu", "--gpu", "h100", "--plan", str(path)]) == 2
    assert words in _err(capsys)


def test_plan_for_another_dtype(tmp_path, capsys):
    from fuseplanner import load_model

    path = tmp_path / "plan.json"
    path.write_text(plan(load_model("mobilenet_v1"), "h100", model="paper", workers=1, dtype="fp16").to_json())
    assert main(["run", "mobilenet_v1", "--device", "cpu", "--gpu", "h100", "--plan", str(path)]) == 2
    assert "dtype fp16, not fp32" in _err(capsys)
