"""A designed micro-sweep that identifies every fitted kernel parameter of a GPU (`KernelFit`).

`fuseplanner calibrate --out FILE` measures the GPU's facts (`validation.microbench`), then runs this
sweep through the validate machinery (`validation.validate.measure_item`: NaN-poisoned outputs
checked against the float64 reference, cold and warm CUDA-event medians) and fits the kernel
parameters to it (`validation.fit.fit_spec`). The sweep is small synthetic layers and blocks of the
shapes the planner fuses (MobileNet / EfficientNet / MobileViT-like), chosen so that each fitted
parameter moves some predicted time (or, for the L2 fractions, predicted L2 traffic):

- every math mode: fp32 storage with exact fp32 products, fp32 storage on TF32 tensor cores, fp16
  storage (each a `Config`), so each `*_warp_flops_per_cycle_*` rate has launches that need it;
- DW (3x3 and 5x5 windows, stride 1 and 2), PW (narrow and wide, small and large maps) and linear
  layers alone at several tiles: the tiles of each layer are picked per thread count (warps per
  block) and spread over predicted time, so block sizes and blocks per SM vary (the warp
  exponents, co-residency, the SM issue caps, load weights, per-warp load rate);
- each fused kind (pw_dw, dw_pw, pw_pw, pw_dw_pw with its residual) at several tiles, and each block
  run unfused, layer by layer (consecutive launches: `launch_overlap_s`; the fused/unfused pairs:
  `fuse_min_speedup`); small blocks make the fixed launch times visible;
- two batches (1 and 8): work per launch changes at fixed per-block shape.

`design(gpu, quick)` lists the sweep's items; `records_to_samples` turns saved records back into
`fit.Sample`s without a GPU (the records carry their ops, so no model file is needed).
`sensitivity(gpu, samples, names)` is the design matrix: d log(prediction) / d log(parameter) of
every sample (time, and L2 bytes of the fused ones) by finite differences on the CPU cost model.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fuseplanner.core.errors import FusePlannerError
from fuseplanner.core.ir import Op, Tile
from fuseplanner.hw.kernel_fit import THRESHOLD_FIELD
from fuseplanner.validation import fit as fit_mod
from fuseplanner.validation.validate import Context, Item, Step, steps_cost, sweep_tiles

SCHEMA = "fuseplanner.sweep/1"
#: The kernel parameters the sweep fits: `fit.FITTABLE` (`fused_weight_load_fraction` is not in it: it is
#: kept as the spec has it, as `calibrate --from-results` keeps it, since it scales the same reads as the
#: rates) less the PW chunk step (`fit.CHUNK_FIELD`), kept off as in the bundled fit (docs/cost_model.md).
FIT_FIELDS: tuple[str, ...] = tuple(n for n in fit_mod.FITTABLE if n != fit_mod.CHUNK_FIELD)
#: Parameters at 0 ("off") are probed at the value the fit starts from (their effect at 0 is a kink).
PROBE_START = {
    fit_mod.SM_CAP_FIELD: fit_mod.SM_CAP_START, fit_mod.LBL_SM_CAP_FIELD: fit_mod.SM_CAP_START,
    **dict.fromkeys(fit_mod.LBL_LOAD_WEIGHT_FIELDS, fit_mod.LBL_LOAD_WEIGHT_START),
    **dict.fromkeys(fit_mod.SECONDS_FIELDS, fit_mod.FIXED_START),
    fit_mod.WINDOW_EPILOGUE_FIELD: 4.0, fit_mod.EPILOGUE_FIELD: 4.0, fit_mod.LOAD_WEIGHT_FIELD: 1.0,
}  # fmt: skip

#: Where `calibrate --from-scratch` starts every fitted parameter: a generic value for what each one is,
#: taken from no GPU's fit. Per-warp FLOP rates: a quarter of a warp's peak (32 lanes x 2 FLOPs of an FMA
#: per cycle = 64) for every kind and math mode; exponents halfway in (0, 1]; L2 fractions and load,
#: epilogue and shared-memory weights 1 (no correction); 8 bytes per warp-cycle of loads; 4 issuing warps
#: per SM (one per scheduler); fixed and overlap times 1 us; no fuse margin. The fit moves each by up to
#: 1000x either way (`fit_sweep`).
SCRATCH_START: dict[str, float] = {
    **{n: 16.0 for n in FIT_FIELDS if "warp_flops_per_cycle" in n},
    **{n: 0.5 for n in FIT_FIELDS if n.endswith("exponent")},
    **{n: 1.0 for n in FIT_FIELDS if n.endswith(("_fraction", "_fraction_fp16", "_weight"))},
    fit_mod.LOAD_FIELD: 8.0, fit_mod.SM_CAP_FIELD: 4.0, fit_mod.LBL_SM_CAP_FIELD: 4.0,
    **dict.fromkeys(fit_mod.SECONDS_FIELDS, 1e-6), fit_mod.THRESHOLD_FIELD: 1.0,
}  # fmt: skip


def scratch(spec: Any) -> Any:
    """`spec` with every fitted parameter at `SCRATCH_START` (its own or borrowed fit ignored)."""
    from fuseplanner.validation.microbench import apply_measured

    missing = [n for n in FIT_FIELDS if n not in SCRATCH_START]
    if missing:
        raise FusePlannerError(f"no scratch start for {', '.join(missing)}")
    return apply_measured(spec, {n: SCRATCH_START[n] for n in FIT_FIELDS})


@dataclass(frozen=True)
class Config:
    """One storage dtype / pointwise precision / batch of the sweep."""

    dtype: str
    precision: str
    batch: int

    @property
    def tag(self) -> str:
        return f"{self.dtype}{'-tf32' if self.precision == 'tf32' else ''}-b{self.batch}"


@dataclass(frozen=True)
class Design:
    """How much of the sweep to run: the configs, blocks and layers, and tiles per item."""

    configs: tuple[Config, ...]
    blocks: tuple[str, ...]
    layers: tuple[str, ...]
    tiles: int  # alternative tiles per block or layer besides its best

    @property
    def name(self) -> str:
        return "quick" if self is QUICK else "full"


@dataclass(frozen=True)
class SweepItem:
    """A sweep item with the config it runs under."""

    item: Item
    config: Config


# ---- synthetic ops ----------------------------------------------------------------------------------


def _op(name: str, kind: str, ins: tuple[int, ...], outs: tuple[int, ...], weights: int, macs: int,
        epilogue: tuple[str, ...], **kw: Any) -> Op:  # fmt: skip
    """An fp32 op as the ONNX importer records it (batch 1; `Op.with_batch` rescales)."""
    return Op(name=name, op_type="MatMul" if kind == "linear" else "Conv", kind=kind, index=0, inputs=(f"{name}.in",),
              outputs=(f"{name}.out",), input_shapes=(ins,), output_shapes=(outs,), epilogue=epilogue,
              has_bias=kind == "linear", params=weights, flops=2 * macs, input_bytes=4 * math.prod(ins),
              output_bytes=4 * math.prod(outs), weight_bytes=4 * weights, **kw)  # fmt: skip


def conv(name: str, cin: int, cout: int, size: int, k: int = 1, s: int = 1, act: bool = True) -> Op:
    """A depthwise (k > 1, cin == cout) or pointwise (k == 1) convolution over a size x size map."""
    epi = ("bn", "relu6") if act else ("bn",)
    if k == 1:
        o = (size - 1) // s + 1
        return _op(name, "pw", (1, cin, size, size), (1, cout, o, o), cin * cout, cin * cout * o * o, epi, stride=(s, s))
    p = k // 2
    o = (size + 2 * p - k) // s + 1
    return _op(name, "dw", (1, cin, size, size), (1, cout, o, o), cout * k * k, cout * k * k * o * o, epi,
               kernel=(k, k), stride=(s, s), pads=(p, p, p, p), groups=cin)  # fmt: skip


def linear(name: str, tokens: int, cin: int, cout: int) -> Op:
    """A token-major matmul with bias over (1, tokens, cin)."""
    return _op(name, "linear", (1, tokens, cin), (1, tokens, cout), cin * cout, tokens * cin * cout, ("bias",))


def chain(ops: Sequence[Op]) -> tuple[Op, ...]:
    """`ops` with each one's input tensor named after the previous one's output (a block)."""
    out = [ops[0]]
    for op in ops[1:]:
        out.append(dataclasses.replace(op, inputs=out[-1].outputs))
    return tuple(out)


#: Fused blocks: (kind, member ops, residual).
BLOCKS: dict[str, tuple[str, tuple[Op, ...], bool]] = {
    "ir56": ("pw_dw_pw", chain([conv("ir56.e", 24, 144, 56), conv("ir56.d", 144, 144, 56, 3),
                                conv("ir56.p", 144, 24, 56, act=False)]), True),
    "ir14k5": ("pw_dw_pw", chain([conv("ir14.e", 80, 480, 14), conv("ir14.d", 480, 480, 14, 5),
                                  conv("ir14.p", 480, 80, 14, act=False)]), True),
    "dwpw28": ("dw_pw", chain([conv("dp28.d", 144, 144, 56, 3, 2), conv("dp28.p", 144, 32, 28, act=False)]), False),
    "pwdw56": ("pw_dw", chain([conv("pd56.e", 16, 96, 112), conv("pd56.d", 96, 96, 112, 3, 2)]), False),
    "mlp256": ("pw_pw", chain([linear("mlp.1", 256, 96, 192), linear("mlp.2", 256, 192, 96)]), False),
    "pwpw7": ("pw_pw", chain([conv("pp7.1", 160, 960, 7), conv("pp7.2", 960, 160, 7, act=False)]), False),
}
#: Layers alone: the tile sweeps of the layer-by-layer kernels.
LAYERS: dict[str, Op] = {
    "dw112": conv("dw112", 32, 32, 112, 3),
    "dw28k5s2": conv("dw28k5s2", 240, 240, 28, 5, 2),
    "dw7": conv("dw7", 960, 960, 7, 3),
    "pw56": conv("pw56", 24, 144, 56),
    "pw14": conv("pw14", 384, 64, 14),
    "pw7w": conv("pw7w", 320, 1280, 7),
    "lin64": linear("lin64", 64, 240, 960),
    "lin256": linear("lin256", 256, 144, 432),
}
_MODES = (("fp32", "fp32"), ("fp32", "tf32"), ("fp16", "fp32"))
FULL = Design(configs=tuple(Config(d, p, b) for b in (1, 8) for d, p in _MODES), blocks=tuple(BLOCKS),
              layers=tuple(LAYERS), tiles=6)  # fmt: skip
QUICK = Design(configs=tuple(Config(d, p, 1) for d, p in _MODES) + (Config("fp32", "fp32", 8),),
               blocks=("ir56", "dwpw28", "pwdw56", "mlp256"), layers=("dw112", "dw7", "pw56", "pw7w", "lin64"),
               tiles=3)  # fmt: skip


# ---- the design ---------------------------------------------------------------------------------


def _spread_tiles(kind: str, ops: Sequence[Op], best: Tile, residual: bool, ctx: Context, count: int) -> list[Tile]:
    """Up to `count` tiles other than `best`: each thread count's tiles spread over predicted time
    (`validate.sweep_tiles` per thread count), then interleaved so that every block size comes first."""
    per = sweep_tiles(kind, ops, best, residual, ctx, count=max(2, count))
    threads = sorted({t.threads for t in per} | {best.threads})
    by_threads = [[t for t in per if t.threads == n] for n in threads]
    order = [t for rank in range(count) for group in by_threads if rank < len(group) for t in group[rank:rank + 1]]
    return order[:count]


def _block_items(name: str, cfg: Config, ctx: Context, search, count: int) -> list[Item]:
    kind, ops, residual = BLOCKS[name]
    ops = tuple(op.with_batch(cfg.batch) for op in ops)
    gid = f"{name}@{cfg.tag}"
    best = search.best(kind, ops, residual)
    if best.tile is None:
        return []
    common = {"kind": kind, "ops": ops, "group": gid, "residual": residual, "residual_from_input": residual}
    out = [Item(id=gid, role="group", steps=(Step(kind, ops, best.tile, residual),), planned=True, **common)]
    for j, t in enumerate(_spread_tiles(kind, ops, best.tile, residual, ctx, count)):
        out.append(Item(id=f"{gid}.t{j + 1}", role="tile", steps=(Step(kind, ops, t, residual),), **common))
    steps = []
    for j, op in enumerate(ops):
        last = residual and j == len(ops) - 1
        choice = search.best(op.kind, (op,), last)
        if choice.tile is None:
            return out
        steps.append(Step(op.kind, (op,), choice.tile, last))
    out.append(Item(id=f"{gid}.u", role="unfused", steps=tuple(steps), **common))
    return out


def _layer_items(name: str, cfg: Config, ctx: Context, search, count: int) -> list[Item]:
    op = LAYERS[name].with_batch(cfg.batch)
    gid = f"{name}@{cfg.tag}"
    best = search.best(op.kind, (op,), False)
    if best.tile is None:
        return []
    tiles = [best.tile, *_spread_tiles(op.kind, (op,), best.tile, False, ctx, count)]
    return [Item(id=gid if j == 0 else f"{gid}.t{j}", role="layer" if j == 0 else "layer_tile", kind=op.kind,
                 ops=(op,), steps=(Step(op.kind, (op,), t),), group=gid, planned=j == 0)
            for j, t in enumerate(tiles)]  # fmt: skip


def context(gpu: Any, cfg: Config, repeat: int = 30, warmup: int = 5) -> Context:
    """The validate context a config's items are planned and measured under."""
    return Context(gpu=gpu, dtype=cfg.dtype, batch=cfg.batch, precision=cfg.precision, objective="time",
                   repeat=repeat, warmup=warmup)  # fmt: skip


def design(gpu: Any, quick: bool = False) -> list[SweepItem]:
    """Every item of the sweep (QUICK or FULL) for spec `gpu`: tiles are chosen among those the
    current kernels can launch on it."""
    from fuseplanner.planning.search import TileSearch

    d = QUICK if quick else FULL
    out: list[SweepItem] = []
    for cfg in d.configs:
        ctx = context(gpu, cfg)
        search = TileSearch(gpu, cfg.dtype, cfg.batch, "time", "ours", cfg.precision)
        for name in d.blocks:
            out += [SweepItem(it, cfg) for it in _block_items(name, cfg, ctx, search, d.tiles)]
        for name in d.layers:
            out += [SweepItem(it, cfg) for it in _layer_items(name, cfg, ctx, search, d.tiles)]
    return out


# ---- records ------------------------------------------------------------------------------------


def _op_dict(op: Op) -> dict[str, Any]:
    return dataclasses.asdict(op)


def _op_from(d: dict[str, Any]) -> Op:
    fix = {k: tuple(tuple(x) if isinstance(x, list) else x for x in v) if isinstance(v, list) else v
           for k, v in d.items()}  # fmt: skip
    return Op(**fix)


def record(si: SweepItem, measured: dict[str, Any], check: dict | None, error: str | None) -> dict[str, Any]:
    """A JSON-ready record of one measured sweep item: its ops, launches, config and measurements."""
    it = si.item
    index = {op.name: i for i, op in enumerate(it.ops)}
    steps = [{"kind": s.kind, "members": [index[o.name] for o in s.ops], "tile": s.tile.as_dict(),
              "residual": s.residual} for s in it.steps]  # fmt: skip
    return {"id": it.id, "role": it.role, "group": it.group, "kind": it.kind, "launches": len(it.steps), "dtype": si.config.dtype,
            "precision": si.config.precision, "batch": si.config.batch, "residual": it.residual,
            "residual_from_input": it.residual_from_input, "ops": [_op_dict(o) for o in it.ops], "steps": steps,
            "measured": measured, "check": check, "error": error}  # fmt: skip


def record_item(rec: dict[str, Any]) -> SweepItem:
    """The sweep item a record was measured from."""
    ops = tuple(_op_from(d) for d in rec["ops"])
    steps = tuple(Step(s["kind"], tuple(ops[i] for i in s["members"]), Tile(**s["tile"]), bool(s["residual"]))
                  for s in rec["steps"])  # fmt: skip
    item = Item(id=rec["id"], role=rec["role"], kind=rec["kind"], ops=ops, steps=steps, group=rec.get("group"),
                residual=bool(rec["residual"]), residual_from_input=bool(rec.get("residual_from_input")))
    return SweepItem(item, Config(rec["dtype"], rec["precision"], int(rec["batch"])))


def records_to_samples(records: Iterable[dict[str, Any]]) -> list[fit_mod.Sample]:
    """The correctly measured records as fit samples (cold time; L2 bytes where counters were read)."""
    out = []
    for rec in records:
        m = rec.get("measured") or {}
        if rec.get("error") or not (rec.get("check") or {}).get("ok") or not m.get("time_cold_s"):
            continue
        si = record_item(rec)
        out.append(fit_mod.Sample(id=rec["id"], kind=rec["kind"], steps=si.item.steps, dtype=si.config.dtype,
                                  batch=si.config.batch, precision=si.config.precision, time_s=float(m["time_cold_s"]),
                                  gma_bytes=m.get("gma_bytes"), role=rec["role"], group=rec.get("group")))  # fmt: skip
    return out


def design_samples(gpu: Any, quick: bool = False) -> list[fit_mod.Sample]:
    """The sweep's items as samples with their predicted time as the 'measurement' (for the design
    matrix: what the sweep can identify before anything is measured)."""
    out = []
    for si in design(gpu, quick):
        c = si.config
        cost = steps_cost(si.item.steps, c.dtype, c.batch, gpu, c.precision)
        if cost is None:
            continue
        out.append(fit_mod.Sample(id=si.item.id, kind=si.item.kind, steps=si.item.steps, dtype=c.dtype, batch=c.batch,
                                  precision=c.precision, time_s=cost.time_s, gma_bytes=cost.gma_bytes,
                                  role=si.item.role, group=si.item.group))  # fmt: skip
    return out


# ---- identifiability ----------------------------------------------------------------------------


def probe_point(gpu: Any, names: Sequence[str]) -> Any:
    """`gpu` with each parameter of `names` that is off (0) set where the fit starts it (`PROBE_START`)."""
    from fuseplanner.validation.microbench import apply_measured

    return apply_measured(gpu, {n: PROBE_START[n] for n in names if not float(gpu.eff(n)) and n in PROBE_START})


def sensitivity(gpu: Any, samples: Sequence[fit_mod.Sample], names: Sequence[str], step: float = 0.05) -> np.ndarray:
    """The design matrix: rows are each sample's log predicted time, then each fused sample's log
    predicted L2 bytes; column j is its central difference in log(parameter j) (relative `step`),
    at `probe_point(gpu, names)`."""
    from fuseplanner.validation.microbench import apply_measured

    base = probe_point(gpu, names)
    fused = [i for i, s in enumerate(samples) if s.fused]

    def outputs(sp: Any) -> np.ndarray:
        p = np.array([fit_mod.predict(sp, s) for s in samples], dtype=float).reshape(-1, 2)
        return np.log(np.concatenate([p[:, 0], p[fused, 1]]))

    cols = []
    for n in names:
        v = float(base.eff(n))
        if n == THRESHOLD_FIELD:
            raise FusePlannerError(f"{n} is a decision rule, not a cost-model parameter: it has no sensitivity")
        up, down = apply_measured(base, {n: v * (1 + step)}), apply_measured(base, {n: v / (1 + step)})
        cols.append((outputs(up) - outputs(down)) / (2 * math.log1p(step)))
    return np.stack(cols, axis=1)


# ---- measuring (GPU) ------------------------------------------------------------------------------


def progress_bar(enabled: bool = True):
    """The sweep's rich progress bar (on stderr): item, bar, count, elapsed and remaining time."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,  # fmt: skip
    )

    return Progress(SpinnerColumn(), TextColumn("{task.description:<34}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=Console(stderr=True),
                    disable=not enabled)  # fmt: skip


def measure(gpu: Any, items: Sequence[SweepItem], repeat: int = 30, warmup: int = 5,
            progress: bool = True) -> list[dict[str, Any]]:  # fmt: skip
    """Run, check and time every item on the current GPU (`validate.measure_item`); one record each
    (`record`). Raises DeviceError without a usable CUDA device."""
    from fuseplanner.kernels import require_device
    from fuseplanner.validation.validate import measure_item

    cp = require_device()
    ctxs: dict[Config, Context] = {}
    records = []
    with progress_bar(progress) as bar:
        task = bar.add_task("micro-sweep", total=len(items))
        for i, si in enumerate(items):
            c = si.config
            ctx = ctxs.setdefault(c, context(gpu, c, repeat, warmup))
            bar.update(task, description=f"{si.item.id} ({si.item.kind})")
            ours = steps_cost(si.item.steps, c.dtype, c.batch, gpu, c.precision)
            measured, chk, err = measure_item(cp, si.item, ctx, i, ours.kernels if ours is not None else ())
            records.append(record(si, measured, chk, err))
            bar.advance(task)
    return records


def counters(gpu: Any, items: Sequence[SweepItem], records: list[dict[str, Any]], timeout_s: float = 300.0) -> str:
    """Add Nsight Compute L2 / DRAM counters to the records of items that ran, config by config;
    returns "ncu", or why there are none (the fit then keeps the spec's L2 fractions)."""
    import tempfile
    from pathlib import Path

    from fuseplanner.core.errors import DeviceError
    from fuseplanner.validation import ncu as ncu_mod
    from fuseplanner.validation.validate import _apply_traffic, profile_items

    for cfg in dict.fromkeys(si.config for si in items):
        runnable = [(si.item, r) for si, r in zip(items, records, strict=True) if si.config == cfg and not r["error"]]
        try:
            with tempfile.TemporaryDirectory(prefix="fuseplanner-sweep-") as tmp:
                traffic = profile_items([it for it, _ in runnable], context(gpu, cfg), Path(tmp), timeout_s)
        except (ncu_mod.CountersUnavailable, DeviceError) as exc:
            return f"no counters ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
        for (_, rec), cold, warm in zip(runnable, traffic["cold"], traffic["warm"], strict=True):
            _apply_traffic(rec, cold, warm)
    return "ncu"


def meta(gpu: Any, design_name: str, repeat: int, traffic: str) -> dict[str, Any]:
    """The ``meta`` of a sweep file: the device, versions, design, timing, where counters came from."""
    import datetime

    from fuseplanner.kernels import require_device
    from fuseplanner.validation.validate import _device_name, _versions

    cp = require_device()
    return {"gpu": getattr(gpu, "name", str(gpu)), "device_name": _device_name(cp), "versions": _versions(cp),
            "design": design_name, "timing": {"repeat": repeat, "statistic": "median", "clock": "CUDA events"},
            "traffic": traffic, "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}  # fmt: skip


def save(path: Any, meta_: dict[str, Any], records: list[dict[str, Any]]) -> None:
    """Write a sweep file (JSON, gzip-compressed when the name ends in .gz)."""
    import gzip
    import json
    from pathlib import Path

    p = Path(path)
    text = json.dumps({"schema": SCHEMA, "meta": meta_, "records": records}, default=float)
    p.parent.mkdir(parents=True, exist_ok=True)
    if p.name.endswith(".gz"):
        p.write_bytes(gzip.compress(text.encode()))
    else:
        p.write_text(text)


def load(path: Any) -> dict[str, Any]:
    """Read a sweep file written by `save`; FusePlannerError (one line) when it is not one."""
    import gzip
    import json
    from pathlib import Path

    p = Path(path)
    try:
        raw = p.read_bytes()
        data = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    except (OSError, ValueError, EOFError) as exc:
        raise FusePlannerError(f"cannot read sweep file {str(p)!r}: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise FusePlannerError(f"{p}: not a micro-sweep file (schema {SCHEMA}); write one with `fuseplanner calibrate --out FILE`")
    return data
