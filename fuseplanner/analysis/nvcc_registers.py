"""Registers nvcc allocates to the fused kernels of saved runs, against the cost model's estimate
(`tiles.regs_per_thread`) and the blocks per SM each implies. Needs nvcc, not a GPU."""

from __future__ import annotations

import concurrent.futures
import re
import statistics
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fuseplanner.analysis.runs import Run
from fuseplanner.analysis.tables import Table
from fuseplanner.cost.time import blocks_per_sm
from fuseplanner.kernels import tiles
from fuseplanner.validation import fit
from fuseplanner.validation.validate import Step

USED = re.compile(r"Used (\d+) registers")


@dataclass(frozen=True)
class CompiledTile:
    """One distinct fused tile: registers allocated by ptxas and estimated, and the blocks per SM of each."""

    kind: str
    dtype: str
    tile: str
    allocated: int
    estimated: int
    bps_allocated: int
    bps_estimated: int

    @property
    def overstated(self) -> bool:
        """Whether the estimate gives more blocks per SM than the compiled kernel can have."""
        return self.bps_estimated > self.bps_allocated


def ptxas_registers(nvcc: str, step: Step, dtype: str, precision: str, workdir: str) -> int | None:
    """Registers ptxas reports for the kernel of one fused step (None when it does not compile)."""
    from fuseplanner.kernels import kernel_source, nvcc_report
    from fuseplanner.kernels.families.fused.launch import SOURCES, kernel_defines

    defines = kernel_defines(step.kind, step.ops, step.tile, dtype, precision, [True] * len(step.ops), False)
    rc, rep = nvcc_report(nvcc, kernel_source(SOURCES[step.kind][0], defines), workdir, timeout=600)
    found = USED.findall(rep)
    return int(found[-1]) if rc == 0 and found else None


def distinct_fused_steps(runs: Sequence[Run], spec: Any) -> list[tuple[Step, str, str]]:
    """(step, dtype, precision) of each distinct feasible fused launch in the runs' measured records."""
    jobs: dict[tuple, tuple[Step, str, str]] = {}
    for s in fit.load_samples([r.path for r in runs]):
        for st in s.steps:
            if st.kind in tiles.FUSED_KINDS and not tiles.check(st.kind, st.ops, st.tile, s.dtype, spec, s.precision):
                key = (st.kind, s.dtype, str(st.tile), tuple((o.c_in, o.c_out, o.kernel, o.stride) for o in st.ops))
                jobs.setdefault(key, (st, s.dtype, s.precision))
    return list(jobs.values())


def compiled_registers(jobs: Sequence[tuple[Step, str, str]], spec: Any, nvcc: str, workers: int = 2,
                       compile_fn: Callable[..., int | None] = ptxas_registers) -> list[CompiledTile]:
    """Compile each job (`compile_fn`, default ptxas through nvcc) and set its registers against the estimate."""
    with tempfile.TemporaryDirectory() as tmp, concurrent.futures.ThreadPoolExecutor(workers) as ex:
        regs = list(ex.map(lambda j: compile_fn(nvcc, j[0], j[1], j[2], tmp), jobs))
    rows = []
    for (st, dtype, precision), got in zip(jobs, regs, strict=True):
        if got is None:
            continue
        est = tiles.regs_per_thread(st.kind, st.ops, st.tile, dtype, precision)
        smem = tiles.smem_bytes(st.kind, st.ops, st.tile, dtype)
        rows.append(CompiledTile(st.kind, dtype, str(st.tile), got, est,
                                 blocks_per_sm(smem, st.tile.threads, got, spec.hw)[0],
                                 blocks_per_sm(smem, st.tile.threads, est, spec.hw)[0]))  # fmt: skip
    return rows


def compiled_table(rows: Sequence[CompiledTile], tried: int) -> Table:
    cells = []
    for kind, dtype in sorted({(r.kind, r.dtype) for r in rows}):
        sel = [r for r in rows if r.kind == kind and r.dtype == dtype]
        ratio = statistics.median(r.allocated / r.estimated for r in sel)
        cells.append((kind, dtype, str(len(sel)), f"{ratio:.2f}", str(sum(r.overstated for r in sel))))
    return Table(
        title="Registers nvcc allocates to the fused tiles",
        columns=("kind", "dtype", "tiles", "allocated / estimated (median)", "blocks per SM overstated"),
        rows=tuple(cells), numeric=(False, False, True, True, True),
        note=f"{len(rows)} of {tried} distinct fused tiles compiled; blocks per SM overstated in "
        f"{sum(r.overstated for r in rows)} of {len(rows)}.",
    )  # fmt: skip
