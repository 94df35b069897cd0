"""Static memory plan: hand-computed layouts, aliases, pinning, and no overlap of live tensors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fuseplanner.core.errors import PlanError
from fuseplanner.run.memory import ALIGNMENT, TensorLife, align, plan_memory


def test_chain_reuses_the_first_buffer():
    # a (step 0 -> read at 1), b (1 -> 2), c (2 -> 3): a is dead when c is written at step 2, so c
    # takes a's bytes: a @ 0 (1024), b @ 1024 (512), c @ 0 (1000 -> 1024 aligned); arena 1536.
    plan = plan_memory([TensorLife("a", 1024, 0, 1), TensorLife("b", 512, 1, 2), TensorLife("c", 1000, 2, 3)])
    assert plan.offsets == {"a": 0, "b": 1024, "c": 0}
    assert plan.arena_bytes == 1536


def test_best_fit_takes_the_smallest_gap():
    # same first step: larger first. Step 0: A (1024, dies 2) @ 0, B (256) @ 1024. Step 1: C (256, dies 2)
    # @ 1280, D (256) @ 1536. At step 3 only B and D live: gaps [0, 1024) and [1280, 1536); a 200-byte
    # tensor (256 aligned) takes the smaller, 1280. Arena 1792 = 1536 + 256.
    tensors = [TensorLife("A", 1024, 0, 2), TensorLife("B", 256, 0, 9), TensorLife("C", 256, 1, 2),
               TensorLife("D", 256, 1, 9), TensorLife("w", 200, 3, 4)]  # fmt: skip
    plan = plan_memory(tensors)
    assert [plan.offsets[k] for k in "ABCD"] == [0, 1024, 1280, 1536]
    assert plan.offsets["w"] == 1280
    assert plan.arena_bytes == 1792


def test_a_step_never_writes_over_its_input():
    # b is written at step 1, where a is read: they may not share bytes even though a dies there.
    plan = plan_memory([TensorLife("a", 256, 0, 1), TensorLife("b", 256, 1, 2)])
    assert plan.offsets["a"] != plan.offsets["b"]


def test_views_alias_and_extend_the_lifetime():
    # v views a and is read at step 5: a's buffer lives to 5, so c (written at 3) cannot take it.
    tensors = [TensorLife("a", 512, 0, 1), TensorLife("v", 512, 1, 5, alias_of="a"), TensorLife("c", 512, 3, 4)]
    plan = plan_memory(tensors)
    assert plan.offsets["v"] == plan.offsets["a"] == 0
    assert plan.root["v"] == "a" and plan.blocks["a"].last == 5
    assert plan.offsets["c"] == 512


def test_pinned_tensors_get_their_own_bytes_first():
    # inputs/outputs first, in order: in @ 0 (256), out @ 256 (256); t (dead early) after them.
    tensors = [TensorLife("in", 100, -1, 9, pinned=True), TensorLife("t", 300, 0, 1),
               TensorLife("out", 256, 1, 9, pinned=True), TensorLife("u", 300, 2, 3)]  # fmt: skip
    plan = plan_memory(tensors)
    assert plan.offsets["in"] == 0 and plan.offsets["out"] == 256
    assert plan.offsets["t"] == plan.offsets["u"] == 512  # t is dead at step 2: u reuses it
    assert plan.arena_bytes == 512 + align(300)


def test_bad_aliases_are_refused():
    with pytest.raises(PlanError):
        plan_memory([TensorLife("a", 10, 0, 1, alias_of="b"), TensorLife("b", 10, 0, 1, alias_of="a")])
    with pytest.raises(PlanError):
        plan_memory([TensorLife("a", 10, 0, 1), TensorLife("v", 20, 1, 2, alias_of="a")])


@st.composite
def _programs(draw):
    n = draw(st.integers(1, 25))
    out = []
    for i in range(n):
        first = draw(st.integers(0, 20))
        last = draw(st.integers(first, 24))
        alias = None
        if out and draw(st.booleans()) and draw(st.booleans()):
            base = draw(st.sampled_from(out))
            alias = base.name
            out.append(TensorLife(f"t{i}", draw(st.integers(0, base.nbytes)), first, last, alias))
            continue
        out.append(TensorLife(f"t{i}", draw(st.integers(1, 5000)), first, last, None, draw(st.booleans())))
    return out


@settings(max_examples=300, deadline=None)
@given(_programs())
def test_no_two_live_buffers_overlap(tensors):
    plan = plan_memory(tensors)
    blocks = list(plan.blocks.items())
    for i, (a, ba) in enumerate(blocks):
        assert ba.offset % ALIGNMENT == 0 and ba.end <= plan.arena_bytes
        for b, bb in blocks[i + 1:]:
            assert not ba.overlaps(bb), (a, ba, b, bb)
            if ba.pinned or bb.pinned:
                assert ba.offset >= bb.end or bb.offset >= ba.end
    for t in tensors:  # every tensor lies inside its root buffer, live whenever it is
        blk = plan.blocks[plan.root[t.name]]
        assert blk.first <= t.first and t.last <= blk.last and t.nbytes <= blk.size
