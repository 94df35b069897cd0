"""Launcher helpers shared by every family's launcher: defines, array checks, outputs, `Launch`.

Everything here takes CuPy arrays but imports CuPy only through `_build.require_device`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from fuseplanner.core.errors import PlanError
from fuseplanner.core.ir import Op, dtype_bytes
from fuseplanner.core.kinds import PRECISIONS
from fuseplanner.kernels import _build

#: ACT define values (kernels/common.cuh) by canonical epilogue name.
ACT_CODES = {
    "relu": 1,
    "relu6": 2,
    "hardswish": 3,
    "hardsigmoid": 4,
    "sigmoid": 5,
    "silu": 6,
    "gelu": 7,
    "leakyrelu": 8,
}
#: Epilogue names the launcher handles without an ACT code: folded into params, or the residual.
PASSIVE_EPILOGUES = frozenset({"bias", "bn", "add"})
#: NumPy/CuPy dtype names of the storage dtypes.
NP_DTYPES = {"fp32": "float32", "fp16": "float16"}


def activation(op: Op) -> str | None:
    """The single activation in `op.epilogue`, or None; raises PlanError for unsupported ones."""
    acts = [e for e in op.epilogue if e not in PASSIVE_EPILOGUES]
    for a in acts:
        if a not in ACT_CODES:
            raise PlanError(
                f"op {op.name}: epilogue {a!r} has no kernel implementation (supported: {', '.join(ACT_CODES)})"
            )
    if len(acts) > 1:
        raise PlanError(f"op {op.name}: more than one activation in its epilogue {acts}: split the op")
    return acts[0] if acts else None


def epilogue_defines(op: Op, has_bias: bool, has_residual: bool, suffix: str = "") -> dict[str, int]:
    """ACT/HAS_BIAS/HAS_RES defines for one op's epilogue; `suffix` names a member of a fused kernel
    (e.g. suffix "1" gives ACT1, HAS_BIAS1, HAS_RES1)."""
    act = activation(op)
    return {
        f"ACT{suffix}": ACT_CODES[act] if act else 0,
        f"HAS_BIAS{suffix}": int(has_bias),
        f"HAS_RES{suffix}": int(has_residual),
    }


def dtype_defines(dtype: str) -> dict[str, int]:
    """T_HALF define for the storage dtype."""
    if dtype not in NP_DTYPES:
        raise PlanError(f"unknown dtype {dtype!r}: use fp32 or fp16")
    return {"T_HALF": int(dtype == "fp16")}


def check_precision(dtype: str, precision: str) -> None:
    if precision not in PRECISIONS:
        raise PlanError(f"unknown precision {precision!r}: use fp32 (exact) or tf32")
    if dtype == "fp16" and precision == "tf32":
        raise PlanError("precision tf32 applies to fp32 storage only: use precision fp32 with fp16")


def check_array(cp, a, shape: Sequence[int], dtype: str, what: str):
    """`a` as a C-contiguous CuPy array of `shape` and storage `dtype`, or PlanError."""
    if not isinstance(a, cp.ndarray):
        raise PlanError(f"{what} must be a cupy.ndarray, got {type(a).__name__}")
    if tuple(a.shape) != tuple(shape):
        raise PlanError(f"{what} has shape {tuple(a.shape)}, the op expects {tuple(shape)}")
    if a.dtype != cp.dtype(NP_DTYPES[dtype]):
        raise PlanError(f"{what} is {a.dtype}, expected {NP_DTYPES[dtype]} for dtype {dtype}")
    return cp.ascontiguousarray(a)


def weight_as(cp, w, shape: Sequence[int], dtype: str | None, what: str):
    """Weight `w` reshaped to `shape` (same element count), contiguous, cast to storage `dtype`
    (None keeps float32). No copy when it already matches."""
    if not isinstance(w, cp.ndarray):
        raise PlanError(f"{what} must be a cupy.ndarray, got {type(w).__name__}")
    n = 1
    for s in shape:
        n *= s
    if w.size != n:
        raise PlanError(f"{what} has {w.size} elements (shape {tuple(w.shape)}), expected {tuple(shape)}")
    target = cp.dtype(NP_DTYPES[dtype] if dtype else "float32")
    return cp.ascontiguousarray(w.reshape(shape).astype(target, copy=False))


def bias_as(cp, b, channels: int, what: str):
    """Per-channel float32 bias, or None."""
    if b is None:
        return None
    if not isinstance(b, cp.ndarray) or b.size != channels:
        raise PlanError(f"{what} must be a cupy.ndarray of {channels} values")
    return cp.ascontiguousarray(b.reshape(channels).astype(cp.float32, copy=False))


def output_array(cp, out, shape: Sequence[int], dtype: str):
    """`out` checked (C-contiguous, shape, dtype) or a new empty array."""
    if out is None:
        return cp.empty(tuple(shape), dtype=NP_DTYPES[dtype])
    if not isinstance(out, cp.ndarray) or not out.flags.c_contiguous:
        raise PlanError("out must be a C-contiguous cupy.ndarray")
    return check_array(cp, out, shape, dtype, "out")


def conv_out_hw(op: Op, h: int, w: int) -> tuple[int, int]:
    """Output (H, W) of a convolution op on an h x w input."""
    (kh, kw), (sh, sw), (dh, dw_) = op.kernel, op.stride, op.dilation
    pt, pl, pb, pr = op.pads
    return ((h + pt + pb - dh * (kh - 1) - 1) // sh + 1, (w + pl + pr - dw_ * (kw - 1) - 1) // sw + 1)


def linear_dims(shape: Sequence[int]) -> tuple[int, int, int]:
    """(sequences, tokens per sequence, channels) of a channel-last token tensor."""
    if len(shape) >= 3:
        tokens = 1
        for s in shape[1:-1]:
            tokens *= s
        return shape[0], tokens, shape[-1]
    if len(shape) == 2:
        return 1, shape[0], shape[1]
    raise PlanError(f"linear input must have at least 2 dimensions, got shape {tuple(shape)}")


def null_ptr(cp):
    """A 0-d placeholder for absent pointer arguments (never read by the kernel)."""
    return _null(cp)


@functools.lru_cache(maxsize=1)
def _null(cp):
    return cp.zeros(1, dtype=cp.float32)


def device_spec(cp):
    """The GpuSpec of the current device: `fuseplanner.hw.spec.detect()` when available, else the fields
    tiles.check needs read off the device properties."""
    try:
        from fuseplanner.hw import spec as specs

        return specs.detect()
    except (ImportError, AttributeError):
        return _props_spec(cp.cuda.runtime.getDevice())


@functools.lru_cache(maxsize=8)
def _props_spec(device: int) -> SimpleNamespace:
    import cupy

    p = cupy.cuda.runtime.getDeviceProperties(device)
    name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
    return SimpleNamespace(
        name=name,
        smem_per_block_bytes=int(p.get("sharedMemPerBlockOptin", p["sharedMemPerBlock"])),
        max_threads_per_block=int(p["maxThreadsPerBlock"]),
        regs_per_sm=int(p["regsPerMultiprocessor"]),
        sm_count=int(p["multiProcessorCount"]),
        compute_capability=f"{p['major']}.{p['minor']}",
    )


def device_props(cp) -> SimpleNamespace:
    """The current device's own limits (name, SM count, compute capability, ...), read off its
    properties: what a launch must respect, whatever spec the plan was made for."""
    return _props_spec(cp.cuda.runtime.getDevice())


@dataclass
class Launch:
    """One prepared kernel launch; calling it runs the kernel (asynchronously) and returns `out`."""

    kernel: object
    grid: tuple[int, int, int]
    block: int
    smem: int
    args: tuple
    out: object
    defines: dict = field(default_factory=dict)
    keep: tuple = ()  # arrays the arguments point into (kept alive with the launch)

    def __call__(self):
        _build.launch(self.kernel, self.grid, self.block, self.smem, self.args)
        return self.out

    def resources(self) -> dict[str, int]:
        """The launch's shape and what the compiler gave its kernel (`_build.kernel_attributes`):
        blocks, threads per block, dynamic shared memory, cluster size (1 without clusters)."""
        blocks = self.grid[0] * self.grid[1] * self.grid[2]
        return {"blocks": blocks, "threads": self.block, "smem_bytes": self.smem,
                "cluster": int(self.defines.get("KS", 1)), **_build.kernel_attributes(self.kernel)}  # fmt: skip


def i32(*vals: int) -> tuple:
    return tuple(np.int32(v) for v in vals)


def vector_elems(ptr: int, dtype: str, ok) -> int:
    """Largest vector width (elements, 16/8/4 bytes) that `ok(width)` accepts and `ptr` is aligned to."""
    e = dtype_bytes(dtype)
    for nbytes in (16, 8, 4):
        u = nbytes // e
        if u >= 1 and ptr % nbytes == 0 and ok(u):
            return u
    return 0
