"""The kernel-family registry: one family per kernel kind, each naming pieces that exist."""

from __future__ import annotations

import pytest

from fuseplanner.core.errors import PlanError
from fuseplanner.core.kinds import (
    GROUP_KINDS,
    GROUP_MEMBERS,
    KERNEL_KINDS,
    KERNEL_MEMBERS,
    LAYER_KINDS,
    MEMBER_KINDS,
)
from fuseplanner.cost.work import KernelModel
from fuseplanner.kernels import kernels_dir, tiles
from fuseplanner.kernels.family import FAMILIES, family


def test_every_kernel_kind_has_exactly_one_family():
    registered = [k for f in FAMILIES for k in f.kinds]
    assert sorted(registered) == sorted(KERNEL_KINDS) and len(registered) == len(set(registered))


def test_kind_tables_agree():
    assert KERNEL_KINDS == (*LAYER_KINDS, *GROUP_KINDS)
    assert set(MEMBER_KINDS) == {k for seqs in GROUP_MEMBERS.values() for s in seqs for k in s}
    # a group kind's name lists its members (pw_pw also runs linear -> linear)
    assert all(KERNEL_MEMBERS[k][0] == tuple(k.split("_")) for k in GROUP_KINDS)


@pytest.mark.parametrize("kind", KERNEL_KINDS)
def test_family_pieces_exist(kind):
    fam = family(kind)
    cu, fn = fam.source(kind)
    assert (kernels_dir() / cu).is_file() and fn
    assert issubclass(fam.cost_model(kind), KernelModel)
    assert fam.preparer(kind).__name__ == f"prepare_{kind}"


def test_family_flags_match_the_tile_tables():
    assert tiles.UNEVEN_KINDS == ("pw", "linear")
    assert set(tiles.SPLIT_KINDS) == {"dw_pw", "pw", "linear"}
    assert [k for k in KERNEL_KINDS if family(k).fused] == list(GROUP_KINDS)


def test_unknown_kind_is_a_plan_error():
    with pytest.raises(PlanError, match="unknown kernel kind 'conv'"):
        family("conv")
