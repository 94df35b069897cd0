"""What `validate` measures and predicts, on CPU: items of a plan, tile sweeps, predictions, cases."""

from __future__ import annotations

from dataclasses import replace

import fakes
import graphs as G
import numpy as np
import pytest

from fuseplanner.core.errors import DeviceError
from fuseplanner.kernels import tiles
from fuseplanner.planning import search as planner
from fuseplanner.validation import validate as V

GPU = fakes.FakeGpu()


@pytest.fixture
def bytes_model(monkeypatch):
    monkeypatch.setattr(planner, "_cost_functions", lambda: (fakes.bytes_estimate, fakes.bytes_estimate_op))
    monkeypatch.setattr(V, "_estimator", lambda: fakes.bytes_estimate)


def _ctx(dtype="fp32"):
    return V.Context(gpu=GPU, dtype=dtype, batch=1, precision="fp32", objective="time")


def test_items_of_a_residual_block(bytes_model):
    g = G.residual(h=4)
    p = fakes.plan(g, GPU)
    items, groups, skipped = V.build_items(g, p, _ctx())
    assert [(i.id, i.role, len(i.steps)) for i in items] == [("g0", "group", 1), ("g0.u", "unfused", 3)]
    fused, unfused = items
    assert fused.planned and not unfused.planned
    assert fused.residual and fused.residual_from_input  # the Add's other operand is the block input x
    # the unfused members: pw, dw, pw, each with the tile the planner's search gives it; the residual
    # add goes into the last kernel only
    assert [s.kind for s in unfused.steps] == ["pw", "dw", "pw"]
    assert [s.residual for s in unfused.steps] == [False, False, True]
    search = planner.TileSearch(GPU, "fp32", 1, "time")
    assert unfused.steps[1].tile == search.best("dw", (g.op("dw"),)).tile
    assert groups["g0"]["planner_fused"] is True and groups["g0"]["planned_tile"] == p.groups[0].tile.as_dict()
    assert skipped == []


def test_layer_that_applies_the_residual_add_is_measured_with_it(bytes_model):
    # only PW->DW may fuse, so pw2 runs on its own and applies the block's Add (other operand: x)
    g = G.residual(h=4, c=16, exp=96)
    p = fakes.plan(g, GPU, objective="gma", kinds=["pw_dw"])
    items, _, skipped = V.build_items(g, p, _ctx())
    (layer,) = [i for i in items if i.role == "layer"]
    assert layer.nodes == ["pw2"] and layer.residual and not layer.residual_from_input
    assert [s.residual for s in layer.steps] == [True]
    assert skipped == []  # the Add is not a library kernel to skip: pw2's kernel applies it
    assert V.predict(layer, _ctx()).gma_bytes == 14400  # as in test_planner's hand count


def _residual_items():
    """(group item, unfused item) of the planned 3-layer residual group."""
    g = G.residual(h=4)
    items, _, _ = V.build_items(g, fakes.plan(g, GPU), _ctx())
    return items[0], items[1]


def test_unfused_prediction_is_the_sum_of_its_launches(bytes_model):
    _, unfused = _residual_items()
    pred = V.predict(unfused, _ctx())
    expect = sum((fakes.bytes_estimate(s.kind, s.ops, s.tile, "fp32", 1, GPU, residual=s.residual)
                  for s in unfused.steps), start=fakes._cost(0, 0, 0))
    assert pred.gma_bytes == expect.gma_bytes
    assert pred.launches == 3
    assert pred.time_s == pytest.approx(expect.time_s)


def test_sequence_prediction_overlaps_its_launches(bytes_model):
    # the unfused run of a 3-layer group is timed back to back: each launch after the first takes the
    # spec's launch_overlap_s (here 1 us) less than alone -> the sum minus 2 us; bytes are unchanged
    group, unfused = _residual_items()
    alone = V.steps_cost(unfused.steps, "fp32", 1, GPU)
    overlapped = V.steps_cost(unfused.steps, "fp32", 1, fakes.FakeGpu(launch_overlap_s=1e-6))
    assert overlapped.launches == 3
    assert overlapped.time_s == pytest.approx(alone.time_s - 2e-6)
    assert overlapped.gma_bytes == alone.gma_bytes
    # one launch has nothing to overlap; the paper's model is left as published
    assert V.steps_cost(group.steps, "fp32", 1, fakes.FakeGpu(launch_overlap_s=1e-6)).time_s == pytest.approx(
        V.steps_cost(group.steps, "fp32", 1, GPU).time_s)
    assert V.steps_cost(unfused.steps, "fp32", 1, fakes.FakeGpu(launch_overlap_s=1e-6), model="paper").time_s == \
        pytest.approx(V.steps_cost(unfused.steps, "fp32", 1, GPU, model="paper").time_s)


def _assert_alternatives(head, alts):
    """`alts` are 1..SWEEP_TILES distinct feasible tiles of `head`'s ops, none of them `head`'s tile."""
    assert 1 <= len(alts) <= V.SWEEP_TILES
    seen = {a.steps[0].tile for a in alts}
    assert head.steps[0].tile not in seen and len(seen) == len(alts)
    assert all(a.nodes == head.nodes for a in alts)
    for a in alts:
        assert tiles.check(a.steps[0].kind, a.ops, a.steps[0].tile, "fp32", GPU) is None


def test_sweep_adds_spread_tiles(bytes_model):
    g = G.chain(h=8)
    p = fakes.plan(g, GPU)
    ctx = _ctx()
    items, _, _ = V.build_items(g, p, ctx, sweep=True)
    grp = next(i for i in items if i.role == "group")
    alts = [i for i in items if i.role == "tile"]
    _assert_alternatives(grp, alts)
    planned = grp.steps[0].tile
    # the spread reaches the worst predicted tile of all candidates
    cands = [t for t in tiles.candidates(grp.kind, grp.ops, "fp32", GPU) if t != planned]
    worst = max(V._predicted_time(grp.kind, grp.ops, t, False, ctx) for t in cands)
    assert max(V._predicted_time(a.kind, a.ops, a.steps[0].tile, False, ctx) for a in alts) == worst


def test_layer_sweep_measures_every_tiled_layer_alone(bytes_model):
    # pw_dw_pw residual block, planned fused: no standalone layer, so each member gets a tile group of
    # its own, headed by the tile the group's unfused alternative runs it with
    g = G.residual(h=4)
    p = fakes.plan(g, GPU)
    ctx = _ctx()
    items, groups, _ = V.build_items(g, p, ctx, layers=True)
    unfused = next(i for i in items if i.role == "unfused")
    heads = [i for i in items if i.role == "member"]
    assert [h.id for h in heads] == ["M0", "M1", "M2"]
    assert [h.steps for h in heads] == [(s,) for s in unfused.steps]  # same tiles, the last with the Add
    assert [h.residual for h in heads] == [False, False, True]
    assert set(groups) == {"g0"}  # layer groups are not fuse decisions
    for h in heads:
        alts = [i for i in items if i.role == "layer_tile" and i.group == h.id]
        assert h.group == h.id
        _assert_alternatives(h, alts)
        assert all(a.steps[0].residual == h.residual for a in alts)
        assert all(a.id.startswith(f"{h.id}.t") for a in alts)
    # without the option nothing of this is measured
    assert not [i for i in V.build_items(g, p, ctx)[0] if i.role in ("member", "layer_tile")]


def test_layer_sweep_of_a_standalone_layer_keeps_its_id_and_plan(bytes_model):
    # only PW->DW may fuse: pw2 runs alone (L0, planned) and is swept under its own id
    g = G.residual(h=4, c=16, exp=96)
    p = fakes.plan(g, GPU, objective="gma", kinds=["pw_dw"])
    items, _, _ = V.build_items(g, p, _ctx(), layers=True)
    (layer,) = [i for i in items if i.role == "layer"]
    assert layer.id == "L0" and layer.group == "L0" and layer.planned
    assert [i.group for i in items if i.role == "layer_tile"].count("L0") >= 1
    # pw2 is not also swept as a member: the members are those of the pw_dw group's unfused run
    assert {tuple(i.nodes) for i in items if i.role == "member"} == {("pw1",), ("dw",)}


@pytest.fixture
def fusion_loses(monkeypatch):
    """Fused kernels cost 10x their members' bytes and time: the planner fuses nothing."""

    def expensive(kind, ops, tile, *a, **k):
        c = fakes.bytes_estimate(kind, ops, tile, *a, **k)
        return c if len(ops) == 1 else replace(c, gma_read_bytes=10 * c.gma_read_bytes, time_s=10 * c.time_s)

    monkeypatch.setattr(planner, "_cost_functions", lambda: (expensive, fakes.bytes_estimate_op))
    monkeypatch.setattr(V, "_estimator", lambda: expensive)


def test_sweep_measures_rejected_gain_candidates(fusion_loses):
    # the planner fuses nothing; sweep still measures each candidate fused and unfused so the
    # no-fuse decisions can be checked
    g = G.chain(h=4)
    p = fakes.plan(g, GPU)
    assert p.groups == []
    items, groups, _ = V.build_items(g, p, _ctx(), sweep=True)
    assert groups and all(not x["planner_fused"] for x in groups.values())
    rejected = [i for i in items if i.group and i.group.startswith("r")]
    assert {i.role for i in rejected} == {"group", "unfused"}
    assert all(i.planned for i in rejected if i.role == "unfused")  # the planner's choice is "unfused"
    assert sum(i.role == "layer" for i in items) == 3


def test_sweep_measures_the_rejected_variant_itself(fusion_loses):
    # Both operands of the Add come from ops that feed only it (pa; pw), so no layer applies it alone
    # and the DW->PW group is a candidate both with and without the Add; nothing fuses, and each
    # rejected variant must be measured as itself, not as its twin with the same members
    shp = (1, 16, 4, 4)
    ops = [
        G.conv("pa", "pw", "x", "a", 16, 16, 4),
        G.conv("dw", "dw", "x", "d", 16, 16, 4, k=3),
        G.conv("pw", "pw", "d", "b", 16, 16, 4, epilogue=("bn",)),
        G.opaque("add", "Add", ["a", "b"], "y", shp),
    ]
    g = G.make_graph("two_branch_add", ops, {"x": shp}, ["y"])
    p = fakes.plan(g, GPU)
    gain = sorted((tuple(r.nodes), bool(r.absorbed)) for r in p.rejected if r.stage == "gain")
    assert gain == [(("dw", "pw"), False), (("dw", "pw"), True)]
    _, groups, _ = V.build_items(g, p, _ctx(), sweep=True)
    assert sorted((tuple(x["nodes"]), x["residual"]) for x in groups.values()) == gain


def test_make_case_rounds_to_fp16(bytes_model):
    g = G.residual(h=4)
    p = fakes.plan(g, GPU)
    ctx = _ctx("fp16")
    items, _, _ = V.build_items(g, p, ctx)
    x, params, res = V.make_case(items[0], ctx, seed=3)
    assert x.dtype == np.float32 and np.array_equal(x, x.astype(np.float16).astype(np.float32))
    assert all(np.array_equal(w, w.astype(np.float16).astype(np.float32)) for w, _ in params)
    assert res is x  # residual from the block input
    x2, _, _ = V.make_case(items[0], ctx, seed=3)
    assert np.array_equal(x, x2)  # seeded


def test_relative_error():
    ref = np.array([3.0, 4.0])
    assert V.relative_error(ref.astype(np.float32), ref) == 0.0
    assert V.relative_error(np.array([3.0, 4.5]), ref) == pytest.approx(0.1)  # 0.5 / 5
    assert V.relative_error(np.array([np.nan, 4.0]), ref) == float("inf")


def test_counter_free_record_has_effective_bandwidth(bytes_model):
    g = G.residual(h=4)
    p = fakes.plan(g, GPU)
    ctx = _ctx()
    items, _, _ = V.build_items(g, p, ctx)
    pred = V.predictions(items[0], ctx)
    rec = V._record(items[0], pred, {"time_cold_s": 2e-6}, {"ok": True}, None)
    assert rec.measured.traffic == "counter-free"
    assert rec.measured.eff_dram_Bps == pytest.approx(pred["ours"].dram_bytes / 2e-6)
    assert rec.tiles == (p.groups[0].tile,)


def test_validate_without_gpu_raises_device_error(bytes_model):
    from fuseplanner.kernels import require_device

    try:
        require_device()
    except DeviceError:
        g = G.residual(h=4)
        with pytest.raises(DeviceError):
            V.validate(g, GPU, fakes.plan(g, GPU), progress=False)
    else:
        pytest.skip("a CUDA device is present")


def test_launch_resources_read_the_compiled_kernel():
    from types import SimpleNamespace

    from fuseplanner.kernels import Launch

    kernel = SimpleNamespace(num_regs=96, local_size_bytes=24, shared_size_bytes=512)
    launch = Launch(kernel, (7, 2, 3), 128, 4096, (), None, {"KS": 4})
    assert launch.resources() == {"blocks": 42, "threads": 128, "smem_bytes": 4096, "cluster": 4, "regs": 96,
                                  "local_bytes": 24, "static_smem_bytes": 512}
    assert Launch(kernel, (5, 1, 1), 64, 0, (), None).resources()["cluster"] == 1


def test_compiled_kernels_beside_the_model():
    from types import SimpleNamespace

    from fuseplanner.hw import spec as specs

    gpu = specs.gpu("h100")
    g = G.residual(h=4)
    ctx = V.Context(gpu=gpu, dtype="fp32", batch=1, precision="fp32", objective="time")
    items, _, _ = V.build_items(g, fakes.plan(g, gpu), ctx)
    unfused = next(i for i in items if i.role == "unfused")
    launches = [SimpleNamespace(resources=lambda s=s: {
        "blocks": 10, "threads": 256, "smem_bytes": 0, "cluster": 1, "regs": 128, "local_bytes": 0,
        "static_smem_bytes": 0}) for s in unfused.steps]  # fmt: skip
    model = V.steps_cost(unfused.steps, "fp32", 1, gpu).kernels
    got = V.compiled_kernels(SimpleNamespace(launches=launches), unfused, ctx, model)
    assert len(unfused.steps) >= 2
    assert [k["kind"] for k in got] == [s.kind for s in unfused.steps]
    for k, m in zip(got, model, strict=True):
        # 128 registers x 32 lanes = 4096 per warp (a multiple of the 256-register unit); 8 warps = 32768
        # per block; 65536 / 32768 = 2 blocks per SM (threads would allow 2048 / 256 = 8)
        assert (k["blocks_per_sm"], k["limiter"]) == (2, "registers")
        assert (k["model_regs"], k["model_blocks_per_sm"]) == (m.regs_per_thread, m.blocks_per_sm)
    # a launch that cannot say what it was compiled to leaves the record without kernels
    assert V.compiled_kernels(SimpleNamespace(launches=[lambda: None] * len(launches)), unfused, ctx, model) == []
