"""Bind a `Program` to memory: one arena of activations, constants uploaded once, one runner per step.

`bind(program, xp, ...)` places every activation tensor in one `xp` arena by the static memory plan
(views alias their input's buffer), uploads the constants library steps read, and prepares each step
once: planned kernels with `fuseplanner.kernels.prepare` on the arena views (GPU), or the float64
`fuseplanner.validation.reference` cast to the storage dtype (CPU); library steps with the operator library's
`prepare`. Running the runners in order is one inference: no allocation by the executor itself,
no host synchronisation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fuseplanner.run.memory import MemoryPlan, TensorLife, plan_memory
from fuseplanner.run.program import KernelStep, LibraryStep, Program


@dataclass(frozen=True)
class Spill:
    """A kernel step whose compiled kernel ran out of registers: it holds the per-thread ceiling
    (`kernels.registers.MAX_REGS_PER_THREAD`) and keeps the rest in local memory, which the cost model
    does not price; its time is not what the plan predicts. (Local memory under the ceiling is a stack
    frame, e.g. an indexed local array: not a spill, not reported here.)"""

    label: str
    kind: str
    tile: str
    regs: int
    local_bytes: int

    def message(self) -> str:
        return (f"{self.label} ({self.kind} {self.tile}) compiled to {self.regs} registers and {self.local_bytes} "
                "bytes of local memory per thread (register spills): it runs slower than the plan predicts")  # fmt: skip


def spill_of(step: KernelStep, launch) -> Spill | None:
    """The spill of `step`'s compiled kernel (`launch.resources()`, where the launcher reports one): at
    the register ceiling with local memory; None otherwise."""
    from fuseplanner.kernels.registers import MAX_REGS_PER_THREAD

    resources = getattr(launch, "resources", None)
    if resources is None:
        return None
    r = resources()
    if r.get("local_bytes", 0) <= 0 or r.get("regs", 0) < MAX_REGS_PER_THREAD:
        return None
    return Spill(step.label, step.kind, str(step.tile), int(r.get("regs", 0)), int(r["local_bytes"]))


@dataclass
class Bound:
    """A program bound to arrays: `views[name]` per activation tensor, one runner per step, and the
    kernel steps whose compiled kernels spill."""

    program: Program
    memory: MemoryPlan
    arena: object
    views: dict
    runners: list[tuple[object, Callable[[], None] | None]]
    spills: tuple[Spill, ...] = ()

    def run(self) -> None:
        """One inference over the bound arrays, step by step on the current stream."""
        for _, fn in self.runners:
            if fn is not None:
                fn()


def lifetimes(program: Program) -> list[TensorLife]:
    """Each activation tensor's size, the steps that write and last read it, what it views, pinning."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    alias: dict[str, str] = {}
    end = len(program.steps)
    for i, s in enumerate(program.steps):
        for t in s.inputs:
            if t in program.tensors:
                last[t] = i
        for t in s.outputs:
            first.setdefault(t, i)
            last.setdefault(t, i)
        if isinstance(s, LibraryStep) and s.view:
            alias[s.outputs[0]] = s.inputs[0]
    pinned = {t.name for t in (*program.inputs, *program.outputs)}
    out = []
    for name, spec in program.tensors.items():
        f = -1 if name in pinned and name not in first else first.get(name, -1)
        lst = end if name in pinned else max(last.get(name, f), f)
        out.append(TensorLife(name, spec.nbytes, f, lst, alias.get(name), name in pinned))
    return out


def _views(xp, program: Program, memory: MemoryPlan):
    arena = xp.zeros(max(memory.arena_bytes, 1), dtype=xp.uint8)
    views = {}
    for name, spec in program.tensors.items():
        off = memory.offsets[name]
        views[name] = arena[off: off + spec.nbytes].view(spec.dtype).reshape(spec.shape)
    return arena, views


def _kernel_runner(xp, step: KernelStep, views, program: Program, gpu: bool, spills: list[Spill]):
    first, last = step.ops[0], step.ops[-1]
    x = views[step.input].reshape(first.kernel_shape(first.in_shape))  # linear tokens as (images, tokens, C)
    res = views[step.residual].reshape(last.kernel_shape(last.out_shape)) if step.residual else None
    out = views[step.output].reshape(last.kernel_shape(last.out_shape))
    if gpu:
        from fuseplanner import kernels

        params = [(xp.asarray(w), xp.asarray(b)) for w, b in step.params]
        launch = kernels.prepare(step.kind, step.ops, step.tile, x, params, dtype=program.dtype,
                                 precision=program.precision, residual=res, out=out)  # fmt: skip
        spill = spill_of(step, launch)
        if spill is not None:
            spills.append(spill)
        return lambda: launch()
    from fuseplanner.validation.reference import reference

    def run() -> None:
        out[...] = reference(step.kind, step.ops, x, step.params, res, program.precision).astype(out.dtype)

    return run


def _library_runner(xp, step: LibraryStep, views, consts: dict, ops_lib):
    kernel = ops_lib.prepare(xp, step.node)
    cvals = getattr(step.node, "consts", (None,) * len(step.inputs))
    ins = []
    for t, c in zip(step.inputs, cvals, strict=False):
        if c is not None:
            key = (t, np.dtype(c.dtype).str)
            if key not in consts:
                consts[key] = xp.asarray(c)
            ins.append(consts[key])
        else:
            ins.append(views[t] if t else None)
    outs = [views[t] for t in step.outputs]
    return lambda: kernel(ins, outs)


def bind(program: Program, xp, ops_lib, gpu: bool) -> Bound:
    """Memory plan, arena, constants and one prepared runner per step (None for view steps)."""
    memory = plan_memory(lifetimes(program))
    arena, views = _views(xp, program, memory)
    consts: dict = {}
    runners: list = []
    spills: list[Spill] = []
    for step in program.steps:
        if isinstance(step, KernelStep):
            runners.append((step, _kernel_runner(xp, step, views, program, gpu, spills)))
        elif step.view:
            runners.append((step, None))
        else:
            runners.append((step, _library_runner(xp, step, views, consts, ops_lib)))
    return Bound(program, memory, arena, views, runners, tuple(spills))
