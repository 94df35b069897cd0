"""Accuracy statistics and plots from validation results (predicted versus measured).

Input is a `records.ValidationRun` (the typed records `fuseplanner.validation.validate` writes as
``records.jsonl``; `records.read_run` also reads the older ``results.json``); output is a
summary dict, ``report.md`` and PNG plots. Everything here is CPU-only and pure apart from file writes,
so a report can be regenerated anywhere with `report_from_results`.

The record types (`RunMeta`, `GroupInfo`, `Record`, `Prediction`, `Measurement`, `Check`) and
their file format are described in `fuseplanner.validation.records`. Functions taking a run or
records also accept documents and record dicts of the older format (converted by `records.as_run`).

Definitions: APE = |predicted - measured| / measured x 100; time is compared with the cold-L2 median
(the cost model predicts a cold L2). A fuse decision agrees when the planner fused a group and the best
measured fused time beats the measured unfused pair (or it did not fuse and the pair was faster). A
tile choice agrees when the planned tile's measured time is within `TILE_SLACK` of the best swept tile;
with layer sweeps (``tiles: layers``) a layer's tile group is its ``layer`` or ``member`` record (the
tile the planner gives it alone) and its ``layer_tile`` alternatives, judged the same way.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fuseplanner.core.ir import Tile
from fuseplanner.validation.records import (
    OLD_SCHEMA,
    Check,
    Measurement,
    Prediction,
    Record,
    RecordLike,
    RunLike,
    ValidationRun,
    as_records,
    as_run,
    read_run,
    write_run,
)

SCHEMA = OLD_SCHEMA
#: The records file `write_report` writes.
RECORDS_FILE = "records.jsonl"
#: Measured key compared with each predicted metric.
MEASURED_KEY = {"gma": "gma_bytes", "dram": "dram_bytes", "time": "time_cold_s"}
PREDICTED_KEY = {"gma": "gma_bytes", "dram": "dram_bytes", "time": "time_s"}
#: Issue targets: metric -> (median APE limit, 90th percentile limit or None), in percent.
TARGETS = {"gma": (10.0, 25.0), "dram": (20.0, None), "time": (25.0, None)}
DECISION_TARGET = 90.0
#: A planned tile counts as the right choice when within this factor of the measured best.
TILE_SLACK = 1.05
#: A fuse decision is a near tie when fused and unfused measured within this factor of each other:
#: run-to-run noise of a few percent can flip which one "wins" (reported beside the strict count).
TIE_SLACK = 1.05
MODEL_LABELS = {"ours": "ours", "ours_uncalibrated": "ours (uncalibrated spec)", "paper": "paper model"}
#: Roles of a layer swept alone: the tile the planner gives it (standalone layer, or group member alone)
#: and the alternatives.
LAYER_ROLES = ("layer", "member", "layer_tile")
PLOTS = ("traffic.png", "time.png", "roofline.png", "layers.png")


# ---- statistics -------------------------------------------------------------------------------------


def ape(predicted: float | None, measured: float | None) -> float | None:
    """Absolute percentage error of a prediction; None when either side is missing or measured <= 0."""
    if predicted is None or measured is None or not math.isfinite(predicted) or not measured > 0:
        return None
    return abs(predicted - measured) / measured * 100.0


def error_summary(errors: Iterable[float | None]) -> dict[str, float | int | None]:
    """n, median and 90th percentile (linear interpolation) of absolute percentage errors."""
    vals = np.array([e for e in errors if e is not None and math.isfinite(e)], dtype=float)
    if vals.size == 0:
        return {"n": 0, "median": None, "p90": None}
    return {"n": int(vals.size), "median": float(np.median(vals)), "p90": float(np.percentile(vals, 90))}


def measured_ok(rec: RecordLike) -> bool:
    """Whether a record ran and has measurements (no error)."""
    return as_records([rec])[0].ok


def pairs(records: Sequence[RecordLike], model: str, metric: str) -> list[tuple[float, float]]:
    """(predicted, measured) for every measured record that has both numbers."""
    out = []
    for r in as_records(records):
        pred = r.prediction(model)
        if not r.ok or pred is None:
            continue
        p = getattr(pred, PREDICTED_KEY[metric])
        m = getattr(r.measured, MEASURED_KEY[metric])
        if p is not None and m is not None and p > 0 and m > 0:
            out.append((float(p), float(m)))
    return out


def model_errors(records: Sequence[RecordLike], model: str, metric: str) -> dict[str, float | int | None]:
    """Error summary of one model on one metric ("gma", "dram", "time") over all records."""
    return error_summary(ape(p, m) for p, m in pairs(records, model, metric))


def errors_by_kind(records: Sequence[RecordLike], model: str, metric: str) -> dict[str, dict]:
    """Error summary per kernel kind (where a model is wrong, by kind)."""
    recs = as_records(records)
    kinds = sorted({r.kind for r in recs})
    return {k: model_errors([r for r in recs if r.kind == k], model, metric) for k in kinds}


def _spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    from scipy.stats import spearmanr

    if len(x) < 3 or len(set(x)) < 2 or len(set(y)) < 2:
        return None
    rho = spearmanr(x, y).statistic
    return None if rho is None or not math.isfinite(rho) else float(rho)


def _fused_records(records: Sequence[Record], group: str) -> list[Record]:
    return [r for r in records if r.group == group and r.role in ("group", "tile") and r.ok]


def _layer_records(records: Sequence[Record], group: str) -> list[Record]:
    return [r for r in records if r.group == group and r.role in LAYER_ROLES and r.ok]


def _tile_records(records: Sequence[Record], group: str) -> list[Record]:
    """The measured tiles of a fused group, or of a layer swept alone."""
    return _fused_records(records, group) or _layer_records(records, group)


def rank_correlation(records: Sequence[RecordLike]) -> dict[str, Any]:
    """Spearman rho of predicted vs measured time across each group's (or swept layer's) tiles (>= 3).

    Ours ranks by predicted time; the paper model predicts no time, so it ranks by its GMA (how it
    chooses tiles).
    """
    records = as_records(records)
    groups = sorted({r.group for r in records if r.group})
    per: dict[str, dict[str, float | int | None]] = {}
    for g in groups:
        recs = [r for r in _tile_records(records, g) if r.cold_s]
        if len(recs) < 3:
            continue
        meas = [r.cold_s for r in recs]
        entry: dict[str, float | int | None] = {"tiles": len(recs)}
        for model, key in (("ours", "time_s"), ("paper", "gma_bytes")):
            pred = [getattr(r.prediction(model), key, None) for r in recs]
            ok = [(p, m) for p, m in zip(pred, meas, strict=True) if p is not None]
            entry[model] = _spearman([p for p, _ in ok], [m for _, m in ok]) if len(ok) == len(recs) else None
        per[g] = entry

    def med(model: str) -> float | None:
        vals = [v[model] for v in per.values() if v.get(model) is not None]
        return float(np.median(vals)) if vals else None

    return {"groups": per, "median_ours": med("ours"), "median_paper": med("paper")}


def decisions(results: RunLike) -> dict[str, Any]:
    """Planner decisions (fuse or not, tile) against the measured best, per group and overall."""
    run = as_run(results)
    records = run.records
    per: dict[str, dict[str, Any]] = {}
    for g, info in run.groups.items():
        fused = _fused_records(records, g)
        unfused = [r for r in records if r.group == g and r.role == "unfused" and r.ok]
        if not fused or not unfused:
            continue
        t_fused = min(r.cold_s for r in fused)
        t_unfused = unfused[0].cold_s
        entry: dict[str, Any] = {
            "planner_fused": info.planner_fused,
            "best_fused_s": t_fused,
            "unfused_s": t_unfused,
            "fusion_wins": t_fused < t_unfused,
        }
        entry["fuse_agrees"] = entry["planner_fused"] == entry["fusion_wins"]
        planned = [r for r in fused if r.planned]
        if len(fused) >= 2 and planned:
            t_planned = planned[0].cold_s
            entry["planned_tile_s"] = t_planned
            entry["tile_is_best"] = t_planned <= t_fused
            entry["tile_agrees"] = t_planned <= TILE_SLACK * t_fused
        # what the plan's choice (fuse at the planned tile, or not) costs over the best measured option
        chosen = (planned[0].cold_s if planned else t_fused) if entry["planner_fused"] else t_unfused
        entry["chosen_s"], entry["best_s"] = chosen, min(t_fused, t_unfused)
        per[g] = entry

    def rate(key: str) -> dict[str, float | int | None]:
        vals = [e[key] for e in per.values() if key in e]
        return {"n": len(vals), "percent": 100.0 * sum(vals) / len(vals) if vals else None}

    misses = [e for e in per.values() if not e["fuse_agrees"]]
    ties = {"disagree": len(misses),
            "near_ties": sum(1 for e in misses if max(e["best_fused_s"], e["unfused_s"])
                             <= TIE_SLACK * min(e["best_fused_s"], e["unfused_s"]))}  # fmt: skip
    regret = {"n": len(per), "over_5pct": sum(1 for e in per.values() if e["chosen_s"] > 1.05 * e["best_s"]),
              "time_lost_percent": _time_lost(per.values())}
    return {"groups": per, "fuse": rate("fuse_agrees"), "tile": rate("tile_agrees"),
            "tile_exact": rate("tile_is_best"), "regret": regret, "ties": ties,
            "layer_tile": layer_tile_choices(records)}


def _time_lost(entries: Iterable[Mapping]) -> float | None:
    """Percent more time the chosen options (`chosen_s`) take than the best measured ones (`best_s`)."""
    entries = list(entries)
    chosen, best = sum(e["chosen_s"] for e in entries), sum(e["best_s"] for e in entries)
    return 100.0 * (chosen - best) / best if best else None


def layer_tile_choices(records: Sequence[RecordLike], model: str | None = None) -> dict[str, Any]:
    """For each layer swept alone (a ``layer`` or ``member`` record and its ``layer_tile`` alternatives): is the tile
    the planner gives it within `TILE_SLACK` of the best measured, and what it costs over that best. With
    `model` (e.g. ``"ours"`` after re-predicting the records with another spec), the chosen tile is instead
    the measured one that model predicts fastest: the choice that spec would make among the measured tiles."""
    records = as_records(records)
    per: dict[str, dict[str, float | bool]] = {}
    for g in sorted({r.group for r in records if r.role == "layer_tile" and r.group}):
        recs = _layer_records(records, g)
        chosen = [r for r in recs if r.role != "layer_tile"]
        if model is not None:
            timed = [r for r in recs if getattr(r.prediction(model), "time_s", None)]
            chosen = [min(timed, key=lambda r: r.predicted[model].time_s)] if timed else []
        if not chosen or len(recs) < 2:
            continue
        t_chosen = chosen[0].cold_s
        t_best = min(r.cold_s for r in recs)
        per[g] = {"chosen_s": t_chosen, "best_s": t_best, "agrees": t_chosen <= TILE_SLACK * t_best}
    n = len(per)
    return {"layers": per, "n": n, "percent": 100.0 * sum(e["agrees"] for e in per.values()) / n if n else None,
            "time_lost_percent": _time_lost(per.values())}


def occupancy(records: Sequence[RecordLike]) -> dict[str, Any]:
    """Blocks per SM the cost model assumed against those the compiled kernels allow (records that
    carry `measured.kernels`: registers, local memory and shared memory of every launch), per kernel
    kind, and our model's median predicted/measured time of the records whose launches all got at least
    the modelled blocks per SM against those where some got fewer."""
    per: dict[str, dict[str, Any]] = {}
    ratio: dict[str, list[float]] = {"as_modelled": [], "fewer": []}
    for r in as_records(records):
        if not r.ok:
            continue
        ks = [k for k in r.measured.kernels or () if k.model_blocks_per_sm is not None]
        if not ks:
            continue
        short = False
        for k in ks:
            e = per.setdefault(k.kind, {"n": 0, "fewer": 0, "spills": 0, "regs_ratio": []})
            e["n"] += 1
            e["regs_ratio"].append(k.regs / k.model_regs)
            if k.blocks_per_sm < k.model_blocks_per_sm:
                e["fewer"] += 1
                short = True
            e["spills"] += k.local_bytes > 0
        t = getattr(r.prediction("ours"), "time_s", None)
        if t and r.cold_s:
            ratio["fewer" if short else "as_modelled"].append(t / r.cold_s)
    for e in per.values():
        e["regs_ratio_median"] = float(np.median(e.pop("regs_ratio")))
    total = {key: sum(e[key] for e in per.values()) for key in ("n", "fewer", "spills")}
    return {**total, "kinds": dict(sorted(per.items())),
            "time_ratio": {k: (float(np.median(v)) if v else None) for k, v in ratio.items()},
            "records": {k: len(v) for k, v in ratio.items()}}


def models_of(results: RunLike) -> list[str]:
    """Prediction models present in the results, ours first."""
    run = as_run(results)
    found: set[str] = set(run.meta.models)
    for r in run.records:
        found.update(r.predicted)
    order = {"ours": 0, "ours_uncalibrated": 1, "paper": 2}
    return sorted(found, key=lambda m: (order.get(m, 9), m))


def summarize(results: RunLike) -> dict[str, Any]:
    """All statistics of a run: errors per model and metric, ranks, decisions, targets."""
    results = as_run(results)
    records = results.records
    models = models_of(results)
    errors = {m: {metric: model_errors(records, m, metric) for metric in TARGETS} for m in models}
    checks = [r.check for r in records if r.check]
    summary = {
        "records": len(records),
        "failed": sum(1 for r in records if r.error),
        "correct": sum(1 for c in checks if c.ok),
        "checked": len(checks),
        "models": models,
        "errors": errors,
        "errors_by_kind": {m: {metric: errors_by_kind(records, m, metric) for metric in TARGETS} for m in models},
        "rank": rank_correlation(records),
        "decisions": decisions(results),
        "occupancy": occupancy(records),
    }
    summary["targets"] = targets(summary)
    return summary


def targets(summary: Mapping) -> list[dict[str, Any]]:
    """The issue's accuracy targets for our model, each with the achieved value and the shortfall."""
    out = []
    ours = summary["errors"].get("ours", {})
    for metric, (med_lim, p90_lim) in TARGETS.items():
        e = ours.get(metric, {})
        for stat, limit in (("median", med_lim), ("p90", p90_lim)):
            if limit is None:
                continue
            v = e.get(stat)
            out.append({"what": f"{metric.upper()} {stat} APE", "limit": limit, "value": v,
                        "met": None if v is None else v <= limit,
                        "miss_by": None if v is None or v <= limit else v - limit, "unit": "%"})
    d = summary["decisions"]["fuse"]["percent"]
    out.append({"what": "fuse decisions agree", "limit": DECISION_TARGET, "value": d,
                "met": None if d is None else d >= DECISION_TARGET,
                "miss_by": None if d is None or d >= DECISION_TARGET else DECISION_TARGET - d, "unit": "%"})
    return out


# ---- plots ------------------------------------------------------------------------------------------


def _figure(width: float = 6.0, height: float = 5.0, ncols: int = 1):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols, height), layout="constrained")
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(1, ncols, i + 1) for i in range(ncols)]
    return fig, axes


_STYLE = {"ours": ("o", "tab:blue"), "ours_uncalibrated": ("s", "tab:green"), "paper": ("x", "tab:red")}


def _identity(ax, lo: float, hi: float, band: float = 0.10) -> None:
    xs = np.geomspace(lo, hi, 50)
    ax.plot(xs, xs, "k-", lw=1, label="y = x")
    ax.fill_between(xs, xs * (1 - band), xs * (1 + band), color="0.85", label=f"±{band:.0%}")
    _log_axes(ax)
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)


def _log_axes(ax) -> None:
    from matplotlib.ticker import NullFormatter

    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_minor_formatter(NullFormatter())


def _scatter_panel(ax, records: Sequence[Record], models: Sequence[str], metric: str, scale: float,
                   unit: str, title: str) -> None:
    data = {m: pairs(records, m, metric) for m in models}
    vals = [v * scale for pts in data.values() for pair in pts for v in pair]
    if not vals:
        ax.text(0.5, 0.5, f"no measured {metric.upper()}\n(counter-free run: no traffic counters)",
                ha="center", va="center", transform=ax.transAxes)
        ax.set_title(title)
        ax.set_axis_off()
        return
    lo, hi = min(vals) / 1.5, max(vals) * 1.5
    _identity(ax, lo, hi)
    for m, pts in data.items():
        if not pts:
            continue
        marker, color = _STYLE.get(m, ("^", "tab:gray"))
        ax.scatter([p[1] * scale for p in pts], [p[0] * scale for p in pts], marker=marker, color=color,
                   s=22, label=f"{MODEL_LABELS.get(m, m)} (n={len(pts)})")
    ax.set_xlabel(f"measured ({unit})")
    ax.set_ylabel(f"predicted ({unit})")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")


def plot_traffic(results: RunLike, path: Path) -> Path:
    """Predicted vs measured GMA (L2) and DRAM bytes, log-log with y = x and a ±10% band."""
    run = as_run(results)
    fig, (ax1, ax2) = _figure(ncols=2)
    models = [m for m in models_of(run) if m != "ours_uncalibrated"]
    _scatter_panel(ax1, run.records, models, "gma", 1e-6, "MB", "GMA: SM <-> L2 traffic")
    _scatter_panel(ax2, run.records, models, "dram", 1e-6, "MB", "DRAM traffic (cold L2)")
    fig.savefig(path, dpi=110)
    return path


def plot_time(results: RunLike, path: Path) -> Path:
    """Predicted vs measured kernel time (cold L2 medians), log-log with y = x and a ±10% band."""
    run = as_run(results)
    fig, (ax,) = _figure()
    models = models_of(run)
    _scatter_panel(ax, run.records, models, "time", 1e6, "µs", "Kernel time (cold L2, median)")
    fig.savefig(path, dpi=110)
    return path


def _traffic_bytes(rec: Record) -> tuple[float | None, str]:
    m = rec.measured.dram_bytes
    if m:
        return m, "measured"
    return getattr(rec.prediction("ours"), "dram_bytes", None), "modelled"


def plot_roofline(results: RunLike, path: Path) -> Path:
    """Every kernel on a DRAM roofline: FLOPs per DRAM byte vs achieved FLOP/s (cold-L2 time)."""
    run = as_run(results)
    fig, (ax,) = _figure(7.0, 5.0)
    peaks = run.meta.peaks
    pts: dict[str, list[tuple[float, float]]] = {}
    source = set()
    for r in run.records:
        if not r.ok or not r.flops or not r.cold_s:
            continue
        b, src = _traffic_bytes(r)
        if not b:
            continue
        source.add(src)
        pts.setdefault(r.role, []).append((r.flops / b, r.flops / r.cold_s))
    allx = [p[0] for v in pts.values() for p in v] or [0.1, 100.0]
    lo, hi = min(allx) / 3, max(allx) * 3
    xs = np.geomspace(lo, hi, 100)
    flops = peaks.flops
    for key, style, label in (("dram_Bps", "k-", "DRAM"), ("l2_Bps", "k--", "L2")):
        bw = getattr(peaks, key)
        if bw:
            ys = xs * bw if not flops else np.minimum(xs * bw, flops)
            ax.plot(xs, ys, style, lw=1, label=f"{label} {bw / 1e12:.2f} TB/s roof")
    colors = {"layer": "tab:gray", "group": "tab:blue", "tile": "tab:cyan", "unfused": "tab:orange",
              "member": "tab:brown", "layer_tile": "tab:olive"}
    for role, p in pts.items():
        ax.scatter([x for x, _ in p], [y for _, y in p], s=20, color=colors.get(role, "tab:purple"),
                   label=f"{role} (n={len(p)})")
    _log_axes(ax)
    ax.set_xlabel(f"operational intensity (FLOP per DRAM byte, {'/'.join(sorted(source)) or 'n/a'})")
    ax.set_ylabel("achieved FLOP/s (cold-L2 median time)")
    ax.set_title("Roofline" + (f" (compute peak {flops / 1e12:.0f} TFLOP/s)" if flops else ""))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=110)
    return path


def layer_rows(results: RunLike) -> list[dict[str, Any]]:
    """Per planned layer or fused group, in model order: label, unfused time and fused time (cold, s).

    Candidates the planner did not fuse are left out (the decision table covers them).
    """
    run = as_run(results)
    rows = []
    by_group: dict[str, dict[str, Any]] = {}
    rejected = {g for g, info in run.groups.items() if not info.planner_fused}
    for r in run.records:
        if not r.ok or r.group in rejected:
            continue
        t = r.cold_s
        if r.role == "layer":
            rows.append({"label": r.nodes[0] if len(r.nodes) == 1 else r.id, "kind": r.kind,
                         "unfused_s": t, "fused_s": None})
        elif r.role in ("group", "unfused"):
            g = by_group.get(r.group)
            if g is None:
                g = by_group[r.group] = {"label": f"{r.group} {r.kind if r.role == 'group' else ''}",
                                         "kind": r.kind, "unfused_s": None, "fused_s": None}
                rows.append(g)
            if r.role == "group":
                g["fused_s"], g["kind"] = t, r.kind
                g["label"] = f"{r.group} {r.kind}"
            else:
                g["unfused_s"] = t
    return rows


def plot_layers(results: RunLike, path: Path) -> Path:
    """Per-layer bars of measured (cold) time: unfused (layer by layer) beside fused (planned)."""
    rows = layer_rows(results)
    fig, (ax,) = _figure(max(6.0, 0.32 * len(rows) + 2), 4.5)
    x = np.arange(len(rows))
    un = [(r["unfused_s"] or 0) * 1e6 for r in rows]
    fu = [(r["fused_s"] or 0) * 1e6 for r in rows]
    ax.bar(x - 0.2, un, 0.4, label="unfused (layer by layer)", color="tab:orange")
    ax.bar(x + 0.2, fu, 0.4, label="fused (planned tile)", color="tab:blue")
    ax.set_xticks(x, [r["label"] for r in rows], rotation=90, fontsize=7)
    ax.set_ylabel("measured time, cold L2 (µs)")
    ax.set_title("Unfused vs fused measured time per layer / group")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.savefig(path, dpi=110)
    return path


def write_plots(results: RunLike, out_dir: Path) -> list[Path]:
    """Write every plot into `out_dir`; returns the paths (see `PLOTS`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return [
        plot_traffic(results, out_dir / "traffic.png"),
        plot_time(results, out_dir / "time.png"),
        plot_roofline(results, out_dir / "roofline.png"),
        plot_layers(results, out_dir / "layers.png"),
    ]


# ---- markdown ---------------------------------------------------------------------------------------


def pct(v: float | None) -> str:
    """A percentage with one decimal, "n/a" without a value."""
    return "n/a" if v is None else f"{v:.1f}%"


def _num(v: float | None, scale: float = 1.0, fmt: str = ".2f") -> str:
    return "-" if v is None else format(v * scale, fmt)


def _stats_table(summary: Mapping) -> list[str]:
    models = summary["models"]
    head = "| metric | " + " | ".join(f"{MODEL_LABELS.get(m, m)} median / p90 (n)" for m in models) + " |"
    lines = [head, "|---|" + "---|" * len(models)]
    for metric in TARGETS:
        cells = []
        for m in models:
            e = summary["errors"][m][metric]
            cells.append("n/a" if not e["n"] else f"{pct(e['median'])} / {pct(e['p90'])} ({e['n']})")
        lines.append(f"| {metric.upper()} | " + " | ".join(cells) + " |")
    return lines


def _kind_table(summary: Mapping) -> list[str]:
    by = summary["errors_by_kind"].get("ours", {})
    kinds = sorted({k for metric in by.values() for k in metric})
    lines = ["| kind | GMA median | DRAM median | time median | n (time) |", "|---|---|---|---|---|"]
    for k in kinds:
        g, d, t = (by[metric].get(k, {"median": None, "n": 0}) for metric in ("gma", "dram", "time"))
        lines.append(f"| {k} | {pct(g['median'])} | {pct(d['median'])} | {pct(t['median'])} | {t['n']} |")
    return lines


def _target_lines(summary: Mapping) -> list[str]:
    lines = ["| target | limit | achieved | met |", "|---|---|---|---|"]
    for t in summary["targets"]:
        op = ">=" if "decisions" in t["what"] else "<="
        met = "n/a" if t["met"] is None else ("yes" if t["met"] else f"no (by {t['miss_by']:.1f} points)")
        lines.append(f"| {t['what']} | {op} {t['limit']:.0f}% | {pct(t['value'])} | {met} |")
    return lines


def _record_lines(records: Sequence[Record]) -> list[str]:
    lines = ["| id | role | kind | nodes | tile(s) | pred. time ours (µs) | meas. cold / warm (µs) | "
             "pred. GMA ours / paper (MB) | meas. GMA (MB) | pred. DRAM (MB) | meas. DRAM (MB) | rel. err | note |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    none = Prediction()
    for r in records:
        ours, paper = r.prediction("ours") or none, r.prediction("paper") or none
        m = r.measured or Measurement()
        tiles = ", ".join(tile_str(t) for t in r.tiles)
        chk = r.check or Check(ok=True)
        note = r.error or ("" if chk.ok else "WRONG RESULT")
        lines.append(
            f"| {r.id} | {r.role}{' *' if r.planned else ''} | {r.kind} | {' '.join(r.nodes)} | "
            f"{tiles} | {_num(ours.time_s, 1e6)} | "
            f"{_num(m.time_cold_s, 1e6)} / {_num(m.time_warm_s, 1e6)} | "
            f"{_num(ours.gma_bytes, 1e-6, '.3f')} / {_num(paper.gma_bytes, 1e-6, '.3f')} | "
            f"{_num(m.gma_bytes, 1e-6, '.3f')} | {_num(ours.dram_bytes, 1e-6, '.3f')} | "
            f"{_num(m.dram_bytes, 1e-6, '.3f')} | {_num(chk.rel_err, 1, '.1e')} | {note} |"
        )
    return lines


def tile_str(t: Tile | None) -> str:
    """A recorded tile as THxTW/fTF/cTC/tTHREADS ("-" without one)."""
    return "-" if t is None else str(t)


def _decision_lines(summary: Mapping) -> list[str]:
    d = summary["decisions"]
    lines = [
        f"- Fuse / no-fuse decisions agreeing with measurement: {pct(d['fuse']['percent'])} of "
        f"{d['fuse']['n']} groups (fused best measured time vs the measured unfused pair)"
        + (f"; {d['ties']['near_ties']} of the {d['ties']['disagree']} disagreeing groups are near ties (fused and "
           f"unfused measured within {TIE_SLACK - 1:.0%})." if d.get("ties", {}).get("disagree") else "."),
        f"- Planned tile within {TILE_SLACK - 1:.0%} of the measured best swept tile: "
        f"{pct(d['tile']['percent'])} of {d['tile']['n']} groups; exactly the best: "
        f"{pct(d['tile_exact']['percent'])}.",
    ]
    rg = d.get("regret")
    if rg and rg["n"]:
        lines.append(f"- What the plan's choices cost (fuse or not, and the planned tile, against the best measured "
                     f"option of each group): {pct(rg['time_lost_percent'])} more time over the {rg['n']} groups; "
                     f"{rg['over_5pct']} groups lose more than 5%.")
    lt = d.get("layer_tile") or {}
    if lt.get("n"):
        lines.append(f"- Layers swept alone: the tile the planner gives a layer is within {TILE_SLACK - 1:.0%} of its "
                     f"measured best in {pct(lt['percent'])} of {lt['n']} layers; those tiles take "
                     f"{pct(lt['time_lost_percent'])} more time than the best measured ones.")
    rk = summary["rank"]
    lines.append(f"- Spearman rank correlation of predicted vs measured time across each group's tiles: "
                 f"median {_num(rk['median_ours'])} (ours, predicted time), {_num(rk['median_paper'])} "
                 f"(paper model, ranking by its GMA) over {len(rk['groups'])} groups with >= 3 tiles.")
    if d["groups"]:
        lines += ["", "| group | planner fused | best fused (µs) | unfused (µs) | fusion wins | agrees | "
                  "planned tile (µs) | tile ok |", "|---|---|---|---|---|---|---|---|"]
        for g, e in d["groups"].items():
            lines.append(
                f"| {g} | {e['planner_fused']} | {_num(e['best_fused_s'], 1e6)} | {_num(e['unfused_s'], 1e6)} | "
                f"{e['fusion_wins']} | {e['fuse_agrees']} | {_num(e.get('planned_tile_s'), 1e6)} | "
                f"{e.get('tile_agrees', '-')} |")
    return lines


def _occupancy_lines(summary: Mapping) -> list[str]:
    o = summary.get("occupancy") or {}
    if not o.get("n"):
        return []
    tr, nr = o["time_ratio"], o["records"]
    lines = ["", "## Occupancy: modelled vs compiled", "",
             f"Registers and shared memory of every launch as compiled (CuPy kernel attributes), and the blocks "
             f"per SM they allow, against the cost model's assumption: {o['fewer']} of {o['n']} launches get fewer "
             f"blocks per SM than modelled; {o['spills']} use local memory (spills).", "",
             "| kind | launches | compiled / modelled registers (median) | fewer blocks per SM | with spills |",
             "|---|---|---|---|---|"]
    for kind, e in o["kinds"].items():
        lines.append(f"| {kind} | {e['n']} | {e['regs_ratio_median']:.2f} | {e['fewer']} | {e['spills']} |")
    lines += ["", f"Our model's median predicted / measured time: {_num(tr['as_modelled'])} over {nr['as_modelled']} "
              f"records whose launches all got the modelled blocks per SM (or more), {_num(tr['fewer'])} over "
              f"{nr['fewer']} records with a launch that got fewer."]
    return lines


def _q(v: Any) -> Any:
    return "?" if v is None else v


def render_markdown(results: RunLike, summary: Mapping, plots: Sequence[Path]) -> str:
    """The report as markdown: setup, targets, error statistics, decisions, every record, plots."""
    run = as_run(results)
    meta = run.meta
    counter_free = meta.traffic_source != "ncu"
    lines = [
        f"# Validation: {_q(meta.model)} on {meta.device_name or _q(meta.gpu)}",
        "",
        f"- GPU spec `{_q(meta.gpu)}`, dtype {_q(meta.dtype)} (precision "
        f"{meta.precision}), batch {_q(meta.batch)}, tiles {_q(meta.tiles)}.",
        f"- Timing: CUDA events, {meta.timing.statistic} of "
        f"{_q(meta.timing.repeat)} runs after {_q(meta.timing.warmup)} "
        "warm-up runs; cold = L2 flushed before each run, warm = not flushed.",
        f"- Traffic: {_q(meta.traffic_source)}. {meta.traffic_note}".rstrip(),
        f"- Records: {summary['records']} ({summary['failed']} failed to run); results correct against the "
        f"float64 reference: {summary['correct']} of {summary['checked']}.",
    ]
    if meta.command:
        lines.append(f"- Command: `{meta.command}`")
    if counter_free:
        lines += ["", "**Counter-free run**: no hardware traffic counters were read, so GMA and DRAM errors "
                  "cannot be computed; the roofline places kernels by *modelled* DRAM bytes over measured "
                  "time (an effective bandwidth, not a measurement of traffic)."]
    lines += ["", "## Targets (our model)", "", *_target_lines(summary),
              "", "## Absolute percentage error, our model vs the paper's", "", *_stats_table(summary),
              "", "The paper's model counts elements (converted to bytes with the dtype and batch); it has no "
              "caches (its DRAM equals its GMA) and no time (its time is the bandwidth floor GMA / DRAM "
              "bandwidth, without a launch term).",
              "", "### Our model's median error by kernel kind", "", *_kind_table(summary),
              "", "## Decisions", "", *_decision_lines(summary), *_occupancy_lines(summary),
              "", "## Plots", ""]
    lines += [f"![{p.stem}]({p.name})" for p in plots]
    lines += ["", "## Every measurement (* = the planner's choice)", "", *_record_lines(run.records), ""]
    return "\n".join(lines)


def write_report(results: RunLike, out_dir: str | Path, source: str | Path | None = None) -> dict[str, Any]:
    """Write the records (`RECORDS_FILE`), ``report.md`` and the PNG plots into `out_dir`; returns the
    summary. `source`: the file these results were read from; it is never overwritten."""
    run = as_run(results)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(run)
    target = out / RECORDS_FILE
    if source is None or not (target.exists() and target.resolve() == Path(source).resolve()):
        write_run(run, target)
    plots = write_plots(run, out)
    (out / "report.md").write_text(render_markdown(run, summary, plots))
    return summary


def load_results(path: str | Path) -> ValidationRun:
    """The run in a records file or an older results.json, plain or gzip-compressed (`records.read_run`)."""
    return read_run(path)


def report_from_results(results_path: str | Path, out_dir: str | Path) -> dict[str, Any]:
    """Regenerate the records file, ``report.md`` and plots in `out_dir` from a saved run."""
    return write_report(read_run(results_path), out_dir, source=results_path)
