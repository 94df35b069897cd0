"""Outputs of a compiled model against onnxruntime (CPU) on the same weights and inputs.

Metric: for each output, ||out - ref||_2 / ||ref||_2 over all its elements (float64), and the check's
error is the maximum over the outputs. Tolerances by math mode: exact fp32 1e-4, TF32 5e-3, fp16 2e-2.
The reference runs the materialized model (`compiled.onnx_model`: the very weights the executor uses,
generated ones included for structure-only models) with the same batch and input shapes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fuseplanner.core.errors import DeviceError

#: Relative L2 error allowed per output, by (dtype, precision).
TOLERANCES = {("fp32", "fp32"): 1e-4, ("fp32", "tf32"): 5e-3, ("fp16", "fp32"): 2e-2}


def tolerance(dtype: str, precision: str) -> float:
    return TOLERANCES[(dtype, "fp32" if dtype == "fp16" else precision)]


@dataclass(frozen=True)
class CheckResult:
    """Relative L2 error per output, the maximum (`error`), the tolerance and whether it is met."""

    errors: tuple[tuple[str, float], ...]
    error: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return bool(self.error <= self.tolerance)


def relative_error(out, ref) -> float:
    """||out - ref||_2 / ||ref||_2 in float64 (inf for a NaN or a shape mismatch; 0 when both are 0)."""
    a, b = np.asarray(out, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    if a.shape != b.shape or not np.all(np.isfinite(a)):
        return float("inf")
    den = float(np.linalg.norm(b))
    num = float(np.linalg.norm(a - b))
    return num / den if den else (0.0 if num == 0 else float("inf"))


def reference_outputs(proto, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """onnxruntime's outputs (CPU provider) of a full ModelProto on host `inputs`."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise DeviceError("onnxruntime is not installed: pip install onnxruntime to use --check") from None
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, inputs), strict=True))


def compare(outputs: dict, reference: dict, dtype: str, precision: str) -> CheckResult:
    """The check's result for executor `outputs` against `reference` outputs (same names)."""
    errors = tuple((name, relative_error(outputs[name], ref)) for name, ref in reference.items())
    return CheckResult(errors, max(e for _, e in errors), tolerance(dtype, precision))


def check(model, proto, inputs: dict[str, np.ndarray]) -> CheckResult:
    """Run compiled `model` and onnxruntime on `proto` (the same weights) with `inputs`; compare."""
    got = model(inputs)
    ref = reference_outputs(proto, inputs)
    return compare(got, ref, model.program.dtype, model.program.precision)
