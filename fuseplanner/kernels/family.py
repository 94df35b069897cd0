"""The kernel families and their one registry.

A family is everything one kind of kernel needs, behind `KernelFamily`: the tiles it searches and
their feasibility rules, its shared memory, its cost model class, its launcher and its CUDA source.
The registry maps every kernel kind of `core.kinds.KERNEL_KINDS` to its family; callers dispatch
through `family(kind)` instead of testing kind names. Adding a kernel kind touches its family's
folder (`fuseplanner/kernels/families/<family>/`), `core.kinds` and, for a new family, `FAMILIES`
below (docs/DESIGN.md, "Adding a kernel kind").

Registers per thread come from `kernels.registers`: a table per kind and math mode over each family's
`accumulators`. The float64 reference (`validation.reference.reference`) applies any kind's member ops
in order, so it needs no per-family entry.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Protocol

from fuseplanner.core.errors import PlanError
from fuseplanner.core.ir import Op, Tile
from fuseplanner.core.kinds import KERNEL_KINDS
from fuseplanner.kernels.families.dw import DW
from fuseplanner.kernels.families.fused import FUSED
from fuseplanner.kernels.families.pw import PW


class KernelFamily(Protocol):
    """What the planner, the cost model and the launchers need of one family of kernel kinds."""

    #: Family name, and the kernel kinds it runs.
    name: str
    kinds: tuple[str, ...]
    #: Fused groups (several member ops, weights packed and read by every block) or one layer.
    fused: bool
    #: Whether it runs tiles whose outputs do not split evenly over the threads (searched only for a
    #: layer with no even tile).
    uneven: bool

    def source(self, kind: str) -> tuple[str, str]:
        """(.cu file in the family's folder, kernel function name)."""
        ...

    def spatial_sizes(self, kind: str, ho: int, wo: int) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """(row tile options, column tiles) when not the NCHW map tiles; None for those."""
        ...

    def chunk_sizes(self, tf: int, tcs: Sequence[int]) -> Sequence[int]:
        """The reduction chunks (tc) searched with filter tile `tf`."""
        ...

    def tile_reason(self, kind: str, tile: Tile) -> str | None:
        """A rule of this family's tiles that `tile` breaks, or None."""
        ...

    def shape_reason(self, kind: str, ops: Sequence[Op]) -> str | None:
        """Why no tile of this family can run `ops`, or None."""
        ...

    def smem(self, kind: str, ops: Sequence[Op], th: int, tw: int, tf: int, tc: int, e: int) -> int:
        """Shared memory (bytes) of one block of tile (th, tw, tf, tc) for element size `e`."""
        ...

    def accumulators(self, kind: str, ops: Sequence[Op], tile: Tile, dtype: str, precision: str) -> float:
        """fp32 accumulators a thread holds at once: the slope variable of its row of the register
        table (`kernels.registers`)."""
        ...

    def splits(self, kind: str) -> bool:
        """Whether `kind` splits its reduction over a thread-block cluster (`tiles.cluster_split`)."""
        ...

    def split_fits(self, kind: str, ops: Sequence[Op], tile: Tile, dtype: str) -> bool:
        """Whether this layer and tile may split at all (the family's own limits)."""
        ...

    def pipeline_depth(self, kind: str, ops: Sequence[Op], tile: Tile, dtype: str) -> int:
        """Chunk loads a block keeps in flight."""
        ...

    def output_rows(self, kind: str, tile: Tile) -> int:
        """Output rows a thread item stores one after another."""
        ...

    def store_key(self, kind: str, tile: Tile) -> int:
        """What besides th, tw, tf and tc sets how a tile stores its outputs."""
        ...

    def cost_model(self, kind: str) -> type:
        """The `costbase.work.KernelModel` subclass of `kind`."""
        ...

    def preparer(self, kind: str) -> Callable:
        """The launcher: (ops, tile, x, params, *, dtype, precision, residual, out) -> a callable."""
        ...


#: Every family, registered once.
FAMILIES: tuple[KernelFamily, ...] = (DW, PW, FUSED)
_BY_KIND: dict[str, KernelFamily] = {kind: f for f in FAMILIES for kind in f.kinds}


def family(kind: str) -> KernelFamily:
    """The family of kernel kind `kind` (PlanError for an unknown kind)."""
    try:
        return _BY_KIND[kind]
    except KeyError:
        raise PlanError(f"unknown kernel kind {kind!r}: use one of {', '.join(KERNEL_KINDS)}") from None


def kinds_where(flag: Callable[[KernelFamily, str], bool]) -> tuple[str, ...]:
    """The kernel kinds (in `KERNEL_KINDS` order) whose family and kind satisfy `flag`."""
    return tuple(k for k in KERNEL_KINDS if flag(_BY_KIND[k], k))


@functools.cache
def cost_model(kind: str) -> type:
    """The `costbase.work.KernelModel` subclass of kernel kind `kind` (its family's `cost_model`),
    looked up once (PlanError for an unknown kind)."""
    return family(kind).cost_model(kind)
