"""The fast tile search against brute force: `tiles.feasible_candidates` against `candidate_grid` +
`check`, and `cost.best_tile` (ranks without a `Cost` per tile, skips timing tiles that already lose
on the gma or dram objective) against a full `estimate` of every candidate.

`best_tile` repeats the arithmetic of `cost.model.estimate_ours`; these tests fail when the two drift
apart (the planner would then fall back to the slow search, counting `TileSearch.mismatches`).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cost_properties import groups

from fuseplanner.core.ir import Tile
from fuseplanner.cost import best_tile, estimate
from fuseplanner.hw.spec import GpuSpec, gpu
from fuseplanner.kernels import tiles
from fuseplanner.planning import search as planner
from fuseplanner.planning.candidates import find_candidates

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
OBJECTIVES = ("time", "gma", "dram")
specs = st.sampled_from(["h100", "gtx1660", "orin", "t4", "rtx_a4000"])


def _rank(c, objective):
    return (c.metric(objective), c.time_s, c.gma_bytes, c.dram_bytes)


def brute_force(kind, ops, dtype, batch, spec, objective, residual=False, precision="fp32"):
    """(tile, rank, reason of the first infeasible tile) of the exhaustive search over `estimate`,
    the first tile in candidate order winning ties (the planner's rule)."""
    best = best_tile_ = None
    why = ""
    for t in tiles.candidates(kind, ops, dtype, spec):
        c = estimate(kind, ops, t, dtype, batch, spec, residual=residual, precision=precision)
        if not c.feasible:
            why = why or c.reason
            continue
        r = _rank(c, objective)
        if best is None or r < best:
            best, best_tile_ = r, t
    return best_tile_, best, why


def fast(kind, ops, dtype, batch, spec, objective, residual=False, precision="fp32"):
    feasible = tiles.feasible_candidates(kind, ops, dtype, spec)
    i, rank, skipped = best_tile(kind, ops, feasible, dtype, batch, spec, objective, residual=residual, precision=precision)
    return (None if i is None else feasible[i][0]), rank, skipped


@SETTINGS
@given(groups(), st.sampled_from(["fp32", "fp16"]), specs, st.sampled_from(["fp32", "tf32"]))
def test_feasible_candidates_are_the_grid_tiles_check_accepts(group, dtype, spec_name, precision):
    kind, ops = group
    spec = gpu(spec_name)
    accepted = [t for t in tiles.candidate_grid(kind, ops) if tiles.check(kind, ops, t, dtype, spec, precision) is None]
    even = [t for t in accepted if (t.tf * t.th * t.tw) % t.threads == 0]
    # uneven tiles (threads past the outputs idle) only for the pw/linear kernel and only when no tile is even
    want = even or (accepted if kind in tiles.UNEVEN_KINDS else [])
    assert len(even) == len(accepted) or kind in tiles.UNEVEN_KINDS
    got = tiles.feasible_candidates(kind, ops, dtype, spec, precision)
    assert [t for t, _, _ in got] == want == tiles.candidates(kind, ops, dtype, spec, precision)
    for t, smem, regs in got:
        assert smem == tiles.smem_bytes(kind, ops, t, dtype)
        assert regs == tiles.regs_per_thread(kind, ops, t, dtype, precision)


@SETTINGS
@given(groups(), st.sampled_from(["fp32", "fp16"]), specs, st.sampled_from(OBJECTIVES), st.integers(1, 4),
       st.booleans(), st.sampled_from(["fp32", "tf32"]))  # fmt: skip
def test_best_tile_equals_brute_force(group, dtype, spec_name, objective, batch, residual, precision):
    kind, ops = group
    spec = gpu(spec_name)
    precision = precision if dtype == "fp32" else "fp32"
    want_tile, want_rank, _ = brute_force(kind, ops, dtype, batch, spec, objective, residual, precision)
    tile, rank, _ = fast(kind, ops, dtype, batch, spec, objective, residual, precision)
    assert (tile, rank) == (want_tile, want_rank)


def _jobs(graph):
    """Every distinct (kind, ops, residual) search the planner runs for `graph`."""
    ops = {op.name: op for op in graph.ops()}
    jobs = [(op.kind, (op,), "add" in op.epilogue) for op in ops.values() if op.kind in planner.TILED_KINDS]
    jobs += [planner._group_job(c, ops) for c in find_candidates(graph).groups]
    return list({planner.search_key(*j): j for j in jobs}.values())


@pytest.mark.parametrize(
    "name, gpu_name, dtype, objective, step",
    [
        ("mobilenet_v2", "h100", "fp32", "time", 3),
        ("mobilenet_v2", "gtx1660", "fp16", "gma", 5),
        ("mobilenet_v2", "h100", "fp32", "dram", 5),
        ("mobilevit_xxs", "h100", "fp32", "time", 4),
        ("mobilevit_xxs", "a100_80gb", "fp16", "dram", 7),
    ],
)
def test_planner_search_equals_brute_force_on_bundled_models(name, gpu_name, dtype, objective, step):
    from test_planner import _bundled

    spec = gpu(gpu_name)
    jobs = _jobs(_bundled(name))
    kinds = {kind for kind, _, _ in jobs}
    sample = jobs[::step] + [next(j for j in jobs if j[0] == k) for k in sorted(kinds)]  # every kind at least once
    search = planner.TileSearch(spec, dtype, 1, objective)
    assert search._best_tile is not None  # the fast path is on with the real cost model
    for kind, ops, residual in sample:
        got = search._search(kind, ops, residual)
        want = search._search_estimate(kind, ops, residual, tiles.candidates(kind, ops, dtype, spec))
        assert got == want, (kind, [op.name for op in ops], residual)
    assert search.mismatches == 0


def _cramped(spec: GpuSpec) -> GpuSpec:
    """`spec` reserving so much shared memory per block that tiles using most of the per-block limit
    fit no block on an SM (`estimate` rejects them, `tiles.check` does not)."""
    d = spec.model_dump()
    d["smem_reserved_per_block_bytes"] = spec.smem_per_sm_bytes - spec.smem_per_block_bytes // 4
    return GpuSpec(**d)


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_tiles_without_a_resident_block_are_skipped(objective):
    from opfactory import dw, pw

    spec = _cramped(gpu("h100"))
    for kind, ops in [("dw", (dw(96, 56, 56),)), ("pw_dw_pw", (pw(24, 144, 28, 28), dw(144, 28, 28), pw(144, 24, 28, 28)))]:
        feasible = tiles.feasible_candidates(kind, ops, "fp32", spec)
        _, _, skipped = best_tile(kind, ops, feasible, "fp32", 1, spec, objective)
        assert skipped is not None  # some candidates are rejected by `estimate`, not by `check`
        want_tile, want_rank, _ = brute_force(kind, ops, "fp32", 1, spec, objective)
        tile, rank, _ = fast(kind, ops, "fp32", 1, spec, objective)
        assert (tile, rank) == (want_tile, want_rank)


def test_no_resident_block_at_all_gives_the_estimate_reason():
    from opfactory import dw

    d = gpu("h100").model_dump()
    d["smem_reserved_per_block_bytes"] = d["smem_per_sm_bytes"]  # no block ever fits
    spec = GpuSpec(**d)
    ops = (dw(32, 14, 14),)
    search = planner.TileSearch(spec, "fp32", 1, "time")
    got = search._search("dw", ops, False)
    want = search._search_estimate("dw", ops, False, tiles.candidates("dw", ops, "fp32", spec))
    assert got == want and not got.feasible and "no block fits on an SM" in got.reason


def test_tile_parse_reads_what_str_writes_and_rejects_other_text():
    for t in (Tile(4, 8, 32, 16, 256), Tile(1, 1, 256, 64, 64), Tile(14, 14, 96, 8, 128)):
        assert Tile.parse(str(t)) == t
    assert Tile.parse(" 2x16/f40/c8/t256 ") == Tile(2, 16, 40, 8, 256)
    for bad in ("4x8", "4x8/f32/c16", "4x8/f32/c16/t", "a4x8/f32/c16/t256", "4x8/f32/c16/t256/x"):
        with pytest.raises(ValueError, match="expected THxTW/fTF/cTC/tTHREADS"):
            Tile.parse(bad)


@SETTINGS
@given(groups(), st.sampled_from(["fp32", "fp16"]), st.integers(1, 4),
       st.sampled_from(["fp32", "tf32"]), st.booleans())  # fmt: skip
def test_bounded_work_never_exceeds_the_exact_work(group, dtype, batch, precision, residual):
    """`best_tile` ranks the tiles of a model with `KernelModel.bounded` first and works out the exact
    work only for tiles that may still win: the bound's floored request counts must never exceed the
    exact ones, and every other field must be the exact one."""
    from fuseplanner.cost.model import context, launched

    kind, ops = group
    spec = gpu("h100")
    precision = precision if dtype == "fp32" else "fp32"
    km = context(kind, tuple(ops), dtype)
    assert km.BOUNDED
    for t in tiles.candidates(kind, ops, dtype, spec)[::7]:
        low, _, _ = launched(kind, tuple(ops), t, dtype, batch, spec, km, residual, precision, exact=False)
        exact, _, _ = launched(kind, tuple(ops), t, dtype, batch, spec, km, residual, precision)
        assert low.gma_write <= exact.gma_write and low.gma_read <= exact.gma_read
        assert low.req_read <= exact.req_read and low.ld_read <= exact.ld_read
        assert low._replace(gma_write=0, gma_read=0, req_read=0, ld_read=0) == exact._replace(
            gma_write=0, gma_read=0, req_read=0, ld_read=0)


@SETTINGS
@given(groups(), st.sampled_from(["fp32", "fp16"]), st.integers(1, 4),
       st.sampled_from(["fp32", "tf32"]), st.booleans())  # fmt: skip
def test_floor_work_is_the_work_without_bytes_and_times_at_most_the_bound(group, dtype, batch, precision, residual):
    """`best_tile` ranks the tiles first by the time of `KernelModel.floor`: the blocks, iterations,
    tile counts and FLOPs of the work and no bytes. Its time must never exceed the time of the bounded
    work (which `best_tile` ranks next), nor that of the exact work."""
    from fuseplanner.cost.model import context, dram_traffic, launch_time, launched, scheduled
    from fuseplanner.cost.time import blocks_per_sm
    from fuseplanner.costbase.work import Work

    kind, ops = group
    ops = tuple(ops)
    spec = gpu("h100")
    precision = precision if dtype == "fp32" else "fp32"
    km = context(kind, ops, dtype)
    counted = ("blocks", "iters", "nf", "nsp", "cuda_flops", "mma_flops")
    for t, smem, regs in tiles.feasible_candidates(kind, ops, dtype, spec, precision)[::5]:
        floor = km.floor(t, batch)
        work = km.work(t, batch, residual, precision=precision)
        assert {f: getattr(floor, f) for f in counted} == {f: getattr(work, f) for f in counted}
        assert all(getattr(floor, f) == 0 for f in Work._fields if f not in counted)
        bps = blocks_per_sm(smem, t.threads, regs, spec.hw)[0]
        if bps < 1:
            continue
        low, depth, ks = launched(kind, ops, t, dtype, batch, spec, km, residual, precision, exact=False)
        exact = launched(kind, ops, t, dtype, batch, spec, km, residual, precision)[0]
        fl, fl_depth = scheduled(kind, ops, t, dtype, floor, ks)
        assert (fl.blocks, fl.iters, fl_depth) == (low.blocks, low.iters, depth)
        floor_s = launch_time(kind, ops, t, dtype, precision, fl, ks, depth, bps, 0.0, spec.hw)
        for w in (low, exact):
            dram = sum(dram_traffic(w, spec.hw.sm_count * bps, spec.hw))
            assert floor_s <= launch_time(kind, ops, t, dtype, precision, w, ks, depth, bps, dram, spec.hw)


def test_parallel_search_gives_the_in_process_results():
    """The planner's tile search spread over forked processes (this one searching the chunks no other
    has started) finds every job, with the results of the search in this process, and the same plan."""
    from test_planner import _bundled

    graph = _bundled("mobilenet_v2")
    jobs = _jobs(graph)
    assert len(jobs) >= planner.MIN_PARALLEL_SEARCHES  # the search does go parallel
    keys = [planner.search_key(*job) for job in jobs]
    alone = planner.TileSearch(gpu("h100"), "fp32", 1, "time")
    alone.prefetch(jobs, 1)
    for workers in (2, 3):
        spread = planner.TileSearch(gpu("h100"), "fp32", 1, "time")
        spread.prefetch(jobs, workers)
        assert all(k in spread.cache for k in keys)
        assert [spread.cache[k] for k in keys] == [alone.cache[k] for k in keys]
    assert planner.plan(graph, "h100", workers=2).to_json() == planner.plan(graph, "h100", workers=1).to_json()
