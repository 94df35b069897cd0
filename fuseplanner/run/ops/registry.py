"""The table of op builders: op type -> `builder(xp, node) -> kernel`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fuseplanner.run.ops.node import Node

#: kernel(inputs, outputs): reads the input arrays and writes every output array in place.
Kernel = Callable[[Sequence[Any], Sequence[Any]], None]
Builder = Callable[[Any, Node], Kernel]

BUILDERS: dict[str, Builder] = {}


def register(*op_types: str) -> Callable[[Builder], Builder]:
    """Decorator: `fn(xp, node) -> kernel` builds kernels for each of `op_types`."""

    def deco(fn: Builder) -> Builder:
        for op in op_types:
            BUILDERS[op] = fn
        return fn

    return deco


def is_numpy(xp: Any) -> bool:
    return getattr(xp, "__name__", "") == "numpy"
