"""GPU specs in two parts: datasheet facts and a typed kernel fit (own or borrowed), the Hw record the
cost loops read, and the trust warnings that plans carry."""

from __future__ import annotations

import re
import tomllib
from importlib import resources
from pathlib import Path

import fakes
import graphs as G
import onnx
import pytest
from pydantic import ValidationError

from fuseplanner.cli.main import main
from fuseplanner.core.errors import SpecError
from fuseplanner.hw.kernel_fit import PARAMS, KernelFit
from fuseplanner.hw.spec import MEASURABLE, GpuSpec, gpu, list_gpus
from fuseplanner.planning import search as planner

ROOT = Path(__file__).resolve().parent.parent
ESTIMATE_NOTE = ("estimate", "assumed")


def _toml(stem: str) -> dict:
    return tomllib.loads((resources.files("fuseplanner") / "data" / "gpu_specs" / f"{stem}.toml").read_text())


def test_facts_and_fit_are_separate_schemas():
    assert not set(PARAMS) & set(GpuSpec.model_fields)
    assert set(MEASURABLE) <= set(GpuSpec.model_fields) and not set(MEASURABLE) & set(PARAMS)
    for s in list_gpus():  # no bundled file keeps a kernel parameter among its facts
        data = _toml(s.name)
        assert not set(PARAMS) & (set(data) | set(data.get("measured", {})) | set(data["sources"])), s.name


def test_h100_has_its_own_fit_with_provenance():
    f = gpu("h100").fit
    assert (f.borrowed, f.source_gpu, f.record_count) == (False, "h100", 4119)
    assert f.driver and f.date and f.records
    assert gpu("h100").fit_from is None
    assert set(f.sources) == set(PARAMS)  # a note for every fitted value
    assert f.fuse_min_speedup == 1.05


@pytest.mark.parametrize("stem", sorted(s.name for s in list_gpus() if s.name != "h100"))
def test_other_gpus_borrow_the_h100_fit(stem):
    s, h = gpu(stem), gpu("h100")
    assert s.fit_from == "h100" and s.fit.borrowed and s.fit.source_gpu == "h100"
    # the kernel parameters are the H100's; the threshold fitted on H100 decisions is not lent
    thresholds = ("fuse_min_speedup", "graph_fuse_min_speedup")
    kept = set(thresholds) | set(s.refit)  # a [refit] table's values are the GPU's own (h200's graph terms)
    assert {k: v for k, v in s.fit.values().items() if k not in kept} == \
           {k: v for k, v in h.fit.values().items() if k not in kept}
    assert all(getattr(s.fit, k) == v == s.eff(k) for k, v in s.refit.items())
    assert all(getattr(s.fit, t) == (s.refit.get(t, 1.0)) == s.eff(t) for t in thresholds)


@pytest.mark.parametrize("stem", sorted(s.name for s in list_gpus()))
def test_estimated_fields_match_their_source_notes(stem):
    s = gpu(stem)
    noted = {k for k in (*MEASURABLE, "clock_hz") if s.sources.get(k, "").lower().startswith(ESTIMATE_NOTE)}
    noted.discard("l2_usable_fraction")  # a modelling assumption shared by every spec, not a datasheet figure
    assert set(s.estimated) == noted
    assert "estimated" in s.sources and ("fit_from" in s.sources) == s.fit.borrowed


def test_hw_record_names_the_fit_times_the_clock():
    h = gpu("h100").hw
    # 1.06 FLOPs per warp per clock x 1.98e9 clocks/s = 2.0988e9 FLOP/s per warp (fp32 DW stencil)
    assert h.dw_warp_flops[0] == pytest.approx(2.0988e9)
    # 3.276 bytes per warp per clock x 1.98e9 = 6.48648e9 bytes/s
    assert h.warp_load_bytes_per_s == pytest.approx(6.48648e9)
    assert (h.block_warp_exponent, h.fused_block_warp_exponent) == (0.952, 0.912)
    assert (h.kernel_fixed_s, h.fused_kernel_fixed_s) == (3.624e-07, 2.919e-06)
    assert h.dram_bw == 3.009e12 and h.launch_overhead_s == 3.68e-06  # the [measured] facts
    # the H100's 256 KiB L1 less its 228 KiB shared-memory carveout: 262,144 - 233,472 = 28,672
    assert h.l1_cache_bytes == 28_672


def test_warnings_per_gpu():
    assert gpu("h100").warnings() == [
        "h100: mem_latency_s is an estimate, not a datasheet figure or a measurement "
        "(`fuseplanner gpus h100 --json --sources` says how each was estimated)"]
    a100 = gpu("a100_80gb").warnings()
    assert len(a100) == 2 and "borrowed from h100" in a100[0] and "launch_overhead_s, mem_latency_s are" in a100[1]
    t4 = gpu("t4").warnings()
    assert len(t4) == 3 and "compute capability 7.5" in t4[1] and "prediction only" in t4[1]
    assert not gpu("a100_80gb").plan_only and gpu("v100").plan_only
    assert gpu("a100_80gb").warnings(kernel_fit=False) == a100[1:]


def _user_spec(tmp_path, name: str, transform) -> Path:
    text = (resources.files("fuseplanner") / "data" / "gpu_specs" / "h100.toml").read_text()
    p = tmp_path / f"{name}.toml"
    p.write_text(transform(text))
    return p


def _facts_only(text: str) -> str:
    return text[:text.index("\n[fit]")] + "\n"


def test_a_measurement_clears_its_estimate_note(tmp_path):
    p = _user_spec(tmp_path, "mine", lambda t: t.replace("[measured]\n", "[measured]\nmem_latency_s = 7e-07\n"))
    s = gpu(str(p))
    assert s.warnings() == [] and not s.fit.borrowed  # h100's own [fit] copied: the file's own


def test_fit_from_a_user_file_and_without_any_fit(tmp_path):
    own = _user_spec(tmp_path, "fitted", lambda t: t.replace('source_gpu = "h100"', 'source_gpu = "my H100"')
                     .replace("coresident_exponent = 0.212", "coresident_exponent = 0.3"))
    user = _user_spec(tmp_path, "borrower", lambda t: _facts_only(t).replace("estimated = [", f'fit_from = "{own}"\nestimated = ['))
    s = gpu(str(user))
    assert s.fit.borrowed and s.fit.source_gpu == "my H100" and s.fit.coresident_exponent == 0.3
    # a relative fit_from is relative to the spec file's folder, wherever the command runs
    relative = _user_spec(tmp_path, "relative", lambda t: _facts_only(t).replace("estimated = [", 'fit_from = "fitted.toml"\nestimated = ['))
    assert gpu(str(relative)).fit == s.fit
    assert "borrowed from my H100" in s.warnings()[0]
    # neither [fit] nor fit_from: the H100 fit is borrowed, as every bundled spec but h100's does
    bare = gpu(str(_user_spec(tmp_path, "bare", _facts_only)))
    assert bare.fit_from == "h100" and bare.fit == gpu("a100_80gb").fit


@pytest.mark.parametrize("transform,message", [
    (lambda t: _facts_only(t).replace("estimated = [", 'fit_from = "a100"\nestimated = ['), "has no [fit] table of its own"),
    (lambda t: t.replace("estimated = [", 'fit_from = "h100"\nestimated = ['), "not both"),
    (lambda t: _facts_only(t).replace("estimated = [", 'fit_from = "nowhere.toml"\nestimated = ['), "cannot read it"),
    (lambda t: t.replace("coresident_exponent = 0.212", "coresident_exponent = 3.0"), "fit.coresident_exponent"),
    (lambda t: t.replace("record_count = 4119\n", "record_count = 4119\nfused_rate = 2.0\n"), "fit.fused_rate"),
    (lambda t: t.replace('estimated = ["l2_bw', 'estimated = ["sm_count", "l2_bw'), "sm_count is not a datasheet number"),
])
def test_bad_fit_is_one_line_naming_it(tmp_path, transform, message):
    p = _user_spec(tmp_path, "bad", transform)
    with pytest.raises(SpecError) as ei:
        gpu(str(p))
    assert message in str(ei.value) and "\n" not in str(ei.value)


def test_layout_before_the_split_still_loads(tmp_path):
    # a spec written by calibrate before the fit had its own table: a kernel parameter in [measured]
    s = gpu(str(_user_spec(tmp_path, "old", lambda t: _facts_only(t).replace("[measured]\n", "[measured]\nfuse_min_speedup = 1.55\n"))))
    assert s.fit.fuse_min_speedup == 1.55 == s.eff("fuse_min_speedup") and "fuse_min_speedup" not in s.measured
    assert s.fit.borrowed and s.fit.block_warp_exponent == gpu("h100").fit.block_warp_exponent
    # and a kernel parameter given beside the facts, as tests and scripts build variants
    v = GpuSpec.model_validate({**gpu("h100").model_dump(), "coresident_exponent": 0.5})
    assert v.fit.coresident_exponent == 0.5 and v.hw.coresident_exponent == 0.5 and not v.fit.borrowed


def test_kernel_fit_is_frozen_and_complete():
    f = gpu("h100").fit
    with pytest.raises(ValidationError, match="frozen"):
        f.coresident_exponent = 0.5  # type: ignore[misc]
    incomplete = {k: v for k, v in f.model_dump().items() if k != "kernel_fixed_s"}
    with pytest.raises(ValidationError, match="kernel_fixed_s"):
        KernelFit.model_validate(incomplete)
    assert f.lent().borrowed and f.lent().fuse_min_speedup == 1.0 and not f.borrowed
    raised = f.model_copy(update={"graph_fuse_min_speedup": 1.3})
    assert raised.lent().graph_fuse_min_speedup == 1.0  # a threshold chosen on another GPU's decisions is not lent
    with pytest.raises(ValidationError, match="graph_fuse_min_speedup"):
        KernelFit.model_validate({**f.model_dump(), "graph_fuse_min_speedup": 0.7})  # under 0.8: fusing much slower kernels


# ---- plans ------------------------------------------------------------------------------------------


@pytest.fixture
def bytes_model(monkeypatch):
    monkeypatch.setattr(planner, "_cost_functions", lambda: (fakes.bytes_estimate, fakes.bytes_estimate_op))


def test_plan_carries_the_spec_warnings(bytes_model):
    graph = G.chain()
    # the graph context (the default) reads the spec's graph facts, so their estimates are named too
    assert planner.plan(graph, "t4").warnings == gpu("t4").warnings(graph=True)
    assert planner.plan(graph, "h100").warnings == gpu("h100").warnings(graph=True)
    assert planner.plan(graph, "h100", context="isolated").warnings == gpu("h100").warnings()
    assert "graph_replay_s" in gpu("h100").warnings(graph=True)[0] and "graph_replay_s" not in gpu("h100").warnings()[0]
    paper = planner.plan(graph, "t4", model="paper").warnings  # the paper model reads no kernel fit
    assert paper == gpu("t4").warnings(kernel_fit=False) and len(paper) == 2


def test_cli_prints_one_note_per_warning(bytes_model, tmp_path, capsys):
    path = tmp_path / "blocks.onnx"
    onnx.save_model(G.onnx_blocks(), str(path))
    assert main(["plan", str(path), "--gpu", "v100", "--json", str(tmp_path / "p.json")]) == 0
    notes = [x for x in capsys.readouterr().err.splitlines() if x.startswith("note: ")]
    assert notes == [f"note: {w}" for w in gpu("v100").warnings(graph=True)] and len(notes) == 3
    assert main(["compare", str(path), "--gpus", "h100,a100"]) == 0
    notes = [x for x in capsys.readouterr().err.splitlines() if x.startswith("note: ")]
    assert notes == [f"note: {w}" for w in (*gpu("h100").warnings(graph=True), *gpu("a100_80gb").warnings(graph=True))]


def test_cost_model_doc_lists_the_h100_fit():
    # docs/cost_model.md's table of the kernel fit states the values the bundled H100 fit has
    text = (ROOT / "docs" / "cost_model.md").read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \| ([0-9.e+-]+) \|", text, flags=re.M))
    fit = gpu("h100").fit
    assert set(rows) == set(PARAMS)
    assert all(float(v) == getattr(fit, k) for k, v in rows.items()), rows


@pytest.mark.parametrize("stem", ["h100", "a100_80gb"])
def test_calibrate_writes_facts_and_keeps_the_fit_layout(tmp_path, stem):
    from test_calibrate import CAL

    from fuseplanner.validation import microbench as calibrate

    base = gpu(stem)
    out = calibrate.write_spec(tmp_path / "mine.toml", base, CAL)
    written = tomllib.loads(out.read_text())
    assert written["measured"]["dram_bw_bytes_per_s"] == CAL.dram_bw_bytes_per_s
    assert not set(PARAMS) & set(written) and not set(PARAMS) & set(written["measured"])
    back = gpu(str(out))
    assert back.fit == base.fit  # the base's own fit stays its [fit] table, a borrowed one a fit_from
    assert ("fit" in written, written.get("fit_from")) == ((False, "h100") if base.fit.borrowed else (True, None))
    # the new measurements clear the launch-overhead estimate (a100), not the memory latency one
    assert all("launch_overhead_s" not in w for w in back.warnings()) and "mem_latency_s" in back.warnings()[-1]


def test_a_fit_with_the_single_layer_by_layer_graph_term_still_loads(tmp_path):
    # fits written before the graph terms were split by kernel family carry graph_lbl_kernel_s: one
    # term for every layer-by-layer kernel, read as the DW, the PW (and so the linear) class's
    text = (ROOT / "gpu_specs" / "h100.toml").read_text()
    lines = [ln for ln in text.splitlines()
             if not ln.startswith(("graph_dw_kernel_s", "graph_pw_kernel_s", "graph_linear_kernel_s"))]
    text = re.sub(r"^graph_fused_kernel_s = [-+0-9.e]+$", "graph_fused_kernel_s = -2.6e-07\ngraph_lbl_kernel_s = 4.1e-07",
                  "\n".join(lines), count=1, flags=re.MULTILINE)  # fmt: skip
    assert "graph_lbl_kernel_s = 4.1e-07" in text
    text = text.replace('graph_fused_kernel_s = "fitted', 'graph_lbl_kernel_s = "an earlier note"\ngraph_fused_kernel_s = "fitted', 1)
    path = tmp_path / "old.toml"
    path.write_text(text)
    spec = gpu(str(path))
    hw = spec.hw
    assert (hw.graph_dw_kernel_s, hw.graph_pw_kernel_s, hw.graph_linear_kernel_s, hw.graph_fused_kernel_s) == (
        4.1e-07, 4.1e-07, 4.1e-07, -2.6e-07)  # fmt: skip
    assert spec.fit.sources["graph_dw_kernel_s"] == spec.fit.sources["graph_pw_kernel_s"] == "an earlier note"
    assert spec.fit.sources["graph_linear_kernel_s"] == "an earlier note"
    assert "graph_lbl_kernel_s" not in spec.fit.sources


def test_a_fit_from_before_the_linear_class_reads_its_pw_term(tmp_path):
    # fits written before linear launches had a class of their own charged them graph_pw_kernel_s
    text = (ROOT / "gpu_specs" / "h100.toml").read_text()
    path = tmp_path / "old.toml"
    path.write_text("\n".join(ln for ln in text.splitlines() if not ln.startswith("graph_linear_kernel_s")))
    spec, now = gpu(str(path)), gpu("h100")
    assert spec.hw.graph_linear_kernel_s == now.hw.graph_pw_kernel_s != now.hw.graph_linear_kernel_s
    assert spec.fit.sources["graph_linear_kernel_s"] == now.fit.sources["graph_pw_kernel_s"]
    assert spec.hw.graph_pw_kernel_s == now.hw.graph_pw_kernel_s  # the others as written


def _refitting(text: str, table: str = "[refit]\ngraph_pw_kernel_s = 3e-07\n") -> str:
    note = '"refit.graph_pw_kernel_s" = "fitted on my executor runs"\n'
    return _facts_only(text).replace("[measured]\n", table + "\n[measured]\n", 1).replace("[sources]\n", "[sources]\n" + note, 1)


def test_refit_replaces_values_of_a_borrowed_fit(tmp_path):
    s, h = gpu(str(_user_spec(tmp_path, "refit", _refitting))), gpu("h100")
    assert s.fit.borrowed and s.refit == {"graph_pw_kernel_s": 3e-07}
    assert s.eff("graph_pw_kernel_s") == 3e-07 == s.hw.graph_pw_kernel_s != h.eff("graph_pw_kernel_s")
    assert s.fit.dw_warp_flops_per_cycle_fp32 == h.fit.dw_warp_flops_per_cycle_fp32  # the rest stays borrowed
    assert s.fit.sources["graph_pw_kernel_s"] == "fitted on my executor runs"
    assert "refitted here: graph_pw_kernel_s" in s.warnings()[0]
    from fuseplanner.cli.cmd_gpus import fit_label

    assert fit_label(s) == "from h100, 1 refit" and fit_label(h) == "own (4119 rec)"
    # a value given beside the facts (a script's variant) wins over the refit one
    v = GpuSpec.model_validate({**s.model_dump(exclude={"fit"}), "fit": s.fit, "graph_pw_kernel_s": 1e-07})
    assert v.eff("graph_pw_kernel_s") == 1e-07


@pytest.mark.parametrize("transform,message", [
    (lambda t: t.replace("[measured]\n", "[refit]\ngraph_pw_kernel_s = 3e-07\n\n[measured]\n", 1), "a fit of the spec's own"),
    (lambda t: _refitting(t, "[refit]\ngraph_pw_kernel = 3e-07\n"), "refit.graph_pw_kernel is not a fitted parameter"),
])
def test_bad_refit_is_one_line_naming_it(tmp_path, transform, message):
    with pytest.raises(SpecError) as ei:
        gpu(str(_user_spec(tmp_path, "bad", transform)))
    assert message in str(ei.value) and "\n" not in str(ei.value)


def test_apply_measured_and_calibrate_keep_a_refit(tmp_path):
    from test_calibrate import CAL

    from fuseplanner.validation import microbench as calibrate

    s = gpu(str(_user_spec(tmp_path, "refit", _refitting)))
    # the values a fit script sets win over the refit ones; the others stay
    assert calibrate.apply_measured(s, {"graph_pw_kernel_s": 0.0}).eff("graph_pw_kernel_s") == 0.0
    assert calibrate.apply_measured(s, {"graph_dw_kernel_s": 0.0}).eff("graph_pw_kernel_s") == 3e-07
    # a calibrated copy of a refitting spec borrows the same fit with the same refit values
    back = gpu(str(calibrate.write_spec(tmp_path / "cal.toml", s, CAL)))
    assert back.fit_from == s.fit_from and back.refit == s.refit and back.fit == s.fit
    # a spec with a fit of its own holds the refit values in it and writes no [refit] table
    own = calibrate.spec_dict(s.model_copy(update={"fit": s.fit.model_copy(update={"borrowed": False})}))
    assert "refit" not in own and own["fit"]["graph_pw_kernel_s"] == 3e-07
