"""The registers fuseplanner's kernels compile to, against the cost model's table (`registers.COMPILED`).

- `fit_table` refits the table to the launches `fuseplanner validate` records (`measured.kernels`:
  the registers CuPy's NVRTC allocated): per (kernel kind, math mode), registers = base(threads
  per block) + slope x the accumulators a thread holds (its family's `accumulators`), the slope by least squares over the distinct compiled
  kernels (clipped to 0..MAX_SLOPE; kernels capped at the 255-register ceiling are left out), each
  base the median residual of its thread count (the pooled median below MIN_SAMPLES kernels);
  `matches` counts the launches whose blocks per SM a table gets right.
- `spill_scan` sets the launches whose table registers (`registers.wanted`) exceed the ceiling
  against the others: measured / recorded predicted time, stack frames, and how often the fastest
  measured tile of a group is one of them (the evidence for `tiles.check` refusing such tiles).
- `nvcc_registers.compiled_registers` compiles the fused kernels of the records with nvcc (no GPU) and
  compares the registers ptxas reports with `tiles.regs_per_thread`.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fuseplanner.analysis.runs import Run
from fuseplanner.analysis.tables import Table
from fuseplanner.core.errors import AnalysisError
from fuseplanner.core.ir import Tile
from fuseplanner.cost.time import blocks_per_sm
from fuseplanner.kernels import registers, tiles
from fuseplanner.kernels.family import family
from fuseplanner.validation import fit
from fuseplanner.validation.records import Record
from fuseplanner.validation.validate import Step

MAX_SLOPE = 2.0
MIN_SAMPLES = 3
THREADS = (64, 128, 256)
RegisterTable = Mapping[tuple[str, str], tuple[float, Mapping[int, int]]]


@dataclass(frozen=True)
class Launch:
    """One recorded launch: its kernel, math mode (`registers.MODES`), tile, the accumulators a thread
    holds (its family's `accumulators`), compiled registers and shared memory, blocks per SM."""

    kind: str
    mode: str
    tile: Tile
    acc: float
    regs: int
    smem: int
    bps: int
    key: tuple = field(default=(), compare=False)  # the distinct compiled kernel it is


def record_steps(runs: Sequence[Run], model: str | None = None) -> Iterator[tuple[Run, Record, tuple[Step, ...]]]:
    """(run, record, its launches with their member ops) of every record of the runs that names its
    nodes and tiles; the model is the bundled one each run names (`model`: an ONNX path instead)."""
    graphs: dict = {}
    for run in runs:
        meta = run.data.meta
        for rec in run.records:
            if rec.nodes and rec.tiles and rec.step_kinds:
                graph = fit.results_graph(run.path, model or meta.model, meta.batch, graphs)
                yield run, rec, fit.record_steps(rec, graph, meta.batch)


def launches(runs: Sequence[Run], model: str | None = None) -> list[Launch]:
    """Every launch of the runs' records that carries `measured.kernels`."""
    out = []
    for run, rec, steps in record_steps(runs, model):
        kernels = rec.measured.kernels if rec.measured is not None else None
        meta = run.data.meta
        for k, st in zip(kernels or (), steps, strict=False):
            acc = family(st.kind).accumulators(st.kind, st.ops, st.tile, meta.dtype, meta.precision)
            key = (json.dumps(st.tile.as_dict(), sort_keys=True), rec.nodes, meta.dtype, meta.precision)
            out.append(Launch(k.kind, registers.mode(meta.dtype, meta.precision), st.tile, acc, k.regs,
                              k.smem_bytes, k.blocks_per_sm, key))  # fmt: skip
    return out


def fit_table(rows: Sequence[Launch]) -> dict[tuple[str, str], tuple[float, dict[int, int]]]:
    """The register table fitted to the launches: (kind, dtype) -> (slope, {threads: base})."""
    cells: dict[tuple[str, str], dict[tuple, tuple[float, float, float]]] = defaultdict(dict)
    for r in rows:
        if r.regs < registers.MAX_REGS_PER_THREAD:
            cells[(r.kind, r.mode)][r.key] = (r.tile.threads, r.acc, r.regs)
    table = {}
    for key, kernels in sorted(cells.items()):
        a = np.array(list(kernels.values()), float)
        thr = sorted({int(n) for n in a[:, 0]})
        x = np.column_stack([a[:, 1]] + [(a[:, 0] == n).astype(float) for n in thr])
        slope = float(np.clip(np.linalg.lstsq(x, a[:, 2], rcond=None)[0][0], 0.0, MAX_SLOPE))
        resid = a[:, 2] - slope * a[:, 1]
        pooled = float(np.median(resid))
        base = {n: round(float(np.median(resid[a[:, 0] == n])) if (a[:, 0] == n).sum() >= MIN_SAMPLES else pooled)
                for n in THREADS}  # fmt: skip
        table[key] = (round(slope, 2), base)
    return table


def matches(rows: Sequence[Launch], table: RegisterTable, hw: Any) -> int:
    """Launches whose blocks per SM under `table` equal the compiled kernel's."""
    return sum(blocks_per_sm(r.smem, r.tile.threads, registers.allocated(r.kind, r.mode, r.tile.threads, r.acc, table), hw)[0]
               == r.bps for r in rows)  # fmt: skip


def fit_result_table(rows: Sequence[Launch], table: RegisterTable, hw: Any) -> Table:
    """The fitted table beside the current one, and how many launches' blocks per SM each gets right."""
    cells = []
    for (kind, mode), (slope, base) in table.items():
        cur = registers.row(kind, mode)
        now = "-" if cur is None else f"{cur[0]}, " + "/".join(str(cur[1].get(n, "-")) for n in THREADS)
        cells.append((kind, mode, f"{slope}", *(str(base[n]) for n in THREADS), now))
    return Table(
        title="Register table fitted to the recorded launches",
        columns=("kind", "math mode", "slope", *(f"base {n}" for n in THREADS), "current slope, bases"),
        rows=tuple(cells), numeric=(False, False, True, True, True, True),
        note=f"{len(rows)} launches; blocks per SM as compiled: fitted table {matches(rows, table, hw)}, current "
        f"table {matches(rows, registers.COMPILED, hw)}, accumulator estimate {matches(rows, {}, hw)}.",
    )  # fmt: skip


def python_source(table: RegisterTable) -> str:
    """The table as the `registers.COMPILED` literal."""
    lines = ["COMPILED = {"]
    lines += [f"    ({kind!r}, {dtype!r}): ({slope}, {dict(base)})," for (kind, dtype), (slope, base) in table.items()]
    return "\n".join([*lines, "}"]) + "\n"


def over_ceiling(step: Step, dtype: str, precision: str) -> bool | None:
    """Whether the kernel of `step` wants more than MAX_REGS_PER_THREAD; None when the register table
    has no row for it."""
    if registers.row(step.kind, registers.mode(dtype, precision)) is None:
        return None
    return tiles.regs_wanted(step.kind, step.ops, step.tile, dtype, precision) > registers.MAX_REGS_PER_THREAD


@dataclass(frozen=True)
class SpillScan:
    """Single-launch records split at the register ceiling (True: over). `ratios`: measured / predicted
    time; `frames`: (over, compiled with a stack frame) counts; `best`: groups by whether their fastest
    measured tile is over."""

    ratios: Mapping[bool, Sequence[float]]
    frames: Mapping[tuple[bool, bool], int]
    best: Mapping[bool, int]


def spill_scan(runs: Sequence[Run], model: str | None = None) -> SpillScan:
    """Split the runs' single-launch records with a prediction at the register ceiling."""
    ratios: dict[bool, list[float]] = defaultdict(list)
    frames: Counter = Counter()
    best: Counter = Counter()
    fused: dict[tuple[str, str], list] = defaultdict(list)
    for run, r, steps in record_steps(runs, model):
        me, ours = r.measured, r.prediction("ours")
        if not r.cold_s or not (ours and ours.time_s) or len(steps) != 1:
            continue
        over = over_ceiling(steps[0], run.dtype, run.data.meta.precision)
        if over is None:
            continue
        ratios[over].append(me.time_cold_s / ours.time_s)
        frames[over, bool(me.kernels and me.kernels[0].local_bytes)] += 1
        if r.group and r.role != "unfused":
            fused[(run.path, r.group)].append((me.time_cold_s, over))
    for measured in fused.values():
        best[min(measured)[1]] += 1
    return SpillScan(dict(ratios), dict(frames), dict(best))


def _quantiles(v: Sequence[float]) -> str:
    v = sorted(v)
    n = len(v)
    return " / ".join(f"{v[int(f * (n - 1))]:.2f}" for f in (0.1, 0.5, 0.9)) if n else "-"


def spill_table(scan: SpillScan) -> Table:
    cells = tuple((name, str(len(scan.ratios.get(over, ()))), _quantiles(scan.ratios.get(over, ())),
                   str(scan.frames.get((over, True), 0)), str(scan.best.get(over, 0)))
                  for over, name in ((True, "over 255 registers"), (False, "within 255")))  # fmt: skip
    return Table(
        title="Launches over the register ceiling",
        columns=("launches", "n", "measured / predicted time p10 / median / p90", "with a stack frame",
                 "groups whose fastest tile"),
        rows=cells, numeric=(False, True, True, True, True),
        note="Registers from the table (`tiles.regs_wanted`, before the ceiling); predictions as recorded.",
    )  # fmt: skip


def register_tables(runs: Sequence[Run], hw: Any, model: str | None = None) -> tuple[list[Table], dict]:
    """(the fit and spill tables, the fitted register table) of the runs' recorded launches."""
    rows = launches(runs, model)
    if not rows:
        raise AnalysisError("no record of these runs carries measured.kernels (validate records them)")
    table = fit_table(rows)
    return [fit_result_table(rows, table, hw), spill_table(spill_scan(runs, model))], table
