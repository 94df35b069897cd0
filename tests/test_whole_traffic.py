"""Whole-inference traffic (fuseplanner.validation.whole_traffic): the prediction summed, ncu's graph
profiles read, the table, and the fallback without counters. No GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from fuseplanner.core.errors import DeviceError
from fuseplanner.cost.execution import StepPrediction, WholePrediction
from fuseplanner.validation import ncu, whole_traffic
from fuseplanner.validation.whole_traffic import InferenceBytes, Measured, measured_from, predicted

FIX = Path(__file__).parent / "fixtures"


def _rec(i: int, kernel: str, dram_r=0.0, dram_w=0.0, sec_r=0.0, sec_w=0.0) -> ncu.KernelRecord:
    return ncu.KernelRecord(i, kernel, metrics={ncu.DRAM_READ: dram_r, ncu.DRAM_WRITE: dram_w, ncu.GMA_READ: sec_r,
                                                ncu.GMA_WRITE: sec_w, ncu.DURATION: 1e-6})  # fmt: skip


def test_predicted_sums_the_steps():
    steps = (StepPrediction("a", "pw", "Conv", 1e-6, 100.0, 40.0, 60.0, l2_read_bytes=320.0, l2_write_bytes=64.0),
             StepPrediction("b", "dw", "Conv", 2e-6, 10.0, 20.0, 0.0, l2_read_bytes=32.0, l2_write_bytes=96.0))  # fmt: skip
    got = predicted(WholePrediction("graph", steps))
    # DRAM read 100 + 10 (what the residency rule left), write 40 + 20; L2 read 320 + 32, write 64 + 96
    assert (got.dram_read_bytes, got.dram_write_bytes, got.l2_read_bytes, got.l2_write_bytes) == (110, 60, 352, 160)
    assert got.dram_bytes == 170 and got.l2_bytes == 512


def test_real_graph_profile_is_read():
    """ncu's --graph-profiling graph output on the H100 (three axpy kernels in one graph, the warm-up replay
    before the begin marker): the marked replay is one record named "graph"."""
    recs = ncu.parse_csv((FIX / "ncu_graph_profile.csv").read_text())
    regions = ncu.split_by_markers(recs)
    assert [[r.kernel for r in reg] for reg in regions] == [["graph"]]
    b = whole_traffic.from_counters(ncu.total(regions[0]))
    # 3,145,728 read sectors x 32 B = 100,663,296 B: 3 kernels x 2 reads x 4 Mi floats x 4 B
    assert b.l2_read_bytes == 3 * 2 * 4 * 2**22 == 3_145_728 * 32
    assert b.l2_write_bytes == 1_572_864 * 32 and b.dram_read_bytes == 43_913_216 and b.dram_write_bytes == 11_598_336


def test_measured_from_two_marked_replays():
    recs = [_rec(0, "graph", 9, 9, 9, 9), _rec(1, ncu.MARK_BEGIN), _rec(2, "graph", 1000, 200, 50, 10), _rec(3, ncu.MARK_END),
            _rec(4, "graph", 9, 9, 9, 9), _rec(5, ncu.MARK_BEGIN), _rec(6, "graph", 3000, 900, 80, 40), _rec(7, ncu.MARK_END)]
    m = measured_from(recs)
    assert m.planned == InferenceBytes(dram_read_bytes=1000, dram_write_bytes=200, l2_read_bytes=50 * 32, l2_write_bytes=10 * 32)
    assert m.unfused.dram_bytes == 3900 and m.unfused.l2_bytes == 120 * 32


@pytest.mark.parametrize("kernels", [["graph"], ["graph", "graph", "graph"], ["k1", "k2"]])
def test_measured_from_rejects_other_shapes(kernels):
    recs = []
    for i, k in enumerate(kernels):  # one marked region per entry (node-mode kernels would not be one "graph")
        recs += [_rec(3 * i, ncu.MARK_BEGIN), _rec(3 * i + 1, k, 1, 1, 1, 1), _rec(3 * i + 2, ncu.MARK_END)]
    if kernels == ["k1", "k2"]:
        recs = [_rec(0, ncu.MARK_BEGIN), _rec(1, "k1"), _rec(2, "k2"), _rec(3, ncu.MARK_END)] * 2
    with pytest.raises(DeviceError):
        measured_from(recs)


def test_graph_profiling_flag():
    cmd = ncu.command(["python3", "x.py"], log_file="l.csv", cache="none", graph=True)
    assert cmd[cmd.index("--graph-profiling") + 1] == "graph" and cmd[cmd.index("--cache-control") + 1] == "none"
    assert "--graph-profiling" not in ncu.command(["python3"], log_file="l.csv")


def test_whole_prediction_traffic_on_a_bundled_model():
    """MobileNetV2 at batch 1: every activation fits in the H100's L2, so the graph context reads less
    DRAM than the per-kernel (isolated) sum, the L2 requests are the same in both contexts, and the
    plan moves fewer L2 bytes than no fusion (fused intermediates never leave the SM)."""
    import fuseplanner
    from fuseplanner.hw.spec import gpu
    from fuseplanner.planning.whole import predict_whole

    g = fuseplanner.load_model("mobilenet_v2")
    spec = gpu("h100")
    p = fuseplanner.plan(g, spec, workers=1)
    gr, iso = predict_whole(g, spec, p, "graph"), predict_whole(g, spec, p, "isolated")
    t = whole_traffic.comparison(gr, iso)
    assert t.predicted_planned.l2_bytes == pytest.approx(t.isolated_planned.l2_bytes)
    assert t.predicted_planned.dram_read_bytes < t.isolated_planned.dram_read_bytes
    assert t.isolated_planned.dram_read_bytes - t.predicted_planned.dram_read_bytes == pytest.approx(gr.planned.saved_read_bytes)
    assert t.predicted_planned.dram_write_bytes == pytest.approx(t.isolated_planned.dram_write_bytes)
    assert t.predicted_planned.l2_bytes < t.predicted_unfused.l2_bytes
    assert t.cold is None and t.warm is None


def _with_traffic(cold: Measured | None):
    from tests.test_validate_whole import _result

    r = _result()
    b = InferenceBytes(dram_read_bytes=8e6, dram_write_bytes=2e6, l2_read_bytes=30e6, l2_write_bytes=10e6)
    t = r.traffic.model_copy(update={"predicted_planned": b, "predicted_unfused": b.model_copy(update={"dram_read_bytes": 18e6}),
                                     "isolated_planned": b, "isolated_unfused": b})  # fmt: skip
    return r.model_copy(update={"traffic": t.with_counters(cold, cold)})


def test_table_row_by_hand():
    meas = InferenceBytes(dram_read_bytes=9e6, dram_write_bytes=3e6, l2_read_bytes=32e6, l2_write_bytes=8e6)
    text = whole_traffic.to_markdown([_with_traffic(Measured(planned=meas, unfused=meas.model_copy(update={"dram_read_bytes": 21e6})))])
    row = text.splitlines()[-1]
    # DRAM planned: measured 12.00 MB, predicted 10.00 MB -> 10/12 - 1 = -16.7%; unfused 24.00 vs 20.00 -> -16.7%
    # saved: measured (24 - 12)/24 = 50.0%, predicted (20 - 10)/20 = 50.0%; writes measured 3 / 3, predicted 2 / 2;
    # L2 40.00 vs 40.00 -> +0.0%
    assert ("| 12.00 | 10.00 (-16.7%) | 10.00 | 24.00 | 20.00 (-16.7%) | 50.0% | 50.0% | 3.00 / 3.00 | 2.00 / 2.00 | "
            "40.00 | 40.00 (+0.0%) | 12.00 |") in row
    assert whole_traffic.to_markdown([_with_traffic(None)]) == ""


def test_counters_unavailable_leaves_a_note(monkeypatch):
    from fuseplanner.validation import whole

    def refuse(*a, **k):
        raise ncu.CountersUnavailable("no counters here")

    monkeypatch.setattr(whole_traffic, "profile", refuse)
    r = _with_traffic(None)
    t = whole._counters(r.traffic, "m", None, None, {}, require=False)
    assert t.cold is None and t.note == "no counters here"
    with pytest.raises(ncu.CountersUnavailable):
        whole._counters(r.traffic, "m", None, None, {}, require=True)


def test_worker_usage():
    assert whole_traffic._main(["--nope"]) == 2


def test_summary_rows_by_set():
    meas = InferenceBytes(dram_read_bytes=9e6, dram_write_bytes=3e6, l2_read_bytes=32e6, l2_write_bytes=8e6)
    r = _with_traffic(Measured(planned=meas, unfused=meas.model_copy(update={"dram_read_bytes": 21e6})))
    rows = whole_traffic.summary([r], held_out=frozenset())
    # DRAM errors -16.7% (10 vs 12) and -16.7% (20 vs 24): median = p90 = 16.7; reads 8/9 - 1 = -11.1% and 18/21 - 1
    # = -14.3%: median 12.7; isolated 10 vs 12 and 10 vs 24 (-58.3%); L2 0%
    assert rows == ["| bundled | fp32/fp32 | 1 | 1 | 16.7 / 16.7 | 12.7 / 14.0 | 37.5 / 54.2 | 0.0 / 0.0 |"]
    assert whole_traffic.summary([r], held_out=frozenset({r.model})) == [
        "| held-out | fp32/fp32 | 1 | 1 | 16.7 / 16.7 | 12.7 / 14.0 | 37.5 / 54.2 | 0.0 / 0.0 |"]
