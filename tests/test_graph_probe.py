"""The graph-context probe of `calibrate` on CPU: spacings, the tail fit, the opaque floor, the notes, and
the spec written with the measured graph terms (fake timings; the GPU part is in tests/gpu)."""

from __future__ import annotations

import tomllib
import types
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fuseplanner.core.errors import DeviceError
from fuseplanner.hw import spec as specs
from fuseplanner.validation import graph_probe as gp
from fuseplanner.validation import microbench
from fuseplanner.validation.timing import spacing

ROOT = Path(__file__).resolve().parent.parent
US = 1e-6
CAL = microbench.Calibration(
    device_name="NVIDIA H100 80GB HBM3", sm_count=132, l2_bytes=52428800, dram_bw_bytes_per_s=2.9e12,
    l2_bw_bytes_per_s=8.5e12, launch_overhead_s=3.6e-6, launch_warm_s=1.3e-6, launch_interval_s=1.1e-6,
    fp32_flops=5.9e13, fp16_flops=6.6e13,
)


def _probe() -> gp.GraphProbe:
    # interval 1.2 us; bodies 2, 5, 10 us spaced 3.4, 6.5, 11.4 us: spacing - body = 1.4, 1.5, 1.4 -> median 1.4 us
    return gp.summarize(1.2 * US, [2 * US, 5 * US, 10 * US], [3.4 * US, 6.5 * US, 11.4 * US],
                        [("Add", 2.0 * US), ("Relu", 1.8 * US), ("GlobalAveragePool", 4.5 * US)], kernels=200, replays=30,
                        replay_median_s=13.6 * US)


def test_spacing_cancels_the_per_replay_cost():
    # 200 launches in 270 us, 400 in 530 us: (530 - 270) / 200 = 1.3 us per launch (the 10 us replay cost cancels)
    assert spacing(270 * US, 530 * US, 200) == pytest.approx(1.3 * US)


def test_spacing_rejects_noise():
    with pytest.raises(DeviceError, match="noise"):
        spacing(270 * US, 260 * US, 200)


def test_tail_is_the_median_excess_over_the_body():
    fit = gp.fit_tail([2 * US, 5 * US, 10 * US], [3.4 * US, 6.5 * US, 11.4 * US], 1.2 * US)
    assert fit.tail_s == pytest.approx(1.4 * US)  # median of 1.4, 1.5, 1.4
    assert (fit.used, fit.dropped) == (3, 0)
    # free line through (2, 3.4), (5, 6.5), (10, 11.4): mean x 17/3, mean y 7.1;
    # Sxy = (-11/3)(-3.7) + (-2/3)(-0.6) + (13/3)(4.3) = 13.5667 + 0.4 + 18.6333 = 32.6, Sxx = (121 + 4 + 169) / 9 = 32.667
    assert fit.slope == pytest.approx(32.6 / (294 / 9))  # 0.99796
    assert fit.intercept_s == pytest.approx(7.1 * US - fit.slope * 17 / 3 * US)  # 7.1 - 0.99796 x 5.6667 = 1.4449 us


def test_a_body_at_the_interval_floor_is_left_out():
    # body 0.3 us spaced at the 1.3 us interval (waits for the next launch): dropped; 1.5 and 1.6 us from the others
    fit = gp.fit_tail([0.3 * US, 5 * US, 10 * US], [1.3 * US, 6.5 * US, 11.6 * US], 1.3 * US)
    assert (fit.used, fit.dropped) == (2, 1)
    assert fit.tail_s == pytest.approx(1.55 * US)  # median of 1.5 and 1.6


def test_one_body_gives_no_line():
    fit = gp.fit_tail([5 * US], [6.5 * US], 1.3 * US)
    assert fit.tail_s == pytest.approx(1.5 * US) and fit.slope is None and fit.intercept_s is None


def test_every_body_at_the_floor_is_an_error():
    with pytest.raises(DeviceError, match="too short"):
        gp.fit_tail([0.2 * US, 0.5 * US], [1.3 * US, 1.33 * US], 1.3 * US)


def test_a_negative_tail_is_an_error_not_a_value():
    with pytest.raises(DeviceError, match="inconsistent"):
        gp.fit_tail([5 * US, 10 * US], [4.5 * US, 9.0 * US], 1.3 * US)


def test_opaque_floor_is_the_median_op():
    assert gp.opaque_floor([("Add", 2.0 * US), ("Relu", 1.8 * US), ("Pool", 4.5 * US)]) == pytest.approx(2.0 * US)
    with pytest.raises(ValueError):
        gp.opaque_floor([])


def test_summary_values_and_notes():
    p = _probe()
    # the opaque floor: median of Add 2.0, Relu 1.8 and GlobalAveragePool 4.5 us = 2.0; the reduction
    # floor: the one reduction, 4.5 us
    assert p.measured() == pytest.approx({"graph_launch_interval_s": 1.2 * US, "graph_kernel_tail_s": 1.4 * US,
                                          "opaque_op_floor_s": 2.0 * US, "reduce_op_floor_s": 4.5 * US,
                                          "graph_replay_s": 1.6 * US})  # 13.6 - 10 x 1.2 us
    notes = p.notes()
    assert set(notes) == set(p.measured())
    assert all("\n" not in n and n.startswith("fuseplanner calibrate") for n in notes.values())
    assert "200 and 400 launches" in notes["graph_launch_interval_s"]
    assert "GlobalAveragePool 4.50 us" in notes["opaque_op_floor_s"]
    assert "free fit spacing = 0.998 x body + 1.44 us" in notes["graph_kernel_tail_s"]


def test_calibration_measured_includes_the_graph_terms():
    assert "graph_kernel_tail_s" not in CAL.measured()
    m = replace(CAL, graph=_probe()).measured()
    assert m["graph_kernel_tail_s"] == pytest.approx(1.4 * US)
    assert m["launch_overhead_s"] == 3.6e-6


def test_written_spec_has_the_graph_terms_measured_not_estimated(tmp_path):
    path = microbench.write_spec(tmp_path / "h100_graph.toml", specs.gpu("h100"), replace(CAL, graph=_probe()))
    raw = tomllib.loads(path.read_text())
    assert raw["measured"]["graph_launch_interval_s"] == pytest.approx(1.2 * US)
    assert not {"graph_launch_interval_s", "graph_kernel_tail_s", "l2_bw_bytes_per_s"} & set(raw["estimated"])
    assert "mem_latency_s" in raw["estimated"]  # not measured: still an estimate
    assert "spin kernels" in raw["sources"]["measured.graph_kernel_tail_s"]
    assert raw["graph_kernel_tail_s"] == 1.5e-6  # the datasheet-level estimate stays beside the measurement
    spec = specs.gpu(path)
    assert spec.eff("graph_kernel_tail_s") == pytest.approx(1.4 * US)
    assert spec.eff("opaque_op_floor_s") == pytest.approx(2.0 * US)
    assert not any("graph_" in w for w in spec.warnings(graph=True))


def test_bundled_h200_warns_about_the_graph_estimates():
    # the contrast of the test above: without the probe the graph terms are flagged as estimates
    # (the bundled h100 and h200 carry the probe's measurements; without them the h200's are estimates)
    estimated = specs.gpu("h200").model_copy(update={"measured": {}, "estimated": ["graph_kernel_tail_s"]})
    assert any("graph_kernel_tail_s" in w for w in estimated.warnings(graph=True))
    assert not any("graph_kernel_tail_s" in w for w in specs.gpu("h200").warnings(graph=True))
    assert not any("graph_kernel_tail_s" in w for w in specs.gpu("h100").warnings(graph=True))


class _NumpyAsCupy(types.ModuleType):
    """NumPy under CuPy's calls that the probe's op builders make (random with a dtype)."""

    def __init__(self) -> None:
        super().__init__("numpy")
        self.random = types.SimpleNamespace(random=lambda shape, dtype: np.random.default_rng(0).random(shape).astype(dtype))

    def __getattr__(self, name):
        return getattr(np, name)


@pytest.mark.parametrize("source", ["cupy", "executor"])
def test_library_ops_compute_their_op(source):
    from fuseplanner.cli.cmd_calibrate import _library_ops

    xp = _NumpyAsCupy()
    built = gp.cupy_ops(xp) if source == "cupy" else _library_ops(xp)
    assert [op.name for op in built] == ["Add", "Relu", "GlobalAveragePool"]
    x = xp.random.random(gp.OPAQUE_SHAPE, np.float32)  # the same seeded draw the builders made
    expected = {"Add": x + x, "Relu": np.maximum(x, 0), "GlobalAveragePool": x.mean(axis=(2, 3), keepdims=True)}
    for op in built:
        op.launch()
        np.testing.assert_allclose(op.output, expected[op.name], rtol=1e-6)


def test_reduction_floor_from_the_reductions_only():
    from fuseplanner.validation.graph_probe import reduce_floor

    # Add 1.35 and Relu 1.34 us are not reductions; GlobalAveragePool 5.18 us is the only one
    assert reduce_floor([("Add", 1.35e-6), ("Relu", 1.34e-6), ("GlobalAveragePool", 5.18e-6)]) == 5.18e-6
    assert reduce_floor([("Add", 1.35e-6)]) is None


def test_replay_once_cost_is_the_replay_less_its_intervals():
    # a graph of 10 empty kernels replays in 13.6 us between events; interval 1.2 us: 13.6 - 10 x 1.2 = 1.6 us once
    p = _probe()
    assert gp.REPLAY_KERNELS == 10
    assert p.replay_s == pytest.approx(1.6 * US)
    assert p.measured()["graph_replay_s"] == pytest.approx(1.6 * US)
    assert "10 empty kernels" in p.notes()["graph_replay_s"]
    # a replay no longer than its intervals (11.9 us < 12 us): nothing measured, nothing written
    none = gp.summarize(1.2 * US, [2 * US], [3.4 * US], [("Add", 2.0 * US)], replay_median_s=11.9 * US)
    assert none.replay_s is None and "graph_replay_s" not in none.measured()
