"""The registers fuseplanner's fused kernels compile to, and the register table's fused rows fitted to them.

    # on the GPU machine: compile a sample of tiles of every fusion group of the bundled models
    python scripts/compiled_registers.py compile --out regs.jsonl.gz --per-group 3 --jobs 16 \
        mobilenet_v1 mobilenet_v2 mobilenet_v3_large mnasnet1_0 efficientnet_b0 mobilevit_xxs
    # anywhere: the fused rows of `kernels.registers.COMPILED` fitted to the records
    python scripts/compiled_registers.py fit data/records/h100/registers/fused-compiled.jsonl.gz
    # out of sample: the held-out models compiled the same way, scored with the bundled table
    python scripts/compiled_registers.py compile --holdout --out held.jsonl.gz --per-group 5 --jobs 15 MODEL...
    python scripts/compiled_registers.py score data/records/h100/registers/holdout-compiled.jsonl.gz

`compile` takes every legal fusion group of each model (`planning.candidates.find_candidates`), its
tiles that pass every feasibility rule but the register estimate (`tiles.check` without the table), and
for each math mode (exact fp32, TF32, fp16) compiles `--per-group` of them spread evenly over the
accumulators a thread holds (`FusedFamily.accumulators`), so that the sample reaches the tiles that
spill. Kernels whose `#define`s are equal compile once. `--compiler cupy` (default) builds each kernel as
a run does (CuPy's NVRTC, then the driver) and reads the registers and local memory the loaded kernel
has; `--compiler nvcc` uses the CUDA toolkit's ptxas instead (no GPU; its allocation can differ from the
driver's). One `CompiledKernel` record per kernel, JSON lines.

`score` sets the bundled table against compiled records of any models: `compile --holdout` compiles the
held-out models' groups (`models/holdout.toml`; `fit` refuses their records), so the table's error on
models its fit never saw can be reported apart.

`fit` refits each fused (kind, math mode) row as `fuseplanner analyze registers` does
(`register_checks.fit_table`: least-squares slope over the accumulators, median base per block size)
and prints the rows as Python, with how many kernels each row and the current table put on the right
side of the 255-register ceiling. Held-out models (`models/holdout.toml`) are refused by `fit`.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import gzip
import json
import random
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import NoReturn
from unittest import mock

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fuseplanner.analysis import register_checks
from fuseplanner.core.ir import Op, Tile
from fuseplanner.core.kinds import GROUP_KINDS
from fuseplanner.frontend.holdout import holdout_models
from fuseplanner.frontend.load import load_model
from fuseplanner.hw.spec import gpu
from fuseplanner.kernels import registers, tiles
from fuseplanner.kernels.family import family
from fuseplanner.planning.candidates import find_candidates

#: (dtype, precision) of each math mode of the register table.
MODES = {"fp32": ("fp32", "fp32"), "tf32": ("fp32", "tf32"), "fp16": ("fp16", "fp32")}


class CompiledKernel(BaseModel):
    """One compiled fused kernel: the group and tile it was built for, and what the compiler gave it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str
    kind: str
    nodes: tuple[str, ...]
    mode: str = Field(pattern="^(fp32|tf32|fp16)$")
    tile: dict[str, int]
    acc: float = Field(ge=0, description="accumulators a thread holds (the family's `accumulators`)")
    regs: int = Field(gt=0, description="registers per thread as compiled")
    local_bytes: int = Field(ge=0, description="local memory per thread (spills, stack), bytes")
    compiler: str


Job = tuple[str, str, tuple[Op, ...], tuple[str, ...], str, Tile]  # model, kind, ops, nodes, mode, tile


def _fail(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def group_tiles(kind: str, ops: Sequence[Op], dtype: str, precision: str, spec, per_group: int) -> list[Tile]:
    """`per_group` tiles of the group that pass every rule but the register estimate, evenly spread over
    their accumulators (the fewest and the most always among them)."""
    with mock.patch.dict(registers.COMPILED, clear=True):  # the fallback estimate admits up to 215 accumulators
        ok = [t for t in tiles.candidate_grid(kind, ops) if tiles.check(kind, ops, t, dtype, spec, precision) is None]
    if not ok:
        return []
    acc = family(kind).accumulators
    ranked = sorted(ok, key=lambda t: (acc(kind, ops, t, dtype, precision), t.threads, t.th, t.tw, t.tf, t.tc))
    picks = np.unique(np.linspace(0, len(ranked) - 1, min(per_group, len(ranked))).round().astype(int))
    return [ranked[i] for i in picks]


def _defines(job: Job) -> dict[str, int]:
    """The `#define`s the job's kernel compiles with (every member with a bias, no residual)."""
    from fuseplanner.kernels.families.fused.launch import kernel_defines

    _, kind, ops, _, mode, tile = job
    dtype, precision = MODES[mode]
    return kernel_defines(kind, ops, tile, dtype, precision, [True] * len(ops), False)


def jobs(models: Sequence[str], modes: Sequence[str], per_group: int, spec, holdout: bool = False) -> list[Job]:
    """One job per distinct kernel (`#define`s) of the models' fusion groups and sampled tiles. Held-out
    models only with `holdout` (their records are for `score`, which `fit` refuses), and then only they."""
    held = {m.name for m in holdout_models()}
    out: dict[tuple, Job] = {}
    for name in models:
        if (name in held) != holdout:
            _fail(f"{name} is a held-out model: no fit may see it (compile it with --holdout, for score)"
                  if name in held else f"{name} is not a held-out model: --holdout compiles only those")
        graph = load_model(name)
        for cand in find_candidates(graph, GROUP_KINDS).groups:
            ops = tuple(graph.op(n) for n in cand.members)
            for mode in modes:
                dtype, precision = MODES[mode]
                for t in group_tiles(cand.kind, ops, dtype, precision, spec, per_group):
                    job = (name, cand.kind, ops, cand.members, mode, t)
                    out.setdefault((cand.kind, tuple(sorted(_defines(job).items()))), job)
    return list(out.values())


def cupy_compile(job: Job) -> tuple[int, int]:
    """(registers, local bytes) of the job's kernel built as a run builds it (CuPy, on the GPU)."""
    from fuseplanner.kernels import _build
    from fuseplanner.kernels.families.fused.launch import SOURCES

    attrs = _build.kernel_attributes(_build.compile_kernel(*SOURCES[job[1]], _defines(job)))
    return attrs["regs"], attrs["local_bytes"]


def nvcc_compile(job: Job) -> tuple[int, int]:
    """(registers, local bytes) ptxas reports for the job's kernel (`nvcc --resource-usage`, no GPU)."""
    import re

    from fuseplanner.analysis.nvcc_registers import USED
    from fuseplanner.kernels import kernel_source, nvcc_report
    from fuseplanner.kernels.families.fused.launch import SOURCES

    _, kind, _, _, mode, tile = job
    with tempfile.TemporaryDirectory() as tmp:
        rc, rep = nvcc_report("nvcc", kernel_source(SOURCES[kind][0], _defines(job)), tmp, timeout=600)
    regs = USED.findall(rep)
    if rc or not regs:
        raise RuntimeError(f"nvcc failed for {kind} {tile} {mode}: {rep.strip().splitlines()[-1] if rep.strip() else rc}")
    spill = re.findall(r"(\d+) bytes stack frame", rep)
    return int(regs[-1]), int(spill[-1]) if spill else 0


def record(job: Job, compiled: tuple[int, int], compiler: str) -> CompiledKernel:
    model, kind, ops, nodes, mode, tile = job
    dtype, precision = MODES[mode]
    return CompiledKernel(model=model, kind=kind, nodes=nodes, mode=mode, tile=tile.as_dict(),
                          acc=family(kind).accumulators(kind, ops, tile, dtype, precision), regs=compiled[0],
                          local_bytes=compiled[1], compiler=compiler)  # fmt: skip


def _compiled(compile_fn: Callable[[Job], tuple[int, int]], todo: Sequence[Job], workers: int) -> Iterator[tuple[int, int]]:
    if workers <= 1:
        yield from map(compile_fn, todo)
        return
    with concurrent.futures.ProcessPoolExecutor(workers) as ex:
        yield from ex.map(compile_fn, todo, chunksize=4)


def compile_all(todo: Sequence[Job], compile_fn: Callable[[Job], tuple[int, int]], compiler: str, workers: int,
                out: Path) -> int:
    """Compile the jobs in `workers` processes (1: in this one) and append each record to `out` as it comes
    (progress on stderr, so a run cut short keeps what it compiled). Returns the records written."""
    n = 0
    with gzip.open(out, "at", encoding="utf-8") as f:
        for job, got in zip(todo, _compiled(compile_fn, todo, workers), strict=True):
            f.write(record(job, got, compiler).model_dump_json() + "\n")
            n += 1
            if n % 100 == 0:
                f.flush()
                print(f"{n}/{len(todo)} compiled", file=sys.stderr, flush=True)
    return n


def read(paths: Iterable[str | Path], holdout_ok: bool = False) -> list[CompiledKernel]:
    """The records of `paths`; a held-out model's record is an error unless `holdout_ok` (scoring)."""
    held = {m.name for m in holdout_models()}
    out = []
    for p in paths:
        with gzip.open(p, "rt", encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    r = CompiledKernel.model_validate(json.loads(line))
                    if r.model in held and not holdout_ok:
                        _fail(f"{p}: {r.model} is a held-out model: no fit may see it")
                    out.append(r)
    return out


def launches(recs: Sequence[CompiledKernel]) -> list[register_checks.Launch]:
    """The records as the register fit's launches (shared memory and blocks per SM are not used)."""
    return [register_checks.Launch(r.kind, r.mode, Tile(**r.tile), r.acc, r.regs, 0, 0,
                                   (r.kind, r.mode, json.dumps(r.tile, sort_keys=True), r.nodes, r.model))
            for r in recs]  # fmt: skip


#: Registers from which a compiled kernel counts as at the ceiling: ptxas stops at 254 or 255 when it
#: runs out (a small local-memory frame alone is a stack, not a spill).
AT_CEILING = 254


def ceiling_agreement(recs: Sequence[CompiledKernel], table) -> int:
    """Records the table puts on the right side of the ceiling: wanting more than 255 registers exactly
    where the compiler stopped at the ceiling (AT_CEILING)."""
    right = 0
    for r in recs:
        over = registers.wanted(r.kind, r.mode, r.tile["threads"], r.acc, table) > registers.MAX_REGS_PER_THREAD
        right += over == (r.regs >= AT_CEILING)
    return right


def summary(recs: Sequence[CompiledKernel], table) -> dict[tuple[str, str], tuple[int, float, int]]:
    """`table` against the records per (kind, mode) and pooled ("all", "all"): (kernels, median |error|
    of the kernels under the ceiling, kernels on the right side of the ceiling)."""
    groups: dict[tuple[str, str], list[CompiledKernel]] = {}
    for r in recs:
        groups.setdefault((r.kind, r.mode), []).append(r)
    out = {}
    for key, sub in [*sorted(groups.items()), (("all", "all"), recs)]:
        err = [abs(registers.wanted(r.kind, r.mode, r.tile["threads"], r.acc, table) - r.regs)
               for r in sub if r.regs < AT_CEILING]  # fmt: skip
        out[key] = (len(sub), float(np.median(err)) if err else float("nan"), ceiling_agreement(sub, table))
    return out


def fit(paths: Sequence[str]) -> dict:
    recs = read(paths)
    table = register_checks.fit_table(launches(recs))
    print(f"{len(recs)} compiled kernels; on the right side of the register ceiling: fitted rows "
          f"{ceiling_agreement(recs, table)}, current table {ceiling_agreement(recs, registers.COMPILED)}")
    for key, (n, med, _) in summary(recs, table).items():
        if key in table:
            print(f"  {key}: {n} kernels, median |error| {med:.1f} registers")
    print(register_checks.python_source(table), end="")
    return table


def score(paths: Sequence[str], table=None) -> dict[tuple[str, str], tuple[int, float, int]]:
    """The register table (`table`, default the bundled one) against compiled records of any models,
    held-out ones included (`summary`), printed as a table."""
    table = registers.COMPILED if table is None else table
    recs = read(paths, holdout_ok=True)
    out = summary(recs, table)
    models = sorted({r.model for r in recs})
    print(f"{len(recs)} compiled kernels of {', '.join(models)}")
    print("| kind | math mode | kernels | median abs error (registers) | right side of the ceiling |")
    print("|---|---|---:|---:|---:|")
    for (kind, mode), (n, med, right) in out.items():
        print(f"| {kind} | {mode} | {n} | {med:.1f} | {right} of {n} |")
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compile", help="compile sampled tiles of the models' fusion groups")
    c.add_argument("models", nargs="+")
    c.add_argument("--out", required=True, type=Path, help="JSON lines (.jsonl.gz), appended to")
    c.add_argument("--modes", default="fp32,tf32,fp16")
    c.add_argument("--per-group", type=int, default=3)
    c.add_argument("--jobs", type=int, default=4)
    c.add_argument("--compiler", choices=("cupy", "nvcc"), default="cupy")
    c.add_argument("--gpu", default="h100")
    c.add_argument("--holdout", action="store_true", help="compile held-out models (only those) for score")
    f = sub.add_parser("fit", help="refit the fused rows of the register table to compiled records")
    f.add_argument("records", nargs="+")
    sc = sub.add_parser("score", help="the bundled register table against compiled records (held-out models too)")
    sc.add_argument("records", nargs="+")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.cmd == "fit":
        fit(args.records)
        return 0
    if args.cmd == "score":
        score(args.records)
        return 0
    modes = [m for m in args.modes.split(",") if m]
    if not modes or any(m not in MODES for m in modes) or args.per_group < 1 or args.jobs < 1:
        _fail(f"--modes takes {', '.join(MODES)}; --per-group and --jobs at least 1")
    todo = jobs(args.models, modes, args.per_group, gpu(args.gpu), args.holdout)
    random.Random(0).shuffle(todo)  # a run cut short keeps a spread of models, kinds and modes
    print(f"{len(todo)} distinct kernels to compile", file=sys.stderr, flush=True)
    fn = cupy_compile if args.compiler == "cupy" else nvcc_compile
    compile_all(todo, fn, args.compiler, args.jobs, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
