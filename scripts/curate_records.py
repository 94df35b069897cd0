"""Add validation runs to the curated record set in data/records (no GPU needed).

Each `fuseplanner validate` run (its records.jsonl, or an older results.json, plain or .gz) becomes one
gzip-compressed records file (`fuseplanner.validation.records`) under OUT/SET/, named
MODEL-DTYPE[-tf32]-bBATCH-TILES.jsonl.gz. A record whose
configuration (model, dtype, precision, batch, nodes, launch kinds, tiles) is already in the curated
set, or in an earlier run of the same call (runs are taken in the order they were measured), is left
out: each configuration is measured once in the set, and the first measurement of it stays.

    python3 scripts/curate_records.py --out data/records/h100 --set holdout NEW/*/runs/*/records.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fuseplanner.core.errors import FusePlannerError  # noqa: E402
from fuseplanner.validation import report  # noqa: E402
from fuseplanner.validation.records import Record, RunMeta, ValidationRun, write_run  # noqa: E402

SETS = ("fit", "holdout")


def record_key(meta: RunMeta, rec: Record) -> tuple:
    """What makes two records the same measured configuration."""
    return (meta.model, meta.dtype, meta.precision, meta.batch, rec.nodes, rec.step_kinds,
            json.dumps([t.as_dict() for t in rec.tiles], sort_keys=True))  # fmt: skip


def run_name(meta: RunMeta) -> str:
    mode = "-tf32" if meta.precision == "tf32" else ""
    return f"{meta.model}-{meta.dtype}{mode}-b{meta.batch}-{meta.tiles}"


def curated_files(out: Path) -> list[Path]:
    return sorted(p for s in SETS for pattern in ("*.json.gz", "*.jsonl.gz") for p in (out / s).glob(pattern))


def seen_keys(out: Path) -> set[tuple]:
    keys: set[tuple] = set()
    for path in curated_files(out):
        run = report.load_results(path)
        keys.update(record_key(run.meta, r) for r in run.records)
    return keys


def dedup(run: ValidationRun, seen: set[tuple]) -> ValidationRun:
    """`run` without its records already in `seen` (which it extends) and its empty groups."""
    kept = []
    for rec in run.records:
        key = record_key(run.meta, rec)
        if key not in seen:
            seen.add(key)
            kept.append(rec)
    used = {r.group for r in kept}
    groups = {g: v for g, v in run.groups.items() if g in used}
    return run.model_copy(update={"groups": groups, "records": tuple(kept)})


def write(run: ValidationRun, folder: Path) -> Path:
    """Write `run` as FOLDER/NAME.jsonl.gz (NAME-2, -3, ... when taken); byte-identical for equal input."""
    folder.mkdir(parents=True, exist_ok=True)
    base = run_name(run.meta)
    path, n = folder / f"{base}.jsonl.gz", 1
    while path.exists():
        n += 1
        path = folder / f"{base}-{n}.jsonl.gz"
    return write_run(run, path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="the curated set's folder, e.g. data/records/h100")
    ap.add_argument("--set", required=True, choices=SETS, help="fit: records a spec is fitted on; holdout: scored only")
    ap.add_argument("results", nargs="+", help="results.json(.gz) files of validation runs")
    args = ap.parse_args(argv)
    out = Path(args.out)
    try:
        runs = [report.load_results(p) for p in args.results]
    except FusePlannerError as e:
        ap.error(str(e))
    seen = seen_keys(out)
    for run in sorted(runs, key=lambda d: d.meta.created):
        kept = dedup(run, seen)
        if kept.records:
            path = write(kept, out / args.set)
            print(f"{path}: {len(kept.records)} of {len(run.records)} records")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
