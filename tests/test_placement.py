"""Block placement summary (`measure.placement_summary`) on hand-made per-block records, and the probe's
argument check and no-GPU error."""

from __future__ import annotations

import numpy as np
import pytest

from fuseplanner.core.errors import DeviceError
from fuseplanner.validation import timing as measure


def test_rounds_and_co_resident_blocks():
    # (SM, start ns, end ns); every block spins 100 ns. SM 0 holds two blocks at once; SM 1 runs one,
    # then a fourth block that started at 100 > 0 + 100/2 (a second round, on SM 1 only)
    rec = np.array([[0, 0, 100], [0, 5, 105], [1, 2, 102], [1, 102, 202]])
    p = measure.placement_summary(rec, spin_ns=100)
    assert (p.blocks, p.sms, p.max_per_sm, p.rounds) == (4, 2, 2, 2)
    assert (p.first_round_blocks, p.first_round_sms) == (3, 2)
    assert p.span_ns == 202  # 202 - 0
    assert p.as_dict()["rounds"] == 2


def test_back_to_back_blocks_do_not_overlap():
    # the second block of SM 3 starts exactly when the first ends: never two at once, three rounds
    rec = [[3, 0, 100], [3, 100, 200], [3, 200, 300]]
    p = measure.placement_summary(rec, spin_ns=100)
    assert (p.sms, p.max_per_sm, p.rounds, p.first_round_blocks) == (1, 1, 3, 1)


def test_no_records_is_an_error():
    with pytest.raises(ValueError, match="no blocks"):
        measure.placement_summary(np.empty((0, 3)), spin_ns=100)


def test_probe_checks_clusters_then_needs_a_device():
    with pytest.raises(ValueError, match="clusters of 8"):
        measure.probe_placement(12, 256, 0, cluster=8)
    try:
        from fuseplanner.kernels import require_device

        require_device()
    except DeviceError:
        with pytest.raises(DeviceError):
            measure.probe_placement(16, 256, 0, cluster=8)
    else:
        pytest.skip("a CUDA device is present")
