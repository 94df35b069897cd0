"""Broken model files for the bad-input tests: each case with the message fragment it must produce."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

MODELS = Path(__file__).resolve().parent.parent / "models"


def bad_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Write the broken files under `tmp_path`; case name -> (path, expected message fragment)."""
    src = (MODELS / "mobilenet_v2.onnx").read_bytes()
    files = {}
    (tmp_path / "dir").mkdir()
    files["missing"] = (tmp_path / "nope.onnx", "does not exist")
    files["directory"] = (tmp_path / "dir", "is a directory")
    (tmp_path / "empty.onnx").write_bytes(b"")
    files["empty"] = (tmp_path / "empty.onnx", "is empty")
    (tmp_path / "random.onnx").write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    files["random"] = (tmp_path / "random.onnx", "not an ONNX model")
    (tmp_path / "notes.onnx").write_text("name,shape\ninput,1x3x224x224\n" * 10)
    files["text"] = (tmp_path / "notes.onnx", "text file")
    (tmp_path / "cut.onnx").write_bytes(src[: len(src) // 2])
    files["truncated"] = (tmp_path / "cut.onnx", "truncated or corrupt")
    model = onnx.load(str(MODELS / "mobilenet_v2.onnx"), load_external_data=False)
    model.opset_import[0].version = 99
    (tmp_path / "opset.onnx").write_bytes(model.SerializeToString())
    files["opset"] = (tmp_path / "opset.onnx", "opset 99")
    model.opset_import[0].version = 18
    model.ir_version = 99
    (tmp_path / "ir.onnx").write_bytes(model.SerializeToString())
    files["ir"] = (tmp_path / "ir.onnx", "IR version 99")
    files["dynamic"] = (MODELS / "mobilenet_v1_converter_op11.onnx", "--input-shape input=")
    return files


BAD = ["missing", "directory", "empty", "random", "text", "truncated", "opset", "ir", "dynamic"]
