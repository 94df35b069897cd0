"""Rich tables for `fuseplanner plan` and `fuseplanner compare`."""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Console
from rich.table import Table

from fuseplanner.core.ir import Cost
from fuseplanner.core.kinds import GROUP_KINDS, WEIGHTED_KINDS
from fuseplanner.planning.export import summary_line, totals_rows
from fuseplanner.planning.result import CostModel, Plan

#: Op kinds listed one per row among the unfused layers; other (opaque) nodes are summed in one row.
LISTED_KINDS = WEIGHTED_KINDS


def _us(c: CostModel) -> str:
    return f"{c.time_s * 1e6:.2f}"


def _mb(v: float) -> str:
    return f"{v / 1e6:.3f}"


def _pct(before: float, after: float) -> str:
    return f"{(before - after) / before * 100:.1f}%" if before else "-"


#: Below this console width the group members move from the groups table to a table of their own.
WIDE = 100


def groups_table(plan: Plan, nodes: bool = True) -> Table:
    """The fused groups; `nodes`: with the member names as the last column."""
    t = Table(
        title=f"Fused groups ({len(plan.groups)}); saving by {plan.objective} against the members run layer by layer",
        title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True,
    )
    t.add_column("#", justify="right", no_wrap=True)
    t.add_column("kind", no_wrap=True)
    t.add_column("tile", no_wrap=True)
    for col in ("time us", "GMA MB", "DRAM MB", "saving"):
        t.add_column(col, justify="right", no_wrap=True)
    if nodes:
        t.add_column("nodes", overflow="fold")
    for i, g in enumerate(plan.groups):
        t.add_row(
            str(i),
            g.kind + ("+res" if g.residual else ""),
            str(g.tile),
            _us(g.fused),
            _mb(g.fused.gma_bytes),
            _mb(g.fused.dram_bytes),
            _pct(g.unfused.metric(plan.objective), g.fused.metric(plan.objective)),
            *([" ".join(g.nodes)] if nodes else []),
        )
    return t


def members_table(plan: Plan) -> Table:
    """Group number -> member names (the groups table's last column, for narrow consoles)."""
    t = Table(title="Members of each group", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    t.add_column("#", justify="right", no_wrap=True)
    t.add_column("nodes", overflow="fold")
    for i, g in enumerate(plan.groups):
        t.add_row(str(i), " ".join(g.nodes))
    return t


def layers_table(plan: Plan) -> Table:
    listed = [lay for lay in plan.layers if lay.kind in LISTED_KINDS]
    rest = [lay for lay in plan.layers if lay.kind not in LISTED_KINDS]
    t = Table(title=f"Unfused layers ({len(plan.layers)})", title_justify="left", box=box.SIMPLE_HEAD)
    t.add_column("node", overflow="fold", min_width=14)
    for col, just in (("kind", "left"), ("tile", "left"), ("time us", "right"), ("GMA MB", "right"), ("DRAM MB", "right")):
        t.add_column(col, justify=just, no_wrap=True)
    for lay in listed:
        t.add_row(lay.node, lay.kind + ("+res" if lay.residual else ""), str(lay.tile) if lay.tile else "library", _us(lay.cost), _mb(lay.cost.gma_bytes), _mb(lay.cost.dram_bytes))
    if rest:
        total = sum((lay.cost.to_cost() for lay in rest), Cost())
        c = CostModel.from_cost(total)
        t.add_row(f"{len(rest)} other nodes", "opaque", "-", _us(c), _mb(c.gma_bytes), _mb(c.dram_bytes))
    return t


def totals_table(plan: Plan) -> Table:
    t = Table(title="Whole model", title_justify="left", box=box.SIMPLE_HEAD)
    for col, just in (("metric", "left"), ("layer by layer", "right"), ("planned", "right"), ("saving", "right")):
        t.add_column(col, justify=just)
    for row in totals_rows(plan):
        t.add_row(*row)
    return t


def print_plan(plan: Plan, console: Console | None = None) -> None:
    """The plan's tables and summary line on stdout."""
    con = console or Console(highlight=False)
    if plan.groups and con.width >= WIDE:
        con.print(groups_table(plan))
    elif plan.groups:
        con.print(groups_table(plan, nodes=False))
        con.print(members_table(plan))
    else:
        con.print("No fused group helps on this GPU with these settings.")
    con.print(layers_table(plan))
    con.print(totals_table(plan))
    by_stage: dict[str, int] = {}
    for r in plan.rejected:
        by_stage[r.stage] = by_stage.get(r.stage, 0) + 1
    if by_stage:
        con.print(
            "Candidates not fused: " + ", ".join(f"{n} {s}" for s, n in sorted(by_stage.items()))
            + " (reasons in --json / --markdown)"
        )
    con.print(summary_line(plan), soft_wrap=True)


def compare_table(plans: Sequence[Plan]) -> Table:
    """Savings of the same model planned on several GPUs, one row per GPU."""
    p0 = plans[0]
    t = Table(
        title=f"{p0.model} ({p0.dtype}, batch {p0.batch}, objective {p0.objective}): layer by layer (LBL) vs plan",
        title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True,
    )
    rows = []
    for p in plans:
        u, q = p.totals.unfused, p.totals.planned
        rows.append([
            p.gpu,
            str(len(p.groups)),
            str(sum(len(g.nodes) for g in p.groups)),
            _us(u),
            _us(q),
            _pct(u.time_s, q.time_s),
            _pct(u.gma_bytes, q.gma_bytes),
            _pct(u.dram_bytes, q.dram_bytes),
            f"{u.launches}->{q.launches}",
        ])
    heads = ("GPU", "groups", "layers", "LBL us", "plan us", "-time", "-GMA", "-DRAM", "kernels")
    for i, col in enumerate(heads):  # every cell keeps its full width: numbers are never cut
        width = max(len(col), *(len(r[i]) for r in rows))
        t.add_column(col, justify="left" if i == 0 else "right", no_wrap=True, min_width=width)
    for r in rows:
        t.add_row(*r)
    return t


def kinds_table(plans: Sequence[Plan]) -> Table:
    """How many groups of each kind each GPU's plan uses."""
    kinds = GROUP_KINDS
    t = Table(title="Groups by kind", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    t.add_column("GPU")
    for k in kinds:
        t.add_column(k, justify="right")
    for p in plans:
        t.add_row(p.gpu, *(str(sum(1 for g in p.groups if g.kind == k)) for k in kinds))
    return t
