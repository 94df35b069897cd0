"""What every kernel family's tiles share: block sizes, the fp32 accumulator size, the halo window
of a tile, rounding to shared-memory alignment. The families (`fuseplanner.kernels.families`) build
on it; `fuseplanner.kernels.tiles` re-exports the public names."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from fuseplanner.core.ir import Op, Tile

#: Buffering depth of streamed chunks (input/weight chunks of PW-like loops).
STAGES = 2


#: fp32 accumulator/communication-buffer element size in bytes.
ACC_BYTES = 4


#: Threads-per-block choices.
THREADS = (64, 128, 256)


#: Shared-memory buffers of the fused kernels start on 128-byte boundaries.
SMEM_ALIGN = 128


def _last(ops: Sequence[Op]) -> Op:
    return ops[-1]


def _dw_of(kind: str, ops: Sequence[Op]) -> Op | None:
    """The depthwise member of a `kind` kernel over `ops`, or None."""
    i = _dw_index(kind)
    return ops[i] if i is not None and i < len(ops) else None


@lru_cache(maxsize=64)
def _dw_index(kind: str) -> int | None:
    parts = kind.split("_")
    return parts.index("dw") if "dw" in parts else None


def halo_window(kind: str, ops: Sequence[Op], tile: Tile) -> tuple[int, int]:
    """(rows, cols) of the input window a block reads for a th x tw output tile.

    For kinds with a DW member the window is the DW's receptive field (in the DW input, i.e. in the PW
    output for pw_dw / pw_dw_pw); for PW-only kinds it is the output tile itself (times the stride).
    """
    return _halo(kind, ops, tile.th, tile.tw)


def _halo(kind: str, ops: Sequence[Op], th: int, tw: int) -> tuple[int, int]:
    dw = _dw_of(kind, ops)
    if dw is None:
        sh, sw = ops[0].stride if ops[0].kind != "linear" else (1, 1)
        return ((th - 1) * sh + 1, (tw - 1) * sw + 1)
    (kh, kw), (sh, sw), (dh, dwl) = dw.kernel, dw.stride, dw.dilation
    return ((th - 1) * sh + (kh - 1) * dh + 1, (tw - 1) * sw + (kw - 1) * dwl + 1)


def _rup(a: int, b: int) -> int:
    return -(-a // b) * b


def _aligned(nbytes: int) -> int:
    """`nbytes` rounded up to a whole SMEM_ALIGN (where each shared-memory buffer starts)."""
    return _rup(nbytes, SMEM_ALIGN)


def out_channels(kind: str, ops: Sequence[Op]) -> int:
    return _last(ops).c_out
