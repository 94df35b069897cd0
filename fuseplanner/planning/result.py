"""The plan value the planner returns: pydantic models with a JSON round trip and an exported schema.

A `Plan` lists the fused groups (`GroupPlan`: kind, member nodes, epilogue nodes, tile, fused and
unfused cost), the layers left unfused (`LayerPlan`), the candidates that were not fused with the
reason (`RejectedPlan`), and the totals. Tiles are `fuseplanner.core.ir.Tile` records; costs are stored as
`CostModel` (the JSON form of `fuseplanner.core.ir.Cost`, with `gma_bytes`/`dram_bytes` spelled out) and
converted back with `.to_cost()`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from fuseplanner.core.ir import Cost, KernelResources, Tile
from fuseplanner.core.kinds import CONTEXTS, COST_MODELS, DTYPES, GROUP_KINDS, OBJECTIVES, PRECISIONS

SCHEMA_VERSION = 1
Objective = Literal[OBJECTIVES]


class KernelModel(BaseModel):
    """Resources of one kernel launch (mirror of `ir.KernelResources`)."""

    model_config = ConfigDict(extra="forbid")

    kind: str
    smem_bytes: int
    threads: int
    regs_per_thread: int
    blocks: int
    blocks_per_sm: int
    waves: float
    occupancy: float
    launch_class: str = ""


class CostModel(BaseModel):
    """Predicted cost (mirror of `ir.Cost.as_dict()`): bytes at L2 (GMA) and DRAM level, FLOPs, time."""

    model_config = ConfigDict(extra="forbid")

    gma_bytes: float = Field(0.0, description="bytes between the SMs and L2 (whole 32-byte sectors)")
    dram_bytes: float = Field(0.0, description="bytes between L2 and DRAM, cold L2")
    time_s: float = Field(0.0, description="predicted kernel time in seconds")
    gma_read_bytes: float = 0.0
    gma_write_bytes: float = 0.0
    dram_read_bytes: float = 0.0
    dram_write_bytes: float = 0.0
    flops: float = 0.0
    redundant_flops: float = 0.0
    launches: int = 0
    feasible: bool = True
    reason: str = ""
    kernels: list[KernelModel] = Field(default_factory=list)

    @classmethod
    def from_cost(cls, cost: Cost) -> CostModel:
        return cls.model_validate(cost.as_dict())

    def to_cost(self) -> Cost:
        return Cost(
            gma_read_bytes=self.gma_read_bytes,
            gma_write_bytes=self.gma_write_bytes,
            dram_read_bytes=self.dram_read_bytes,
            dram_write_bytes=self.dram_write_bytes,
            flops=self.flops,
            redundant_flops=self.redundant_flops,
            time_s=self.time_s,
            launches=self.launches,
            kernels=tuple(KernelResources(**k.model_dump()) for k in self.kernels),
            feasible=self.feasible,
            reason=self.reason,
        )

    def metric(self, objective: str) -> float:
        return self.to_cost().metric(objective)


def _saving(before: CostModel, after: CostModel, objective: str) -> float:
    b = before.metric(objective)
    return (b - after.metric(objective)) / b if b else 0.0


class GroupPlan(BaseModel):
    """One fused kernel: which nodes it replaces, with which tile, and what it costs."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal[GROUP_KINDS]
    nodes: list[str] = Field(description="member op names in execution order")
    epilogue: list[str] = Field(
        default_factory=list, description="ONNX nodes applied as epilogue (absorbed BN/activations, residual Add)"
    )
    absorbed: list[str] = Field(
        default_factory=list, description="graph nodes other than members that the kernel replaces (elementwise, residual Add)"
    )
    residual: bool = False
    residual_input: str | None = Field(None, description="the residual Add's other operand")
    tile: Tile
    fused: CostModel
    unfused: CostModel = Field(description="the members (and absorbed nodes) run layer by layer, each with its best tile")

    @property
    def covers(self) -> list[str]:
        """Every graph node this group replaces: members then absorbed nodes."""
        return [*self.nodes, *self.absorbed]

    @property
    def fused_cost(self) -> Cost:
        return self.fused.to_cost()

    @property
    def unfused_cost(self) -> Cost:
        return self.unfused.to_cost()

    def saving(self, objective: str = "time") -> float:
        """Fraction of the unfused metric the fused kernel saves."""
        return _saving(self.unfused, self.fused, objective)


class LayerPlan(BaseModel):
    """One node left unfused: its kernel kind, tile (None for library/opaque ops) and cost."""

    model_config = ConfigDict(extra="forbid")

    node: str
    kind: str
    op_type: str = ""
    tile: Tile | None = None
    cost: CostModel
    residual: bool = Field(default=False, description="the kernel also applies the residual Add after this node")
    absorbed: list[str] = Field(default_factory=list, description="the residual Add node the kernel applies")
    residual_input: str | None = Field(default=None, description="the residual Add's other operand")

    @property
    def covers(self) -> list[str]:
        """Every graph node this kernel runs: the node, then its absorbed residual Add."""
        return [self.node, *self.absorbed]

    @property
    def ir_cost(self) -> Cost:
        return self.cost.to_cost()


class RejectedPlan(BaseModel):
    """A candidate group that is not in the plan, and why."""

    model_config = ConfigDict(extra="forbid")

    kind: str
    nodes: list[str]
    absorbed: list[str] = Field(default_factory=list)
    stage: Literal["graph", "tile", "gain", "overlap"] = Field(
        description="graph: illegal or kind disabled; tile: no feasible tile; gain: fusing does not help; "
        "overlap: a better set of groups covers its nodes"
    )
    reason: str


class Totals(BaseModel):
    """The whole model run layer by layer versus as planned."""

    model_config = ConfigDict(extra="forbid")

    unfused: CostModel
    planned: CostModel

    def saving(self, objective: str = "time") -> float:
        return _saving(self.unfused, self.planned, objective)


class Plan(BaseModel):
    """A fusion plan for one model on one GPU."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    model: str
    gpu: str
    dtype: Literal[DTYPES]
    batch: int = Field(ge=1)
    objective: Objective
    cost_model: Literal[COST_MODELS] = "ours"
    precision: Literal[PRECISIONS] = "fp32"
    context: Literal[CONTEXTS] = Field(
        "isolated", description="execution context the time objective decided in (fuseplanner.cost.execution); "
        "costs are isolated-context either way")
    kinds: list[str] = Field(default_factory=list, description="fused kinds the planner was allowed to use")
    groups: list[GroupPlan] = Field(default_factory=list)
    layers: list[LayerPlan] = Field(default_factory=list)
    totals: Totals
    rejected: list[RejectedPlan] = Field(default_factory=list)
    warnings: list[str] = Field(
        default_factory=list,
        description="what limits trust in this plan's predictions, one line each (GpuSpec.warnings): a kernel fit "
        "borrowed from another GPU, a GPU the bundled kernels cannot run on, datasheet values that are estimates")

    # ---- access -------------------------------------------------------------------------------
    def to_json(self, indent: int | None = 2) -> str:
        return self.model_dump_json(indent=indent)

    @classmethod
    def from_json(cls, text: str | bytes) -> Plan:
        return cls.model_validate_json(text)

    @classmethod
    def json_schema(cls) -> dict:
        return cls.model_json_schema()

    def group_of(self, node: str) -> GroupPlan | None:
        """The group that covers graph node `node`, or None when it runs unfused."""
        for g in self.groups:
            if node in g.covers:
                return g
        return None

    def tiles(self) -> dict[str, Tile]:
        """Tile per kernel: group kernels are keyed by their members joined with '+'."""
        out: dict[str, Tile] = {"+".join(g.nodes): g.tile for g in self.groups}
        out.update({lay.node: lay.tile for lay in self.layers if lay.tile is not None})
        return out

    def kernels(self) -> Iterator[GroupPlan | LayerPlan]:
        """Groups and unfused layers, in the plan's order."""
        yield from self.groups
        yield from self.layers

    def saving(self, objective: str | None = None) -> float:
        """Fraction of the unfused total the plan saves (by the plan's objective by default)."""
        return self.totals.saving(objective or self.objective)
