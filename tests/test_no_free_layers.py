"""Every layer a plan runs has a real cost.

The rule: a layer whose kind has a kernel (dw, pw, conv, linear) always costs time, L2-level bytes and
one launch; only shape-only ops (`cost.layers.VIEW_OPS`: Reshape, Flatten, Squeeze, ...) may cost
nothing, since a runtime runs them as views. A dw/pw/linear layer that no tile runs is a `PlanError`
naming it. Squeeze-excite 1x1 convs over a 1x1 map (fewer outputs than a 64-thread block) run as
"uneven" pw tiles (`tiles.UNEVEN_KINDS`), whose idle thread slots the cost model charges.
"""

from __future__ import annotations

import pytest
from opfactory import dw, linear, pw
from test_planner import _bundled

from fuseplanner.core.errors import PlanError
from fuseplanner.core.ir import Tile
from fuseplanner.cost import estimate, estimate_op
from fuseplanner.cost.layers import VIEW_OPS
from fuseplanner.frontend.load import bundled_models
from fuseplanner.hw.spec import gpu
from fuseplanner.kernels import tiles
from fuseplanner.planning import search as planner

H100 = gpu("h100")
KERNEL_KINDS = ("dw", "pw", "conv", "linear")


def _free(plan) -> list[str]:
    """Layers of `plan` that break the rule, as 'node (kind op_type)'."""
    bad = []
    for lay in plan.layers:
        c = lay.cost
        free = c.time_s <= 0 or c.gma_bytes <= 0 or c.launches < 1
        if free and (lay.kind in KERNEL_KINDS or lay.op_type not in VIEW_OPS):
            bad.append(f"{lay.node} ({lay.kind} {lay.op_type})")
    return bad


@pytest.mark.parametrize("name", bundled_models())
def test_no_bundled_model_plans_a_free_layer(name):
    plan = planner.plan(_bundled(name), H100, workers=1)
    assert _free(plan) == []
    for g in plan.groups:
        assert g.fused.time_s > 0 and g.fused.gma_bytes > 0


def test_efficientnet_squeeze_excite_layers_are_costed():
    plan = planner.plan(_bundled("efficientnet_b0"), H100, workers=1)
    se = [lay for lay in plan.layers if ".se.reduce" in lay.node or ".se.expand" in lay.node]
    se += [lay for g in plan.groups for lay in [g] if ".se." in g.nodes[0]]
    assert len(se) >= 17  # the 17 layers that no even tile runs, fused or on their own
    uneven = [lay for lay in plan.layers if lay.tile is not None and lay.kind == "pw"
              and (lay.tile.tf * lay.tile.th * lay.tile.tw) % lay.tile.threads]
    assert uneven and all(lay.cost.time_s > H100.launch_overhead_s for lay in uneven)


def test_uneven_tiles_only_where_no_even_tile_exists():
    se_reduce = pw(32, 8, 1, 1)  # 8 outputs: no tile of 64, 128 or 256 threads splits them evenly
    got = tiles.candidates("pw", (se_reduce,), "fp32", H100)
    assert got and all((t.tf * t.th * t.tw) % t.threads for t in got)
    plain = pw(32, 96, 1, 1)  # tf 64 over 64 threads is even: the uneven tiles are not searched
    assert all((t.tf * t.th * t.tw) % t.threads == 0 for t in tiles.candidates("pw", (plain,), "fp32", H100))
    assert tiles.check("pw", (se_reduce,), Tile(1, 1, 8, 8, 64), "fp32", H100) is None
    assert "do not split evenly" in tiles.check("dw", (dw(8, 1, 1),), Tile(1, 1, 8, 8, 64), "fp32", H100)


def test_squeeze_excite_reduce_cost_by_hand():
    """A 32 -> 8 squeeze-excite reduce over a 1x1 map, fp32, batch 1, one block of 64 threads (FLAT:
    8 threads work, 56 idle), the whole reduction in one 32-channel chunk."""
    op = pw(32, 8, 1, 1)  # epilogue bn + relu6: a folded fp32 bias of 8 channels
    t = Tile(1, 1, 8, 32, 64)
    c = estimate("pw", (op,), t, "fp32", 1, H100)
    # writes: 8 outputs x 4 B = 32 B, one sector
    assert c.gma_write_bytes == 32
    # reads: weights 8 x 32 x 4 = 1,024 B + bias 8 x 4 = 32 B (one sector), and the input: 32 channel
    # planes of one 4-byte pixel, each counted as its own sector (the per-plane row model): 32 x 32 = 1,024 B
    assert c.gma_read_bytes == 1024 + 32 + 1024
    # DRAM: the compulsory input 32 x 4 = 128 B + weights and bias 1,056 B; the 32 B output stays in L2
    assert c.dram_read_bytes == 128 + 1056 and c.dram_write_bytes == 0
    assert c.flops == 2 * 8 * 32 and c.launches == 1
    # time: one wave of one block on one SM, time.kernel_time:
    #   launch + kernel_fixed + chain + latency, chain = t_lat + max(t_mem, t_ld) + t_own
    #   t_lat = 1 chunk x latency / (PW ring depth 6 - 1)
    #   t_mem = max((2,080 + 32) / l2_bw, 1,184 / dram_bw)            (one block: its whole traffic)
    #   t_ld  = 2,080 B / (2 warps ** exp x warp_load)
    #   t_own = issued / (pw warp rate x 2 warps ** exp): FLAT, one output per thread slot, idle slots
    #           included: 2 x 32 channels x 64 threads = 4,096 FLOP-equivalents (useful: 512)
    # On the H100 spec: 3.68 + 0.3624 + (0.12 + max(0.0003, 0.1657) + 0.1886) + 0.6 = 5.117 us
    hw = H100.hw
    warps = 2 ** hw.block_warp_exponent
    t_lat = hw.mem_latency_s / (tiles.PW_STAGES - 1)
    t_mem = max(2112 / hw.l2_bw, 1184 / hw.dram_bw)
    t_ld = 2080 / (warps * hw.warp_load_bytes_per_s)
    t_own = 2 * 32 * 64 / (hw.pw_warp_flops[0] * warps)
    want = hw.launch_overhead_s + hw.kernel_fixed_s + t_lat + max(t_mem, t_ld) + t_own + hw.mem_latency_s
    assert c.time_s == pytest.approx(want, rel=1e-12)
    assert c.time_s == pytest.approx(5.117e-6, abs=5e-10)
    # the idle slots cost: the same block's useful FLOPs alone would take 8x less own compute
    assert t_own == pytest.approx(8 * 512 / (hw.pw_warp_flops[0] * warps))


def test_a_layer_no_tile_runs_is_an_error_naming_it():
    tiny = dw(4, 1, 1, name="se_like_dw")  # 4 outputs; the dw kernel needs its threads evenly busy
    assert tiles.candidates("dw", (tiny,), "fp32", H100) == []
    search = planner.TileSearch(H100, "fp32", 1, "time")
    with pytest.raises(PlanError, match="se_like_dw"):
        search.layer(tiny)
    assert not search.layer(tiny, residual=True).feasible  # a residual variant just is not offered
    with pytest.raises(PlanError, match="se_like_dw"):
        estimate_op(tiny, "fp32", 1, H100)


def test_small_classifier_linear_is_costed():
    fc = linear(1, 256, 10)  # a 10-class head over one token: 10 outputs
    c = estimate_op(fc, "fp32", 1, H100)
    # at least the 10 x 4 = 40 B output (2 sectors) and the 10 x 256 x 4 = 10,240 B weights
    assert c.feasible and c.time_s > H100.launch_overhead_s and c.gma_write_bytes >= 64 and c.gma_read_bytes >= 10_240
