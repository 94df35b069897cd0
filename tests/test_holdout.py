"""The held-out model list (models/holdout.toml) and, where exported, planning each held-out model."""

from __future__ import annotations

import pytest

import fuseplanner
from fuseplanner.core.errors import ModelError
from fuseplanner.frontend.holdout import holdout_models
from fuseplanner.frontend.load import bundled_models
from fuseplanner.hw.spec import gpu

MODELS = holdout_models()


def test_list_is_large_diverse_and_disjoint_from_the_fit():
    assert len(MODELS) >= 8
    assert len({m.exporter for m in MODELS}) >= 2 and len({m.source for m in MODELS}) >= 2
    fit = set(bundled_models())
    # no held-out model is a bundled (fitted-on) model at the same resolution
    assert not {m.name for m in MODELS} & fit


def test_bad_list_is_one_error(tmp_path):
    bad = tmp_path / "h.toml"
    bad.write_text('[[model]]\nname = "x"\nsource = "keras"\narch = "x"\nresolution = 1\nexporter = "torch-dynamo"\nopset = 18\n')
    with pytest.raises(ModelError, match="source"):
        holdout_models(bad)


@pytest.mark.parametrize("m", MODELS, ids=[m.name for m in MODELS])
def test_exported_holdout_model_plans(m):
    if not m.path().is_file():
        pytest.skip(f"{m.path()} not exported: run python models/export_holdout.py")
    g = fuseplanner.load_model(str(m.path()))
    assert g.ops()[0].in_shape[-1] == m.resolution
    p = fuseplanner.plan(g, gpu("h100"), workers=1)
    assert p.totals.planned.time_s > 0
