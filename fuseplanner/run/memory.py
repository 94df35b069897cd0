"""Static memory plan: every activation tensor gets an offset in one arena, reused by liveness.

A pure function over sizes and lifetimes. A tensor is live from the step that writes it (`first`)
through the last step that reads it (`last`), both inclusive: a step reads its inputs while it writes
its outputs, so a step's output never shares bytes with its inputs. Tensors of a view step (Reshape,
Flatten, Squeeze, ...) alias the tensor they view (`alias_of`): the root buffer's lifetime is extended
over every alias. `pinned` tensors (graph inputs and outputs, and whatever they alias) get their own
bytes for the whole run. The others are placed greedily in execution order (by `first`), each at the
best-fitting gap between the blocks live at that step (the smallest gap that holds it, else on top);
offsets and sizes are rounded up to `ALIGNMENT` bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fuseplanner.core.errors import PlanError

#: Byte alignment of every buffer in the arena (covers 16-byte vector loads and cuBLAS's preference).
ALIGNMENT = 256


@dataclass(frozen=True)
class TensorLife:
    """One tensor to place: its bytes, the steps that write and last read it, what it views."""

    name: str
    nbytes: int
    first: int
    last: int
    alias_of: str | None = None
    pinned: bool = False


@dataclass(frozen=True)
class Block:
    """A placed buffer: [offset, offset + size) of the arena, live over steps [first, last]."""

    offset: int
    size: int
    first: int
    last: int
    pinned: bool = False

    @property
    def end(self) -> int:
        return self.offset + self.size

    def overlaps(self, other: Block) -> bool:
        """True when both are live at some step and share a byte."""
        live = self.first <= other.last and other.first <= self.last
        return live and self.offset < other.end and other.offset < self.end


@dataclass(frozen=True)
class MemoryPlan:
    """Where each tensor lives: `offsets[name]` into an arena of `arena_bytes`; `blocks[root]` per buffer;
    `root[name]` is the buffer a tensor views (itself for a tensor with its own buffer)."""

    offsets: Mapping[str, int]
    blocks: Mapping[str, Block]
    root: Mapping[str, str]
    arena_bytes: int

    def naive_bytes(self) -> int:
        """Bytes if every buffer had its own memory (what liveness reuse saves against)."""
        return sum(b.size for b in self.blocks.values())


def align(n: int, alignment: int = ALIGNMENT) -> int:
    """`n` rounded up to a multiple of `alignment`."""
    return -(-n // alignment) * alignment


def _roots(tensors: Sequence[TensorLife]) -> tuple[dict[str, str], dict[str, TensorLife]]:
    """Each tensor's root buffer, and each root with its lifetime and pinning merged over its aliases."""
    by_name = {t.name: t for t in tensors}
    root: dict[str, str] = {}
    for t in tensors:
        seen, cur = [], t
        while cur.alias_of is not None:
            if cur.name in seen or cur.alias_of not in by_name:
                raise PlanError(f"tensor {t.name!r} aliases {cur.alias_of!r}, which is unknown or a cycle")
            seen.append(cur.name)
            cur = by_name[cur.alias_of]
        root[t.name] = cur.name
    merged: dict[str, TensorLife] = {}
    for t in tensors:
        r = by_name[root[t.name]]
        m = merged.get(r.name, TensorLife(r.name, r.nbytes, r.first, r.last, None, r.pinned))
        if t.nbytes > m.nbytes:
            raise PlanError(f"view {t.name!r} ({t.nbytes} bytes) is larger than the buffer it views ({m.nbytes})")
        merged[r.name] = TensorLife(m.name, m.nbytes, min(m.first, t.first), max(m.last, t.last), None,
                                    m.pinned or t.pinned)  # fmt: skip
    return root, merged


def _best_gap(live: list[Block], size: int) -> int:
    """Offset of the smallest gap between `live` blocks (sorted by offset) that holds `size`, else the top."""
    best, best_len, cursor = None, None, 0
    for b in live:
        gap = b.offset - cursor
        if gap >= size and (best_len is None or gap < best_len):
            best, best_len = cursor, gap
        cursor = max(cursor, b.end)
    return cursor if best is None else best


def plan_memory(tensors: Sequence[TensorLife], alignment: int = ALIGNMENT) -> MemoryPlan:
    """Place every tensor (see the module docstring); raises PlanError for bad aliases or lifetimes."""
    for t in tensors:
        if t.nbytes < 0 or t.first > t.last:
            raise PlanError(f"tensor {t.name!r}: bad size {t.nbytes} or lifetime [{t.first}, {t.last}]")
    root, merged = _roots(tensors)
    blocks: dict[str, Block] = {}
    top = 0
    for r in (m for m in merged.values() if m.pinned):  # own bytes for the whole run
        blocks[r.name] = Block(top, align(max(r.nbytes, 1), alignment), r.first, r.last, True)
        top = blocks[r.name].end
    base = top
    placed: list[Block] = []
    for r in sorted((m for m in merged.values() if not m.pinned), key=lambda m: (m.first, -m.nbytes, m.name)):
        size = align(max(r.nbytes, 1), alignment)
        live = sorted((b for b in placed if b.last >= r.first), key=lambda b: b.offset)
        offset = base + _best_gap([Block(b.offset - base, b.size, b.first, b.last) for b in live], size)
        blocks[r.name] = Block(offset, size, r.first, r.last)
        placed.append(blocks[r.name])
        top = max(top, offset + size)
    offsets = {name: blocks[r].offset for name, r in root.items()}
    return MemoryPlan(offsets=offsets, blocks=blocks, root=root, arena_bytes=top)
