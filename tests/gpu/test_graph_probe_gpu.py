"""The graph-context probe of `calibrate` on the GPU: measured launch interval, kernel tail and opaque floor."""

from __future__ import annotations

import tomllib

import pytest

cp = pytest.importorskip("cupy", reason="CuPy is not installed: GPU tests need a CUDA machine")
if not cp.cuda.is_available():
    pytest.skip("no CUDA device visible: GPU tests skipped", allow_module_level=True)

from fuseplanner.cli.cmd_calibrate import _library_ops  # noqa: E402
from fuseplanner.cli.main import main  # noqa: E402
from fuseplanner.validation import graph_probe  # noqa: E402

US = 1e-6


def _sane(probe: graph_probe.GraphProbe) -> None:
    for key, v in probe.measured().items():
        assert 0.2 * US <= v <= 20 * US, (key, v)
    # a graph kernel never starts closer than the interval: every measured spacing is at least it
    assert all(s >= probe.launch_interval_s * 0.95 for s in probe.body_spacings_s), probe
    assert all(b > 0 for b in probe.bodies_s), probe.bodies_s
    # the bodies are ordered as aimed (2, 5, 10 us) and so are their spacings
    assert list(probe.bodies_s) == sorted(probe.bodies_s) and list(probe.body_spacings_s) == sorted(probe.body_spacings_s)
    for body in probe.bodies_s:
        assert probe.launch_interval_s <= probe.kernel_tail_s + body


def test_probe_with_the_executor_ops():
    with cp.cuda.Device(0):
        probe = graph_probe.measure(cp, _library_ops, n=100, replays=10)
    _sane(probe)
    assert probe.replay_s is not None  # a replay costs something once: at least the host submitting it
    assert [name for name, _ in probe.opaque_ops_s] == ["Add", "Relu", "GlobalAveragePool"]
    if probe.tail_fit.slope is not None:  # a graph kernel's spacing grows with its body about one for one
        assert 0.8 < probe.tail_fit.slope < 1.2, probe.tail_fit


def test_cli_writes_the_graph_terms(tmp_path):
    out = tmp_path / "graph.toml"
    assert main(["calibrate", "--no-sweep", "--out", str(out)]) == 0
    raw = tomllib.loads(out.read_text())
    for key in ("graph_launch_interval_s", "graph_kernel_tail_s", "opaque_op_floor_s", "graph_replay_s"):
        assert 0.2 * US <= raw["measured"][key] <= 20 * US, key
        assert key not in raw.get("estimated", ())
        assert raw["sources"][f"measured.{key}"].startswith("fuseplanner calibrate")
