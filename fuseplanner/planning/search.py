"""The planner: best tile for every candidate group and every layer, then the exact best set of groups.

1. `graph.find_candidates` lists the legal fusion groups (and the rejected pattern matches).
2. Every layer and every candidate group gets its best tile by the objective: all feasible tiles of
   `tiles.candidates` are ranked by (objective, time, gma, dram) of their `cost.estimate`, the first
   in candidate order winning ties. With the real cost model ("ours") `cost.best_tile` computes those
   numbers without a `Cost` per tile and only the winner gets a full `cost.estimate`; other models
   (and stand-ins in tests) estimate every tile. Results are cached per signature (kernel kind,
   member shapes and attributes), since models repeat the same blocks. Layers without a tile kernel
   (dense convolutions, opaque nodes) are costed once with `cost.estimate_op`.
3. Only groups that beat their members run layer by layer are kept; the set of non-overlapping groups
   with the largest total saving is found exactly (weighted set packing over graph nodes): each
   component of overlapping groups by exhaustive branch and bound when small, otherwise by a 0/1
   integer program (`scipy.optimize.milp`, zero optimality gap).

`plan` never mutates the graph; it returns a `fuseplanner.planning.result.Plan`.
"""

from __future__ import annotations

import gc
import json
import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from fuseplanner.core.errors import PlanError
from fuseplanner.core.ir import INFEASIBLE, Cost, ModelGraph, Op, Tile
from fuseplanner.core.kinds import (
    COST_MODELS,
    DEFAULT_CONTEXT,
    DTYPE_BYTES,
    GROUP_KINDS,
    OBJECTIVES,
    PRECISIONS,
)
from fuseplanner.core.kinds import LAYER_KINDS as TILED_KINDS
from fuseplanner.cost.execution import check_context, launch_terms, sequence_time
from fuseplanner.hw.kernel_fit import GRAPH_THRESHOLD_FIELD, THRESHOLD_FIELD
from fuseplanner.kernels import tiles as tiles_mod
from fuseplanner.kernels.family import cost_model, family
from fuseplanner.planning.candidates import (
    Candidate,
    LayerResidual,
    epilogue_names,
    find_candidates,
    layer_residuals,
)


def _cost_functions() -> tuple[Callable[..., Cost], Callable[..., Cost]]:
    """The cost model's (estimate, estimate_op); imported lazily so the planner module loads fast."""
    from fuseplanner.cost import estimate, estimate_op

    return estimate, estimate_op


def _fast_search(estimate: Callable[..., Cost]) -> Callable[..., tuple] | None:
    """`cost.best_tile`, the search that ranks tiles without a `Cost` per tile, when `estimate` is
    the cost model's own (it computes the same numbers); None for any other estimate."""
    from fuseplanner import cost

    return cost.best_tile if estimate is cost.estimate else None


@dataclass(frozen=True)
class Choice:
    """The best kernel found for one layer or group: its tile (None for tile-less ops) and cost."""

    tile: Tile | None
    cost: Cost
    reason: str = ""
    searched: int = 0

    @property
    def feasible(self) -> bool:
        return self.cost.feasible


def _signature(op: Op) -> tuple:
    """What a cost depends on, without the op's name or position."""
    return (
        op.kind,
        op.op_type,
        op.input_shapes,
        op.output_shapes,
        op.kernel,
        op.stride,
        op.pads,
        op.dilation,
        op.groups,
        op.epilogue,
        op.has_bias,
        op.dtype,
    )


@dataclass
class TileSearch:
    """Best-tile search for one planning context (GPU, dtype, batch, objective, cost model), cached
    per kernel signature."""

    gpu: object
    dtype: str
    batch: int
    objective: str
    model: str = "ours"
    precision: str = "fp32"
    cache: dict = field(default_factory=dict)
    evaluated: int = 0
    #: searches where `cost.best_tile` disagreed with `estimate` (then searched with `estimate`); 0
    mismatches: int = 0
    #: kernels never chosen (`kernel_key`s): e.g. those the compiler spilled registers in on this GPU
    excluded: frozenset = frozenset()

    def __post_init__(self) -> None:
        self._estimate, self._estimate_op = _cost_functions()
        self._best_tile = _fast_search(self._estimate)

    def _rank(self, cost: Cost) -> tuple[float, float, float, float]:
        return (cost.metric(self.objective), cost.time_s, cost.gma_bytes, cost.dram_bytes)

    def best(self, kind: str, ops: Sequence[Op], residual: bool = False) -> Choice:
        """The best feasible tile of kernel `kind` over `ops`, by the objective."""
        key = search_key(kind, ops, residual)
        hit = self.cache.get(key)
        if hit is None:
            hit = self._search(kind, tuple(ops), residual)
            self.cache[key] = hit
        return hit

    def _candidates(self, kind: str, ops: tuple[Op, ...]) -> list[tuple[Tile, int, int]]:
        """`tiles.feasible_candidates` (tile, shared memory, registers), shared by the residual and
        plain variants of a group."""
        key = ("tiles", kind, tuple(_signature(op) for op in ops))
        hit = self.cache.get(key)
        if hit is None:
            hit = tiles_mod.feasible_candidates(kind, ops, self.dtype, self.gpu, self.precision)
            if self.excluded:
                hit = [] if kernel_key(kind, ops, None) in self.excluded else [
                    c for c in hit if kernel_key(kind, ops, c[0]) not in self.excluded]
            self.cache[key] = hit
        return hit

    def _cost(self, kind: str, ops: tuple[Op, ...], tile: Tile, residual: bool) -> Cost:
        return self._estimate(
            kind, ops, tile, self.dtype, self.batch, self.gpu, model=self.model, residual=residual, precision=self.precision
        )

    def _search(self, kind: str, ops: tuple[Op, ...], residual: bool) -> Choice:
        feasible = self._candidates(kind, ops)
        if not feasible:
            return Choice(None, INFEASIBLE, f"no feasible tile: {_why_none(kind, ops, self.dtype, self.gpu)}")
        if self.model == "ours" and self._best_tile is not None:
            i, rank, skipped = self._best_tile(
                kind, ops, feasible, self.dtype, self.batch, self.gpu, self.objective, residual=residual, precision=self.precision
            )
            self.evaluated += len(feasible)
            if i is not None:
                tile = feasible[i][0]
                cost = self._cost(kind, ops, tile, residual)
                if cost.feasible and self._rank(cost) == rank:
                    return Choice(tile, cost, "", len(feasible))
                self.mismatches += 1  # the fast path disagrees with `estimate`: search with `estimate` instead
            elif skipped is not None:
                why = self._cost(kind, ops, feasible[skipped][0], residual).reason
                return Choice(None, INFEASIBLE, f"no feasible tile: {why or 'every candidate was rejected'}", len(feasible))
        return self._search_estimate(kind, ops, residual, [t for t, _, _ in feasible])

    def _search_estimate(self, kind: str, ops: tuple[Op, ...], residual: bool, cands: list[Tile]) -> Choice:
        """The exhaustive search with a full `estimate` of every candidate (cost model "paper", and
        the reference that `cost.best_tile` must agree with)."""
        best: tuple | None = None
        best_tile, best_cost, why = None, INFEASIBLE, ""
        for t in cands:
            c = self._cost(kind, ops, t, residual)
            self.evaluated += 1
            if not c.feasible:
                why = why or c.reason
                continue
            r = self._rank(c)
            if best is None or r < best:
                best, best_tile, best_cost = r, t, c
        if best_tile is None:
            return Choice(None, INFEASIBLE, f"no feasible tile: {why or 'every candidate was rejected'}", len(cands))
        return Choice(best_tile, best_cost, "", len(cands))

    def prefetch(self, jobs: Sequence[tuple[str, tuple[Op, ...], bool]], workers: int) -> None:
        """Search every not yet cached (kind, ops, residual) job, on `workers` processes when > 1 (this
        one and `workers` - 1 forked ones)."""
        todo: dict[tuple, tuple[str, tuple[Op, ...], bool]] = {}
        for kind, ops, residual in jobs:
            key = search_key(kind, ops, residual)
            if key not in self.cache:
                todo.setdefault(key, (kind, ops, residual))
        if workers <= 1 or len(todo) < MIN_PARALLEL_SEARCHES:
            with _gc_paused():
                for key, (kind, ops, residual) in todo.items():
                    self.cache[key] = self._search(kind, ops, residual)
            return
        families: dict[tuple, list] = {}
        for key, job in todo.items():  # residual and plain variants share their candidate tiles
            families.setdefault((key[0], key[2]), []).append((key, job))
        fams = sorted(families.values(), key=lambda f: -sum(_weight(j) for _, j in f))
        n = workers * CHUNKS_PER_WORKER
        chunks = [c for c in ([kv for f in fams[i::n] for kv in f] for i in range(n)) if c]
        ctx = _context(self)
        for kind in {job[0] for job in todo.values()}:
            cost_model(kind)  # imported once here, not again by every forked process
        with ProcessPoolExecutor(max_workers=workers - 1, mp_context=multiprocessing.get_context("fork")) as pool:
            futures = [pool.submit(_search_chunk, (ctx, c)) for c in chunks]
            # this process is the last worker: it searches the chunks no other has started, from the
            # last one back, while they take them from the first one on
            with _gc_paused():
                for fut, chunk in zip(reversed(futures), reversed(chunks), strict=True):
                    if fut.cancel():
                        self.cache.update((key, self._search(*job)) for key, job in chunk)
            for fut in futures:
                if not fut.cancelled():
                    self.cache.update(fut.result())

    def layer(self, op: Op, residual: bool = False) -> Choice:
        """The best way to run one op on its own (`residual`: its kernel also applies the residual Add
        after it; None for the tile when no tile does). An op of a tiled kind that no tile runs cannot
        be costed: `PlanError` naming it (never a free layer)."""
        if op.kind in TILED_KINDS:
            ch = self.best(op.kind, (op,), residual or "add" in op.epilogue)
            if ch.feasible or residual:
                return ch
            raise PlanError(f"layer {op.name} ({op.kind} {op.in_shape} -> {op.out_shape}) has no kernel that runs "
                            f"it on {self.gpu.name} ({self.dtype}): {ch.reason}")
        key = ("op", _signature(op))
        hit = self.cache.get(key)
        if hit is None:
            hit = Choice(None, self._estimate_op(op, self.dtype, self.batch, self.gpu, precision=self.precision))
            self.cache[key] = hit
        return hit


def kernel_key(kind: str, ops: Sequence[Op], tile: Tile | None) -> tuple:
    """What identifies one compiled kernel for the planner: kind, member signatures (batch applied) and
    tile (`plan(..., exclude=...)` takes these); tile None stands for every tile of that kind over
    those members (excluded, the planner never fuses them)."""
    return (kind, tuple(_signature(op) for op in ops), tile)


def search_key(kind: str, ops: Sequence[Op], residual: bool) -> tuple:
    """Cache key of a tile search: the kernel kind, the residual flag and the member signatures."""
    return (kind, residual, tuple(_signature(op) for op in ops))


#: The tile searches of the open `shared_searches` block (None outside one), by planning context.
_SHARED: dict[tuple, TileSearch] | None = None


#: Spec fields that only a plan's decisions read (the fuse thresholds), never a tile search: specs that
#: differ in nothing else share their searches inside `shared_searches`.
DECISION_FIELDS = frozenset({THRESHOLD_FIELD, GRAPH_THRESHOLD_FIELD})


@contextmanager
def shared_searches() -> Iterator[None]:
    """Within this block, plans of the same planning context (the spec's values but its fuse thresholds,
    dtype, batch, objective, cost model, precision) share one `TileSearch`, so that planning the model
    again (the unfused plan beside a plan, the other execution context, another fuse threshold) reuses
    the searches made. Outside it every plan searches afresh (the cost functions may have changed in
    between)."""
    global _SHARED
    outer, _SHARED = _SHARED, ({} if _SHARED is None else _SHARED)
    try:
        yield
    finally:
        _SHARED = outer


def tile_search(spec, dtype: str, batch: int, objective: str, model: str, precision: str,
                excluded: frozenset = frozenset()) -> TileSearch:  # fmt: skip
    """The `TileSearch` of this planning context: the shared one inside `shared_searches` (made on
    first use), else a new one."""
    if _SHARED is None:
        return TileSearch(spec, dtype, batch, objective, model, precision, excluded=excluded)
    ident = search_identity(spec)
    key = (ident, dtype, batch, objective, model, precision, excluded)
    hit = _SHARED.get(key)
    if hit is None or (isinstance(ident, int) and hit.gpu is not spec):
        hit = _SHARED[key] = TileSearch(spec, dtype, batch, objective, model, precision, excluded=excluded)
    return hit


def search_identity(spec) -> str | int:
    """What a tile search on `spec` depends on: every value of the spec but `DECISION_FIELDS` (a stand-in
    spec without pydantic's `model_dump`: the object itself, by id)."""
    dump = getattr(spec, "model_dump", None)
    if dump is None:
        return id(spec)
    values = dump(mode="json")
    for table in ("fit", "measured", "refit"):
        if isinstance(values.get(table), dict):
            values[table] = {k: v for k, v in values[table].items() if k not in DECISION_FIELDS}
    return json.dumps(values, sort_keys=True)


#: Fewer distinct searches than this run in-process (a process pool costs more than it saves).
MIN_PARALLEL_SEARCHES = 24


#: Chunks of searches per process of a parallel search (finer chunks balance the processes better).
CHUNKS_PER_WORKER = 6


def _weight(job: tuple[str, tuple[Op, ...], bool]) -> int:
    """A rough size of a search (candidate count grows with the output map and channel count)."""
    last = job[1][-1]
    ho, wo = last.hw_out
    return ho * wo * len(job[1])


def _context(search: TileSearch) -> tuple:
    return (search.gpu, search.dtype, search.batch, search.objective, search.model, search.precision,
            search.excluded)  # fmt: skip


def _search_chunk(payload: tuple) -> list[tuple[tuple, Choice]]:
    """Worker: search a chunk of jobs in a fresh TileSearch with the parent's context."""
    ctx, items = payload
    *head, excluded = ctx
    search = TileSearch(*head, excluded=excluded)
    with _gc_paused():
        return [(key, search._search(kind, ops, residual)) for key, (kind, ops, residual) in items]


@contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for a batch of tile searches: they allocate hundreds of
    thousands of short-lived tuples, none in a cycle (reference counting frees them), and the
    collections they would trigger took about a sixth of the search time."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def default_workers() -> int:
    """Processes for the tile search: the CPUs this process may use, at most 8; 1 where fork is missing."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:
        n = os.cpu_count() or 1
    return max(1, min(8, n))


def _why_none(kind: str, ops: Sequence[Op], dtype: str, gpu) -> str:
    """The feasibility reason for the smallest tile of this kernel (why even it does not fit)."""
    cout = ops[-1].c_out
    tf = min(8, cout)
    t = Tile(1, 1, tf, family(kind).chunk_sizes(tf, (8,))[0], 64)
    return tiles_mod.check(kind, ops, t, dtype, gpu) or "no tile in the candidate set passes tiles.check"


# ---- the exact choice ---------------------------------------------------------------------------


#: Overlap components with at most this many groups are solved by exhaustive branch and bound (no
#: solver start-up); larger ones by the MILP.
MAX_ENUMERATED = 16


def overlap_components(covers: Sequence[Sequence[str]]) -> list[list[int]]:
    """Groups that share nodes, directly or through other groups; independent components can be
    chosen separately without losing optimality."""
    g = nx.Graph()
    g.add_nodes_from(("g", j) for j in range(len(covers)))
    g.add_edges_from((("g", j), ("n", v)) for j, c in enumerate(covers) for v in c)
    comps = [sorted(j for kind, j in comp if kind == "g") for comp in nx.connected_components(g)]
    return sorted((c for c in comps if c), key=lambda c: c[0])


def choose_exact(covers: Sequence[Sequence[str]], savings: Sequence[float], method: str = "auto") -> list[int]:
    """Indices of the non-overlapping groups with the largest total saving, exactly.

    `covers[i]` are the graph nodes group i replaces and `savings[i] > 0` what it saves. Every node
    may be covered at most once (uncovered nodes run layer by layer): weighted set packing. Each
    component of overlapping groups is solved on its own, by exhaustive branch and bound when small
    ("enumerate") or as a 0/1 program with HiGHS through `scipy.optimize.milp` at zero optimality gap
    ("milp"); "auto" picks by size.
    """
    if method not in ("auto", "enumerate", "milp"):
        raise PlanError(f"unknown selection method {method!r}: use auto, enumerate or milp")
    out: list[int] = []
    for comp in overlap_components(covers):
        if method == "milp" or (method == "auto" and len(comp) > MAX_ENUMERATED):
            out += _milp(covers, savings, comp)
        else:
            out += _enumerate(covers, savings, comp)
    return sorted(out)


def _enumerate(covers: Sequence[Sequence[str]], savings: Sequence[float], comp: list[int]) -> list[int]:
    """Exhaustive branch and bound: take or skip each group, best first, pruned by the savings left."""
    order = sorted(comp, key=lambda j: -savings[j])
    sets = [frozenset(covers[j]) for j in order]
    vals = [float(savings[j]) for j in order]
    left = np.cumsum(vals[::-1])[::-1].tolist() + [0.0]
    best_val, best_pick = 0.0, []

    def walk(k: int, used: frozenset, total: float, picked: list[int]) -> None:
        nonlocal best_val, best_pick
        if total > best_val:
            best_val, best_pick = total, list(picked)
        if k == len(order) or total + left[k] <= best_val:
            return
        if not (used & sets[k]):
            picked.append(order[k])
            walk(k + 1, used | sets[k], total + vals[k], picked)
            picked.pop()
        walk(k + 1, used, total, picked)

    walk(0, frozenset(), 0.0, [])
    return best_pick


def _milp(covers: Sequence[Sequence[str]], savings: Sequence[float], comp: list[int]) -> list[int]:
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_array

    nodes = {v: i for i, v in enumerate(dict.fromkeys(v for j in comp for v in covers[j]))}
    rows = [nodes[v] for j in comp for v in covers[j]]
    cols = [k for k, j in enumerate(comp) for _ in covers[j]]
    a = coo_array((np.ones(len(rows)), (rows, cols)), shape=(len(nodes), len(comp))).tocsr()
    s = np.asarray([savings[j] for j in comp], dtype=float)
    scale = float(s.max()) if s.size and s.max() > 0 else 1.0
    res = milp(
        c=-s / scale,
        constraints=LinearConstraint(a, -np.inf, 1.0),
        integrality=np.ones(len(comp)),
        bounds=Bounds(0, 1),
        options={"mip_rel_gap": 0.0},
    )
    if res.x is None:
        raise PlanError(f"the group-selection program failed ({res.message}); report this with the model")
    return [j for k, j in enumerate(comp) if res.x[k] > 0.5]


def choose_greedy(covers: Sequence[Sequence[str]], savings: Sequence[float]) -> list[int]:
    """The published approach, for comparison: take groups by descending saving while they do not
    overlap. Not optimal (see tests/test_planner.py for a case where it loses)."""
    taken: set[str] = set()
    out: list[int] = []
    for j in sorted(range(len(covers)), key=lambda j: -savings[j]):
        if savings[j] > 0 and not taken.intersection(covers[j]):
            out.append(j)
            taken.update(covers[j])
    return sorted(out)


# ---- plan -----------------------------------------------------------------------------------------


def _check_options(dtype: str, batch: int | None, objective: str, kinds: Iterable[str] | None, model: str, precision: str) -> tuple[str, ...]:
    if dtype not in DTYPE_BYTES:
        raise PlanError(f"unknown dtype {dtype!r}: use one of {', '.join(DTYPE_BYTES)}")
    if objective not in OBJECTIVES:
        raise PlanError(f"unknown objective {objective!r}: use one of {', '.join(OBJECTIVES)}")
    if model not in COST_MODELS:
        raise PlanError(f"unknown cost model {model!r}: use one of {', '.join(COST_MODELS)}")
    if precision not in PRECISIONS:
        raise PlanError(f"unknown precision {precision!r}: use one of {', '.join(PRECISIONS)}")
    if precision == "tf32" and dtype != "fp32":
        raise PlanError("precision tf32 applies to fp32 storage only: drop --precision or use --dtype fp32")
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
        raise PlanError(f"batch must be a positive integer, got {batch!r}")
    allowed = tuple(GROUP_KINDS if kinds is None else dict.fromkeys(kinds))
    bad = [k for k in allowed if k not in GROUP_KINDS]
    if bad:
        raise PlanError(f"unknown fusion kind {bad[0]!r}: use any of {', '.join(GROUP_KINDS)}")
    return allowed


def model_batch(graph: ModelGraph) -> int:
    """The batch the model was loaded with: the leading dimension of its first conv/linear input."""
    for op in graph.ops():
        if op.kind in ("dw", "pw", "conv") or (op.kind == "linear" and len(op.in_shape) >= 3):
            return max(1, op.batch)
    for t in graph.inputs:
        if t.shape:
            return max(1, int(t.shape[0]))
    return 1


def _resolve_gpu(gpu):
    if isinstance(gpu, str):
        from fuseplanner.hw.spec import gpu as load_gpu

        return load_gpu(gpu)
    if gpu is None or not hasattr(gpu, "name"):
        raise PlanError(f"gpu must be a GpuSpec or a GPU name, got {gpu!r}: see `fuseplanner gpus`")
    return gpu


@dataclass(frozen=True)
class Evaluated:
    """A candidate group with its best fused kernel and its members' layer-by-layer cost."""

    cand: Candidate
    fused: Choice
    #: the members run layer by layer, their launches summed as if each ran alone
    members: Cost
    #: a residual Add the group does not absorb but its last member would alone: run separately if fused
    orphaned: Cost = field(default_factory=Cost)
    #: seconds each launch after the first of back-to-back launches saves (spec `launch_overlap_s`)
    overlap: float = 0.0

    @property
    def fused_launches(self) -> Cost:
        """The fused kernel plus whatever fusing leaves to run separately, summed as if each ran alone."""
        return self.fused.cost + self.orphaned

    @property
    def unfused(self) -> Cost:
        """The members back to back, isolated (what the plan records as the group's unfused cost)."""
        return self.members.overlapped(self.overlap)


def plan(
    graph: ModelGraph,
    gpu,
    dtype: str = "fp32",
    batch: int | None = None,
    objective: str = "time",
    kinds: Iterable[str] | None = None,
    model: str = "ours",
    precision: str = "fp32",
    workers: int | None = None,
    context: str = DEFAULT_CONTEXT,
    exclude: Iterable[tuple] = (),
):
    """Plan which DW/PW layers of `graph` to fuse on `gpu`, with which tiles.

    gpu: a `GpuSpec` or a name/path for `fuseplanner.gpu`; dtype: storage dtype "fp32"/"fp16";
    batch: images (or sequences) per run, default the model's; objective: what to minimise over the
    whole model ("time", "gma" bytes at L2 level or "dram" bytes); kinds: fused kinds allowed (default
    all of pw_dw, dw_pw, pw_pw, pw_dw_pw); model: cost model "ours" or "paper"; precision: "tf32"
    lets fp32 pointwise parts use TF32 tensor cores; workers: processes for the tile search (default:
    the usable CPUs when the model has many distinct kernels; 1 searches in this process, e.g. in a
    threaded server where forking is unwelcome); context: the execution context the time objective
    decides in (`fuseplanner.cost.execution`: "graph" replay, the default, as the executor runs a model:
    each launch's floor is the spec's graph tail and an operand still in L2 is not read from DRAM; or
    "isolated" launches after an L2 flush; the plan's costs stay isolated-context); exclude: kernels
    (`kernel_key`s) never to choose, e.g. those the compiler spilled registers in (`fuseplanner.compile`
    plans again without them), or with tile None whole groups, e.g. those measured slower fused than
    unfused (`fuseplanner.tune`). Returns a `Plan`.
    """
    from fuseplanner.planning.result import CostModel, GroupPlan, LayerPlan, Plan, RejectedPlan, Totals

    allowed = _check_options(dtype, batch, objective, kinds, model, precision)
    check_context(context)
    spec = _resolve_gpu(gpu)
    b = model_batch(graph) if batch is None else batch
    ops = {op.name: op.with_batch(b) for op in graph.ops()}
    excluded = frozenset(exclude)
    search = tile_search(spec, dtype, b, objective, model, precision, excluded)
    # the layer-by-layer baseline runs each layer with its fastest tile whatever the objective
    base = search if objective == "time" else tile_search(spec, dtype, b, "time", model, precision, excluded)
    found = find_candidates(graph, allowed)
    resid = layer_residuals(graph)
    jobs = [(op.kind, (op,), "add" in op.epilogue) for op in ops.values() if op.kind in TILED_KINDS]
    jobs += [(ops[n].kind, (ops[n],), True) for n in resid]
    n_workers = default_workers() if workers is None else workers
    if base is not search:
        base.prefetch(jobs, n_workers)
        jobs = []
    jobs += [_group_job(c, ops) for c in found.groups]
    search.prefetch(jobs, n_workers)
    layer = {name: base.layer(op) for name, op in ops.items()}
    library = {r.add: layer[r.add] for r in resid.values()}  # the Add as its own kernel
    for name, r in list(resid.items()):
        applying = base.layer(ops[name], residual=True)
        if applying.tile is None:
            del resid[name]  # no tile applies the Add: it stays a separate kernel
            continue
        layer[name], layer[r.add] = applying, Choice(None, Cost())

    rejected = [RejectedPlan(kind=r.kind, nodes=list(r.members), absorbed=list(r.absorbed), stage="graph", reason=r.reason) for r in found.rejected]
    helpful: list[Evaluated] = []
    threshold = GRAPH_THRESHOLD_FIELD if context == "graph" else THRESHOLD_FIELD
    margin = float(spec.eff(threshold)) if model == "ours" else 1.0
    overlap = float(spec.eff("launch_overlap_s")) if model == "ours" else 0.0
    decide = _decider(spec, objective, context, overlap)
    evaluated = [_evaluate(cand, ops, layer, search, _orphaned_add(cand, resid, library), overlap)
                 for cand in found.groups]
    with_add = {ev.cand.members for ev in evaluated if ev.cand.residual and ev.fused.feasible}
    for ev in evaluated:
        cand = ev.cand
        if not cand.residual and cand.members in with_add and cand.members[-1] in resid:
            rejected.append(_rejected(cand, "overlap", f"the same group applying the residual Add "
                                                       f"{resid[cand.members[-1]].add!r} is evaluated instead"))
            continue
        why, stage = _why_not_helpful(ev, objective, margin, decide, threshold)
        if why:
            rejected.append(_rejected(cand, stage, why))
        else:
            helpful.append(ev)

    covers = [ev.cand.nodes for ev in helpful]
    credit = _fuse_credit(objective, margin)
    savings = [decide(ev.members) - credit * decide(ev.fused_launches) for ev in helpful]
    chosen = set(choose_exact(covers, savings))
    groups: list[GroupPlan] = []
    covered: dict[str, str] = {}
    for j, ev in enumerate(helpful):
        if j in chosen:
            groups.append(_group_plan(graph, ev, GroupPlan, CostModel))
            covered.update({n: "+".join(ev.cand.members) for n in ev.cand.nodes})
    for j, ev in enumerate(helpful):
        if j not in chosen:
            by = sorted({covered[n] for n in ev.cand.nodes if n in covered})
            rejected.append(_rejected(ev.cand, "overlap", f"overlaps chosen group {', '.join(by)}: the chosen set saves more"))

    layers = _layer_plans(graph, ops, layer, covered, resid, library, LayerPlan, CostModel)
    unfused_total = sum((layer[n].cost for n in graph.order), Cost()).overlapped(overlap)
    planned_total = (sum((g.fused_cost for g in groups), Cost()) + sum((lay.ir_cost for lay in layers), Cost())
                     ).overlapped(overlap)
    groups.sort(key=lambda g: graph.order.index(g.nodes[0]))
    return Plan(
        model=graph.name,
        gpu=spec.name,
        dtype=dtype,
        batch=b,
        objective=objective,
        cost_model=model,
        precision=precision,
        kinds=list(allowed),
        groups=groups,
        layers=layers,
        totals=Totals(unfused=CostModel.from_cost(unfused_total), planned=CostModel.from_cost(planned_total)),
        rejected=rejected,
        warnings=spec.warnings(kernel_fit=model == "ours", **({"graph": True} if context == "graph" else {}))
        + _excluded_warning(excluded),
        context=context,
    )


def _excluded_warning(excluded: frozenset) -> list[str]:
    tiles = sum(1 for k in excluded if k[2] is not None)
    groups = len(excluded) - tiles
    out = []
    if tiles:
        out.append(f"{tiles} kernel tile(s) left out of the search (the compiler spilled registers in them on this "
                   "GPU): the plan uses the best of the others")  # fmt: skip
    if groups:
        out.append(f"{groups} fused kernel(s) left out whatever their tile (measured no faster fused than unfused on "
                   "this GPU): their layers run layer by layer or in other groups")  # fmt: skip
    return out


def _group_job(cand: Candidate, ops: dict[str, Op]) -> tuple[str, tuple[Op, ...], bool]:
    members = tuple(ops[m] for m in cand.members)
    return cand.kind, members, cand.residual or "add" in members[-1].epilogue


def _evaluate(cand: Candidate, ops: dict[str, Op], layer: dict[str, Choice], search: TileSearch,
              orphaned: Cost | None = None, overlap: float = 0.0) -> Evaluated:  # fmt: skip
    """The group's best fused kernel against its members run layer by layer, back to back (`overlap`)."""
    fused = search.best(*_group_job(cand, ops))
    members = sum((layer[n].cost for n in cand.nodes), Cost())
    return Evaluated(cand, fused, members, orphaned or Cost(), overlap)


def _orphaned_add(cand: Candidate, resid: dict[str, LayerResidual], library: dict[str, Choice]) -> Cost | None:
    """The residual Add that the group's last member applies when run on its own but the group does
    not absorb: fusing leaves it to run as a separate kernel (None when there is none)."""
    r = resid.get(cand.members[-1])
    return library[r.add].cost if r is not None and r.add not in cand.nodes else None


def _layer_plans(graph: ModelGraph, ops: dict[str, Op], layer: dict[str, Choice], covered: dict[str, str],
                 resid: dict[str, LayerResidual], library: dict[str, Choice], layer_cls, cost_cls) -> list:  # fmt: skip
    """Every node no chosen group covers, in model order. An op that applies its residual Add keeps
    it (the Add gets no entry of its own) unless a group covers the op; then the Add runs alone."""
    absorbed = {r.add: n for n, r in resid.items() if n not in covered}
    out = []
    for n in graph.order:
        if n in covered or n in absorbed:
            continue
        r = resid.get(n)
        choice = library.get(n, layer[n])  # an Add its op does not absorb runs as the library kernel
        out.append(layer_cls(
            node=n, kind=ops[n].kind, op_type=ops[n].op_type, tile=choice.tile, cost=cost_cls.from_cost(choice.cost),
            residual=r is not None, absorbed=[r.add] if r else [], residual_input=r.tensor if r else None,
        ))  # fmt: skip
    return out


def _decider(spec, objective: str, context: str, overlap: float) -> Callable[[Cost], float]:
    """The number a plan decision compares for launches run back to back (a `Cost` summed as if each
    ran alone): the objective's metric, for the time objective in `context` (`sequence_time`)."""
    if objective != "time":
        return lambda cost: cost.metric(objective)
    terms = launch_terms(spec) if context != "isolated" else None  # the isolated context reads no terms
    return lambda cost: sequence_time(cost, terms, context, overlap)


def _fuse_credit(objective: str, margin: float) -> float:
    """The weight of a group's fused metric against its layers' in a plan decision: a time threshold
    under 1 (`graph_fuse_min_speedup`) fuses groups predicted up to that much slower, so their fused
    time counts that much less; otherwise 1."""
    return min(margin, 1.0) if objective == "time" else 1.0


def _why_not_helpful(ev: Evaluated, objective: str, margin: float, decide: Callable[[Cost], float],
                     threshold: str = THRESHOLD_FIELD) -> tuple[str, str]:  # fmt: skip
    """Why a feasible candidate is not worth fusing ("" if it is). For the time objective the predicted
    unfused/fused ratio must reach `margin`, the GPU's `threshold` field: `fuse_min_speedup` (fitted to
    measured fuse decisions: it absorbs the optimism of picking the best-predicted of many fused
    tiles) or, deciding in the graph context, `graph_fuse_min_speedup` (chosen on decisions measured
    in the executor)."""
    if not ev.fused.feasible:
        return ev.fused.reason or "no feasible tile", "tile"
    if not ev.members.feasible:
        return "a member has no feasible layer-by-layer kernel to compare with", "tile"
    f, u = decide(ev.fused_launches), decide(ev.members)
    credit = _fuse_credit(objective, margin)
    if f >= u and not (credit < 1 and u >= credit * f):
        return f"fused {_fmt(f, objective)} is not below unfused {_fmt(u, objective)}", "gain"
    if objective == "time" and u < margin * f:
        return (f"fused {_fmt(f, objective)} is below unfused {_fmt(u, objective)} by {u / f:.2f}x, under this "
                f"GPU's {threshold} {margin:g}x (measured fused kernels fall short of such gains)"), "gain"
    return "", ""


def _fmt(v: float, objective: str) -> str:
    if objective == "time":
        return f"{v * 1e6:.2f} us"
    return f"{v / 1e6:.3f} MB"


def _rejected(cand: Candidate, stage: str, reason: str):
    from fuseplanner.planning.result import RejectedPlan

    return RejectedPlan(kind=cand.kind, nodes=list(cand.members), absorbed=list(cand.absorbed), stage=stage, reason=reason)


def _group_plan(graph: ModelGraph, ev: Evaluated, group_cls, cost_cls):
    c = ev.cand
    return group_cls(
        kind=c.kind,
        nodes=list(c.members),
        epilogue=list(epilogue_names(graph, c)),
        absorbed=list(c.absorbed),
        residual=c.residual,
        residual_input=c.residual_tensor,
        tile=ev.fused.tile,
        fused=cost_cls.from_cost(ev.fused.cost),
        unfused=cost_cls.from_cost(ev.unfused),
    )
