"""The fitted kernel parameters of a GPU: `KernelFit`, separate from the GPU's datasheet facts.

The cost model's time and traffic terms for fuseplanner's own kernels (achieved FLOPs per warp per
clock, warp exponents, co-residency, issue caps, operand-load weights, fixed launch times, the fuse
threshold) are properties of the kernels' instruction mix on one GPU, fitted to measured kernel
sequences by `fuseplanner calibrate --from-results` (`fuseplanner.validation.fit`). A GPU spec carries one fit:

- its own, a ``[fit]`` table in its TOML naming the GPU, driver, date and record set it was fitted
  on (``source_gpu``, ``driver``, ``date``, ``records``, ``record_count``), its values, and a
  ``[fit.sources]`` table with a note per value (and, from `fuseplanner calibrate --out`, a
  ``[fit.ci]`` table: each fitted value's bootstrap interval);
- or another spec's, named by ``fit_from = "h100"`` (a bundled name or a path to a TOML with a
  ``[fit]`` table): the fit is then *borrowed* (`KernelFit.borrowed`), which plans report as a
  warning. A borrowed fit fuses at any predicted gain (``fuse_min_speedup`` and
  ``graph_fuse_min_speedup`` 1): its own thresholds were chosen on fuse decisions measured on the GPU
  it was fitted on.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: The fuse threshold: a decision rule fitted with the kernel parameters, not applied when borrowed.
THRESHOLD_FIELD = "fuse_min_speedup"
#: Its graph-context counterpart (chosen on executor-measured decisions), likewise not applied when borrowed.
GRAPH_THRESHOLD_FIELD = "graph_fuse_min_speedup"
#: A field that fits written before the graph terms were split by kernel family carry: its value was one
#: term for every layer-by-layer kernel, so it is read as both the DW and the PW family's.
RENAMED = {"graph_lbl_kernel_s": ("graph_dw_kernel_s", "graph_pw_kernel_s")}
#: A field a fit written before it existed lacks -> the field that covered its launches then: its value
#: and source note are read as the missing field's.
SPLIT_FROM = {"graph_linear_kernel_s": "graph_pw_kernel_s"}
#: Provenance fields of a fit (everything else but `sources` is a parameter the cost model reads).
META_FIELDS = ("source_gpu", "driver", "date", "records", "record_count", "borrowed", "sources", "ci")


class KernelFit(BaseModel):
    """Fitted parameters of fuseplanner's kernels on one GPU, with where they were fitted."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        """A fit of an earlier version: each `RENAMED` field (and its source note) read as the fields
        that replace it, unless the fit gives them; a `SPLIT_FROM` field it lacks read from the field that
        covered it."""
        if not isinstance(data, dict) or (not RENAMED.keys() & data.keys() and SPLIT_FROM.keys() <= data.keys()):
            return data  # a fit of this version: nothing to read as another field
        data = dict(data)
        sources = dict(data.get("sources") or {})
        for old, new in RENAMED.items():
            if old in data:
                value, note = data.pop(old), sources.pop(old, None)
                for n in new:
                    data.setdefault(n, value)
                    if note is not None:
                        sources.setdefault(n, note)
        for new, old in SPLIT_FROM.items():
            if new not in data and old in data:
                data[new] = data[old]
                if old in sources:
                    sources.setdefault(new, sources[old])
        if "sources" in data:
            data["sources"] = sources
        return data

    source_gpu: str = Field(min_length=1, description="the GPU the parameters were fitted on (bundled spec name or device name)")
    driver: str = Field(default="", description="NVIDIA driver / CUDA version of the fitted records")
    date: str = Field(default="", description="ISO date of the fit")
    records: str = Field(default="", description="the record set fitted to")
    record_count: int = Field(default=0, ge=0, description="kernel sequences fitted to")
    borrowed: bool = Field(default=False, description="True when a spec uses another GPU's fit (fit_from)")
    dw_warp_flops_per_cycle_fp32: float = Field(
        gt=0, description="achieved FLOPs per warp per clock of the depthwise stencil (layer by layer), fp32 storage")
    dw_warp_flops_per_cycle_fp16: float = Field(gt=0, description="same, fp16 storage (fp32 arithmetic)")
    pw_warp_flops_per_cycle_fp32: float = Field(
        gt=0, description="achieved FLOPs per warp per clock of the layer-by-layer PW/linear kernel, exact fp32")
    pw_warp_flops_per_cycle_tf32: float = Field(gt=0, description="same, fp32 storage on TF32 tensor cores")
    pw_warp_flops_per_cycle_fp16: float = Field(gt=0, description="same, fp16 storage on FP16 tensor cores")
    fused_pw_warp_flops_per_cycle_fp32: float = Field(
        gt=0, description="achieved FLOPs per warp per clock of the PW stages of fused kernels, exact fp32")
    fused_pw_warp_flops_per_cycle_tf32: float = Field(gt=0, description="same, TF32 tensor cores")
    fused_pw_warp_flops_per_cycle_fp16: float = Field(gt=0, description="same, FP16 tensor cores")
    fused_dw_warp_flops_per_cycle: float = Field(
        gt=0, description="achieved FLOP-equivalents per warp per clock of the fused kernels' DW stencil (dw_window: "
        "operands from shared memory, fp32 arithmetic, any storage dtype), per issued FLOP with its shared "
        "loads counted (kernels.families.fused.cost._dw_issue)")
    fused_weight_l2_fraction: float = Field(
        gt=0, le=2, description="L2 read sectors per modelled sector of a fused kernel's per-block copies of its "
        "packed PW weights (16-byte cp.async.ca), fp32 storage, beyond what the L2 merges of the concurrent "
        "copies of neighbouring blocks (l2_coalesce_blocks); its DW filters and biases go through L1 and reach "
        "L2 once (cost/model.py l1_filtered)")
    fused_weight_l2_fraction_fp16: float = Field(gt=0, le=2, description="the same for fp16 storage")
    fused_weight_load_fraction: float = Field(
        gt=0, le=2, description="share of a fused kernel's per-block weight reads (packed PW weights, DW filters, "
        "biases) that the time model charges its loads, L1 hits included (kept by calibrate --from-results)")
    block_warp_exponent: float = Field(
        gt=0, le=1, description="a block of w warps of the layer-by-layer kernels computes at w ** exponent times "
        "one warp's rate (its warps share shared-memory bandwidth and barriers)")
    fused_block_warp_exponent: float = Field(gt=0, le=1, description="same for the fused kernels")
    warp_load_bytes_per_cycle: float = Field(
        gt=0, description="bytes per clock one warp of fuseplanner's kernels loads from L2/DRAM (bytes in flight "
        "over latency): a block's reads take at least its bytes / (warps ** exponent x this x clock)")
    coresident_exponent: float = Field(
        ge=0, le=1, description="a block's serial chain (loads, waits, own compute) takes (resident blocks per SM) "
        "** this times as long as alone: co-resident blocks share the SM's issue slots and shared-memory "
        "bandwidth (0: no slowdown)")
    fused_sm_issue_warps: float = Field(
        ge=0, description="an SM runs the issued work of its resident fused-kernel blocks at most at this many "
        "warps' rate (the fused warp rates x this) (0: no cap)")
    fused_shared_load_weight: float = Field(
        ge=0, description="FMA-equivalents (exact fp32) or mma-equivalents (tensor cores) that the fused kernels' "
        "issued work charges per shared-memory operand load of a GEMM unit or DW stencil item (a float4, an ldmatrix)")
    fused_epilogue_weight: float = Field(
        ge=0, description="FMA-equivalents that the fused kernels' issued work charges per element of their staged "
        "epilogue (kernels.families.fused.cost.epilogue_issue), at the fused DW stencil's warp rate")
    fused_window_epilogue_weight: float = Field(
        ge=0, description="FMA-equivalents that the pw_dw and pw_dw_pw kernels' issued work charges per element "
        "their expansion GEMM stores into the staged window (kernels.families.fused.cost.window_epilogue_issue)")
    pw_shared_load_weight: float = Field(
        ge=0, description="FMA-equivalents that the layer-by-layer pw/linear kernel's exact-fp32 path charges per "
        "shared-memory operand load of its register block (0: useful FLOPs, term off for that path)")
    pw_mma_load_weight: float = Field(
        ge=0, description="mma-equivalents that the layer-by-layer pw/linear kernel's tensor-core path charges per "
        "fragment load (an ldmatrix) of its warp's mma tiles (0: term off for that path)")
    pw_chunk_cycles: float = Field(
        default=0.0, ge=0, description="clock cycles each chunk iteration (a barrier, a register block's operand "
        "staging) adds to the serial chain of a layer-by-layer pw/linear block, whatever its register block: a "
        "block of few outputs per thread pays it over few FMAs (cost.time; schema default 0: term off)")
    sm_issue_warps: float = Field(
        ge=0, description="an SM runs the work of its resident layer-by-layer pw/linear blocks at most at this many "
        "warps' rate, as fused_sm_issue_warps does for the fused kernels (0: no cap)")
    kernel_fixed_s: float = Field(
        ge=0, description="seconds one launch of the layer-by-layer kernels takes beyond the empty-launch floor "
        "(launch_overhead_s) whatever its work: first touches after the L2 flush, prologue and tail")
    fused_kernel_fixed_s: float = Field(
        ge=0, description="same for the fused kernels (their prologue fills the cp.async ring and stages weights)")
    launch_overlap_s: float = Field(
        ge=0, description="seconds each launch after the first of back-to-back launches takes less than it does "
        "alone (Cost.overlapped)")
    library_stream_bw_fraction: float = Field(
        default=1.0, gt=0, le=2, description="graph context: the fraction of dram_bw at which the executor's "
        "operator-library streaming kernels (CuPy elementwise, copy, gather) move their bytes in a graph replay "
        "with their operands in L2 (cost.library; schema default 1: DRAM bandwidth)")
    library_gemm_slice_cycles: float = Field(default=0.0, ge=0, description=(
        "graph context: clock cycles one block of the executor's CUDA-core GEMM (run.ops._gemm) takes per 16-deep "
        "K slice, an SM's blocks one after another (cost.library; schema default 0: term off)"))
    library_row_iter_cycles: float = Field(default=0.0, ge=0, description=(
        "graph context: clock cycles of one 32-column iteration of one pass of the executor's LayerNorm/Softmax "
        "row kernel (run.ops._rows; cost.library; schema default 0: term off)"))
    graph_dw_kernel_s: float = Field(default=0.0, ge=-5e-6, le=5e-6, description=(
        "graph context: seconds a launch of class dw (core.kinds.LAUNCH_CLASSES) takes among back-to-back "
        "CUDA-graph kernels beyond its isolated time less the isolated floor plus the graph tail (the graph "
        "counterpart of its share of kernel_fixed_s; cost.execution; schema default 0)"))
    graph_pw_kernel_s: float = Field(default=0.0, ge=-5e-6, le=5e-6, description=(
        "graph context: the same for a launch of class pw (PW over NCHW maps, PW->PW pairs over them included)"))
    graph_linear_kernel_s: float = Field(default=0.0, ge=-5e-6, le=5e-6, description=(
        "graph context: the same for a launch of class linear (channel-last tokens); a fit without it takes "
        "graph_pw_kernel_s, which covered linear launches before"))
    graph_fused_kernel_s: float = Field(default=0.0, ge=-5e-6, le=5e-6, description=(
        "graph context: the same for a launch of class fused (the graph counterpart of fused_kernel_fixed_s)"))
    library_direct_terms_per_cycle: float = Field(default=0.0, ge=0, description=(
        "graph context: products (input channel x tap, one load and one FMA each) per SM per clock cycle of the "
        "executor's direct conv kernel (run.ops._cuda.conv2d, one thread per output; cost.library; schema "
        "default 0: term off)"))
    fuse_min_speedup: float = Field(
        ge=1.0, description="the planner fuses a group for time only when its predicted unfused/fused time ratio "
        "reaches this (1: any predicted gain); fitted to measured decisions")
    graph_fuse_min_speedup: float = Field(
        default=1.0, ge=0.8, description="the same threshold when the plan decides in the graph context "
        "(the default of `plan`): chosen on fuse decisions measured in the executor (`calibrate --from-whole`; "
        "schema default 1: any predicted gain; under 1 a group predicted up to that much slower fused is fused)")
    sources: dict[str, str] = Field(default_factory=dict, description="a note per value: how it was fitted")
    ci: dict[str, tuple[float, float]] = Field(
        default_factory=dict, description="bootstrap interval (5th, 95th percentile) of fitted values, by name: "
        "records resampled and refitted (`fuseplanner calibrate`, validation.fit_sweep.bootstrap)")

    def lent(self) -> KernelFit:
        """This fit as another GPU borrows it: marked borrowed, fusing at any predicted gain."""
        return self.model_copy(update={"borrowed": True, THRESHOLD_FIELD: 1.0, GRAPH_THRESHOLD_FIELD: 1.0})

    def values(self) -> dict[str, float]:
        """The fitted parameters by name (no provenance)."""
        return {k: float(getattr(self, k)) for k in PARAMS}


#: Names of the fitted parameters, in schema order.
PARAMS: tuple[str, ...] = tuple(k for k in KernelFit.model_fields if k not in META_FIELDS)
