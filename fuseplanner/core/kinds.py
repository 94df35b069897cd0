"""Every list of names the stages share, defined once: op kinds, kernel kinds and their member
sequences, storage dtypes, math precisions, planning objectives and cost models.

Other modules import these; none defines its own copy. What each kernel kind needs (tiles, shared
memory, cost model, launcher, CUDA source) is its family's, in `fuseplanner.kernels.family`.
"""

from __future__ import annotations

#: Operator kinds. dw/pw/conv are ONNX Conv nodes, linear is MatMul/Gemm over the channel dimension.
OP_KINDS = ("dw", "pw", "conv", "linear", "opaque")
#: Op kinds of a Conv node (NCHW maps, a kernel, strides and pads).
CONV_KINDS = ("dw", "pw", "conv")
#: Op kinds with a learnt weight the planner, exporter and executor tile or run themselves.
WEIGHTED_KINDS = ("dw", "pw", "conv", "linear")

#: Layer-by-layer kernel kinds: one op each, the op's own kind.
LAYER_KINDS = ("dw", "pw", "linear")
#: Fused group kinds, named by their members in execution order, with the member op kinds each accepts.
GROUP_MEMBERS: dict[str, tuple[tuple[str, ...], ...]] = {
    "pw_dw": (("pw", "dw"),),
    "dw_pw": (("dw", "pw"),),
    "pw_pw": (("pw", "pw"), ("linear", "linear")),
    "pw_dw_pw": (("pw", "dw", "pw"),),
}
GROUP_KINDS = tuple(GROUP_MEMBERS)
#: Member op kinds of every kernel kind, in execution order.
KERNEL_MEMBERS: dict[str, tuple[tuple[str, ...], ...]] = {
    **{k: ((k,),) for k in LAYER_KINDS},
    **GROUP_MEMBERS,
}
#: Every kernel kind `fuseplanner.kernels.run` and `fuseplanner.cost.estimate` accept.
KERNEL_KINDS = tuple(KERNEL_MEMBERS)
#: Op kinds that can be a member of a fused group.
MEMBER_KINDS = tuple(dict.fromkeys(k for seqs in GROUP_MEMBERS.values() for seq in seqs for k in seq))

#: Storage dtypes the cost models and kernels know, with their element sizes in bytes.
DTYPE_BYTES = {"fp32": 4, "fp16": 2}
DTYPES = tuple(DTYPE_BYTES)
#: Math precisions of fp32 products: exact fp32 or TF32 tensor cores.
PRECISIONS = ("fp32", "tf32")
#: What the planner minimises.
OBJECTIVES = ("time", "gma", "dram")
#: Cost models: ours, and the published element-count model.
COST_MODELS = ("ours", "paper")

#: Execution contexts of the time model (fuseplanner.cost.execution): one launch alone after an L2
#: flush, or back to back in a CUDA graph.
CONTEXTS = ("isolated", "graph")
#: The context `plan`, `run` and `compile` decide in unless told: the graph, as the executor runs a model.
DEFAULT_CONTEXT = "graph"

#: Launch classes of the graph context's per-launch terms (fuseplanner.cost.execution, spec
#: `graph_<class>_kernel_s`): a launch that takes `fused_kernel_fixed_s` when isolated is `fused` (the
#: fused kinds with a DW stage, PW->PW over channel-last tokens); any other is its first op's kind: `dw`,
#: `pw` (NCHW maps, PW->PW pairs over them included) or `linear` (channel-last tokens).
LAUNCH_CLASSES = ("dw", "pw", "linear", "fused")

#: Operator types the executor runs as a reduction kernel (a CuPy reduction over an axis); in a graph
#: they take at least the spec's `reduce_op_floor_s` (fuseplanner.cost.execution).
REDUCE_OP_TYPES = frozenset({"GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceSum", "ReduceMax",
                             "ReduceMin", "ReduceProd", "ReduceL2", "ReduceSumSquare"})
