"""The command line shared by the scripts that re-read saved validation runs (scripts/saved_runs.py)."""

import glob
import gzip
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import saved_runs  # noqa: E402

RECORDS = ROOT / "data/records/h100"
RUN = RECORDS / "fit/efficientnet_b0-fp32-b1-sweep.json.gz"


def test_parse_returns_spec_and_paths():
    spec, paths = saved_runs.parse("doc", ["--gpu", "h100", str(RUN)])
    assert spec.name == "h100" and paths == [str(RUN)]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["data/records/nothing-*/results.json"],
            "no such results file: data/records/nothing-*/results.json",
        ),
        (["--gpu", "no_such_gpu", str(RUN)], "no_such_gpu"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        saved_runs.parse("doc", argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err.strip().splitlines()[-1] and "Traceback" not in err


def test_parse_accepts_gzipped_runs_and_their_globs(tmp_path):
    plain = tmp_path / "results.json"
    plain.write_bytes(gzip.decompress(RUN.read_bytes()))
    assert saved_runs.parse("doc", [str(plain)])[1] == [str(plain)]
    # a glob over the curated set, as the shell expands it
    runs = sorted(glob.glob(str(RECORDS / "fit/*.json.gz")))
    assert len(runs) == 29 and saved_runs.parse("doc", runs)[1] == runs
    # a compressed run reads as its plain file does
    spec = saved_runs.specs.gpu("h100")

    def launched(path):
        return [(run, r["id"], st.kind) for run, r, st, *_ in saved_runs.launched_records(spec, str(path))]

    assert launched(RUN) and launched(plain) == launched(RUN)


def test_unmatched_gzip_glob_is_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        saved_runs.parse("doc", ["data/records/nothing-*/results.json.gz"])
    assert exc.value.code == 2
    assert "no such results file: data/records/nothing-*/results.json.gz" in capsys.readouterr().err


def test_parse_with_adds_a_scripts_own_options():
    def options(ap):
        ap.add_argument("--kind", default="")

    spec, paths, args = saved_runs.parse_with("doc", ["--kind", "pw,dw", str(RUN)], options)
    assert spec.name == "h100" and paths == [str(RUN)] and args.kind == "pw,dw"


def test_read_split_parts_add_up_to_the_predicted_reads():
    import read_split

    from fuseplanner import specs

    rows = read_split.split(specs.gpu("h100"), str(RUN), {"pw"})
    assert rows and all(kind == "pw" for _, _, _, kind, *_ in rows)
    for ratio, _, _, _, _, act, wt in rows:
        # both parts are fractions of the same measured reads: together the predicted / measured ratio
        assert act > 0 and wt >= 0 and abs(act + wt - ratio) < 1e-9
    assert len(read_split.split(specs.gpu("h100"), str(RUN), set())) > len(rows)  # no filter: every kind


def test_input_merging_replays_the_models_own_share():
    import math

    import input_merging
    import read_split

    from fuseplanner import specs
    from fuseplanner.cost import model

    spec = specs.gpu("h100")
    variants = input_merging.errors(spec, str(RUN))
    ratios = {}
    for ratio, _, _, kind, *_ in read_split.split(spec, str(RUN), set()):
        ratios.setdefault(kind, []).append(abs(math.log(ratio)))
    assert variants  # EfficientNet-B0's sweep has fused records whose inputs are re-read
    for kind, rows in variants.items():
        # the model's choice: both factors, or co-residency only for UNMERGED_INPUT_KINDS
        col = 1 if kind in model.UNMERGED_INPUT_KINDS else 0
        # each record's error under the model's own share is the one read_split prints for it
        assert len(rows) <= len(ratios[kind])
        assert all(any(abs(r[col] - x) < 1e-9 for x in ratios[kind]) for r in rows)
        # and the other column differs somewhere (the replay really switches the factor)
        assert any(abs(r[0] - r[1]) > 1e-6 for rows_ in variants.values() for r in rows_)


def test_traffic_ratios_are_measured_over_predicted(capsys):
    import traffic_ratios

    from fuseplanner import fit, report, specs

    spec = specs.gpu("h100")
    got = traffic_ratios.ratios(spec, [str(RUN)])
    data = fit.repredict(report.load_results(str(RUN)), spec)
    # recompute one kind's writes by hand from the re-predicted records
    want = sorted(r["measured"]["gma_write_bytes"] / r["predicted"]["ours"]["gma_write_bytes"]
                  for r in data["records"] if r["kind"] == "pw_dw" and len(r["step_kinds"]) == 1
                  and (r.get("measured") or {}).get("traffic") == "ncu")  # fmt: skip
    assert want and sorted(got["write", "pw_dw", "fp32"]) == want
    assert len(got["gma", "pw_dw", ""]) == len(want)
    assert traffic_ratios.main(["--gpu", "h100", str(RUN)]) == 0
    out = capsys.readouterr().out
    assert "| write | pw_dw | fp32 |" in out and "| pw_dw |" in out


def test_spill_check_splits_launches_at_the_register_ceiling(capsys):
    import spill_check

    from fuseplanner import registers, report
    from fuseplanner.ir import Tile

    run = RECORDS / "fit/mobilenet_v1-fp16-b8-sweep.json.gz"
    ratios, frames, best = spill_check.scan([str(run)])
    data = report.load_results(str(run))
    # the DW->PW tile 28 x 14 x 128 of g2 wants 271 registers (61 + 1.07 x 196) and ran 186 us
    g2 = next(r for r in data["records"] if r["id"] == "g2")
    assert registers.wanted("dw_pw", Tile(**g2["tiles"][0]), "fp16") == 271
    assert spill_check.over_ceiling(g2, "fp16") is True
    want = g2["measured"]["time_cold_s"] / g2["predicted"]["ours"]["time_s"]
    assert want > 6 and want in ratios[True]
    assert frames[True, True] >= 1 and sum(best.values()) == 20  # the run's 20 groups
    spill_check.main(["--gpu", "h100", str(run)])
    out = capsys.readouterr().out
    assert "| over 255 registers |" in out and "| within 255 |" in out


def test_plan_totals_sum_the_planned_items_and_compare_with_the_first_run(tmp_path, capsys):
    import json

    import plan_totals

    def doc(gpu, items):
        recs = [{"id": f"x{i}", "role": "layer", "planned": planned, "error": err,
                 "predicted": {"ours": {"time_s": p * 1e-6}},
                 "measured": {"time_cold_s": c * 1e-6, "time_warm_s": c * 0.9e-6}}
                for i, (planned, err, p, c) in enumerate(items)]  # fmt: skip
        return {"schema": "fuseplanner.validation/1", "records": recs,
                "meta": {"model": "m", "dtype": "fp32", "batch": 8, "gpu": gpu}}

    # planned 10 + 20 us measured (the unplanned 99 us and the failed item are left out) ...
    a = doc("h100", [(True, None, 9, 10), (True, None, 18, 20), (False, None, 99, 99), (True, "boom", 5, 5)])
    # ... against 12 + 15 us: 27 / 30 = 0.900
    b = doc("other", [(True, None, 11, 12), (True, None, 14, 15)])
    t = plan_totals.totals(a)
    assert (t["items"], t["missing"]) == (2, 1)
    assert t["cold"] == pytest.approx(30e-6) and t["pred"] == pytest.approx(27e-6)
    paths = []
    for name, d in (("a", a), ("b", b)):
        p = tmp_path / f"{name}.json"
        p.write_text(json.dumps(d))
        paths.append(str(p))
    assert plan_totals.main(paths) == 0
    rows = capsys.readouterr().out.strip().splitlines()
    assert rows[2].endswith("| 1.000 |") and "(1 failed)" in rows[2] and rows[3].endswith("| 0.900 |")


@pytest.mark.parametrize(("extra", "message"), [(["--fit", "no_such_field"], "cannot fit no_such_field"),
                                                (["--fit", "sm_issue_warps", "--start", "{bad"], "error:")])
def test_single_pw_fit_bad_input_is_one_line_and_exit_2(extra, message, capsys):
    import single_pw_fit

    assert single_pw_fit.main([*extra, str(RUN)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
