"""Add validation runs to the curated record set in data/records (no GPU needed).

Each `fuseplanner validate` run (its results.json or results.json.gz) becomes one gzip-compressed
results document under OUT/SET/, named MODEL-DTYPE[-tf32]-bBATCH-TILES.json.gz. A record whose
configuration (model, dtype, precision, batch, nodes, launch kinds, tiles) is already in the curated
set, or in an earlier run of the same call (runs are taken in the order they were measured), is left
out: each configuration is measured once in the set, and the first measurement of it stays. The
stale `summary` is dropped; `fuseplanner validate --from-results` recomputes it.

    python3 scripts/curate_records.py --out data/records/h100 --set holdout NEW/*/runs/*/results.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fuseplanner.core.errors import FusePlannerError  # noqa: E402
from fuseplanner.validation import report  # noqa: E402

SETS = ("fit", "holdout")


def record_key(meta: dict, rec: dict) -> tuple:
    """What makes two records the same measured configuration."""
    return (meta["model"], meta["dtype"], meta.get("precision", "fp32"), int(meta["batch"]),
            tuple(rec.get("nodes") or ()), tuple(rec.get("step_kinds") or ()),
            json.dumps(rec.get("tiles") or [], sort_keys=True))  # fmt: skip


def run_name(meta: dict) -> str:
    mode = "-tf32" if meta.get("precision") == "tf32" else ""
    return f"{meta['model']}-{meta['dtype']}{mode}-b{int(meta['batch'])}-{meta['tiles']}"


def curated_files(out: Path) -> list[Path]:
    return sorted(p for s in SETS for p in (out / s).glob("*.json.gz"))


def seen_keys(out: Path) -> set[tuple]:
    keys: set[tuple] = set()
    for path in curated_files(out):
        data = report.load_results(path)
        keys.update(record_key(data["meta"], r) for r in data["records"])
    return keys


def dedup(data: dict, seen: set[tuple]) -> dict:
    """`data` without its records already in `seen` (which it extends), its summary and its empty groups."""
    meta = data["meta"]
    kept = []
    for rec in data["records"]:
        key = record_key(meta, rec)
        if key not in seen:
            seen.add(key)
            kept.append(rec)
    used = {r.get("group") for r in kept}
    groups = {g: v for g, v in data.get("groups", {}).items() if g in used}
    return {**{k: v for k, v in data.items() if k != "summary"}, "groups": groups, "records": kept}


def write(data: dict, folder: Path) -> Path:
    """Write `data` as FOLDER/NAME.json.gz (NAME-2, -3, ... when taken); byte-identical for equal input."""
    folder.mkdir(parents=True, exist_ok=True)
    base = run_name(data["meta"])
    path, n = folder / f"{base}.json.gz", 1
    while path.exists():
        n += 1
        path = folder / f"{base}-{n}.json.gz"
    raw = json.dumps(data, separators=(",", ":"), sort_keys=True).encode()
    path.write_bytes(gzip.compress(raw, compresslevel=9, mtime=0))
    return path


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
    for data in sorted(runs, key=lambda d: d["meta"].get("created", "")):
        kept = dedup(data, seen)
        if kept["records"]:
            path = write(kept, out / args.set)
            print(f"{path}: {len(kept['records'])} of {len(data['records'])} records")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
