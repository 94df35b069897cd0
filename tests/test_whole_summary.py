"""The per-set whole-model summary, on hand-built results (synthetic numbers)."""

from __future__ import annotations

from types import SimpleNamespace

from fuseplanner.validation.whole_summary import kind_rows, model_rows, summary_rows, to_markdown


def _result(model, e_planned, e_unfused, gap, steps, batch=1, planned_us=90.0, unfused_us=100.0):
    """A result with measured latencies `planned_us` / `unfused_us` and predictions off by the errors."""
    us = 1e-6
    return SimpleNamespace(model=model, dtype="fp32", precision="fp32", batch=batch, error_planned=e_planned,
                           error_unfused=e_unfused, saving_gap_points=gap,
                           measured_planned=SimpleNamespace(median_s=planned_us * us),
                           measured_unfused=SimpleNamespace(median_s=unfused_us * us),
                           predicted_planned_s=planned_us * (1 + e_planned) * us,
                           predicted_unfused_s=unfused_us * (1 + e_unfused) * us,
                           measured_saving=1 - planned_us / unfused_us,
                           predicted_saving=1 - planned_us * (1 + e_planned) / (unfused_us * (1 + e_unfused)),
                           step_error_median=None, step_error_p90=None, plan=None,
                           steps=[SimpleNamespace(kind=k, error=e) for k, e in steps])  # fmt: skip


def test_rows_pool_per_set_and_config():
    held = frozenset({"b"})
    results = [
        _result("a", 0.10, -0.20, -1.0, [("pw", 0.1), ("dw_pw", -0.3), ("opaque", 0.5)]),
        _result("c", -0.04, 0.02, 4.0, [("conv", None), ("linear", 0.2)]),
        _result("b", 0.30, 0.10, 2.5, [("pw", 0.4)]),
        _result("a", 0.06, 0.06, 0.0, [], batch=8),
    ]
    rows = {(r[0], r[1], r[2]): r for r in summary_rows(results, held)}
    # bundled fp32 batch 1: e2e |errors| 10, 20, 4, 2 -> median 7.0; p90 of (2, 4, 10, 20) = 10 + 0.7 x 10 = 17.0
    b1 = rows[("bundled", "fp32/fp32", "1")]
    assert b1[3:6] == ("2", "7.0 / 17.0", "1 of 2")  # gaps 1.0 (within 3) and 4.0 (not)
    # own kernels 10, 30, 20 -> median 20.0, p90 = 20 + 0.8 x 10 = 28.0; library: the Add only (conv's None skipped)
    assert b1[6:] == ("20.0 / 28.0", "50.0 / 50.0")
    assert rows[("held-out", "fp32/fp32", "1")][3:6] == ("1", "20.0 / 28.0", "1 of 1")
    everything = rows[("bundled", "all", "all")]
    assert everything[3] == "3" and everything[5] == "2 of 3"
    assert rows[("bundled", "fp32/fp32", "8")][7] == "n/a"  # no steps


def test_markdown_has_one_line_per_row():
    md = to_markdown([_result("a", 0.1, 0.1, 0.0, [])], frozenset())
    assert md.count("\n| bundled |") == 4  # the config row and the "all" row, the per-kind row, the model row


def test_markdown_says_which_context_the_measured_plans_were_decided_in():
    results = [_result("a", 0.1, 0.1, 0.0, []), _result("b", 0.1, 0.1, 0.0, []), _result("c", 0.1, 0.1, 0.0, [])]
    results[0].plan, results[1].plan = SimpleNamespace(context="graph"), SimpleNamespace(context="isolated")
    md = to_markdown(results, frozenset())
    assert ("Plans measured, by the context they were decided in: graph 1, isolated 1, unknown (saved without "
            "its plan) 1.") in md


def test_model_rows_by_hand():
    # measured 90 / 100 us: saving 10.0%; predicted 90 x 1.1 = 99.0 and 100 x 0.95 = 95.0 us: saving
    # 1 - 99 / 95 = -4.2%; the gap is the result's own (-14.2 here, given)
    r = _result("m", 0.10, -0.05, -14.2, [])
    r.step_error_median, r.step_error_p90 = 0.081, 0.25
    held = _result("h", 0.0, 0.0, 0.0, [], batch=8)
    rows = model_rows([held, r], frozenset({"h"}))
    assert rows[0] == ("bundled", "m", "fp32/fp32", "1", "90.0", "99.0", "+10.0%", "100.0", "95.0", "-5.0%", "10.0%",
                       "-4.2%", "-14.2", "8.1% / 25.0%")  # fmt: skip
    assert rows[1][:4] == ("held-out", "h", "fp32/fp32", "8") and rows[1][-1] == "n/a"


def test_kind_rows_give_the_signed_median_per_kernel_kind():
    from fuseplanner.core.kinds import KERNEL_KINDS

    results = [_result("a", 0, 0, 0, [("pw", 0.10), ("pw", -0.30), ("pw", 0.20), ("pw_pw", 0.6), ("opaque", -0.5),
                                      ("conv", None)]),
               _result("b", 0, 0, 0, [("pw", 0.4)])]  # fmt: skip
    (bundled, held) = kind_rows(results, frozenset({"b"}))
    cell = dict(zip((*KERNEL_KINDS, "library"), bundled[3:], strict=True))
    # pw errors +10, -30, +20 -> median +10.0 of 3 steps; pw_pw +60 of 1; the library Add -50 (conv: no error)
    assert cell["pw"] == "+10.0 (3)" and cell["pw_pw"] == "+60.0 (1)" and cell["library"] == "-50.0 (1)"
    assert cell["dw"] == "" and bundled[:3] == ("bundled", "fp32/fp32", "1")
    assert held[:3] == ("held-out", "fp32/fp32", "1") and "+40.0 (1)" in held


def test_saved_h100_runs_meet_the_whole_model_latency_target():
    """The saved H100 whole runs at fp32 batch 1 (data/records/h100/whole), re-predicted with the bundled
    spec: end-to-end |error| median <= 10% and p90 <= 20% on the bundled and on the held-out models
    (whose runs chose no fitted value)."""
    from pathlib import Path

    import numpy as np

    from fuseplanner.frontend.holdout import holdout_models
    from fuseplanner.hw.spec import gpu
    from fuseplanner.validation.whole import read, repredict

    records = Path(__file__).resolve().parents[1] / "data" / "records" / "h100" / "whole" / "fp32fp32_b1"
    held = {m.name for m in holdout_models()}
    errors: dict[bool, list[float]] = {True: [], False: []}
    for path in sorted(records.glob("*.json.gz")):
        r = repredict(read(path)[0], gpu("h100"), context="isolated")
        errors[r.model in held] += [abs(r.error_planned), abs(r.error_unfused)]
    assert len(errors[False]) == 12 and len(errors[True]) == 18  # 6 bundled, 9 held-out models
    for e in errors.values():
        assert np.median(e) <= 0.10 and np.percentile(e, 90) <= 0.20
