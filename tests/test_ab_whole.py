"""scripts/ab_whole.py's old-op-module swap (the GPU comparison itself runs on a GPU only), on CPU."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from fuseplanner.run.ops import prepare, registry
from fuseplanner.run.ops.node import Node

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("ab_whole", ROOT / "scripts" / "ab_whole.py")
ab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ab)

OLD = '''
from fuseplanner.run.ops.registry import register


@register("GlobalAveragePool")
def old_pool(xp, node):
    def kernel(ins, outs):
        outs[0][...] = -1.0  # what the old module did: a marker
    return kernel
'''


def _gap() -> Node:
    import onnx

    proto = onnx.helper.make_node("GlobalAveragePool", ["x"], ["y"])
    return Node.from_onnx(proto, {"x": (1, 2, 3, 3), "y": (1, 2, 1, 1)}, {"x": "float32", "y": "float32"}, {}, 17)


def _run(node: Node) -> np.ndarray:
    out = np.full((1, 2, 1, 1), np.nan, dtype=np.float32)
    prepare(np, node)([np.ones((1, 2, 3, 3), dtype=np.float32)], [out])
    return out


def test_an_old_op_module_builds_while_it_is_swapped_in_and_the_registry_comes_back(tmp_path):
    old = tmp_path / "reduce.py"
    old.write_text(OLD)
    current = registry.BUILDERS["GlobalAveragePool"]
    inside = ab.with_old(old, lambda: _run(_gap()))
    assert (inside == -1.0).all()  # the old module's builder ran
    assert registry.BUILDERS["GlobalAveragePool"] is current and (_run(_gap()) == 1.0).all()


def test_the_registry_comes_back_when_the_build_fails(tmp_path):
    old = tmp_path / "reduce.py"
    old.write_text(OLD)
    before = dict(registry.BUILDERS)

    def fail():
        raise RuntimeError("compile failed")

    with pytest.raises(RuntimeError):
        ab.with_old_ops(old, fail)
    assert registry.BUILDERS == before


def test_both_builds_are_checked_against_one_onnxruntime_run(monkeypatch):
    import fuseplanner

    calls = []
    real = ab.reference_outputs
    monkeypatch.setattr(ab, "reference_outputs", lambda proto, x: calls.append(1) or real(proto, x))
    fused = fuseplanner.compile("mobilenet_v1", "h100", device="cpu")
    unfused = fuseplanner.compile("mobilenet_v1", "h100", device="cpu", fuse=False)
    checks = ab._checks("mobilenet_v1", (fused, unfused), 1)
    assert len(calls) == 1 and all(c.ok for c in checks) and len(checks) == 2
