"""`fuseplanner.compile(model, spec, plan)`: a whole-model executor you call on arrays.

    net = fuseplanner.compile("mobilenet_v2", "h100")            # plans it, weights seeded if absent
    out = net({"input": x})                                      # numpy in -> numpy out
    rec = net.bench(replays=200)                                 # CUDA-graph replay latency

GPU mode uploads the weights once, prepares every kernel once on views of one activation arena,
runs one warm-up inference and captures one inference as a CUDA graph (CuPy stream capture); a call
copies the inputs into their buffers, replays the graph and returns copies of the outputs;
`input_buffers`, `launch()` and `output_buffers` skip the copies (zero-copy). Op-library
temporaries come from a private memory pool kept alive with the model. CPU mode (device="cpu") runs
the same program on NumPy arrays, planned kernels by the float64 reference cast to the storage dtype.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from fuseplanner.core.errors import DeviceError, ModelError, PlanError
from fuseplanner.core.kinds import CONTEXTS, DEFAULT_CONTEXT, DTYPES, PRECISIONS
from fuseplanner.run import program as program_mod
from fuseplanner.run.program import KernelStep, Program, build_program, precheck_supported
from fuseplanner.run.runtime import Bound, bind


@dataclass(frozen=True)
class StepInfo:
    """What runs where: the step's label, kind (a kernel kind, `library` or `view`), op type (a merged
    elementwise chain's member op types joined by +), tile, covered ONNX nodes, and why a planned op
    runs in the library (empty otherwise)."""

    label: str
    kind: str
    op_type: str
    tile: str
    covers: tuple[str, ...]
    reason: str = ""


def _step_info(step) -> StepInfo:
    if isinstance(step, KernelStep):
        return StepInfo(step.label, step.kind, "+".join(o.op_type for o in step.ops), str(step.tile), step.covers)
    kind = "view" if step.view else "library"
    chain = step.node.attrs.get("chain") if hasattr(step.node, "attrs") else None
    op_type = "+".join(m.node.op_type for m in chain) if chain else step.op_type  # a merged elementwise chain
    return StepInfo(step.label, kind, op_type, "", step.covers, step.reason)


class CompiledModel:
    """A compiled model; call it on a dict of input arrays (or one array for a one-input model)."""

    def __init__(self, program: Program, plan, bound: Bound, xp, gpu: bool) -> None:
        self.program, self.plan, self._bound, self._xp, self.gpu = program, plan, bound, xp, gpu
        self.avoided: tuple = ()  # spills of earlier plans that `compile` planned again without (`without_spills`)
        self.steps = tuple(_step_info(s) for s in program.steps)
        self.memory = bound.memory.arena_bytes
        self._graph = self._stream = self._pool = self._io = None
        self._in_plan, self._out_plan = _copy_plan(program, bound, xp)

    @property
    def spills(self):
        """The kernel steps whose compiled kernels spill registers (`run.runtime.Spill`: at the register
        ceiling with local memory), which the plan's prediction does not include (GPU only; empty on the CPU)."""
        return self._bound.spills

    @property
    def memory_plan(self):
        """The activation arena's static memory plan (`run.memory.MemoryPlan`): each tensor's offset."""
        return self._bound.memory

    # ---- inputs and outputs -----------------------------------------------------------------------
    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.program.inputs)

    def _check(self, inputs) -> dict:
        if type(inputs) is dict and len(inputs) == len(self._in_plan):  # the common case: few attribute reads
            try:
                if all(inputs[n].shape == shape and inputs[n].dtype == want for n, shape, want, _ in self._in_plan):
                    return inputs
            except (KeyError, AttributeError):
                pass
        return self._check_slow(inputs)

    def _check_slow(self, inputs) -> dict:
        names = self.input_names
        if not isinstance(inputs, Mapping):
            if len(names) != 1:
                raise ModelError(f"the model has {len(names)} inputs ({', '.join(names)}): pass a dict of arrays")
            inputs = {names[0]: inputs}
        extra = sorted(set(inputs) - set(names))
        lacking = [n for n in names if n not in inputs]
        if extra or lacking:
            raise ModelError(f"inputs {sorted(inputs)} do not match the model's inputs {list(names)}: "
                             f"{'unknown ' + ', '.join(extra) if extra else 'missing ' + ', '.join(lacking)}")  # fmt: skip
        for spec in self.program.inputs:
            a = inputs[spec.name]
            want = self.program.model_dtypes.get(spec.name, spec.dtype)
            if tuple(getattr(a, "shape", ())) != spec.shape:
                raise ModelError(f"input {spec.name!r} has shape {tuple(getattr(a, 'shape', ()))}, the model "
                                 f"takes {spec.shape}: compile with batch/input shapes that match")  # fmt: skip
            if np.dtype(getattr(a, "dtype", None)) != want:
                raise ModelError(f"input {spec.name!r} is {getattr(a, 'dtype', type(a).__name__)}, the model takes {want}")
        return dict(inputs)

    def _outputs(self) -> dict:
        """Copies of the outputs in the dtypes the caller gets (CPU mode; the GPU's are `device.call`'s)."""
        return {name: src.astype(want, copy=True) for name, src, want in self._out_plan}

    # ---- running ----------------------------------------------------------------------------------
    def __call__(self, inputs) -> dict:
        """Outputs by name: NumPy in -> NumPy out; CuPy in -> CuPy out (copies, kept across calls)."""
        inputs = self._check(inputs)
        if not self.gpu:
            self._load(inputs)
            self._bound.run()
            return self._outputs()
        from fuseplanner.run import device

        return device.call(self, inputs)

    # ---- zero-copy calls -------------------------------------------------------------------------
    @property
    def input_buffers(self) -> dict:
        """The model's own input buffers by name (CuPy arrays on the GPU, in the dtype the kernels read):
        write inputs here, call `launch()`, read `output_buffers`. No copy, no check."""
        return {name: view for name, _, _, view in self._in_plan}

    @property
    def output_buffers(self) -> dict:
        """The model's own output buffers by name: valid after a `launch()` has completed on its stream,
        overwritten by the next one."""
        return {name: src for name, src, _ in self._out_plan}

    def launch(self, stream=None) -> None:
        """One inference over `input_buffers` into `output_buffers`: on the GPU, the CUDA graph replayed
        on `stream` (default: CuPy's current stream), nothing else; launches of one model must be ordered
        (one stream, or events between streams) because they share the buffers."""
        if not self.gpu:
            self._bound.run()
            return
        from fuseplanner.run import device

        device.launch(self, stream)

    def _load(self, inputs: Mapping) -> None:
        asarray = self._xp.asarray
        for name, _, _, view in self._in_plan:
            view[...] = asarray(inputs[name])

    def run_stream(self, inputs) -> dict:
        """One inference step by step on the stream, without the CUDA graph (for debugging)."""
        inputs = self._check(inputs)
        if not self.gpu:
            return self(inputs)
        from fuseplanner.run import device

        return device.call(self, inputs, graph=False)

    def time_nodes(self, inputs=None, repeats: int = 20, mode: str = "stream"):
        """Per-step times (CUDA events, median of `repeats`; `mode` "stream" or "graph", see
        `run.device.STEP_MODES`): a list of `StepTime`."""
        from fuseplanner.run import device

        return device.time_nodes(self, inputs, repeats, mode)

    def bench(self, replays: int = 200, cold_l2: bool = False):
        """Latency of CUDA-graph replays (`BenchRecord`): warm L2, or with L2 flushed between replays."""
        from fuseplanner.run import device

        return device.bench(self, replays, cold_l2)


def _copy_plan(program: Program, bound: Bound, xp) -> tuple[tuple, tuple]:
    """What a call copies, worked out once: per input (name, shape, dtype the caller passes, arena view);
    per output (name, the array it is copied from, dtype the caller gets)."""
    ins = tuple((s.name, s.shape, np.dtype(program.model_dtypes.get(s.name, s.dtype)), bound.views[s.name])
                for s in program.inputs)  # fmt: skip
    outs = []
    for spec in program.outputs:
        src = bound.views.get(spec.name)
        if src is None:
            src = xp.asarray(program.constants[spec.name])
        outs.append((spec.name, src, np.dtype(program.model_dtypes.get(spec.name, spec.dtype))))
    return ins, tuple(outs)


def _load_model(model, input_shapes, batch, seed: int):
    """(shape-inferred full ModelProto, ModelGraph, name) with every weight inline."""
    from fuseplanner.frontend.load import build_graph, read_model
    from fuseplanner.frontend.shapes import prepare
    from fuseplanner.frontend.view import GraphView
    from fuseplanner.run.weights import materialize

    proto, name, path = read_model(model)
    full = materialize(proto, seed, Path(path).parent if path else None, input_shapes)
    prepared = prepare(full, input_shapes, batch)
    return prepared, build_graph(GraphView(prepared), name, path), name


def check_plan(plan, graph, gpu_name: str, dtype: str, precision: str, batch: int) -> None:
    """PlanError when `plan` was made for another model, GPU, dtype, precision or batch."""
    for what, have, want in (("model", plan.model, graph.name), ("GPU", plan.gpu, gpu_name),
                             ("dtype", plan.dtype, dtype), ("precision", plan.precision, precision),
                             ("batch", plan.batch, batch)):  # fmt: skip
        if have != want:
            raise PlanError(f"the plan was made for {what} {have}, not {want}: re-plan with `fuseplanner plan` "
                            "for this model and options")  # fmt: skip
    names = set(graph.order)
    for k in plan.kernels():
        bad = [n for n in k.covers if n not in names]
        if bad:
            raise PlanError(f"the plan names node {bad[0]!r}, which model {graph.name} lacks: it was made for another model")


def _spec(spec, device: str):
    from fuseplanner.hw.spec import detect, gpu

    if spec in (None, "auto"):
        found = detect() if device == "gpu" else None
        if found is None and device == "gpu":
            raise DeviceError("--gpu auto found no usable CUDA GPU with a bundled spec: name one with --gpu NAME "
                              "(see `fuseplanner gpus`)")
        return found if found is not None else gpu("h100")
    return gpu(spec) if isinstance(spec, str) else spec


#: Plans made again at most this many times to leave out kernels the compiler spilled registers in.
MAX_REPLANS = 3


def compile(model, spec=None, plan=None, *, dtype: str = "fp32", precision: str = "fp32", batch: int | None = None,
            fuse: bool = True, seed: int = 0, device: str = "gpu", input_shapes=None, ops_lib=None,
            avoid_spills: bool = True, exclude: Iterable[tuple] = (), context: str = DEFAULT_CONTEXT) -> CompiledModel:  # fmt: skip
    """Compile `model` (path, bundled name or ModelProto) to run as `plan` says on `spec` ("auto": this
    GPU). plan=None plans it (fuse=False: every dw/pw/linear op on its own kernel with its best tile)
    and, with `avoid_spills`, plans it again without the kernels the compiler spilled registers in
    (`CompiledModel.avoided`); a given plan is compiled as it is (`CompiledModel.spills` names its
    spilled kernels). `exclude`: kernels the planning never chooses (`planning.search.kernel_key`s; tile
    None: every tile of a group); `context`: the execution context the planning decides in (`planning.search.plan`).
    device "gpu" runs with CuPy and CUDA graphs; "cpu" runs the same program in NumPy."""
    if dtype not in DTYPES or precision not in PRECISIONS or device not in ("gpu", "cpu") or context not in CONTEXTS:
        raise PlanError(f"bad options dtype={dtype!r} precision={precision!r} device={device!r} context={context!r}: use "
                        "dtype fp32|fp16, precision fp32|tf32, device gpu|cpu, context isolated|graph")  # fmt: skip
    prepared, graph, _ = _load_model(model, input_shapes, batch, seed)
    ops_lib = ops_lib or program_mod.lib_module()
    precheck_supported(prepared, graph, ops_lib.SUPPORTED)
    if device == "gpu":
        from fuseplanner.kernels import require_device

        require_device()
    gpu_spec = _spec(spec, device)
    from fuseplanner.planning.search import model_batch
    from fuseplanner.planning.search import plan as make_plan

    given = frozenset(exclude)

    def planned(more=frozenset()):
        return make_plan(graph, gpu_spec, dtype=dtype, precision=precision, kinds=None if fuse else [],
                         exclude=given | more, context=context)  # fmt: skip

    def built(p) -> CompiledModel:
        check_plan(p, graph, gpu_spec.name, dtype, precision, model_batch(graph))
        return _bind(build_program(prepared, graph, p, dtype=dtype, precision=precision, ops_lib=ops_lib), p, ops_lib,
                     device)  # fmt: skip

    if plan is not None:
        if not fuse:
            raise PlanError("give either a plan or fuse=False (--plan or --no-fuse), not both")
        if given:
            raise PlanError("kernels to exclude apply to the planning: give them without a plan")
        return built(plan)
    compiled = built(planned())
    return without_spills(compiled, planned, built) if avoid_spills else compiled


def without_spills(compiled: CompiledModel, planned, built) -> CompiledModel:
    """`compiled`, or where the compiler spilled registers in its kernels, the model planned again
    without those kernels (`planning.search.kernel_key`), at most MAX_REPLANS times: `planned(exclude)`
    makes a plan, `built(plan)` compiles one. The result's `avoided` lists the spills left behind."""
    from fuseplanner.planning.search import kernel_key

    excluded: set = set()
    avoided: list = []
    for _ in range(MAX_REPLANS):
        steps = {s.label: s for s in compiled.program.steps if isinstance(s, KernelStep)}
        spilled = ((steps[sp.label], sp) for sp in compiled.spills)
        new = {k: sp for k, sp in ((kernel_key(st.kind, st.ops, st.tile), sp) for st, sp in spilled) if k not in excluded}
        if not new:
            break
        excluded.update(new)
        avoided += new.values()
        compiled = built(planned(frozenset(excluded)))
    compiled.avoided = tuple(avoided)
    return compiled


def _bind(program: Program, plan, ops_lib, device: str) -> CompiledModel:
    if device == "cpu":
        return CompiledModel(program, plan, bind(program, np, ops_lib, gpu=False), np, gpu=False)
    from fuseplanner.run import device as dev

    return dev.compile_gpu(program, plan, ops_lib, CompiledModel)


def load_plan(path: str | Path):
    """A Plan from a JSON file; PlanError (one line) when it is missing or not a plan."""
    from pydantic import ValidationError

    from fuseplanner.planning.result import Plan

    p = Path(path)
    if not p.is_file():
        raise PlanError(f"plan file {str(p)!r} does not exist: write one with `fuseplanner plan MODEL --json PATH`")
    try:
        return Plan.from_json(p.read_bytes())
    except (ValidationError, ValueError) as exc:
        raise PlanError(f"{str(p)!r} is not a fuseplanner plan JSON ({str(exc).splitlines()[0]})") from None


def onnx_model(model, input_shapes=None, batch=None, seed: int = 0) -> onnx.ModelProto:
    """The model `compile` runs, for onnxruntime: weights inline (materialized with `seed`), inputs
    pinned, batch set and hard-coded Reshape batches re-solved."""
    return _load_model(model, input_shapes, batch, seed)[0]
