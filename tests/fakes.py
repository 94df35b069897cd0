"""Stand-ins for planner tests that must control costs exactly (tests only, never the library).

`FakeGpu` has the fields `tiles.check` reads. `bytes_cost` is a transparent traffic model: a kernel
reads its input once per filter tile, its weights once per spatial tile, writes its output once, and
costs a fixed launch time plus bytes over a fixed bandwidth. `table_cost` returns fixed costs per
member list, for chooser tests.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from fuseplanner.core.ir import DTYPE_BYTES, Cost

LAUNCH_S = 2e-6
BANDWIDTH = 2e12


@dataclass(frozen=True)
class FakeGpu:
    name: str = "fake"
    sm_count: int = 100
    smem_per_block_bytes: int = 96 * 1024
    max_threads_per_block: int = 1024
    regs_per_sm: int = 65536
    l2_bytes: int = 40 * 2**20
    fuse_min_speedup: float = 1.0
    launch_overlap_s: float = 0.0

    def eff(self, field: str):
        """Like GpuSpec.eff: this fake has no measured overrides."""
        return getattr(self, field)

    def warnings(self, kernel_fit: bool = True) -> list[str]:
        """Like GpuSpec.warnings: nothing limits trust in this fake."""
        return []


def plan(graph, gpu, **kw):
    """`planning.search.plan` deciding in the isolated context unless told: the context whose arithmetic
    these fakes spell out (a FakeGpu has no graph-context facts)."""
    from fuseplanner.planning import search

    return search.plan(graph, gpu, **{"context": "isolated", **kw})


def _cost(read: float, write: float, launches: int = 1) -> Cost:
    return Cost(
        gma_read_bytes=read,
        gma_write_bytes=write,
        dram_read_bytes=read,
        dram_write_bytes=write,
        time_s=launches * LAUNCH_S + (read + write) / BANDWIDTH,
        launches=launches,
    )


def bytes_estimate(kind, ops, tile, dtype, batch, gpu, *, model="ours", residual=False, precision="fp32") -> Cost:
    """Traffic of one kernel: input x filter tiles + weights x spatial tiles + output (+ residual)."""
    e = DTYPE_BYTES[dtype]
    first, last = ops[0], ops[-1]
    inp = math.prod(first.in_shape) * e
    out = math.prod(last.out_shape) * e
    weights = sum(op.params for op in ops) * e
    ho, wo = last.hw_out
    n_sp = math.ceil(ho / tile.th) * math.ceil(wo / tile.tw)
    n_f = math.ceil(last.c_out / tile.tf)
    read = inp * n_f + weights * n_sp + (out if residual else 0)
    return _cost(read, out)


def bytes_estimate_op(op, dtype, batch, gpu, **_) -> Cost:
    """A library kernel reads its inputs and weights once and writes its output."""
    e = DTYPE_BYTES[dtype]
    read = sum(math.prod(s) for s in op.input_shapes) * e + op.params * e
    return _cost(read, math.prod(op.out_shape) * e)


def table_cost(fused: Mapping[tuple[str, ...], float], layer: float):
    """(estimate, estimate_op) where a kernel over members `names` costs fused[names] seconds, and
    every single layer `layer` seconds; costs do not depend on the tile."""

    def estimate(kind, ops, tile, dtype, batch, gpu, **_):
        names = tuple(op.name for op in ops)
        t = layer if len(names) == 1 else fused[names]
        return Cost(time_s=t, gma_read_bytes=t * 1e12, dram_read_bytes=t * 1e12, launches=1)

    def estimate_op(op, dtype, batch, gpu, **_):
        return Cost(time_s=layer, gma_read_bytes=layer * 1e12, dram_read_bytes=layer * 1e12, launches=1)

    return estimate, estimate_op
