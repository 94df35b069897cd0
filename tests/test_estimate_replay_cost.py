"""scripts/estimate_replay_cost.py: the once-per-replay cost from saved whole results, on CPU."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("estimate_replay_cost", ROOT / "scripts" / "estimate_replay_cost.py")
erc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(erc)


def test_share_is_the_slope_through_the_origin():
    # 20 steps fused away, excess 7.4 us; 10 steps, 3.8 us: (20 x 7.4 + 10 x 3.8) / (20^2 + 10^2) = 186 / 500 = 0.372 us
    assert erc.per_step_share([(20, 7.4e-6), (10, 3.8e-6)]) == pytest.approx(0.372e-6)


def test_bundled_h100_results_give_the_specs_value():
    from fuseplanner.hw.spec import gpu
    from fuseplanner.validation.whole import REPLAY_COPIES

    models = ("mobilenet_v1", "mobilenet_v2", "mobilenet_v3_large", "mnasnet1_0", "efficientnet_b0", "mobilevit_xxs")
    paths = [str(p) for p in sorted((ROOT / "data/records/h100/whole").glob("*_b1/*.json.gz")) if p.name.split(".")[0] in models]
    assert len(paths) == 18
    share = erc.per_step_share(erc.pairs(paths))
    assert share * REPLAY_COPIES == pytest.approx(gpu("h100").eff("graph_replay_s"), rel=0.01)


def test_held_out_models_are_refused():
    with pytest.raises(SystemExit, match="held-out"):
        erc.pairs([str(ROOT / "data/records/h100/whole/fp32fp32_b1/mnasnet0_5.json.gz")])
