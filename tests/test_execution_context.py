"""Execution contexts (fuseplanner.cost.execution) and whole-model steps (fuseplanner.planning.whole)."""

from __future__ import annotations

import pytest
from opfactory import dw, linear, pw

import fuseplanner
from fuseplanner.core.errors import PlanError
from fuseplanner.core.ir import Cost, KernelResources
from fuseplanner.core.kinds import LAUNCH_CLASSES
from fuseplanner.cost import estimate
from fuseplanner.cost.execution import (
    Access,
    LaunchTerms,
    Step,
    check_context,
    context_time,
    launch_terms,
    predict,
    resident_reads,
    sequence_time,
)
from fuseplanner.hw.spec import gpu
from fuseplanner.kernels import tiles
from fuseplanner.planning.whole import predict_whole, steps

TERMS = LaunchTerms(floor_s=4e-6, tail_s=1.5e-6, interval_s=1e-6, opaque_floor_s=2e-6)


def _step(label, reads, writes, dram_read=0.0, launches=1, time_s=10e-6, kind="pw"):
    cost = Cost(dram_read_bytes=dram_read, gma_read_bytes=dram_read, time_s=time_s, launches=launches)
    return Step(label, kind, "Conv", cost, tuple(Access(t, b) for t, b in reads), tuple(Access(t, b) for t, b in writes))


def test_context_time_replaces_the_floor_by_the_tail():
    c = Cost(time_s=10e-6, launches=1)
    # graph: 10 - 1 x (4 - 1.5) = 7.5 us; isolated unchanged
    assert context_time(c, TERMS, "graph") == pytest.approx(7.5e-6)
    assert context_time(c, TERMS, "isolated") == 10e-6
    # a short kernel: 4.5 - 2.5 = 2.0 us, above the 1 us interval; an opaque one: max(2, 2.0) = 2.0
    assert context_time(Cost(time_s=4.5e-6, launches=1), TERMS, "graph") == pytest.approx(2.0e-6)
    # 3 launches of 4.2 us each: 12.6 - 3 x 2.5 = 5.1 us, the floor 3 x 2 us = 6 us binds for opaque ops
    c3 = Cost(time_s=12.6e-6, launches=3)
    assert context_time(c3, TERMS, "graph") == pytest.approx(5.1e-6)
    assert context_time(c3, TERMS, "graph", opaque=True) == pytest.approx(6e-6)
    assert context_time(Cost(), TERMS, "graph") == 0.0  # a view launches nothing


def test_sequence_time_overlaps_back_to_back_launches_only_isolated():
    c3 = Cost(time_s=30e-6, launches=3)
    # isolated: 30 - (3 - 1) x 2 = 26 us; graph: 30 - 3 x (4 - 1.5) = 22.5 us, the 2 us overlap not again
    # (22.5 - 4 = 18.5 us would count back-to-back launches twice)
    assert sequence_time(c3, TERMS, "isolated", 2e-6) == pytest.approx(26e-6)
    assert sequence_time(c3, TERMS, "graph", 2e-6) == pytest.approx(22.5e-6) == context_time(c3, TERMS, "graph")


def _res(kind: str, launch_class: str = "") -> KernelResources:
    return KernelResources(kind, 0, 256, 32, 132, 1, 1.0, 0.125, launch_class)


def test_class_terms_by_hand():
    kernel_s = {"dw": -0.1e-6, "pw": 0.3e-6, "linear": -0.4e-6, "fused": -0.2e-6}
    terms = LaunchTerms(floor_s=4e-6, tail_s=1.5e-6, interval_s=1e-6, opaque_floor_s=2e-6, class_kernel_s=kernel_s)
    # a dw and a pw launch (20 us isolated): 20 - 2 x (4 - 1.5) - 0.1 + 0.3 = 15.2 us
    pair = Cost(time_s=20e-6, launches=2, kernels=(_res("dw", "dw"), _res("pw", "pw")))
    assert context_time(pair, terms, "graph") == pytest.approx(15.2e-6)
    # a linear launch has its own class (8 us isolated): 8 - 2.5 - 0.4 = 5.1 us
    linear = Cost(time_s=8e-6, launches=1, kernels=(_res("linear", "linear"),))
    assert context_time(linear, terms, "graph") == pytest.approx(5.1e-6)
    # their fused kernel (16 us isolated): 16 - 2.5 - 0.2 = 13.3 us; the isolated context ignores both terms
    fused = Cost(time_s=16e-6, launches=1, kernels=(_res("dw_pw", "fused"),))
    assert context_time(fused, terms, "graph") == pytest.approx(13.3e-6)
    assert context_time(fused, terms, "isolated") == 16e-6
    # a PW->PW launch over NCHW maps is of class pw: 6 - 2.5 + 0.3 = 3.8 us
    se = Cost(time_s=6e-6, launches=1, kernels=(_res("pw_pw", "pw"),))
    assert context_time(se, terms, "graph") == pytest.approx(3.8e-6)
    # a cost saved without classes reads its kind's: a pw_pw launch is then fused: 6 - 2.5 - 0.2 = 3.3 us
    assert context_time(Cost(time_s=6e-6, launches=1, kernels=(_res("pw_pw"),)), terms, "graph") == pytest.approx(3.3e-6)
    # a cost with no kernel resources (a library op's) gets no class term: 10 - 2.5 = 7.5 us
    assert context_time(Cost(time_s=10e-6, launches=1), terms, "graph") == pytest.approx(7.5e-6)


def test_class_terms_come_from_the_spec():
    spec = gpu("h100")
    t = launch_terms(spec)
    assert t.class_kernel_s == {"dw": spec.hw.graph_dw_kernel_s, "pw": spec.hw.graph_pw_kernel_s,
                                "linear": spec.hw.graph_linear_kernel_s, "fused": spec.hw.graph_fused_kernel_s}  # fmt: skip
    assert set(t.class_kernel_s) == set(LAUNCH_CLASSES)  # every class has its term


def test_launch_classes_of_estimates():
    """An estimate labels each launch with its class: the fused kinds with a DW stage and PW->PW over
    channel-last tokens fused, PW->PW over NCHW maps pw (both take the fixed time of that class when
    isolated, `cost.time.warp_rates`), the layer kinds their own."""
    se = (pw(96, 4, 1, 1), pw(4, 96, 1, 1))
    mlp = (linear(256, 64, 128), linear(256, 128, 64))
    cases = [("pw_pw", se, "pw"), ("pw_pw", mlp, "fused"), ("pw_dw", (pw(32, 96, 28, 28), dw(96, 28, 28)), "fused"),
             ("dw", (dw(96, 28, 28),), "dw"), ("pw", (pw(32, 96, 28, 28),), "pw"), ("linear", (mlp[0],), "linear")]
    for kind, ops, want in cases:
        tile = tiles.candidates(kind, ops, "fp32", gpu("h100"))[0]
        for model in ("ours", "paper"):
            c = estimate(kind, ops, tile, "fp32", 1, "h100", model=model)
            assert [k.launch_class for k in c.kernels] == [want], (kind, model)


def test_residency_rule_by_hand():
    # capacity 100 bytes. A writes t (40); B reads u (30 from DRAM, no producer) and writes v (30):
    # traffic since A finished = 30 + 30 = 60; 60 + 40 = 100 <= 100 -> C reads t from L2
    a = _step("A", [], [("t", 40)])
    b = _step("B", [("u", 30)], [("v", 30)], dram_read=30)
    c = _step("C", [("t", 40), ("v", 30)], [("w", 10)], dram_read=70)
    assert resident_reads([a, b, c], 100) == (0.0, 0.0, 70.0)  # t (60 + 40 = 100) and v (0 + 30) hit
    # B moves one byte more: 61 + 40 = 101 > 100 -> t misses; v still hits (0 + 30 <= 100)
    b2 = _step("B", [("u", 31)], [("v", 30)], dram_read=31)
    assert resident_reads([a, b2, c], 100) == (0.0, 0.0, 30.0)
    # a view (no launch) passes its input's residency on and moves nothing
    view = _step("V", [("t", 40)], [("t2", 40)], launches=0)
    d = _step("D", [("t2", 40)], [], dram_read=40)
    assert resident_reads([a, view, d], 40) == (0.0, 40.0, 40.0)


def test_predict_graph_saves_dram_time_only_when_dram_bound():
    spec = gpu("h100")
    hw = spec.hw
    terms = launch_terms(spec)
    big = 8e6  # bytes: DRAM-bound (8e6 / 3.009e12 = 2.66 us > gma 8e6 / 6.613e12 = 1.21 us)
    a = _step("A", [], [("t", big)], time_s=20e-6)
    b = _step("B", [("t", big)], [("o", 1)], dram_read=big, time_s=20e-6)
    whole = predict([a, b], spec, "graph")
    # B: 20 us - (3.68 - 0.932) us launch saving - (2.66 - 1.21) us memory saving
    want = 20e-6 - (terms.floor_s - terms.tail_s) - (big / hw.dram_bw - big / hw.l2_bw)
    assert whole.steps[1].time_s == pytest.approx(want)
    assert whole.steps[1].saved_read_bytes == big and whole.steps[1].dram_read_bytes == 0.0
    iso = predict([a, b], spec, "isolated")
    assert iso.time_s == pytest.approx(40e-6) and iso.saved_read_bytes == 0.0


def test_h100_terms_and_fallbacks():
    t = launch_terms(gpu("h100"))
    # gpu_specs/h100.toml [measured]: isolated floor 3.68 us, graph tail 0.932 us, interval 0.964 us, opaque 1.35 us
    assert (t.floor_s, t.tail_s, t.interval_s, t.opaque_floor_s) == (3.68e-6, 9.32e-7, 9.64e-7, 1.35e-6)
    t4 = launch_terms(gpu("t4"))  # no graph facts: the tail is the floor (no launch saving), no interval
    assert t4.tail_s == t4.floor_s and t4.interval_s == 0.0
    with pytest.raises(PlanError):
        check_context("stream")


def test_graph_warnings_only_in_graph_context():
    s = gpu("h200").model_copy(update={"measured": {}, "estimated": ["graph_kernel_tail_s"]})  # an estimated graph term
    assert not any("graph_kernel_tail_s" in w for w in s.warnings())
    assert any("graph_kernel_tail_s" in w for w in s.warnings(graph=True))
    assert not any("graph_kernel_tail_s" in w for w in gpu("h100").warnings(graph=True))  # measured by calibrate


@pytest.fixture(scope="module")
def v2():
    g = fuseplanner.load_model("mobilenet_v2")
    return g, fuseplanner.plan(g, gpu("h100"), workers=1, context="isolated")


def test_steps_follow_the_executor_and_isolated_totals_match_the_plan(v2):
    g, p = v2
    st = steps(g, p)
    assert len(st) == len(p.groups) + len(p.layers)
    assert {s.label for s in st} >= {"+".join(gr.nodes) for gr in p.groups}
    first = st[0]
    assert first.reads[0].tensor == g.op(g.order[0]).inputs[0]
    # the stem's input 1x3x224x224 fp32 = 602,112 bytes
    assert first.reads[0].bytes == 1 * 3 * 224 * 224 * 4
    whole = predict_whole(g, gpu("h100"), p, "isolated")
    assert whole.planned.time_s == pytest.approx(p.totals.planned.time_s)
    assert whole.unfused.time_s == pytest.approx(p.totals.unfused.time_s)


def test_graph_context_is_cheaper_and_saves_dram(v2):
    g, p = v2
    iso, gr = predict_whole(g, gpu("h100"), p, "isolated"), predict_whole(g, gpu("h100"), p, "graph")
    launches = sum(s.cost.launches for s in steps(g, p))
    # each launch saves at most floor - tail = 3.68 - 0.932 = 2.748 us, plus DRAM time of resident reads
    assert iso.planned.time_s - gr.planned.time_s >= 0
    assert gr.planned.time_s >= iso.planned.time_s - launches * (3.68e-6 - 9.32e-7) - gr.planned.saved_read_bytes / 3.009e12
    assert 0 < gr.planned.dram_bytes < iso.planned.dram_bytes


def test_plan_in_graph_context_decides_on_graph_times(v2):
    g, iso = v2
    gr = fuseplanner.plan(g, gpu("h100"), workers=1)  # the graph context is the default
    assert iso.context == "isolated" and gr.context == "graph"
    # every fused group of the graph-context plan clears that context's threshold on graph times
    terms, margin = launch_terms(gpu("h100")), gpu("h100").fit.graph_fuse_min_speedup
    for grp in gr.groups:
        assert margin * context_time(grp.fused_cost, terms, "graph") <= context_time(grp.unfused_cost, terms, "graph")
    # the graph context's whole prediction of its own plan is no worse than of the isolated plan
    t_gr = predict_whole(g, gpu("h100"), gr, "graph").planned.time_s
    t_iso = predict_whole(g, gpu("h100"), iso, "graph").planned.time_s
    assert t_gr <= t_iso * 1.001
    with pytest.raises(PlanError):
        fuseplanner.plan(g, gpu("h100"), workers=1, context="warm")


def test_graph_context_decisions_ignore_the_isolated_launch_overlap(v2):
    # a spec `calibrate` writes fits launch_overlap_s (1-2.5 us on the H100 and H200): what each launch of
    # a timed isolated sequence saves. The graph context's tail already models back-to-back launches, so
    # its decisions must not see it (with it, MobileNetV2's graph plan fell from 17 groups to 3-4)
    from fuseplanner.validation.microbench import apply_measured

    g, _ = v2
    base = gpu("h100")
    overlapping = apply_measured(base, {"launch_overlap_s": 3e-6})
    assert overlapping.eff("launch_overlap_s") == 3e-6 and base.eff("launch_overlap_s") == 0.0
    gr = fuseplanner.plan(g, overlapping, workers=1, context="graph")
    ref = fuseplanner.plan(g, base, workers=1, context="graph")
    assert [x.nodes for x in gr.groups] == [x.nodes for x in ref.groups] and len(gr.groups) >= 10
    # the plan's own costs stay isolated, its members back to back: each group's unfused cost is
    # its members' less 3 us per launch after the first
    for a, b in zip(gr.groups, ref.groups, strict=True):
        assert a.unfused.launches == b.unfused.launches >= 2
        assert a.unfused.time_s == pytest.approx(b.unfused.time_s - (b.unfused.launches - 1) * 3e-6)


def _graph_line(out: str) -> tuple[float, float, float]:
    import re

    m = re.search(r"graph context \(whole inference, CUDA-graph replay\): planned ([\d.]+) us, unfused ([\d.]+) us, "
                  r"saving (-?[\d.]+)%", out)  # fmt: skip
    assert m, out[-400:]
    return tuple(float(x) for x in m.groups())


def test_cli_plan_prints_the_graph_context_by_default(capsys):
    """Either context's plan ends with the whole-model prediction as the executor runs it, whose saving
    is smaller than the isolated one (no 3.7 us floor per launch saved, warm L2); the plan decided in
    the graph context (the default) is predicted faster there than the one decided in isolation."""
    from fuseplanner.cli.main import main

    assert main(["plan", "mobilenet_v2", "--gpu", "h100", "--context", "isolated"]) == 0
    planned_iso, unfused, saving = _graph_line(capsys.readouterr().out)
    assert saving == pytest.approx(100 * (1 - planned_iso / unfused), abs=0.06)
    assert saving < 13.6  # the isolated saving of the same plan (371.60 -> 321.11 us)
    assert main(["plan", "mobilenet_v2", "--gpu", "h100"]) == 0
    planned, unfused_again, _ = _graph_line(capsys.readouterr().out)
    assert unfused_again == unfused and planned < planned_iso


def test_tile_searches_are_shared_only_inside_shared_searches():
    from fuseplanner.planning import search as S

    spec = gpu("h100")
    assert S.tile_search(spec, "fp32", 1, "time", "ours", "fp32") is not S.tile_search(spec, "fp32", 1, "time", "ours", "fp32")
    with S.shared_searches():
        first = S.tile_search(spec, "fp32", 1, "time", "ours", "fp32")
        assert S.tile_search(spec, "fp32", 1, "time", "ours", "fp32") is first
        assert S.tile_search(spec, "fp32", 8, "time", "ours", "fp32") is not first  # another batch
        # a spec of equal values, or differing only in the fuse thresholds (which no search reads), shares it
        assert S.tile_search(spec.model_copy(), "fp32", 1, "time", "ours", "fp32") is first
        from fuseplanner.validation.microbench import apply_measured

        for field in S.DECISION_FIELDS:
            assert S.tile_search(apply_measured(spec, {field: 0.5}), "fp32", 1, "time", "ours", "fp32") is first
        other = apply_measured(spec, {"dram_bw_bytes_per_s": spec.eff("dram_bw_bytes_per_s") / 2})
        assert S.tile_search(other, "fp32", 1, "time", "ours", "fp32").gpu is other  # a cost input differs
        with S.shared_searches():  # nested: the same shared searches
            assert S.tile_search(spec, "fp32", 1, "time", "ours", "fp32") is first
        # the unfused plan beside a plan searches nothing new
        g = fuseplanner.load_model("mobilenet_v1")
        fuseplanner.plan(g, spec, workers=1)
        again = S.tile_search(spec, "fp32", 1, "time", "ours", "fp32")
        n = len(again.cache)
        fuseplanner.plan(g, spec, workers=1, kinds=[])
        assert len(again.cache) == n
    assert S._SHARED is None


def test_cli_plan_and_compare_decide_in_the_graph_context_unless_told(tmp_path, capsys):
    import json

    from fuseplanner.cli.main import main

    contexts = {}
    for flags in ([], ["--context", "isolated"], ["--context", "graph"]):
        path = tmp_path / f"p{len(contexts)}.json"
        assert main(["plan", "mobilenet_v1", "--gpu", "h100", "--json", str(path), *flags]) == 0
        contexts[tuple(flags)] = json.loads(path.read_text())["context"]
    assert contexts == {(): "graph", ("--context", "isolated"): "isolated", ("--context", "graph"): "graph"}
    capsys.readouterr()
    for flags, want in (([], "graph"), (["--context", "isolated"], "isolated")):
        assert main(["compare", "mobilenet_v1", "--gpus", "h100,t4", "--json", "-", *flags]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert [p["context"] for p in doc["plans"]] == [want, want]


def test_reductions_take_the_reduction_floor():
    """gpu_specs/h100.toml: a graph reduction (GlobalAveragePool, ReduceMean, ...) takes at least 5.18 us,
    another opaque op 1.35 us, a kernel 0.964 us; a GPU without the reduction fact falls back to its
    opaque floor."""
    spec = gpu("h100")
    t = launch_terms(spec)
    assert t.least_s("opaque", "GlobalAveragePool") == 5.18e-6
    assert t.least_s("opaque", "ReduceMean") == 5.18e-6
    assert t.least_s("opaque", "Add") == 1.35e-6
    assert t.least_s("pw", "Conv") == 9.64e-7
    pool = Step("gap", "opaque", "GlobalAveragePool", Cost(time_s=4.0e-6, launches=1))
    add = Step("add", "opaque", "Add", Cost(time_s=4.0e-6, launches=1))
    whole = predict([pool, add], spec, "graph")
    # the pool: max(5.18, 4.0 - (3.68 - 0.932)) = 5.18 us; the add: max(1.35, 1.252) = 1.35 us
    assert whole.steps[0].time_s == pytest.approx(5.18e-6)
    assert whole.steps[1].time_s == pytest.approx(1.35e-6)
    t4 = launch_terms(gpu("t4"))
    assert t4.reduce_floor_s == t4.opaque_floor_s


def test_predict_whole_is_public_and_adds_up():
    g = fuseplanner.load_model("mobilenet_v1")
    p = fuseplanner.plan(g, gpu("h100"), workers=1)
    whole = fuseplanner.predict_whole(g, gpu("h100"), p)
    assert "predict_whole" in fuseplanner.__all__ and whole.context == "graph"
    # the steps plus what the replay costs once (spec graph_replay_s, 3.72 us on the H100)
    assert whole.planned.replay_s == pytest.approx(3.72e-6)
    assert whole.planned.time_s == pytest.approx(sum(s.time_s for s in whole.planned.steps) + 3.72e-6)
    assert whole.saving == pytest.approx(1 - whole.planned.time_s / whole.unfused.time_s)
    assert len(whole.planned.steps) < len(whole.unfused.steps)  # fused groups run as one step each
