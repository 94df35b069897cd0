"""Typed measurement records of `fuseplanner validate`, their file format, and the one reader.

A validation run is a `ValidationRun`: the run's `RunMeta`, the fused groups it measured
(`GroupInfo`) and one `Record` per measured kernel sequence (its launches, every model's
`Prediction`, the `Measurement`, the correctness `Check`). Every model is a frozen pydantic model.

File format (``records.jsonl``, gzip-compressed when the name ends in ``.gz``), one JSON object a line:

    {"format": "fuseplanner.records", "version": 2, "meta": {...}, "groups": {...}}   <- run header
    {"id": "L0", "role": "layer", "kind": "dw", "nodes": [...], "tiles": [...], ...}  <- one record
    ...

`read_run` is the one reader: it takes these files and the older single-document ``results.json``
(schema ``fuseplanner.validation/1``, plain or ``.gz``) and returns a `ValidationRun`; `as_run` and
`as_records` convert in-memory documents of the older format the same way.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fuseplanner.core.errors import RecordsError
from fuseplanner.core.ir import Tile

FORMAT = "fuseplanner.records"
VERSION = 2
#: Schema tag of the single-document results.json that `read_run` converts.
OLD_SCHEMA = "fuseplanner.validation/1"


def _ncu(metric: str, unit: str = "B") -> Any:
    """A measured quantity's Nsight Compute source and unit, kept in the model's JSON schema."""
    return Field(default=None, json_schema_extra={"ncu": metric, "unit": unit})


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="constants")


class Prediction(_Frozen):
    """One cost model's prediction for a record's launches, summed (`Cost.as_dict` without kernels)."""

    gma_bytes: float | None = None
    gma_read_bytes: float | None = None
    gma_write_bytes: float | None = None
    dram_bytes: float | None = None
    dram_read_bytes: float | None = None
    dram_write_bytes: float | None = None
    time_s: float | None = None
    flops: float | None = None
    redundant_flops: float | None = None
    launches: int | None = None
    feasible: bool = True
    reason: str = ""


def prediction_of(cost: Any) -> Prediction:
    """A cost model's `Cost` as a prediction (its per-launch kernels left out)."""
    d = cost.as_dict()
    d.pop("kernels", None)
    return Prediction.model_validate(d)


class CompiledKernel(_Frozen):
    """One launch as compiled and launched, beside what the cost model assumed for it."""

    kind: str
    blocks: int
    threads: int
    smem_bytes: int = Field(description="dynamic shared memory per block, bytes")
    static_smem_bytes: int = 0
    cluster: int = 1
    regs: int = Field(description="registers per thread as compiled")
    local_bytes: int = Field(0, description="local memory per thread (spills, stack), bytes")
    blocks_per_sm: int
    limiter: str
    model_regs: int | None = None
    model_blocks_per_sm: int | None = None


_GMA = "(lts__t_sectors_srcunit_tex_op_read.sum + lts__t_sectors_srcunit_tex_op_write.sum) x 32"
_DRAM = "dram__bytes_read.sum + dram__bytes_write.sum"


class Measurement(_Frozen):
    """What was measured: CUDA-event times (s) with the L2 flushed (cold) and not (warm), and the
    Nsight Compute traffic counters (bytes; ``traffic == "ncu"``) or, counter-free, the effective
    bandwidths (modelled bytes / measured cold time)."""

    time_cold_s: float | None = None
    time_cold_p10_s: float | None = None
    time_cold_p90_s: float | None = None
    time_cold_min_s: float | None = None
    time_warm_s: float | None = None
    time_warm_p10_s: float | None = None
    time_warm_p90_s: float | None = None
    time_warm_min_s: float | None = None
    gma_bytes: float | None = _ncu(_GMA)
    gma_read_bytes: float | None = _ncu("lts__t_sectors_srcunit_tex_op_read.sum x 32")
    gma_write_bytes: float | None = _ncu("lts__t_sectors_srcunit_tex_op_write.sum x 32")
    dram_bytes: float | None = _ncu(_DRAM)
    dram_read_bytes: float | None = _ncu("dram__bytes_read.sum")
    dram_write_bytes: float | None = _ncu("dram__bytes_write.sum")
    gma_warm_bytes: float | None = _ncu(_GMA + ", --cache-control none")
    dram_warm_bytes: float | None = _ncu(_DRAM + ", --cache-control none")
    ncu_time_s: float | None = _ncu("gpu__time_duration.sum", "s")
    ncu_kernels: int | None = None
    ncu_note: str | None = None
    traffic: str | None = None  # "ncu" | "counter-free"
    eff_dram_Bps: float | None = None
    eff_gma_Bps: float | None = None
    kernels: tuple[CompiledKernel, ...] | None = None
    kernels_error: str | None = None


class Check(_Frozen):
    """The result against the float64 NumPy reference: relative error, tolerance, within it."""

    rel_err: float | None = None
    tol: float | None = None
    ok: bool = False


class Record(_Frozen):
    """One measured kernel sequence: a layer, a fused group at one tile, or a group run unfused.
    `measured` is None when it did not run (`error` says why)."""

    id: str
    role: str  # "layer" | "group" | "tile" | "unfused" | "member" | "layer_tile"
    kind: str = ""
    group: str | None = None
    nodes: tuple[str, ...] = ()
    tiles: tuple[Tile, ...] = ()
    step_kinds: tuple[str, ...] = ()
    planned: bool = False
    launches: int | None = None
    residual: bool = False
    flops: float | None = None
    predicted: dict[str, Prediction | None] = Field(default_factory=dict)
    measured: Measurement | None = None
    check: Check | None = None
    error: str | None = None

    def prediction(self, model: str) -> Prediction | None:
        return self.predicted.get(model)

    @property
    def ok(self) -> bool:
        """Ran and has measurements (no error)."""
        return not self.error and self.measured is not None

    @property
    def cold_s(self) -> float | None:
        return self.measured.time_cold_s if self.measured is not None else None


class Timing(_Frozen):
    warmup: int | None = None
    repeat: int | None = None
    statistic: str = "median"
    clock: str = "CUDA events"


class Peaks(_Frozen):
    dram_Bps: float | None = None
    l2_Bps: float | None = None
    flops: float | None = None


class Skipped(_Frozen):
    id: str
    nodes: tuple[str, ...]
    reason: str


class GroupInfo(_Frozen):
    """A fused group (or rejected candidate) of the plan: the tile the planner gave it and its verdict."""

    kind: str = ""
    nodes: tuple[str, ...] = ()
    planner_fused: bool = True
    planned_tile: Tile | None = None
    residual: bool = False
    reason: str | None = None


class RunMeta(_Frozen):
    """How the run was made: model, GPU spec and device, dtype, batch, tile mode, traffic source."""

    model: str | None = None
    gpu: str | None = None
    device_name: str | None = None
    dtype: str | None = None
    precision: str = "fp32"
    batch: int | None = None
    tiles: str | None = None
    objective: str = "time"
    traffic_source: str | None = None
    traffic_note: str = ""
    timing: Timing = Timing()
    peaks: Peaks = Peaks()
    calibrated: bool = False
    models: tuple[str, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    versions: dict[str, str] = Field(default_factory=dict)
    created: str = ""
    command: str = ""
    repredicted: str | None = None


class ValidationRun(_Frozen):
    """One validation run: its metadata, its groups and its records (in model order)."""

    meta: RunMeta = RunMeta()
    groups: dict[str, GroupInfo] = Field(default_factory=dict)
    records: tuple[Record, ...] = ()


# ---- conversion -------------------------------------------------------------------------------------

#: A typed record, or a record dict of either format.
RecordLike = Record | Mapping[str, Any]
#: A typed run, or a results document dict.
RunLike = ValidationRun | Mapping[str, Any]


def _one_line(exc: ValidationError, where: str) -> RecordsError:
    e = exc.errors()[0]
    loc = ".".join(str(p) for p in e["loc"])
    return RecordsError(f"{where}: {loc}: {e['msg']}")


def record(rec: Record | Mapping[str, Any], where: str = "record") -> Record:
    """A record from a record dict of either format (an old one's empty `measured` means not run)."""
    if isinstance(rec, Record):
        return rec
    d = dict(rec)
    for key in ("measured", "check"):  # an old record's empty dict: not run, not checked
        if not d.get(key):
            d[key] = None
    try:
        return Record.model_validate(d)
    except ValidationError as exc:
        raise _one_line(exc, where) from None


def as_records(records: Iterable[Record | Mapping[str, Any]]) -> list[Record]:
    """Typed records from typed ones or record dicts."""
    return [record(r, f"record {i}") for i, r in enumerate(records)]


def as_run(doc: ValidationRun | Mapping[str, Any], where: str = "results") -> ValidationRun:
    """A `ValidationRun` from itself or a results document dict (``meta``, ``groups``, ``records``;
    a ``schema`` or ``summary`` key is ignored)."""
    if isinstance(doc, ValidationRun):
        return doc
    try:
        meta = RunMeta.model_validate(doc.get("meta") or {})
        groups = {g: GroupInfo.model_validate(v) for g, v in (doc.get("groups") or {}).items()}
    except ValidationError as exc:
        raise _one_line(exc, where) from None
    recs = [record(r, f"{where}: record {i}") for i, r in enumerate(doc.get("records") or ())]
    return ValidationRun.model_construct(meta=meta, groups=groups, records=tuple(recs))


def _text(path: Path) -> str:
    try:
        raw = path.read_bytes()
        return (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode()
    # a bad gzip stream raises gzip.BadGzipFile (an OSError), EOFError when cut short, or zlib.error
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:
        raise RecordsError(f"cannot read results {path}: {exc}") from None


def _json(line: str, where: str) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise RecordsError(f"cannot read results {where}: {exc}") from None


def _from_lines(lines: Sequence[str], path: Path) -> ValidationRun:
    head = _json(lines[0], f"{path}:1")
    if head.get("version") != VERSION:
        raise RecordsError(f"{path} holds {FORMAT} version {head.get('version')}; this fuseplanner reads "
                           f"version {VERSION} (and {OLD_SCHEMA} results.json)")  # fmt: skip
    recs = [_json(line, f"{path}:{i + 2}") for i, line in enumerate(lines[1:]) if line.strip()]
    return as_run({"meta": head.get("meta"), "groups": head.get("groups"), "records": recs}, str(path))


def read_run(path: str | Path) -> ValidationRun:
    """The run in a records file (``.jsonl``) or an older ``results.json``, plain or gzip-compressed."""
    path = Path(path)
    text = _text(path)
    first = text.lstrip()[:1]
    lines = text.splitlines()
    if first == "{" and lines and '"format"' in lines[0]:
        head = _json(lines[0], f"{path}:1")
        if isinstance(head, dict) and head.get("format") == FORMAT:
            return _from_lines(lines, path)
    doc = _json(text, str(path))
    if not isinstance(doc, dict) or doc.get("schema") != OLD_SCHEMA or "records" not in doc:
        raise RecordsError(f"{path} is not a fuseplanner validation results file ({FORMAT} version {VERSION} "
                           f"or {OLD_SCHEMA})")  # fmt: skip
    return as_run(doc, str(path))


def run_lines(run: ValidationRun) -> list[str]:
    """The run as JSON lines: the header, then one record a line (defaults left out)."""
    head = {"format": FORMAT, "version": VERSION,
            **run.model_dump(mode="json", exclude={"records"}, exclude_defaults=True)}  # fmt: skip
    return [json.dumps(head), *(r.model_dump_json(exclude_defaults=True) for r in run.records)]


def write_run(run: ValidationRun, path: str | Path) -> Path:
    """Write `run` to `path` as JSON lines, gzip-compressed when the name ends in ``.gz``."""
    path = Path(path)
    data = ("\n".join(run_lines(run)) + "\n").encode()
    path.write_bytes(gzip.compress(data, mtime=0) if path.name.endswith(".gz") else data)
    return path
