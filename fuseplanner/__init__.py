"""fuseplanner: decide which depthwise and pointwise convolutions to fuse, with which tiles, on which GPU;
predict what that saves; and prove it on the hardware."""

from __future__ import annotations

__version__ = "0.1.0"

from fuseplanner.core.errors import DeviceError, FusePlannerError, ModelError, PlanError, SpecError, TileError
from fuseplanner.core.ir import Cost, ModelGraph, Op, TensorInfo, Tile

_LAZY = {
    "load_model": ("fuseplanner.frontend.load", "load_model"),
    "gpu": ("fuseplanner.hw.spec", "gpu"),
    "GpuSpec": ("fuseplanner.hw.spec", "GpuSpec"),
    "plan": ("fuseplanner.planning.search", "plan"),
    "Plan": ("fuseplanner.planning.result", "Plan"),
    "predict_whole": ("fuseplanner.planning.whole", "predict_whole"),
    "compile": ("fuseplanner.run.compiled", "compile"),
    "CompiledModel": ("fuseplanner.run.compiled", "CompiledModel"),
    "tune": ("fuseplanner.validation.tune", "tune_model"),
}


def __getattr__(name: str):
    """Import the heavier parts (ONNX, planner) only when they are first used."""
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'fuseplanner' has no attribute {name!r}")


__all__ = [
    "load_model",
    "gpu",
    "GpuSpec",
    "plan",
    "Plan",
    "predict_whole",
    "compile",
    "CompiledModel",
    "tune",
    "__version__",
    "Cost",
    "DeviceError",
    "FusePlannerError",
    "ModelError",
    "ModelGraph",
    "Op",
    "PlanError",
    "SpecError",
    "TensorInfo",
    "Tile",
    "TileError",
]
