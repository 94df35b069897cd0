"""GPU descriptions: the `GpuSpec` schema, the bundled spec library, and local device detection.

Each GPU is one TOML file (`gpu_specs/<stem>.toml`, bundled as package data). Every number in a
bundled file has a note in its ``[sources]`` table saying where it comes from (datasheet, whitepaper,
programming guide, a measurement, or a labelled estimate). An optional ``[measured]`` table, written
by calibration, overrides datasheet values: the cost models read effective values through
`GpuSpec.eff` / `GpuSpec.hw`, never the raw datasheet fields.
"""

from __future__ import annotations

import math
import tomllib
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import SpecError

#: Numeric fields that a ``[measured]`` table may override.
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
    "dw_warp_flops_per_cycle_fp32",
    "dw_warp_flops_per_cycle_fp16",
    "pw_warp_flops_per_cycle_fp32",
    "pw_warp_flops_per_cycle_tf32",
    "pw_warp_flops_per_cycle_fp16",
    "fused_pw_warp_flops_per_cycle_fp32",
    "fused_pw_warp_flops_per_cycle_tf32",
    "fused_pw_warp_flops_per_cycle_fp16",
    "fused_dw_warp_flops_per_cycle",
    "fused_weight_l2_fraction",
    "fused_weight_l2_fraction_fp16",
    "fused_weight_load_fraction",
    "block_warp_exponent",
    "fused_block_warp_exponent",
    "warp_load_bytes_per_cycle",
    "coresident_exponent",
    "fused_sm_issue_warps",
    "fused_shared_load_weight",
    "fused_epilogue_weight",
    "fused_window_epilogue_weight",
    "pw_shared_load_weight",
    "pw_mma_load_weight",
    "sm_issue_warps",
    "kernel_fixed_s",
    "fused_kernel_fixed_s",
    "launch_overlap_s",
    "fuse_min_speedup",
)

#: Achieved FLOPs per warp per clock of fuseplanner's own kernels (the `*_warp_flops_per_cycle` fields),
#: fitted by `fuseplanner calibrate --from-results` on H100 validation records (data/records/h100/fit,
#: see data/records/README.md). They are properties of the kernels'
#: instruction mix (shared-memory operand loads, barriers, dependent chains) more than of the chip, so
#: per clock and per warp they are the best first guess on another GPU; calibrate there to replace them.
#: The TF32 rates (layer-by-layer and fused) were fitted on two TF32 sweeps only (MobileNetV2 and
#: MobileNetV3-Large, batch 1): not yet checked out of sample. The fused fields (rates, warp exponent,
#: co-residency, SM issue cap, `fused_kernel_fixed_s`) were fitted together with
#: `fused_shared_load_weight` (3) and `fused_epilogue_weight` (16), both chosen by scans
#: (scripts/field_scan.py), then the layer-by-layer ones, on the 4,119 timed counter records of
#: data/records/h100/fit (batch 1-8, fp32 and fp16), and scored on data/records/h100/holdout; the
#: commands are in gpu_specs/h100.toml.
KERNEL_RATE_DEFAULTS: dict[str, float] = {
    "dw_warp_flops_per_cycle_fp32": 1.06,
    "dw_warp_flops_per_cycle_fp16": 1.166,
    "pw_warp_flops_per_cycle_fp32": 5.668,
    "pw_warp_flops_per_cycle_tf32": 5.338,
    "pw_warp_flops_per_cycle_fp16": 13.03,
    "fused_pw_warp_flops_per_cycle_fp32": 27.376,
    "fused_pw_warp_flops_per_cycle_tf32": 151.624,
    "fused_pw_warp_flops_per_cycle_fp16": 212.013,
    "fused_dw_warp_flops_per_cycle": 15.084,
    "fused_weight_l2_fraction": 1.05,
    "fused_weight_l2_fraction_fp16": 1.3,
    "fused_weight_load_fraction": 0.7,
    "block_warp_exponent": 0.952,
    "fused_block_warp_exponent": 0.912,
    "warp_load_bytes_per_cycle": 3.276,
    "coresident_exponent": 0.212,
    "fused_sm_issue_warps": 3.774,
    "fused_shared_load_weight": 3.0,
    "fused_epilogue_weight": 16.0,
    "fused_window_epilogue_weight": 0.0,
    "pw_shared_load_weight": 0.0,
    "pw_mma_load_weight": 0.0,
    "sm_issue_warps": 0.0,
    "kernel_fixed_s": 3.624e-07,
    "fused_kernel_fixed_s": 2.919e-06,
    "launch_overlap_s": 0.0,
}


class Hw(NamedTuple):
    """Effective (measured where available) hardware numbers as a plain tuple for the hot cost loops."""

    sm_count: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    regs_per_sm: int
    reg_alloc_unit: int
    warp_size: int
    smem_per_sm: int
    smem_reserved: int
    l2_bytes: int
    l2_usable: float
    sector: int
    dram_bw: float
    l2_bw: float
    fp32: float
    fp16: float
    fp16_tc: float
    tf32_tc: float
    launch: float
    latency: float
    clock_hz: float
    coalesce: float  # concurrent readers of one GPC whose reads of the same sectors L2 sees once
    gpcs: int  # GPCs: readers on different GPCs never merge
    gpc_chunk: int  # consecutive blocks of a large launch that the scheduler places on one GPC
    #: achieved FLOP/s of one warp of fuseplanner's kernels (rate per cycle x clock): DW stencil,
    #: layer-by-layer PW/linear by math mode, and the PW stages of fused kernels by math mode
    warp_dw: tuple[float, float]  # fp32, fp16 storage
    warp_pw: tuple[float, float, float]  # fp32, tf32, fp16
    warp_fused_pw: tuple[float, float, float]
    warp_fused_dw: float  # the fused kernels' DW stencil (fp32 operands from shared memory, any storage dtype)
    fused_w_l2: tuple[float, float]  # L2 sectors per modelled sector of a fused kernel's per-block packed PW weight copies: fp32, fp16
    fused_w_load: float  # share of a fused kernel's per-block weight reads that its loads cost (time model)
    warp_load: float  # bytes/s one warp's loads bring in (Little's law: bytes in flight / latency)
    warp_exp: tuple[float, float]  # a block of w warps computes at w ** exp times one warp's rate: LBL, fused
    cluster_sms: int  # SMs whose blocks clusters of CLUSTER_PLACED_MIN or more blocks can use
    coresident_exp: float  # a block's serial chain is slowed by (blocks resident on its SM) ** this
    fused_sm_warps: float  # an SM issues its resident fused blocks' work at most at this many warps' rate (0: no cap)
    fused_load_w: float  # FMA-equivalents the fused kernels' issued work charges per shared-memory operand load
    fused_epi_w: float  # FMA-equivalents the fused kernels' issued work charges per element of a staged epilogue
    fused_win_w: float  # ... per element of a pw_dw / pw_dw_pw expansion's window epilogue
    pw_load_w: tuple[float, float]  # FMA- (exact fp32) / mma-equivalents (tensor cores) the layer-by-layer pw/linear issued work charges per operand load (0: that path off)
    sm_warps: float  # an SM issues its resident layer-by-layer pw/linear blocks' work at most at this many warps' rate
    fixed: tuple[float, float]  # seconds a launch takes beyond the empty-launch floor whatever its work: LBL, fused
    l1_cache: int  # bytes of L1 data cache an SM keeps at the largest shared-memory carveout (l1_bytes - smem_per_sm)
    l1_line: int  # L1 cache line bytes


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
    dw_warp_flops_per_cycle_fp32: float = Field(
        default=KERNEL_RATE_DEFAULTS["dw_warp_flops_per_cycle_fp32"], gt=0,
        description="achieved FLOPs per warp per clock of the depthwise stencil (layer by layer and fused), fp32 storage")
    dw_warp_flops_per_cycle_fp16: float = Field(
        default=KERNEL_RATE_DEFAULTS["dw_warp_flops_per_cycle_fp16"], gt=0,
        description="same, fp16 storage (fp32 arithmetic)")
    pw_warp_flops_per_cycle_fp32: float = Field(
        default=KERNEL_RATE_DEFAULTS["pw_warp_flops_per_cycle_fp32"], gt=0,
        description="achieved FLOPs per warp per clock of the layer-by-layer PW/linear kernel, exact fp32")
    pw_warp_flops_per_cycle_tf32: float = Field(
        default=KERNEL_RATE_DEFAULTS["pw_warp_flops_per_cycle_tf32"], gt=0,
        description="same, fp32 storage on TF32 tensor cores")
    pw_warp_flops_per_cycle_fp16: float = Field(
        default=KERNEL_RATE_DEFAULTS["pw_warp_flops_per_cycle_fp16"], gt=0,
        description="same, fp16 storage on FP16 tensor cores")
    fused_pw_warp_flops_per_cycle_fp32: float = Field(
        default=KERNEL_RATE_DEFAULTS["fused_pw_warp_flops_per_cycle_fp32"], gt=0,
        description="achieved FLOPs per warp per clock of the PW stages of fused kernels, exact fp32")
    fused_pw_warp_flops_per_cycle_tf32: float = Field(
        default=KERNEL_RATE_DEFAULTS["fused_pw_warp_flops_per_cycle_tf32"], gt=0,
        description="same, TF32 tensor cores")
    fused_pw_warp_flops_per_cycle_fp16: float = Field(
        default=KERNEL_RATE_DEFAULTS["fused_pw_warp_flops_per_cycle_fp16"], gt=0,
        description="same, FP16 tensor cores")
    fused_dw_warp_flops_per_cycle: float = Field(
        default=KERNEL_RATE_DEFAULTS["fused_dw_warp_flops_per_cycle"], gt=0,
        description="achieved FLOP-equivalents per warp per clock of the fused kernels' DW stencil (dw_window: "
        "operands from shared memory, fp32 arithmetic, any storage dtype), per issued FLOP with its shared "
        "loads counted (cost.fused._dw_issue)")
    fused_weight_l2_fraction: float = Field(
        default=KERNEL_RATE_DEFAULTS["fused_weight_l2_fraction"], gt=0, le=2,
        description="L2 read sectors per modelled sector of a fused kernel's per-block copies of its packed PW "
        "weights (16-byte cp.async.ca), fp32 storage, beyond what the L2 merges of the concurrent copies of "
        "neighbouring blocks (l2_coalesce_blocks); its DW filters and biases go through L1 and reach L2 once "
        "(cost/model.py l1_filtered)")
    fused_weight_l2_fraction_fp16: float = Field(
        default=KERNEL_RATE_DEFAULTS["fused_weight_l2_fraction_fp16"], gt=0, le=2,
        description="the same for fp16 storage (above 1 on the H100: its fp16 weight copies cost more L2 "
        "sectors than the packed bytes)")
    fused_weight_load_fraction: float = Field(
        default=KERNEL_RATE_DEFAULTS["fused_weight_load_fraction"], gt=0, le=2,
        description="share of a fused kernel's per-block weight reads (packed PW weights, DW filters, "
        "biases) that the time model charges its loads, L1 hits included (the bundled warp rates were fitted "
        "with 0.7; calibrate --from-results keeps it)")
    block_warp_exponent: float = Field(
        default=KERNEL_RATE_DEFAULTS["block_warp_exponent"], gt=0, le=1,
        description="a block of w warps of the layer-by-layer kernels computes at w ** exponent times one "
        "warp's rate (its warps share shared-memory bandwidth and barriers)")
    warp_load_bytes_per_cycle: float = Field(
        default=KERNEL_RATE_DEFAULTS["warp_load_bytes_per_cycle"], gt=0,
        description="bytes per clock one warp of fuseplanner's kernels loads from L2/DRAM (bytes in flight "
        "over latency): a block's reads take at least its bytes / (warps ** exponent x this x clock)")
    fuse_min_speedup: float = Field(
        default=1.0, ge=1.0,
        description="the planner fuses a group for time only when its predicted unfused/fused time ratio "
        "reaches this (1: any predicted gain); fitted to measured decisions by calibrate --from-results")
    fused_block_warp_exponent: float = Field(
        default=KERNEL_RATE_DEFAULTS["fused_block_warp_exponent"], gt=0, le=1,
        description="same for the fused kernels")
    coresident_exponent: float = Field(
        default=KERNEL_RATE_DEFAULTS["coresident_exponent"], ge=0, le=1,
        description="a block's serial chain (loads, waits, own compute) takes (resident blocks per SM) ** this "
        "times as long as alone: co-resident blocks share the SM's issue slots and shared-memory bandwidth "
        "(0: no slowdown)")
    fused_sm_issue_warps: float = Field(
        default=KERNEL_RATE_DEFAULTS["fused_sm_issue_warps"], ge=0,
        description="an SM runs the issued work of its resident fused-kernel blocks at most at this many "
        "warps' rate (the fused warp rates x this): however many blocks share it, the SM's shared-memory "
        "and issue bandwidth is one (0: no cap)")
    fused_shared_load_weight: float = Field(
        default=KERNEL_RATE_DEFAULTS["fused_shared_load_weight"], ge=0,
        description="FMA-equivalents (exact fp32) or mma-equivalents (tensor cores) that the fused kernels' "
        "issued work charges per shared-memory operand load of a GEMM unit or DW stencil item (a float4, "
        "an ldmatrix): how much a small register or mma block is slowed by its operand loads")
    fused_epilogue_weight: float = Field(
        default=KERNEL_RATE_DEFAULTS["fused_epilogue_weight"], ge=0,
        description="FMA-equivalents that the fused kernels' issued work charges per element of their staged "
        "epilogue (accumulator through shared memory, index arithmetic, bias, activation, residual, global "
        "store; cost.fused.epilogue_issue), at the fused DW stencil's warp rate")
    fused_window_epilogue_weight: float = Field(
        default=KERNEL_RATE_DEFAULTS["fused_window_epilogue_weight"], ge=0,
        description="FMA-equivalents that the pw_dw and pw_dw_pw kernels' issued work charges per element "
        "their expansion GEMM stores into the staged window through its epilogue (map and channel tests, "
        "bias, activation, shared store; cost.fused.window_epilogue_issue), at the fused DW stencil's warp "
        "rate")
    pw_shared_load_weight: float = Field(
        default=KERNEL_RATE_DEFAULTS["pw_shared_load_weight"], ge=0,
        description="FMA-equivalents that the layer-by-layer pw/linear kernel's exact-fp32 (CUDA core) path "
        "charges per shared-memory operand load of its register block (a float4 or single word): with it "
        "that path's own compute is its busiest thread's issued work (idle slots past the tile count), not "
        "its useful FLOPs (0: useful FLOPs, term off for that path)")
    pw_mma_load_weight: float = Field(
        default=KERNEL_RATE_DEFAULTS["pw_mma_load_weight"], ge=0,
        description="mma-equivalents that the layer-by-layer pw/linear kernel's tensor-core path (fp16, tf32) "
        "charges per fragment load (an ldmatrix) of its warp's mma tiles: with it that path's own compute is "
        "its busiest warp's issued work (idle tiles past the tile count), not its useful FLOPs (0: useful "
        "FLOPs, term off for that path)")
    sm_issue_warps: float = Field(
        default=KERNEL_RATE_DEFAULTS["sm_issue_warps"], ge=0,
        description="an SM runs the work of its resident layer-by-layer pw/linear blocks at most at this many "
        "warps' rate (the pw warp rates x this), as fused_sm_issue_warps does for the fused kernels (0: no cap)")
    kernel_fixed_s: float = Field(
        default=KERNEL_RATE_DEFAULTS["kernel_fixed_s"], ge=0,
        description="seconds one launch of fuseplanner's layer-by-layer kernels takes beyond the empty-launch "
        "floor (launch_overhead_s) whatever its work: first touches after the L2 flush, prologue and tail")
    fused_kernel_fixed_s: float = Field(
        default=KERNEL_RATE_DEFAULTS["fused_kernel_fixed_s"], ge=0,
        description="same for the fused kernels (their prologue fills the cp.async ring and stages weights)")
    launch_overlap_s: float = Field(
        default=KERNEL_RATE_DEFAULTS["launch_overlap_s"], ge=0,
        description="seconds each launch after the first of back-to-back launches takes less than it does "
        "alone (Cost.overlapped): its launch is queued while its predecessor runs, so part of the empty-launch "
        "floor and fixed time it pays alone overlaps that predecessor")
    cluster_sms: int | None = Field(
        default=None, gt=0,
        description="SMs that thread-block clusters of 4 or more blocks can use: the scheduler places a "
        "cluster within one GPC, so the SMs of a GPC beyond its last whole cluster stay idle (None: all; "
        "measured by benchmarks/probe_placement.py)")
    sources: dict[str, str] = Field(default_factory=dict)
    measured: dict[str, float] = Field(default_factory=dict)

    @field_validator("measured")
    @classmethod
    def _known_measured(cls, v: dict[str, float]) -> dict[str, float]:
        for key, val in v.items():
            if key not in MEASURABLE:
                raise ValueError(f"measured.{key} is not a measurable field (use one of {', '.join(MEASURABLE)})")
            if not (isinstance(val, int | float) and math.isfinite(val) and val > 0):
                raise ValueError(f"measured.{key} must be a positive number")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> GpuSpec:
        if self.smem_per_block_bytes > self.smem_per_sm_bytes:
            raise ValueError("smem_per_block_bytes exceeds smem_per_sm_bytes")
        if self.max_threads_per_block > self.max_threads_per_sm:
            raise ValueError("max_threads_per_block exceeds max_threads_per_sm")
        if self.cluster_sms is not None and self.cluster_sms > self.sm_count:
            raise ValueError("cluster_sms exceeds sm_count")
        return self

    def __hash__(self) -> int:
        return hash(self.hw)

    def eff(self, field: str) -> Any:
        """Effective value of `field`: the calibrated measurement when present, else the datasheet value."""
        if field in self.measured:
            return self.measured[field]
        return getattr(self, field)

    @cached_property
    def hw(self) -> Hw:
        """Effective numbers as a plain tuple (cached); missing tensor-core rates fall back to CUDA cores."""
        e = self.eff
        fp16_tc = e("fp16_tc_flops") or e("fp16_flops")
        tf32_tc = e("tf32_tc_flops") or e("fp32_flops")
        return Hw(
            self.sm_count, self.max_threads_per_sm, self.max_blocks_per_sm, self.regs_per_sm,
            self.reg_alloc_unit, self.warp_size, self.smem_per_sm_bytes, self.smem_reserved_per_block_bytes,
            self.l2_bytes, float(e("l2_usable_fraction")), self.sector_bytes, float(e("dram_bw_bytes_per_s")),
            float(e("l2_bw_bytes_per_s")), float(e("fp32_flops")), float(e("fp16_flops")), float(fp16_tc),
            float(tf32_tc), float(e("launch_overhead_s")), float(e("mem_latency_s")), float(self.clock_hz),
            float(self.l2_coalesce_blocks), int(self.gpc_count), int(self.gpc_dispatch_blocks),
            tuple(float(e(f"dw_warp_flops_per_cycle_{m}")) * self.clock_hz for m in ("fp32", "fp16")),
            tuple(float(e(f"pw_warp_flops_per_cycle_{m}")) * self.clock_hz for m in ("fp32", "tf32", "fp16")),
            tuple(float(e(f"fused_pw_warp_flops_per_cycle_{m}")) * self.clock_hz for m in ("fp32", "tf32", "fp16")),
            float(e("fused_dw_warp_flops_per_cycle")) * self.clock_hz,
            (float(e("fused_weight_l2_fraction")), float(e("fused_weight_l2_fraction_fp16"))),
            float(e("fused_weight_load_fraction")),
            float(e("warp_load_bytes_per_cycle")) * self.clock_hz,
            (float(e("block_warp_exponent")), float(e("fused_block_warp_exponent"))),
            self.cluster_sms or self.sm_count,
            float(e("coresident_exponent")),
            float(e("fused_sm_issue_warps")),
            float(e("fused_shared_load_weight")),
            float(e("fused_epilogue_weight")),
            float(e("fused_window_epilogue_weight")),
            (float(e("pw_shared_load_weight")), float(e("pw_mma_load_weight"))),
            float(e("sm_issue_warps")),
            (float(e("kernel_fixed_s")), float(e("fused_kernel_fixed_s"))),
            max(0, self.l1_bytes - self.smem_per_sm_bytes),
            self.l1_line_bytes,
        )  # fmt: skip

    def summary(self) -> dict[str, Any]:
        """The spec as a JSON-ready dict of its fields (without sources), effective values under `effective`."""
        d = self.model_dump(exclude={"sources"})
        d["effective"] = {k: self.eff(k) for k in MEASURABLE}
        return d


def _spec_dir():
    return resources.files("fuseplanner") / "data" / "gpu_specs"


def _bundled() -> dict[str, Any]:
    """Bundled spec files by stem."""
    return {p.name[:-5]: p for p in _spec_dir().iterdir() if p.name.endswith(".toml")}


def _parse(text: str, stem: str, origin: str) -> GpuSpec:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{origin}: not valid TOML ({exc}); fix the file") from None
    data.setdefault("name", stem)
    try:
        return GpuSpec.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "(file)"
        msg = err["msg"].removeprefix("Value error, ")
        raise SpecError(f"{origin}: field {field!r}: {msg}; fix it in the TOML") from None


def load(path: str | Path) -> GpuSpec:
    """Load a user spec file (TOML); its stem becomes `name` unless the file sets one."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read GPU spec {str(p)!r}: {exc.strerror}") from None
    return _parse(text, p.stem, str(p))


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
