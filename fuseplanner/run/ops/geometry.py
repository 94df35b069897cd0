"""Sliding-window geometry shared by Conv, ConvTranspose and the pools: pads (explicit or auto_pad),
padded input extents, per-tap strided slices and the im2col gather index."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fuseplanner.run.ops.node import Node


@dataclass(frozen=True)
class Window:
    """A window over the spatial axes: kernel, strides, dilations, leading pads, padded extent, output."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    begin: tuple[int, ...]
    end: tuple[int, ...]
    extent: tuple[int, ...]
    inner: tuple[int, ...]
    out: tuple[int, ...]

    @property
    def taps(self) -> list[tuple[int, ...]]:
        return list(itertools.product(*(range(k) for k in self.kernel)))

    @property
    def unpadded(self) -> bool:
        return self.extent == self.inner and not any(self.begin)

    def tap_slices(self, tap: tuple[int, ...]) -> tuple[slice, ...]:
        """Slices of the padded input's spatial axes that tap `tap` reads for every output position."""
        return tuple(slice(t * d, t * d + (o - 1) * s + 1, s)
                     for t, d, o, s in zip(tap, self.dilations, self.out, self.strides, strict=True))

    def gather_index(self) -> np.ndarray:
        """(taps, outputs) flat offsets into the padded spatial plane: the im2col gather."""
        strides = np.cumprod((1, *self.extent[::-1]))[-2::-1]
        grids = np.meshgrid(*(np.arange(o) * s for o, s in zip(self.out, self.strides, strict=True)),
                            indexing="ij")
        base = sum(g.reshape(-1) * st for g, st in zip(grids, strides, strict=True))
        taps = np.array([sum(t * d * st for t, d, st in zip(tap, self.dilations, strides, strict=True))
                         for tap in self.taps])
        return (taps[:, None] + base[None, :]).astype(np.int64)


def _explicit_pads(node: Node, rank: int) -> tuple[list[int], list[int]]:
    pads = [int(p) for p in node.attr("pads", [0] * (2 * rank))]
    if len(pads) != 2 * rank or any(p < 0 for p in pads):
        raise node.error(f"pads {pads} must be {2 * rank} non-negative values")
    return pads[:rank], pads[rank:]


def window(node: Node, kernel: tuple[int, ...], inner: tuple[int, ...], out: tuple[int, ...]) -> Window:
    """The window of a Conv/pool node from its attributes and its static input/output spatial shapes."""
    rank = len(kernel)
    strides = tuple(int(s) for s in node.attr("strides", [1] * rank))
    dilations = tuple(int(d) for d in node.attr("dilations", [1] * rank))
    auto_pad = node.attr("auto_pad", "NOTSET")
    if len(strides) != rank or len(dilations) != rank or min(strides + dilations, default=1) < 1:
        raise node.error(f"strides {strides} / dilations {dilations} must be {rank} positive values")
    if auto_pad in ("NOTSET", ""):
        begin, end = _explicit_pads(node, rank)
    elif auto_pad == "VALID":
        begin, end = [0] * rank, [0] * rank
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        total = [max((o - 1) * s + (k - 1) * d + 1 - i, 0)
                 for o, s, k, d, i in zip(out, strides, kernel, dilations, inner, strict=True)]
        small = [t // 2 for t in total]
        begin = small if auto_pad == "SAME_UPPER" else [t - h for t, h in zip(total, small, strict=True)]
        end = [t - b for t, b in zip(total, begin, strict=True)]
    else:
        raise node.error(f"auto_pad={auto_pad!r} is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID")
    extent = tuple(max(b + i + e, (o - 1) * s + (k - 1) * d + 1)
                   for b, i, e, o, s, k, d in zip(begin, inner, end, out, strides, kernel, dilations, strict=True))
    return Window(tuple(kernel), strides, dilations, tuple(begin), tuple(end), extent, tuple(inner), tuple(out))


def padded(xp: Any, x: Any, win: Window, fill: Any, dtype: Any = None) -> Any:
    """`x` (N, C, *inner) placed at `win.begin` in a (N, C, *extent) array filled with `fill`."""
    if win.unpadded and (dtype is None or x.dtype == dtype):
        return x
    buf = xp.full(x.shape[:2] + win.extent, fill, dtype=dtype or x.dtype)
    inside = tuple(slice(b, b + i) for b, i in zip(win.begin, win.inner, strict=True))
    buf[(slice(None), slice(None)) + inside] = x
    return buf


def tap_count(win: Window, include_pad: bool) -> np.ndarray:
    """Per output position, how many taps fall in the input (or in input plus pads, `include_pad`)."""
    mask = np.zeros(win.extent, dtype=np.float32)
    lo = tuple(slice(0, b + i + e) if include_pad else slice(b, b + i)
               for b, i, e in zip(win.begin, win.inner, win.end, strict=True))
    mask[lo] = 1.0
    count = np.zeros(win.out, dtype=np.float32)
    for tap in win.taps:
        count += mask[win.tap_slices(tap)]
    return count


def numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)
