"""Plain-text tables: what an analysis shows, independent of how it is printed (rich or markdown)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Table:
    """A titled table of strings. `numeric` marks the columns printed right-aligned; `note` is a line
    of text shown under the table."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    numeric: tuple[bool, ...] = ()
    note: str = ""

    def __post_init__(self) -> None:
        for row in self.rows:
            if len(row) != len(self.columns):
                raise ValueError(f"table {self.title!r}: a row has {len(row)} cells for {len(self.columns)} columns")

    def is_numeric(self, i: int) -> bool:
        return i < len(self.numeric) and self.numeric[i]


def markdown(table: Table) -> str:
    """The table as GitHub markdown: a heading line, the table, and its note."""
    align = ["---:" if table.is_numeric(i) else "---" for i in range(len(table.columns))]
    lines = [f"**{table.title}**", "", _row(table.columns), "|" + "|".join(align) + "|"]
    lines += [_row(r) for r in table.rows]
    if table.note:
        lines += ["", table.note]
    return "\n".join(lines) + "\n"


def markdown_all(tables: Sequence[Table]) -> str:
    """Several tables as markdown, a blank line apart."""
    return "\n".join(markdown(t) for t in tables)


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def cell_mp(median: float | None, p90: float | None) -> str:
    """"median / p90" with one decimal, "-" without values."""
    return "-" if median is None or p90 is None else f"{median:.1f} / {p90:.1f}"

