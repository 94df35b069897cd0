"""Whole-model accuracy pooled per model set: the table `docs/validation.md` leads with.

Per (set, dtype/precision, batch), over `validate --whole` results: the end-to-end |error| of the
graph-context prediction (median and p90 over the planned and the unfused run of every model), how
many models' predicted saving is within 3 points of the measured one, and the per-step |error|
(median / p90 over all matched steps) of fuseplanner's own kernels (dw/pw/linear and the fused kinds)
and of the operator library's steps. The set is "held-out" for the models of `models/holdout.toml`
(no fitted value was chosen on them), "bundled" otherwise. A second table gives, per (set, mode, batch),
the signed median step error of each kernel kind and of the library steps: where a bias sits.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from fuseplanner.core.kinds import KERNEL_KINDS

#: The largest saving gap (points of the unfused run) the whole-model target allows.
SAVING_GAP_POINTS = 3.0
_OWN = frozenset(KERNEL_KINDS)  # dw/pw/linear and the fused kinds


def model_set(model: str, held_out: frozenset[str]) -> str:
    return "held-out" if model in held_out else "bundled"


def abs_stats(values: Sequence[float]) -> str:
    """Signed fractional errors as "median / p90" of their absolute values in percent ("n/a" for none)."""
    if not len(values):
        return "n/a"
    a = 100 * np.abs(np.asarray(values))
    return f"{np.median(a):.1f} / {np.percentile(a, 90):.1f}"


def by_set(items: Iterable, held_out: frozenset[str]) -> Iterator[tuple[str, str, int, list]]:
    """(set, "dtype/precision", batch, items) for each group of `items` (anything with model, dtype,
    precision and batch), bundled before held-out, then by mode and batch."""
    groups: dict[tuple[str, str, int], list] = defaultdict(list)
    for r in items:
        groups[(model_set(r.model, held_out), f"{r.dtype}/{r.precision}", r.batch)].append(r)
    for key in sorted(groups):
        yield (*key, groups[key])


_SET_ORDER = {"bundled": 0, "held-out": 1, "all": 2}


def pooled(pairs: Iterable[tuple], held_out: frozenset[str], all_models: bool = False
           ) -> list[tuple[str, str, str, list]]:  # fmt: skip
    """(set, "dtype/precision", batch, items) pooling the `items` of each (result, items) pair: per
    (set, mode, batch), then per set over every mode and batch ("all", "all"); with `all_models` also
    the set "all" of every model. Bundled, held-out, all; within a set the "all" row last."""
    groups: dict[tuple[str, str, str], list] = defaultdict(list)
    for r, items in pairs:
        for kind in (model_set(r.model, held_out), *(("all",) if all_models else ())):
            for key in ((kind, f"{r.dtype}/{r.precision}", str(r.batch)), (kind, "all", "all")):
                groups[key].extend(items)
    ordered = sorted(groups.items(), key=lambda g: (_SET_ORDER[g[0][0]], g[0][1] == "all", g[0]))
    return [(*key, items) for key, items in ordered]


def summary_rows(results: Sequence, held_out: frozenset[str]) -> list[tuple[str, ...]]:
    """One row per (set, mode, batch), then one per set over all of them ("all"): set, mode, batch,
    results, end-to-end median / p90 (%), savings within the gap, own-kernel steps median / p90 (%),
    library steps median / p90 (%)."""
    rows = []
    for kind, mode, batch, rs in pooled(((r, [r]) for r in results), held_out):
        e2e = [e for r in rs for e in (r.error_planned, r.error_unfused)]
        within = sum(abs(r.saving_gap_points) <= SAVING_GAP_POINTS for r in rs)
        own = [s.error for r in rs for s in r.steps if s.error is not None and s.kind in _OWN]
        lib = [s.error for r in rs for s in r.steps if s.error is not None and s.kind not in _OWN]
        rows.append((kind, mode, batch, str(len(rs)), abs_stats(e2e), f"{within} of {len(rs)}", abs_stats(own),
                     abs_stats(lib)))  # fmt: skip
    return rows


def signed_median(values: Sequence[float]) -> str:
    """Signed fractional errors as "median% (count)" ("" for none)."""
    return f"{100 * np.median(values):+.1f} ({len(values)})" if len(values) else ""


def kind_rows(results: Sequence, held_out: frozenset[str]) -> list[tuple[str, ...]]:
    """Per (set, mode, batch): the signed median step error (predicted / measured - 1) and the step
    count of each kernel kind, then of the library steps: where a bias sits (a positive median is a
    kind predicted slower than it runs)."""
    rows = []
    for kind, mode, batch, rs in by_set(results, held_out):
        errors: dict[str, list[float]] = defaultdict(list)
        for r in rs:
            for st in r.steps:
                if st.error is not None:
                    errors[st.kind if st.kind in _OWN else "library"].append(st.error)
        rows.append((kind, mode, str(batch), *(signed_median(errors[k]) for k in (*KERNEL_KINDS, "library"))))
    return rows


def signed_pct(x: float | None) -> str:
    """A signed fraction as "+12.3%" ("n/a" for None)."""
    return "n/a" if x is None else f"{100 * x:+.1f}%"


def model_rows(results: Sequence, held_out: frozenset[str]) -> list[tuple[str, ...]]:
    """One row per result, bundled before held-out, then by mode, batch and model: set, model, mode,
    batch, measured / predicted / error of the planned and of the unfused run (us), the measured and
    predicted saving (% of the unfused run), their gap (points) and the per-step |error| median / p90."""
    rows = []
    for kind, mode, batch, rs in by_set(results, held_out):
        for r in sorted(rs, key=lambda r: r.model):
            steps = "n/a" if r.step_error_median is None else (
                f"{100 * r.step_error_median:.1f}% / {100 * r.step_error_p90:.1f}%")  # fmt: skip
            rows.append((kind, r.model, mode, str(batch), f"{r.measured_planned.median_s * 1e6:.1f}",
                         f"{r.predicted_planned_s * 1e6:.1f}", signed_pct(r.error_planned),
                         f"{r.measured_unfused.median_s * 1e6:.1f}", f"{r.predicted_unfused_s * 1e6:.1f}",
                         signed_pct(r.error_unfused), f"{100 * r.measured_saving:.1f}%",
                         f"{100 * r.predicted_saving:.1f}%", f"{r.saving_gap_points:+.1f}", steps))  # fmt: skip
    return rows


MODEL_HEAD = ("| set | model | dtype/precision | batch | measured planned us | predicted | error | measured unfused us | "
              "predicted | error | saving measured | predicted | gap (points) | per-step \\|error\\| median / p90 |")


def _plans_line(results: Sequence) -> str:
    """Which execution context the measured plans were decided in (how many results each)."""
    counts = Counter(r.plan.context if r.plan is not None else "unknown (saved without its plan)" for r in results)
    return "Plans measured, by the context they were decided in: " + ", ".join(f"{c} {n}" for c, n in sorted(counts.items())) + "."


def to_markdown(results: Sequence, held_out: frozenset[str]) -> str:
    """The summary table (module docstring), the signed step error per kernel kind and the per-model
    rows (`model_rows`) as markdown."""
    head = ("| set | dtype/precision | batch | runs | end-to-end \\|error\\| median / p90 % | saving within 3 points | "
            "own kernels per step % | library steps per step % |")  # fmt: skip
    lines = ["## Summary per model set", "", _plans_line(results), "", head, "|---|---|---:|---:|---|---|---|---|"]
    lines += ["| " + " | ".join(row) + " |" for row in summary_rows(results, held_out)]
    kinds = (*KERNEL_KINDS, "library")
    lines += ["", "Per kernel kind: signed median step error % (predicted / measured - 1) and steps:", "",
              "| set | dtype/precision | batch | " + " | ".join(kinds) + " |", "|---|---|---:|" + "---:|" * len(kinds)]
    lines += ["| " + " | ".join(row) + " |" for row in kind_rows(results, held_out)]
    lines += ["", "Per model (graph context; saving: % of the unfused run, gap: predicted - measured points):", "",
              MODEL_HEAD, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    lines += ["| " + " | ".join(row) + " |" for row in model_rows(results, held_out)]
    return "\n".join(lines) + "\n"
