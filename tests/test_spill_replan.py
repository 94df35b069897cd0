"""Kernels the compiler spills registers in: the planner leaves them out when told (`plan(exclude=...)`),
and `compile` plans again without them (`run.compiled.without_spills`). CPU only: the spills are fed in."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fuseplanner.frontend.load import load_model
from fuseplanner.hw.spec import gpu
from fuseplanner.planning.search import kernel_key, plan
from fuseplanner.run.compiled import MAX_REPLANS, without_spills
from fuseplanner.run.program import KernelStep
from fuseplanner.run.runtime import Spill


@pytest.fixture(scope="module")
def v2():
    g = load_model("mobilenet_v2", None, 1)
    return g, plan(g, gpu("h100"), workers=1)


def _key(graph, group):
    return kernel_key(group.kind, tuple(graph.op(n) for n in group.nodes), group.tile)


def test_excluded_kernels_are_never_chosen(v2):
    g, base = v2
    first = base.groups[0]
    again = plan(g, gpu("h100"), workers=1, exclude={_key(g, first)})
    same = [x for x in again.groups if x.nodes == first.nodes]
    assert not same or same[0].tile != first.tile  # fused with another tile, or left unfused
    # groups of the same shapes lose the tile too (the key is the kernel, not the nodes)
    assert all(_key(g, x) != _key(g, first) for x in again.groups)
    assert any("spilled registers" in w for w in again.warnings) and not any("spilled" in w for w in base.warnings)
    # forked searches leave it out as well
    assert {(tuple(x.nodes), x.tile) for x in plan(g, gpu("h100"), workers=2, exclude={_key(g, first)}).groups} == \
           {(tuple(x.nodes), x.tile) for x in again.groups}


def _step(graph, group):
    ops = tuple(graph.op(n) for n in group.nodes)
    return KernelStep(group.kind, ops, group.tile, (), "x", "y", None, tuple(group.nodes))


def _compiled(steps, spilled_labels):
    spills = tuple(Spill(s.label, s.kind, str(s.tile), 255, 16) for s in steps if s.label in spilled_labels)
    return SimpleNamespace(program=SimpleNamespace(steps=steps), spills=spills)


def test_compile_plans_again_without_the_spilled_kernels(v2):
    g, base = v2
    steps = [_step(g, x) for x in base.groups[:3]]
    asked = []
    clean = _compiled(steps, set())
    out = without_spills(_compiled(steps, {steps[1].label}), lambda ex: asked.append(ex) or "p", lambda p: clean)
    assert out is clean and asked == [frozenset({kernel_key(steps[1].kind, steps[1].ops, steps[1].tile)})]
    assert [s.label for s in out.avoided] == [steps[1].label]
    # nothing spills: compiled once, nothing avoided
    first = _compiled(steps, set())
    assert without_spills(first, lambda ex: pytest.fail("planned again"), lambda p: None) is first
    assert first.avoided == ()


def test_a_spill_that_stays_stops_the_replanning(v2):
    g, base = v2
    steps = [_step(g, x) for x in base.groups[:2]]
    stubborn = _compiled(steps, {steps[0].label})  # the re-plan keeps the same kernel: nothing new to exclude
    calls = []
    out = without_spills(stubborn, lambda ex: calls.append(ex), lambda p: stubborn)
    assert len(calls) == 1 and out is stubborn and len(out.avoided) == 1
    # a new spill after every re-plan: at most MAX_REPLANS plans
    seq = iter([_compiled(steps, {steps[1].label})] + [_compiled(steps, set())] * 5)
    calls = []
    without_spills(stubborn, lambda ex: calls.append(ex), lambda p: next(seq))
    assert 1 <= len(calls) <= MAX_REPLANS
