"""Honest scoring of saved records: test records deduplicated against training records, and errors per
held-out model.

A record's configuration key is (model, dtype, batch, nodes, tile): the run's model, storage dtype
and batch, the record's member nodes and its tiles. `dedup` drops the test records whose key also
occurs in the training runs, so a test score counts only configurations the fit never saw;
`dedup_accuracy` scores both the full and the deduplicated test set. `per_model` groups runs by model
and scores each model's records alone: with runs re-predicted by a spec fitted without that model
(`fuseplanner calibrate --from-results` on the other models' records), this is leave-one-model-out
accuracy; on a spec fitted on every model it is the in-sample error split by model. `layer_key` is
the key without the model's name (the same layers in another model count as seen): what
`fuseplanner.analysis.loo` deduplicates a left-out model's records against.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fuseplanner.analysis.accuracy import METRICS, Errors, metric_apes
from fuseplanner.analysis.runs import Run
from fuseplanner.validation.records import Record


def record_key(run: Run, record: Record) -> tuple:
    """(model, dtype, batch, nodes, tile) of one record of `run`."""
    meta = run.data.meta
    tiles = json.dumps([t.as_dict() for t in record.tiles], sort_keys=True)
    return (meta.model, meta.dtype, int(meta.batch or 0), tuple(record.nodes), tiles)


def layer_key(run: Run, record: Record, graph: Any) -> tuple:
    """(dtype, precision, batch, launch kinds, residual, each member layer's kind, shapes, window and
    epilogue, tiles) of one record of `run` whose model is `graph`: the key `record_key` has without
    the model's name, so the same layer configuration of two models counts as one."""
    meta = run.data.meta
    batch = int(meta.batch or 0)
    ops = tuple(_layer(graph.op(n).with_batch(batch)) for n in record.nodes)
    tiles = json.dumps([t.as_dict() for t in record.tiles], sort_keys=True)
    return (meta.dtype, meta.precision, batch, tuple(record.step_kinds), record.residual, ops, tiles)


def _layer(op: Any) -> tuple:
    return (op.kind, op.op_type, op.input_shapes, op.output_shapes, op.kernel, op.stride, op.pads, op.dilation,
            op.groups, op.epilogue)  # fmt: skip


def training_keys(train: Sequence[Run]) -> frozenset[tuple]:
    return frozenset(record_key(r, rec) for r in train for rec in r.records)


def dedup(test: Sequence[Run], train: Sequence[Run]) -> list[Record]:
    """The test records whose configuration key no training record has."""
    seen = training_keys(train)
    return [rec for r in test for rec in r.records if record_key(r, rec) not in seen]


@dataclass(frozen=True)
class DedupScore:
    """Errors of every test record and of those left after deduplication against the training runs."""

    all: dict[str, Errors]
    deduplicated: dict[str, Errors]
    records: int
    kept: int


def _errors(records: Sequence[Record]) -> dict[str, Errors]:
    return {m: Errors.of(metric_apes(records, m)) for m in METRICS}


def dedup_accuracy(test: Sequence[Run], train: Sequence[Run]) -> DedupScore:
    every = [rec for r in test for rec in r.records]
    kept = dedup(test, train)
    return DedupScore(_errors(every), _errors(kept), len(every), len(kept))


def per_model(runs: Sequence[Run]) -> dict[str, dict[str, Errors]]:
    """Errors of each model's records alone (module docstring: leave-one-model-out with a refit spec)."""
    by: dict[str, list[Record]] = {}
    for r in runs:
        by.setdefault(r.data.meta.model or "?", []).extend(r.records)
    return {m: _errors(recs) for m, recs in sorted(by.items())}
