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


def test_gzip_model_loads_like_the_plain_file(tmp_path):
    import gzip

    from fuseplanner.frontend.load import load_model, resolve_model

    plain = resolve_model("mobilenet_v2")
    packed = tmp_path / "m.onnx.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    a, b = load_model(str(plain)), load_model(str(packed))
    assert [op.name for op in a.ops()] == [op.name for op in b.ops()]
    assert b.name == "m"


def test_truncated_gzip_model_is_one_error_line(tmp_path, capsys):
    import gzip

    from fuseplanner.cli.main import main
    from fuseplanner.frontend.load import resolve_model

    bad = tmp_path / "m.onnx.gz"
    bad.write_bytes(gzip.compress(resolve_model("mobilenet_v2").read_bytes())[:500])
    assert main(["plan", str(bad), "--gpu", "h100"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "gzip" in err[0]
