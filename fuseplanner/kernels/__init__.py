"""Run a planned layer or fused group on CuPy arrays with a given tile.

    out = fuseplanner.kernels.run("pw_dw", ops, tile, x, params, dtype="fp16")

`kind` is a kernel kind (dw, pw, linear, pw_dw, dw_pw, pw_pw, pw_dw_pw), `ops` the member Op records
in execution order, `tile` an ir.Tile, `x` the input (NCHW, or (..., C) tokens for linear), `params`
one `(weight, bias)` pair of CuPy arrays per member op (weight in ONNX layout (C_out, C_in/groups,
kh, kw), or (C_out, C_in) for linear; float32 or the storage dtype; bias float32 or None; BN already
folded). The tile is checked with `tiles.check` first and refused with its reason (TileError).
See kernels/README.md for the ABI; each family's launcher, cost model and CUDA source sit in its
folder under `fuseplanner.kernels.families`. This package imports CuPy lazily: importing it never needs CuPy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fuseplanner.core.errors import PlanError, TileError
from fuseplanner.core.ir import Op, Tile
from fuseplanner.core.kinds import KERNEL_KINDS, KERNEL_MEMBERS
from fuseplanner.kernels import tiles
from fuseplanner.kernels._build import (
    compile_kernel,
    kernel_source,
    kernels_dir,
    launch,
    nvcc_report,
    require_device,
)
from fuseplanner.kernels._common import Launch, activation, device_props, device_spec
from fuseplanner.kernels.family import family

__all__ = [
    "Launch",
    "activation",
    "KERNEL_KINDS",
    "compile_kernel",
    "device_props",
    "device_spec",
    "kernel_source",
    "kernels_dir",
    "launch",
    "nvcc_report",
    "prepare",
    "require_device",
    "run",
    "check_tile",
]


def _members(kind: str) -> tuple[str, ...]:
    return KERNEL_MEMBERS[kind][0]


def check_tile(kind: str, ops: Sequence[Op], tile: Tile, dtype: str = "fp32", gpu=None,
               precision: str = "fp32") -> None:
    """Raise TileError with the cost model's reason when `tile` cannot run for this kernel on `gpu`
    (default: the current device) at `precision`."""
    family(kind)  # PlanError for an unknown kind
    if len(ops) != len(_members(kind)):
        raise PlanError(f"kernel kind {kind} takes {len(_members(kind))} ops, got {len(ops)}")
    if gpu is None:
        from fuseplanner.kernels._common import device_spec

        gpu = device_spec(require_device())
    reason = tiles.check(kind, ops, tile, dtype, gpu, precision)
    if reason is not None:
        raise TileError(reason)


def _with_batch(ops: Sequence[Op], kind: str, x) -> tuple[Op, ...]:
    """The ops with their batch set to the batch of `x` (so shapes and costs describe this run)."""
    if ops[0].channel_last:  # the linear kind, and pw_pw over linear ops
        from fuseplanner.kernels._common import linear_dims

        n = linear_dims(x.shape)[0] if len(x.shape) >= 3 else None
        return tuple(o.with_batch(n) if n is not None and len(o.in_shape) >= 3 else o for o in ops)
    return tuple(o.with_batch(int(x.shape[0])) for o in ops)


def prepare(kind: str, ops: Sequence[Op], tile: Tile, x, params, *, dtype: str = "fp32",
            precision: str = "fp32", residual=None, out=None, gpu=None) -> Callable:
    """Check the tile, compile the kernel and return a callable that launches it and returns `out`.

    Calling it again reruns the kernel on the same arrays (for timing).
    """
    require_device()
    ops = _with_batch(tuple(ops), kind, x)
    check_tile(kind, ops, tile, dtype, gpu, precision)
    if len(params) != len(ops):
        raise PlanError(f"params must hold one (weight, bias) pair per op: got {len(params)} for {len(ops)} ops")
    return family(kind).preparer(kind)(ops, tile, x, params, dtype=dtype, precision=precision, residual=residual, out=out)


def run(kind: str, ops: Sequence[Op], tile: Tile, x, params, *, dtype: str = "fp32",
        precision: str = "fp32", residual=None, out=None, gpu=None):
    """Run kernel `kind` over `ops` with `tile` on CuPy array `x`; returns the output array.

    Raises TileError (the `tiles.check` reason) before launch for an infeasible tile, DeviceError
    without CuPy or a CUDA device, PlanError for arrays that do not match the ops.
    """
    return prepare(kind, ops, tile, x, params, dtype=dtype, precision=precision, residual=residual,
                   out=out, gpu=gpu)()
