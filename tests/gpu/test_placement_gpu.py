"""The placement probe on the GPU: with shared memory that fits one block per SM, one block per SM
runs at a time, a grid of one block per SM runs in one round and a grid of two per SM in two."""

from __future__ import annotations

import pytest

cp = pytest.importorskip("cupy", reason="CuPy is not installed: GPU placement tests need a CUDA machine")
if not cp.cuda.is_available():
    pytest.skip("no CUDA device visible: GPU placement tests skipped", allow_module_level=True)

from fuseplanner.hw import spec as specs  # noqa: E402
from fuseplanner.validation.timing import probe_placement  # noqa: E402

GPU = specs.detect() or specs.gpu("h100")


SMS = cp.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
ONE_PER_SM = (GPU.hw.smem_per_sm_bytes - GPU.hw.smem_reserved_per_block_bytes) // 1024 * 1024  # shared memory for one block per SM


def test_one_block_per_sm():
    one = probe_placement(SMS, 256, ONE_PER_SM, 1, spin_us=100)
    assert one.max_per_sm == 1 and one.rounds == 1 and one.sms == SMS, one
    two = probe_placement(2 * SMS, 256, ONE_PER_SM, 1, spin_us=100)
    assert two.max_per_sm == 1 and two.rounds == 2 and two.first_round_blocks == SMS, two
    assert two.span_ns >= 2 * 100e3


def test_clusters_of_eight_record_every_block():
    p = probe_placement(8 * (SMS // 8), 256, ONE_PER_SM, 8, spin_us=100)
    assert p.blocks == 8 * (SMS // 8) and p.max_per_sm == 1 and p.sms <= SMS and p.rounds >= 1, p
    assert p.first_round_blocks % 8 == 0  # clusters start together
