"""GPU descriptions: the `GpuSpec` schema, the bundled spec library, and local device detection.

Each GPU is one TOML file (`gpu_specs/<stem>.toml`, bundled as package data) in two parts:

- its facts: datasheet / programming-guide / probed numbers, each with a note in the ``[sources]``
  table (datasheet, whitepaper, programming guide, a measurement, or a labelled estimate; the
  estimates are also listed in ``estimated``). An optional ``[measured]`` table, written by
  calibration, overrides datasheet values: the cost models read effective values through
  `GpuSpec.eff` / `GpuSpec.hw`, never the raw datasheet fields;
- its kernel fit (`fuseplanner.hw.kernel_fit.KernelFit`): its own ``[fit]`` table, or another spec's
  fit named by ``fit_from`` (borrowed; `GpuSpec.warnings` says so).
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from functools import cache, cached_property
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from fuseplanner.core.errors import SpecError
from fuseplanner.hw.kernel_fit import PARAMS, KernelFit

#: Datasheet fields that a ``[measured]`` table may override (calibrate measures some of them).
MEASURABLE = (
    "dram_bw_bytes_per_s",
    "l2_bw_bytes_per_s",
    "fp32_flops",
    "fp16_flops",
    "fp16_tc_flops",
    "tf32_tc_flops",
    "launch_overhead_s",
    "mem_latency_s",
    "l2_usable_fraction",
    "graph_launch_interval_s",
    "graph_kernel_tail_s",
    "opaque_op_floor_s",
    "reduce_op_floor_s",
    "graph_replay_s",
)
#: The facts only the graph execution context reads (fuseplanner.cost.execution).
GRAPH_FIELDS = ("graph_launch_interval_s", "graph_kernel_tail_s", "opaque_op_floor_s", "reduce_op_floor_s",
                "graph_replay_s")
#: The spec whose fit a spec without one of its own (neither ``[fit]`` nor ``fit_from``) borrows.
DEFAULT_FIT = "h100"
#: The lowest compute capability the bundled kernels run on (cp.async, mma.sync with bf16/tf32).
KERNEL_MIN_CC = (8, 0)


@dataclass(frozen=True, slots=True)
class Hw:
    """Effective hardware numbers for the hot cost loops: the spec's facts (measured where calibrated)
    and its kernel fit, per-clock rates turned into per-second ones. Names follow the GpuSpec /
    KernelFit fields they come from."""

    sm_count: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    regs_per_sm: int
    reg_alloc_unit: int
    warp_size: int
    smem_per_sm_bytes: int
    smem_reserved_per_block_bytes: int
    l2_bytes: int
    l2_usable_fraction: float
    sector_bytes: int
    dram_bw: float  # bytes/s
    l2_bw: float  # bytes/s
    fp32_flops: float
    fp16_flops: float
    fp16_tc_flops: float  # FP16 tensor cores, else the FP16 CUDA-core rate
    tf32_tc_flops: float  # TF32 tensor cores, else the FP32 CUDA-core rate
    launch_overhead_s: float
    mem_latency_s: float
    clock_hz: float
    l2_coalesce_blocks: float  # concurrent readers of one GPC whose reads of the same sectors L2 sees once
    gpc_count: int  # GPCs: readers on different GPCs never merge
    gpc_dispatch_blocks: int  # consecutive blocks of a large launch that the scheduler places on one GPC
    cluster_sms: int  # SMs whose blocks clusters of CLUSTER_PLACED_MIN or more blocks can use
    l1_cache_bytes: int  # bytes of L1 data cache an SM keeps at the largest shared-memory carveout
    l1_line_bytes: int
    #: achieved FLOP/s of one warp of fuseplanner's kernels (rate per cycle x clock), by math mode
    dw_warp_flops: tuple[float, float]  # layer-by-layer DW stencil: fp32, fp16 storage
    pw_warp_flops: tuple[float, float, float]  # layer-by-layer PW/linear: fp32, tf32, fp16
    fused_pw_warp_flops: tuple[float, float, float]  # PW stages of fused kernels: fp32, tf32, fp16
    fused_dw_warp_flops: float  # the fused kernels' DW stencil (operands from shared memory, any storage dtype)
    fused_weight_l2_fraction: float  # L2 sectors per modelled sector of fused per-block packed PW weight copies, fp32
    fused_weight_l2_fraction_fp16: float  # ... fp16 storage
    fused_weight_load_fraction: float  # share of a fused kernel's per-block weight reads that its loads cost
    warp_load_bytes_per_s: float  # bytes/s one warp's loads bring in (Little's law: bytes in flight / latency)
    block_warp_exponent: float  # a layer-by-layer block of w warps computes at w ** this times one warp's rate
    fused_block_warp_exponent: float  # ... a fused block
    coresident_exponent: float  # a block's serial chain is slowed by (blocks resident on its SM) ** this
    fused_sm_issue_warps: float  # an SM issues its resident fused blocks' work at most at this many warps' rate (0: no cap)
    fused_shared_load_weight: float  # FMA-equivalents the fused kernels' issued work charges per shared operand load
    fused_epilogue_weight: float  # ... per element of a staged epilogue
    fused_window_epilogue_weight: float  # ... per element of a pw_dw / pw_dw_pw expansion's window epilogue
    pw_shared_load_weight: float  # FMA-equivalents the layer-by-layer exact-fp32 pw/linear path charges per operand load (0: off)
    pw_mma_load_weight: float  # mma-equivalents its tensor-core path charges per fragment load (0: off)
    pw_chunk_s: float  # seconds each chunk iteration adds to a layer-by-layer pw/linear block's chain
    sm_issue_warps: float  # an SM issues its resident layer-by-layer pw/linear blocks' work at most at this many warps' rate
    kernel_fixed_s: float  # seconds a layer-by-layer launch takes beyond the empty-launch floor whatever its work
    fused_kernel_fixed_s: float  # ... a fused launch
    library_stream_bw_fraction: float = 1.0  # graph context: operator-library streaming kernels' share of dram_bw
    library_gemm_slice_cycles: float = 0.0  # ... cycles of one K slice of a block of the executor's GEMM
    library_row_iter_cycles: float = 0.0  # ... cycles of one iteration of a row kernel pass
    library_direct_terms_per_cycle: float = 0.0  # ... products per SM per cycle of the direct conv kernel (0: off)
    graph_dw_kernel_s: float = 0.0  # graph context: seconds a launch of class dw adds beyond the graph terms
    graph_pw_kernel_s: float = 0.0  # ... of class pw (core.kinds.LAUNCH_CLASSES)
    graph_linear_kernel_s: float = 0.0  # ... of class linear
    graph_fused_kernel_s: float = 0.0  # ... of class fused (any may be negative)


class GpuSpec(BaseModel):
    """One GPU. Sizes in bytes, bandwidths in bytes/s, rates in FLOP/s, times in seconds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="file stem, the short name used on the CLI")
    full_name: str
    compute_capability: str = Field(pattern=r"^\d+\.\d+$")
    device_names: tuple[str, ...] = Field(default=(), description="substrings of cudaDeviceProp.name")
    sm_count: int = Field(gt=0)
    max_threads_per_sm: int = Field(gt=0)
    max_threads_per_block: int = Field(gt=0)
    max_blocks_per_sm: int = Field(gt=0)
    regs_per_sm: int = Field(gt=0)
    max_regs_per_thread: int = Field(gt=0)
    smem_per_sm_bytes: int = Field(gt=0)
    smem_per_block_bytes: int = Field(gt=0, description="opt-in maximum of dynamic shared memory per block")
    smem_reserved_per_block_bytes: int = Field(default=0, ge=0)
    l1_bytes: int = Field(gt=0)
    l2_bytes: int = Field(gt=0)
    dram_bw_bytes_per_s: float = Field(gt=0)
    l2_bw_bytes_per_s: float = Field(gt=0)
    fp32_flops: float = Field(gt=0)
    fp16_flops: float = Field(gt=0, description="non-tensor-core FP16")
    fp16_tc_flops: float | None = Field(default=None, gt=0, description="dense FP16 tensor core, FP32 accumulate")
    tf32_tc_flops: float | None = Field(default=None, gt=0, description="dense TF32 tensor core")
    clock_hz: float = Field(gt=0)
    launch_overhead_s: float = Field(gt=0, description="launch + empty timed region")
    mem_latency_s: float = Field(default=6e-7, gt=0, description="global-memory load latency, cold L2")
    graph_launch_interval_s: float | None = Field(
        default=None, gt=0,
        description="graph context (fuseplanner.cost.execution): the least time between the starts of two kernels "
        "launched back to back in a CUDA graph; no step of a graph replay takes less (None: no floor beyond the tail)")
    graph_kernel_tail_s: float | None = Field(
        default=None, gt=0,
        description="graph context: what one kernel of a CUDA graph adds to its body in place of the isolated "
        "launch floor launch_overhead_s (dispatch, drain, dependency resolution; None: launch_overhead_s, "
        "i.e. no launch saving in a graph)")
    opaque_op_floor_s: float | None = Field(
        default=None, gt=0,
        description="graph context: the least time of one opaque operator (the executor's operator library may "
        "launch several kernels for it; None: graph_launch_interval_s)")
    reduce_op_floor_s: float | None = Field(
        default=None, gt=0,
        description="graph context: the least time of one reduction operator (core.kinds.REDUCE_OP_TYPES: a "
        "CuPy reduction kernel; None: opaque_op_floor_s)")
    graph_replay_s: float | None = Field(
        default=None, ge=0,
        description="graph context: what one replay of a CUDA graph costs once between the CUDA events that time "
        "it, beyond its kernels' spacings (the host submitting the graph, the graph's start; None: 0)")
    warp_size: int = Field(default=32, gt=0)
    sector_bytes: Literal[32] = Field(default=32, description="L2 sector; every CUDA GPU since Maxwell uses 32")
    l1_line_bytes: Literal[128] = Field(
        default=128, description="L1 cache line (four sectors); every CUDA GPU since Maxwell uses 128")
    reg_alloc_unit: int = Field(default=256, gt=0, description="registers allocated per warp in these units")
    l2_usable_fraction: float = Field(default=0.75, gt=0, le=1)
    l2_coalesce_blocks: float = Field(
        default=1.0, ge=1,
        description="blocks on SMs of one GPC whose reads of the same sectors at about the same time reach L2 as "
        "one (the H100 merges up to about 4; benchmarks/probe_copy.py, the cR patterns): 1 = none")
    gpc_count: int = Field(
        default=1, ge=1,
        description="graphics processing clusters: concurrent reads of one sector from SMs of different GPCs "
        "reach L2 separately (benchmarks/probe_copy.py, the sN patterns)")
    gpc_dispatch_blocks: int = Field(
        default=1, ge=1,
        description="consecutive blocks that the block scheduler places on one GPC before the next, in a launch of "
        "gpc_dispatch_blocks x (gpc_count + 1) blocks or more; a smaller launch spreads the blocks after its "
        "first gpc_dispatch_blocks over the GPCs (benchmarks/probe_copy.py's SM map)")
    cluster_sms: int | None = Field(
        default=None, gt=0,
        description="SMs that thread-block clusters of 4 or more blocks can use: the scheduler places a "
        "cluster within one GPC, so the SMs of a GPC beyond its last whole cluster stay idle (None: all; "
        "measured by benchmarks/probe_placement.py)")
    estimated: tuple[str, ...] = Field(
        default=(),
        description="datasheet fields whose value is an estimate (no datasheet figure, no measurement): plans "
        "say so until a [measured] value replaces it")
    fit_from: str | None = Field(
        default=None,
        description="the bundled spec name (or TOML path) whose kernel fit this GPU borrows; None: its own [fit]")
    fit: KernelFit = Field(description="the fitted kernel parameters (fuseplanner.hw.kernel_fit)")
    refit: dict[str, float] = Field(
        default_factory=dict,
        description="fitted parameters this GPU fits on its own measurements over a borrowed fit (fit_from), "
        "each with a refit.NAME note in [sources]: the graph-context terms fitted on its executor runs, say, "
        "while the kernel parameters stay borrowed; `fit` carries them")
    sources: dict[str, str] = Field(default_factory=dict)
    measured: dict[str, float] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _resolve_fit(cls, data: Any) -> Any:
        """Give the spec its fit: its own ``[fit]`` table, else the borrowed fit of ``fit_from`` (default
        `DEFAULT_FIT`) with the values of its ``[refit]`` table. Kernel parameters at top level or in
        ``[measured]`` (the layout before the fit had its own table) override the fit's values."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        legacy = {k: data.pop(k) for k in PARAMS if k in data}
        measured = data.get("measured")
        if isinstance(measured, dict) and any(k in PARAMS for k in measured):
            legacy.update({k: v for k, v in measured.items() if k in PARAMS})
            data["measured"] = {k: v for k, v in measured.items() if k not in PARAMS}
        refit = data.get("refit") or {}
        refit = {k: v for k, v in refit.items() if k in PARAMS} if isinstance(refit, dict) else {}  # else refused below
        if data.get("fit") is None:
            data["fit_from"] = data.get("fit_from") or DEFAULT_FIT
            data["fit"] = borrowed_fit(str(data["fit_from"]))
        elif refit and not data.get("fit_from"):
            raise ValueError("[refit] refits values of a borrowed fit (fit_from): a fit of the spec's own puts them in [fit]")
        overrides = {**refit, **legacy}  # a value given beside the facts (a variant) wins over the refit one
        if overrides:
            fit = data["fit"]
            fit = fit.model_dump() if isinstance(fit, KernelFit) else dict(fit)
            notes = dict(data.get("sources") or {})
            refit_notes = {k: str(notes.get(f"refit.{k}", "[refit]")) for k in refit}
            data["fit"] = {**fit, **overrides, "sources": {**fit.get("sources", {}), **refit_notes}}
        return data

    @field_validator("measured")
    @classmethod
    def _known_measured(cls, v: dict[str, float]) -> dict[str, float]:
        for key, val in v.items():
            if key not in MEASURABLE:
                raise ValueError(f"measured.{key} is not a measurable field (use one of {', '.join(MEASURABLE)})")
            if not (isinstance(val, int | float) and math.isfinite(val) and val > 0):
                raise ValueError(f"measured.{key} must be a positive number")
        return v

    @field_validator("refit")
    @classmethod
    def _known_refit(cls, v: dict[str, float]) -> dict[str, float]:
        for key in v:
            if key not in PARAMS:
                raise ValueError(f"refit.{key} is not a fitted parameter (use one of {', '.join(PARAMS[:3])}, ...)")
        return v

    @field_validator("estimated")
    @classmethod
    def _known_estimated(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for key in v:
            if key not in MEASURABLE and key != "clock_hz":
                raise ValueError(f"{key} is not a datasheet number (estimated lists fields such as {MEASURABLE[0]})")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> GpuSpec:
        if self.smem_per_block_bytes > self.smem_per_sm_bytes:
            raise ValueError("smem_per_block_bytes exceeds smem_per_sm_bytes")
        if self.max_threads_per_block > self.max_threads_per_sm:
            raise ValueError("max_threads_per_block exceeds max_threads_per_sm")
        if self.cluster_sms is not None and self.cluster_sms > self.sm_count:
            raise ValueError("cluster_sms exceeds sm_count")
        if (self.fit_from is not None) != self.fit.borrowed:
            raise ValueError("give either fit_from (a borrowed fit) or a [fit] table of the spec's own, not both")
        return self

    def __hash__(self) -> int:
        return hash(self.hw)

    def eff(self, field: str) -> Any:
        """Effective value of `field`: the calibrated measurement when present, else the datasheet value;
        a kernel parameter's value comes from the spec's fit."""
        if field in self.measured:
            return self.measured[field]
        if field in PARAMS:
            return getattr(self.fit, field)
        return getattr(self, field)

    @property
    def plan_only(self) -> bool:
        """True when the bundled kernels cannot run on this GPU (compute capability below 8.0)."""
        major, minor = (int(x) for x in self.compute_capability.split("."))
        return (major, minor) < KERNEL_MIN_CC

    def warnings(self, kernel_fit: bool = True, graph: bool = False) -> list[str]:
        """What limits trust in this spec's predictions, one line each: a borrowed kernel fit (unless
        `kernel_fit` is False: a cost model that does not read the fit), a GPU the bundled kernels cannot
        run on, datasheet values that are estimates (the graph-context facts `GRAPH_FIELDS` only when
        `graph`: a prediction in the isolated context does not read them)."""
        out = []
        if kernel_fit and self.fit.borrowed:
            own = f" (refitted here: {', '.join(self.refit)})" if self.refit else ""
            out.append(f"{self.name} has no kernel fit of its own: kernel parameters borrowed from "
                       f"{self.fit.source_gpu}{own}; fit them on this GPU with `fuseplanner calibrate --out FILE` "
                       "(a micro-sweep, minutes), then pass --gpu FILE")
        if self.plan_only:
            out.append(f"{self.name} is compute capability {self.compute_capability}: the bundled kernels need "
                       "sm_80 or newer (cp.async, mma), so this plan is a prediction only")
        guessed = [f for f in self.estimated if f not in self.measured and (graph or f not in GRAPH_FIELDS)]
        if guessed:
            verb = "is an estimate" if len(guessed) == 1 else "are estimates"
            out.append(f"{self.name}: {', '.join(guessed)} {verb}, not a datasheet figure or a measurement "
                       f"(`fuseplanner gpus {self.name} --json --sources` says how each was estimated)")
        return out

    @cached_property
    def hw(self) -> Hw:
        """Effective numbers as a `Hw` record (cached); missing tensor-core rates fall back to CUDA cores."""
        e, f, clock = self.eff, self.fit, self.clock_hz
        return Hw(
            sm_count=self.sm_count, max_threads_per_sm=self.max_threads_per_sm,
            max_blocks_per_sm=self.max_blocks_per_sm, regs_per_sm=self.regs_per_sm,
            reg_alloc_unit=self.reg_alloc_unit, warp_size=self.warp_size, smem_per_sm_bytes=self.smem_per_sm_bytes,
            smem_reserved_per_block_bytes=self.smem_reserved_per_block_bytes, l2_bytes=self.l2_bytes,
            l2_usable_fraction=float(e("l2_usable_fraction")), sector_bytes=self.sector_bytes,
            dram_bw=float(e("dram_bw_bytes_per_s")), l2_bw=float(e("l2_bw_bytes_per_s")),
            fp32_flops=float(e("fp32_flops")), fp16_flops=float(e("fp16_flops")),
            fp16_tc_flops=float(e("fp16_tc_flops") or e("fp16_flops")),
            tf32_tc_flops=float(e("tf32_tc_flops") or e("fp32_flops")),
            launch_overhead_s=float(e("launch_overhead_s")), mem_latency_s=float(e("mem_latency_s")),
            clock_hz=float(clock), l2_coalesce_blocks=float(self.l2_coalesce_blocks), gpc_count=int(self.gpc_count),
            gpc_dispatch_blocks=int(self.gpc_dispatch_blocks), cluster_sms=self.cluster_sms or self.sm_count,
            l1_cache_bytes=max(0, self.l1_bytes - self.smem_per_sm_bytes), l1_line_bytes=self.l1_line_bytes,
            dw_warp_flops=(f.dw_warp_flops_per_cycle_fp32 * clock, f.dw_warp_flops_per_cycle_fp16 * clock),
            pw_warp_flops=tuple(getattr(f, f"pw_warp_flops_per_cycle_{m}") * clock for m in ("fp32", "tf32", "fp16")),
            fused_pw_warp_flops=tuple(getattr(f, f"fused_pw_warp_flops_per_cycle_{m}") * clock
                                      for m in ("fp32", "tf32", "fp16")),
            fused_dw_warp_flops=f.fused_dw_warp_flops_per_cycle * clock,
            fused_weight_l2_fraction=f.fused_weight_l2_fraction,
            fused_weight_l2_fraction_fp16=f.fused_weight_l2_fraction_fp16,
            fused_weight_load_fraction=f.fused_weight_load_fraction,
            warp_load_bytes_per_s=f.warp_load_bytes_per_cycle * clock,
            block_warp_exponent=f.block_warp_exponent, fused_block_warp_exponent=f.fused_block_warp_exponent,
            coresident_exponent=f.coresident_exponent, fused_sm_issue_warps=f.fused_sm_issue_warps,
            fused_shared_load_weight=f.fused_shared_load_weight, fused_epilogue_weight=f.fused_epilogue_weight,
            fused_window_epilogue_weight=f.fused_window_epilogue_weight,
            pw_shared_load_weight=f.pw_shared_load_weight, pw_mma_load_weight=f.pw_mma_load_weight,
            pw_chunk_s=f.pw_chunk_cycles / clock,
            sm_issue_warps=f.sm_issue_warps, kernel_fixed_s=f.kernel_fixed_s, fused_kernel_fixed_s=f.fused_kernel_fixed_s,
            library_stream_bw_fraction=f.library_stream_bw_fraction,
            library_gemm_slice_cycles=f.library_gemm_slice_cycles, library_row_iter_cycles=f.library_row_iter_cycles,
            library_direct_terms_per_cycle=f.library_direct_terms_per_cycle,
            graph_dw_kernel_s=f.graph_dw_kernel_s, graph_pw_kernel_s=f.graph_pw_kernel_s,
            graph_linear_kernel_s=f.graph_linear_kernel_s, graph_fused_kernel_s=f.graph_fused_kernel_s,
        )  # fmt: skip

    def summary(self) -> dict[str, Any]:
        """The spec as a JSON-ready dict of its fields (without sources), effective values under
        `effective`, the fit's provenance and values under `fit`."""
        d = self.model_dump(exclude={"sources", "fit"})
        d["effective"] = {k: self.eff(k) for k in MEASURABLE}
        d["fit"] = self.fit.model_dump(exclude={"sources"})
        return d


def _spec_dir():
    return resources.files("fuseplanner") / "data" / "gpu_specs"


def _bundled() -> dict[str, Any]:
    """Bundled spec files by stem."""
    return {p.name[:-5]: p for p in _spec_dir().iterdir() if p.name.endswith(".toml")}


def _invalid(origin: str, exc: ValidationError) -> SpecError:
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or "(file)"
    msg = err["msg"].removeprefix("Value error, ")
    return SpecError(f"{origin}: field {field!r}: {msg}; fix it in the TOML")


def _toml(text: str, origin: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{origin}: not valid TOML ({exc}); fix the file") from None


def _parse(text: str, stem: str, origin: str, folder: Path | None = None) -> GpuSpec:
    data = _toml(text, origin)
    data.setdefault("name", stem)
    source = data.get("fit_from")
    if folder is not None and isinstance(source, str) and _bundled_stem(source) is None and not Path(source).is_absolute():
        data["fit_from"] = str(folder / source)  # a path relative to the spec file, not to the working directory
    try:
        return GpuSpec.model_validate(data)
    except ValidationError as exc:
        raise _invalid(origin, exc) from None


@cache
def _bundled_fit(stem: str) -> KernelFit:
    return _own_fit(_bundled()[stem].read_text(encoding="utf-8"), f"gpu_specs/{stem}.toml", stem)


def _own_fit(text: str, origin: str, source: str) -> KernelFit:
    table = _toml(text, origin).get("fit")
    if not isinstance(table, dict):
        raise SpecError(f"fit_from = {source!r}: {origin} has no [fit] table of its own; name a spec that has "
                        f"one (e.g. {DEFAULT_FIT!r})")
    try:
        return KernelFit.model_validate(table)
    except ValidationError as exc:
        raise _invalid(f"{origin} [fit]", exc) from None


def _bundled_stem(name: str) -> str | None:
    """The bundled spec stem `name` spells (aliases included), or None."""
    stem = name.lower().replace("-", "_")
    stem = ALIASES.get(stem, stem)
    return stem if stem in _bundled() else None


def borrowed_fit(source: str) -> KernelFit:
    """The kernel fit of spec `source` (a bundled name or a TOML path) as another GPU borrows it."""
    stem = _bundled_stem(source)
    if stem is not None:
        return _bundled_fit(stem).lent()
    p = Path(source)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"fit_from = {source!r}: not a bundled GPU and cannot read it ({exc.strerror})") from None
    return _own_fit(text, str(p), source).lent()


def load(path: str | Path) -> GpuSpec:
    """Load a user spec file (TOML); its stem becomes `name` unless the file sets one."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read GPU spec {str(p)!r}: {exc.strerror}") from None
    return _parse(text, p.stem, str(p), p.parent)


_CACHE: dict[str, GpuSpec] = {}
#: Other accepted spellings of bundled stems.
ALIASES = {"a100": "a100_80gb", "a4000": "rtx_a4000", "1660": "gtx1660", "4090": "rtx4090", "jetson_orin": "orin"}


def gpu(name_or_path: str | Path | GpuSpec) -> GpuSpec:
    """A bundled spec by short name (``"h100"``), or a user TOML by path. A GpuSpec passes through."""
    if isinstance(name_or_path, GpuSpec):
        return name_or_path
    key = str(name_or_path)
    if key in _CACHE:
        return _CACHE[key]
    bundled = _bundled()
    stem = key.lower().replace("-", "_")
    stem = ALIASES.get(stem, stem)
    if stem in bundled:
        spec = _parse(bundled[stem].read_text(encoding="utf-8"), stem, f"gpu_specs/{stem}.toml")
    elif key.endswith(".toml") or "/" in key or Path(key).is_file():
        spec = load(key)
        return spec  # user files are not cached: they may change between calls
    else:
        raise SpecError(f"unknown GPU {key!r}: use one of {', '.join(sorted(bundled))} or a path to a TOML file")
    _CACHE[key] = spec
    return spec


def list_gpus() -> list[GpuSpec]:
    """Every bundled spec, sorted by name."""
    return [gpu(stem) for stem in sorted(_bundled())]


def detect() -> GpuSpec | None:
    """The bundled spec of the local GPU (device 0) via CuPy, or None without CuPy, a device, or a match."""
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None
        props = cupy.cuda.runtime.getDeviceProperties(0)
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        return match_device(name, int(props["multiProcessorCount"]), f"{props['major']}.{props['minor']}")
    except Exception:  # detect() never raises, by contract
        return None


def match_device(name: str, sm_count: int, compute_capability: str) -> GpuSpec | None:
    """The bundled spec with this SM count and compute capability; a device-name match breaks ties."""
    same = [s for s in list_gpus() if s.sm_count == sm_count and s.compute_capability == compute_capability]
    named = [s for s in same if any(n and n in name for n in s.device_names)]
    if len(named) == 1:
        return named[0]
    return same[0] if len(same) == 1 else None
