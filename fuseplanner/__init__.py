"""fuseplanner: decide which depthwise and pointwise convolutions to fuse, with which tiles, on which GPU;
predict what that saves; and prove it on the hardware."""

from __future__ import annotations

__version__ = "0.1.0"

from .errors import DeviceError, FusePlannerError, ModelError, PlanError, SpecError, TileError
from .ir import Cost, ModelGraph, Op, TensorInfo, Tile

_LAZY = {
    "load_model": ("onnx_import", "load_model"),
    "gpu": ("specs", "gpu"),
    "GpuSpec": ("specs", "GpuSpec"),
    "plan": ("planner", "plan"),
    "Plan": ("plans", "Plan"),
    "compile": ("run.compiled", "compile"),
    "CompiledModel": ("run.compiled", "CompiledModel"),
}


def __getattr__(name: str):
    """Import the heavier parts (ONNX, planner) only when they are first used."""
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(f".{module}", __name__), attr)
    raise AttributeError(f"module 'fuseplanner' has no attribute {name!r}")


__all__ = [
    "load_model",
    "gpu",
    "GpuSpec",
    "plan",
    "Plan",
    "compile",
    "CompiledModel",
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
