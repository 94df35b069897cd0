"""The kernel-family registry: one family per kernel kind, each naming pieces that exist."""

from __future__ import annotations

import fnmatch
import importlib.resources
import re
import tomllib
from pathlib import Path, PurePosixPath

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
from fuseplanner.costbase.work import KernelModel
from fuseplanner.kernels import tiles
from fuseplanner.kernels._build import source_dirs, source_path
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
def test_family_pieces_sit_in_its_folder(kind):
    """Every registered kind reaches its cost model class, launcher and CUDA source through its family
    object, and each sits in the family's own folder (kernels/families/<family>/: cost.py, launch.py,
    the .cu file, found as package data)."""
    fam = family(kind)
    package = type(fam).__module__  # fuseplanner.kernels.families.<family>
    folder = importlib.resources.files(package)
    cu, fn = fam.source(kind)
    assert folder.joinpath(cu).is_file()
    assert source_path(cu) == Path(str(folder / cu))  # what the compiler is given
    assert re.search(rf'extern "C" __global__ void .*\n{fn}\(', folder.joinpath(cu).read_text())
    model = fam.cost_model(kind)
    assert issubclass(model, KernelModel) and model.__module__ == f"{package}.cost"
    prepare = fam.preparer(kind)
    assert prepare.__name__ == f"prepare_{kind}" and prepare.__module__ == f"{package}.launch"


def test_source_names_are_unique_across_folders():
    """`_build.source_path` finds a source by file name in the first folder that has it: no name may
    be in two folders."""
    names = [p.name for d in source_dirs() for p in d.iterdir() if p.suffix in (".cu", ".cuh")]
    assert len(names) == len(set(names)) and "common.cuh" in names and "fused_common.cuh" in names


def test_every_kernel_source_ships_as_package_data():
    """pyproject's package-data globs cover every .cu and .cuh the compiler may be given: a
    non-editable install copies only the files they match."""
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    globs = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["package-data"]["fuseplanner"]
    root = Path(str(importlib.resources.files("fuseplanner")))
    shipped = []
    for d in source_dirs():
        for path in d.iterdir():
            if path.suffix in (".cu", ".cuh"):
                rel = PurePosixPath(path.relative_to(root).as_posix())
                assert any(_glob_matches(rel, g) for g in globs), f"{rel} is not package data"
                shipped.append(rel)
    assert len(shipped) >= len({family(k).source(k)[0] for k in KERNEL_KINDS}) + 2  # + common.cuh, fused_common.cuh


def _glob_matches(rel: PurePosixPath, glob: str) -> bool:
    parts = PurePosixPath(glob).parts
    return len(parts) == len(rel.parts) and all(fnmatch.fnmatchcase(a, b) for a, b in zip(rel.parts, parts, strict=True))


def test_family_flags_match_the_tile_tables():
    assert tiles.UNEVEN_KINDS == ("pw", "linear")
    assert set(tiles.SPLIT_KINDS) == {"dw_pw", "pw", "linear"}
    assert [k for k in KERNEL_KINDS if family(k).fused] == list(GROUP_KINDS)


def test_unknown_kind_is_a_plan_error():
    with pytest.raises(PlanError, match="unknown kernel kind 'conv'"):
        family("conv")
