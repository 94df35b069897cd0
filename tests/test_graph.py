"""Candidate fusion groups found from the graph: expected groups and rejections on tiny graphs."""

from __future__ import annotations

import graphs as G
import pytest

from fuseplanner.planning.candidates import (
    check_partition,
    consumers,
    epilogue_names,
    find_candidates,
    group_kind,
    layer_residuals,
    producers,
    validate_group,
)


def _keys(cands):
    return {(c.kind, c.members, c.absorbed) for c in cands.groups}


def _rejected(cands):
    return {(r.kind, r.members): r.reason for r in cands.rejected}


def test_producers_and_consumers():
    g = G.residual()
    assert producers(g) == {"a": "pw1", "b": "dw", "c": "pw2", "y": "add"}
    cons = consumers(g)
    assert cons["x"] == ["pw1", "add"]
    assert cons["c"] == ["add"]
    assert "y" not in cons


@pytest.mark.parametrize(
    "kinds, expected",
    [
        (("pw", "dw"), "pw_dw"),
        (("dw", "pw"), "dw_pw"),
        (("pw", "pw"), "pw_pw"),
        (("linear", "linear"), "pw_pw"),
        (("pw", "dw", "pw"), "pw_dw_pw"),
        (("dw", "dw"), None),
        (("pw", "linear"), None),
        (("conv", "pw"), None),
    ],
)
def test_group_kind(kinds, expected):
    assert group_kind(kinds) == expected


def test_chain_has_three_overlapping_groups():
    c = find_candidates(G.chain())
    assert _keys(c) == {
        ("pw_dw", ("pw1", "dw"), ()),
        ("dw_pw", ("dw", "pw2"), ()),
        ("pw_dw_pw", ("pw1", "dw", "pw2"), ()),
    }
    assert c.rejected == ()


def test_residual_add_ends_groups_that_reach_it():
    c = find_candidates(G.residual())
    assert _keys(c) == {
        ("pw_dw", ("pw1", "dw"), ()),
        ("dw_pw", ("dw", "pw2"), ()),
        ("dw_pw", ("dw", "pw2"), ("add",)),
        ("pw_dw_pw", ("pw1", "dw", "pw2"), ()),
        ("pw_dw_pw", ("pw1", "dw", "pw2"), ("add",)),
    }
    res = [x for x in c.groups if x.residual]
    assert all(x.residual_tensor == "x" for x in res)
    # the PW->DW pair ends at the DW, whose output goes to pw2, not to the Add
    assert not any(x.residual for x in c.groups if x.kind == "pw_dw")


def test_diamond_does_not_fuse_across_the_branch():
    c = find_candidates(G.diamond())
    assert _keys(c) == {("dw_pw", ("dw1", "pw1"), ()), ("dw_pw", ("dw2", "pw2"), ())}
    rej = _rejected(c)
    assert set(rej) == {("pw_dw", ("pw0", "dw1")), ("pw_dw", ("pw0", "dw2"))}
    assert all("2 consumers" in why for why in rej.values())


def test_graph_output_is_never_an_intermediate():
    c = find_candidates(G.branch())
    assert _keys(c) == {("dw_pw", ("dw", "pw2"), ())}
    assert "graph output" in _rejected(c)[("pw_dw", ("pw1", "dw"))]


def test_mlp_linear_pair_with_absorbed_gelu_and_residual():
    c = find_candidates(G.mlp())
    assert _keys(c) == {("pw_pw", ("fc1", "fc2"), ()), ("pw_pw", ("fc1", "fc2"), ("add",))}
    res = next(x for x in c.groups if x.residual)
    assert res.residual_tensor == "x"  # the LayerNorm's input: in memory before the kernel starts
    g = G.mlp()
    assert epilogue_names(g, res) == ("fc1.bias", "fc1.gelu", "fc2.bias", "add")


def test_mlp_with_separate_gelu_node_absorbs_it():
    g = G.mlp(separate_act=True)
    c = find_candidates(g)
    assert _keys(c) == {("pw_pw", ("fc1", "fc2"), ("gelu",)), ("pw_pw", ("fc1", "fc2"), ("gelu", "add"))}


def test_kinds_filter_rejects_with_reason():
    c = find_candidates(G.chain(), kinds=("pw_dw", "dw_pw"))
    assert _keys(c) == {("pw_dw", ("pw1", "dw"), ()), ("dw_pw", ("dw", "pw2"), ())}
    assert "not enabled" in _rejected(c)[("pw_dw_pw", ("pw1", "dw", "pw2"))]


def test_pw_chain_pairs():
    c = find_candidates(G.pw_chain(4))
    assert [x.members for x in c.groups] == [("p0", "p1"), ("p1", "p2"), ("p2", "p3")]


def test_validate_group_accepts_legal_and_explains_illegal():
    g = G.residual()
    assert validate_group(g, ["pw1", "dw", "pw2", "add"]) is None
    assert validate_group(g, ["dw", "pw2"]) is None
    assert "not a fusable pattern" in validate_group(g, ["dw", "add"])
    assert "cycle" in validate_group(g, ["pw1", "pw2"])  # a PW->PW pattern, but dw lies between
    assert "no node named" in validate_group(g, ["pw1", "nope"])
    assert "twice" in validate_group(g, ["pw1", "pw1"])


def test_validate_group_cycle_through_outside_node():
    why = validate_group(G.cycle_trap(), ["pw1", "pw2"])
    assert why is not None and "cycle" in why and "'sm'" in why
    assert find_candidates(G.cycle_trap()).groups == ()


def test_residual_operand_computed_after_a_member_is_illegal():
    # x -> p0 -> a -> p1 -> b; add(b, a2) where a2 = relu-like opaque of ... a is single-consumer, so
    # build: x -> p0 -> a; a -> p1 -> b; p1's output also -> p2 -> c; add(b2, c) with group [p1, ...]
    ops = [
        G.conv("p0", "pw", "x", "a", 16, 16, 8),
        G.conv("dw", "dw", "a", "d", 16, 16, 8, k=3),
        G.conv("p1", "pw", "d", "b", 16, 16, 8),
        G.opaque("side", "Softmax", ["x"], "s", (1, 16, 8, 8)),
        G.opaque("add", "Add", ["b", "s"], "y", (1, 16, 8, 8)),
    ]
    g = G.make_graph("late_residual", ops, {"x": (1, 16, 8, 8)}, ["y"])
    # the other operand 's' is computed outside and not after any member: legal
    assert validate_group(g, ["p0", "dw", "p1", "add"]) is None
    ops2 = [
        G.conv("p0", "pw", "x", "a", 16, 16, 8),
        G.conv("dw", "dw", "a", "d", 16, 16, 8, k=3),
        G.conv("p1", "pw", "d", "b", 16, 16, 8),
        G.conv("p2", "pw", "b", "c", 16, 16, 8),
        G.opaque("add", "Add", ["b", "c"], "y", (1, 16, 8, 8)),
    ]
    g2 = G.make_graph("late_residual2", ops2, {"x": (1, 16, 8, 8)}, ["y"])
    why = validate_group(g2, ["dw", "p1", "add"])
    assert why is not None
    assert not any(x.residual for x in find_candidates(g2).groups)


def test_layer_residuals():
    # pw2's output feeds only the block's Add, whose other operand is the block input
    assert {n: (r.add, r.tensor) for n, r in layer_residuals(G.residual()).items()} == {"pw2": ("add", "x")}
    # p1's output also feeds p2, so only p2 (after p1, whose output b is then in memory) applies the Add
    ops = [
        G.conv("p1", "pw", "x", "b", 16, 16, 8),
        G.conv("p2", "pw", "b", "c", 16, 16, 8),
        G.opaque("add", "Add", ["b", "c"], "y", (1, 16, 8, 8)),
    ]
    g = G.make_graph("shared", ops, {"x": (1, 16, 8, 8)}, ["y"])
    assert {n: (r.add, r.tensor) for n, r in layer_residuals(g).items()} == {"p2": ("add", "b")}
    # both operands from ops that feed only the Add: neither applies it
    ops = [
        G.conv("pa", "pw", "x", "a", 16, 16, 8),
        G.conv("pb", "pw", "x", "b", 16, 16, 8),
        G.opaque("add", "Add", ["a", "b"], "y", (1, 16, 8, 8)),
    ]
    assert layer_residuals(G.make_graph("two", ops, {"x": (1, 16, 8, 8)}, ["y"])) == {}
    # no Add at all
    assert layer_residuals(G.chain()) == {}


def test_check_partition():
    g = G.chain()
    assert check_partition(g, [["pw1", "dw"]]) is None
    assert "two groups" in check_partition(g, [["pw1", "dw"], ["dw", "pw2"]])
    assert check_partition(g, [["pw1", "dw", "pw2"]]) is None
