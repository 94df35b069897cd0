"""Frozen records shared by every stage: tensors, operators, the model graph, tiles and costs.

One `Op` per graph node (after epilogue ops such as BatchNormalization or ReLU6 have been absorbed
into the op they follow). The planner never mutates a `ModelGraph`; it returns a `Plan` value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, replace

import networkx as nx

# the kind and dtype tables live in core.kinds; re-exported here, where the public `fuseplanner.ir` had them
from fuseplanner.core.kinds import DTYPE_BYTES, GROUP_KINDS, LAYER_KINDS  # noqa: F401
from fuseplanner.core.kinds import OP_KINDS as KINDS  # noqa: F401

#: ONNX element type names (as stored on records) -> short dtype names.
ONNX_TO_DTYPE = {"float32": "fp32", "float16": "fp16", "float": "fp32"}


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a storage dtype ("fp32" or "fp16")."""
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}: use one of {', '.join(DTYPE_BYTES)}") from None


def math_mode(dtype: str, precision: str) -> int:
    """The math path of the PW/linear products (kernels' PREC / USE_TC): 0 exact fp32 FMA, 1 TF32
    tensor cores (fp32 storage, precision "tf32"), 2 fp16 tensor cores (fp16 storage)."""
    if dtype == "fp16":
        return 2
    return 1 if precision == "tf32" else 0


@dataclass(frozen=True)
class TensorInfo:
    """A named tensor with a static shape. `dtype` is the ONNX element type name (e.g. "float32")."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    itemsize: int = 4

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def bytes(self) -> int:
        return self.numel * self.itemsize


@dataclass(frozen=True)
class Op:
    """One operator of the model graph.

    Shapes are NCHW for convolutions; for `linear` the input is (..., C_in) and the output
    (..., C_out) over tokens. `inputs`/`outputs` name activation tensors only (weights, biases and
    BN parameters are folded into `params`/`weight_bytes`). `outputs` are the tensors after the
    absorbed epilogue, i.e. what the next op consumes.
    """

    name: str
    op_type: str
    kind: str
    index: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    input_shapes: tuple[tuple[int, ...], ...]
    output_shapes: tuple[tuple[int, ...], ...]
    kernel: tuple[int, int] = (1, 1)
    stride: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, left, bottom, right
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    dtype: str = "float32"
    #: canonical epilogue names in order: "bias", "bn", "relu", "relu6", "clip", "hardswish",
    #: "hardsigmoid", "sigmoid", "silu", "gelu", "leakyrelu", "add" (residual)
    epilogue: tuple[str, ...] = ()
    #: ONNX node names absorbed into this op as its epilogue
    epilogue_nodes: tuple[str, ...] = ()
    has_bias: bool = False
    params: int = 0
    flops: int = 0
    input_bytes: int = 0
    output_bytes: int = 0
    weight_bytes: int = 0
    #: the model batch, set when an activation's leading dimension is not that batch (a ViT
    #: hybrid's unfolded patches run as batch x patch-pixel sequences); 0: the leading dimension is
    #: the batch
    images: int = 0

    # ---- shape views -------------------------------------------------------------------------
    @property
    def in_shape(self) -> tuple[int, ...]:
        return self.input_shapes[0] if self.input_shapes else ()

    @property
    def out_shape(self) -> tuple[int, ...]:
        return self.output_shapes[0] if self.output_shapes else ()

    @property
    def is_conv(self) -> bool:
        return self.kind in ("dw", "pw", "conv")

    @property
    def channel_last(self) -> bool:
        """Whether the op runs over channel-last tokens (..., C) rather than an NCHW map: `linear`."""
        return self.kind == "linear"

    @property
    def batch(self) -> int:
        """Images of the model batch this op's shapes hold: `images` when set, else the input's
        leading dimension (convs; linear ops over 3-D or wider token tensors; 1 for a 2-D linear)."""
        if self.images:
            return self.images
        s = self.in_shape
        if self.kind == "linear":
            return s[0] if len(s) >= 3 else 1
        return s[0] if s else 1

    @property
    def c_in(self) -> int:
        s = self.in_shape
        return s[-1] if self.kind == "linear" else s[1]

    @property
    def c_out(self) -> int:
        s = self.out_shape
        return s[-1] if self.kind == "linear" else s[1]

    def _spatial(self, s: tuple[int, ...]) -> tuple[int, int]:
        if self.kind == "linear":
            if len(s) >= 3:
                return (math.prod(s[:-1]) // max(1, self.batch), 1)
            return (s[0] if len(s) == 2 else 1, 1)
        return (s[2], s[3]) if len(s) == 4 else (1, 1)

    def kernel_shape(self, s: tuple[int, ...]) -> tuple[int, ...]:
        """`s` (this op's input or output shape) as fuseplanner's kernels take it: a linear op's
        3-D or wider tokens as (images, tokens per image, channels); any other shape unchanged."""
        if self.kind == "linear" and len(s) >= 3:
            return (self.batch, self._spatial(s)[0], s[-1])
        return s

    @property
    def hw_in(self) -> tuple[int, int]:
        """(H, W) of the input; for linear (tokens per image, 1)."""
        return self._spatial(self.in_shape)

    @property
    def hw_out(self) -> tuple[int, int]:
        """(H, W) of the output; for linear (tokens per image, 1)."""
        return self._spatial(self.out_shape)

    @property
    def multiplier(self) -> int:
        """Depthwise channel multiplier (output channels per input channel)."""
        return self.c_out // self.c_in if self.kind == "dw" and self.c_in else 1

    def with_batch(self, batch: int) -> Op:
        """The same op for a model batch of `batch` images; bytes and FLOPs rescaled. The leading
        dimension becomes `batch`, or with `images` set, `batch` x its sequences per image."""
        old = self.batch
        if batch == old:
            return self

        def fix(shape: tuple[int, ...]) -> tuple[int, ...]:
            if not shape or (self.kind == "linear" and len(shape) < 3):
                return shape
            if self.images and len(shape) >= 3:  # sequences per image kept; another leading dim stays
                lead = shape[0]
                return (lead // self.images * batch, *shape[1:]) if lead % self.images == 0 else shape
            return (batch, *shape[1:])

        scale = batch / old if old else 1.0
        return replace(
            self,
            input_shapes=tuple(fix(s) for s in self.input_shapes),
            output_shapes=tuple(fix(s) for s in self.output_shapes),
            flops=int(round(self.flops * scale)),
            input_bytes=int(round(self.input_bytes * scale)),
            output_bytes=int(round(self.output_bytes * scale)),
            images=batch if self.images else 0,
        )


@dataclass(frozen=True)
class ModelGraph:
    """A model as a DAG of `Op` records.

    `graph` nodes are op names with attribute ``op`` (the record); an edge u -> v carries
    ``tensor`` (name) and ``bytes``. `order` lists op names in execution (topological) order.
    `graph_outputs` are tensors the model returns: they always go to memory.
    """

    name: str
    graph: nx.DiGraph
    order: tuple[str, ...]
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    tensors: Mapping[str, TensorInfo] = field(default_factory=dict)
    opset: int = 18
    source: str = ""

    def op(self, name: str) -> Op:
        return self.graph.nodes[name]["op"]

    def ops(self) -> list[Op]:
        return [self.graph.nodes[n]["op"] for n in self.order]

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops())

    def __len__(self) -> int:
        return len(self.order)

    @property
    def graph_outputs(self) -> frozenset[str]:
        return frozenset(t.name for t in self.outputs)

    def producer(self, tensor: str) -> str | None:
        """Name of the op whose output is `tensor`, or None for graph inputs and constants."""
        for n in self.order:
            if tensor in self.op(n).outputs:
                return n
        return None

    def consumers(self, tensor: str) -> list[str]:
        """Names of ops that read `tensor`, in execution order."""
        return [n for n in self.order if tensor in self.op(n).inputs]

    def counts(self) -> dict[str, int]:
        """Op counts by kind; `other` counts opaque nodes."""
        c = {"dw": 0, "pw": 0, "conv": 0, "linear": 0, "other": 0}
        for op in self.ops():
            c[op.kind if op.kind in c else "other"] += 1
        return c


@dataclass(frozen=True, order=True)
class Tile:
    """Tunable parameters of one kernel launch, shared by cost models and CUDA kernels.

    th x tw: output pixels of the kernel's final layer per block (for linear: th tokens, tw = 1);
    tf: output channels (filters) of the final layer per block;
    tc: channel chunk of the inner loop (PW reduction chunk, DW channels per step in DW->PW, expanded
        channels per step in PW->DW->PW, mid channels per step in PW->PW; equal to tf for LBL DW);
    threads: threads per block.
    """

    th: int
    tw: int
    tf: int
    tc: int
    threads: int = 256

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: Mapping[str, int]) -> Tile:
        return cls(**{f.name: int(d[f.name]) for f in fields(cls) if f.name in d})

    def __str__(self) -> str:
        return f"{self.th}x{self.tw}/f{self.tf}/c{self.tc}/t{self.threads}"

    @classmethod
    def parse(cls, text: str) -> Tile:
        """The tile `str(tile)` writes, THxTW/fTF/cTC/tTHREADS; ValueError for any other text."""
        m = re.fullmatch(r"(\d+)x(\d+)/f(\d+)/c(\d+)/t(\d+)", text.strip())
        if not m:
            raise ValueError(f"bad tile {text!r}: expected THxTW/fTF/cTC/tTHREADS, e.g. 4x8/f32/c16/t256")
        return cls(*(int(g) for g in m.groups()))


@dataclass(frozen=True)
class KernelResources:
    """Resources of one kernel launch."""

    kind: str
    smem_bytes: int
    threads: int
    regs_per_thread: int
    blocks: int
    blocks_per_sm: int
    waves: float
    occupancy: float
    #: its class for the graph context's per-launch terms (`core.kinds.LAUNCH_CLASSES`,
    #: `KernelModel.launch_class`); "" in a cost saved before classes existed (`graph_class`)
    launch_class: str = ""

    @property
    def graph_class(self) -> str:
        """`launch_class`, or for a cost saved without one the class its kind has over NCHW maps."""
        if self.launch_class:
            return self.launch_class
        return self.kind if self.kind in LAYER_KINDS else "fused"

    def as_dict(self) -> dict[str, float | int | str]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


_ADDITIVE = (
    "gma_read_bytes",
    "gma_write_bytes",
    "dram_read_bytes",
    "dram_write_bytes",
    "flops",
    "redundant_flops",
    "time_s",
    "launches",
)


@dataclass(frozen=True)
class Cost:
    """Predicted cost of one or more kernel launches. Costs add up with ``+``.

    gma_*: traffic between the SMs and L2 in whole 32-byte sectors; dram_*: traffic between L2 and
    DRAM for a cold L2; flops: useful FLOPs; redundant_flops: recomputation (fused halos, filter
    tiles); time_s: predicted kernel time; launches: kernel launches.
    """

    gma_read_bytes: float = 0.0
    gma_write_bytes: float = 0.0
    dram_read_bytes: float = 0.0
    dram_write_bytes: float = 0.0
    flops: float = 0.0
    redundant_flops: float = 0.0
    time_s: float = 0.0
    launches: int = 0
    kernels: tuple[KernelResources, ...] = ()
    feasible: bool = True
    reason: str = ""

    @property
    def gma_bytes(self) -> float:
        return self.gma_read_bytes + self.gma_write_bytes

    @property
    def dram_bytes(self) -> float:
        return self.dram_read_bytes + self.dram_write_bytes

    def __add__(self, other: Cost) -> Cost:
        if not isinstance(other, Cost):
            return NotImplemented
        vals = {k: getattr(self, k) + getattr(other, k) for k in _ADDITIVE}
        reasons = "; ".join(r for r in (self.reason, other.reason) if r)
        return Cost(
            **vals,
            kernels=self.kernels + other.kernels,
            feasible=self.feasible and other.feasible,
            reason=reasons,
        )

    def overlapped(self, overlap: float) -> Cost:
        """These launches run back to back: each after the first takes `overlap` seconds less than alone
        (the spec's `launch_overlap_s`; a timed sequence or a whole plan, not a lone kernel)."""
        if self.launches <= 1 or not overlap:
            return self
        return replace(self, time_s=self.time_s - (self.launches - 1) * overlap)

    def __radd__(self, other: object) -> Cost:
        if other == 0:  # lets sum() work
            return self
        return NotImplemented

    def metric(self, objective: str) -> float:
        """The number an objective minimises: "time" -> time_s, "gma" -> gma_bytes, "dram" -> dram_bytes."""
        if objective == "time":
            return self.time_s
        if objective == "gma":
            return self.gma_bytes
        if objective == "dram":
            return self.dram_bytes
        raise ValueError(f"unknown objective {objective!r}: use time, gma or dram")

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in _ADDITIVE}
        d["gma_bytes"] = self.gma_bytes
        d["dram_bytes"] = self.dram_bytes
        d["feasible"] = self.feasible
        d["reason"] = self.reason
        d["kernels"] = [k.as_dict() for k in self.kernels]
        return d

    @classmethod
    def from_dict(cls, d: Mapping) -> Cost:
        return cls(
            **{k: d[k] for k in _ADDITIVE if k in d},
            kernels=tuple(KernelResources(**k) for k in d.get("kernels", ())),
            feasible=bool(d.get("feasible", True)),
            reason=str(d.get("reason", "")),
        )


INFEASIBLE = Cost(feasible=False, reason="no feasible tile")
