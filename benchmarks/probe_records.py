"""Re-run the kernels of saved validation records, one launch at a time: time every launch (cold and
warm L2, CUDA events, medians) next to an empty kernel, check the result against float64, and for
dw_pw launches optionally force the cluster split KS (the reduction's blocks per output tile) instead
of `tiles.cluster_split`'s choice. `--ncu` launches each configuration once, untimed, for Nsight
Compute (`ncu --section ... -k regex:fused python3 benchmarks/probe_records.py --ncu ...`).

    python3 benchmarks/probe_records.py --out DIR [--splits 1,2,4,8] RESULTS.json:RECORD_ID [...]

RECORD_ID is a record's `id` in that results file (e.g. g7, g7.t3, g7.u); the model is loaded as the
results file names it. Writes DIR/probe_records.json and prints one JSON line per launch.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from probe_fused import empty_floor  # noqa: E402  (the timing floor of one launch)

from fuseplanner.kernels import tiles  # noqa: E402
from fuseplanner.validation import fit  # noqa: E402
from fuseplanner.validation.records import RunMeta  # noqa: E402
from fuseplanner.validation.report import load_results  # noqa: E402


def record_steps(spec: str) -> tuple[RunMeta, tuple]:
    """(meta, steps) of record `path:id`."""
    path, _, rid = spec.rpartition(":")
    data = load_results(path)
    rec = next((r for r in data.records if r.id == rid), None)
    if rec is None:
        raise SystemExit(f"{path}: no record {rid!r}")
    meta = data.meta
    graph = fit.results_graph(path, meta.model, meta.batch, {})
    return meta, fit.record_steps(rec, graph, meta.batch)


def _forced_split(ks: int | None):
    """A cluster_split that returns `ks` for dw_pw (None: the library's own choice)."""
    own = tiles.cluster_split

    def split(kind, ops, tile, batch, gpu):
        return ks if (ks is not None and kind == "dw_pw") else own(kind, ops, tile, batch, gpu)

    return own, split


def probe_step(step, meta: RunMeta, ks: int | None, repeat: int, ncu: bool) -> dict:
    import cupy as cp

    from fuseplanner import kernels
    from fuseplanner.kernels import device_props
    from fuseplanner.validation.reference import random_input, random_params, reference
    from fuseplanner.validation.timing import time_kernel

    dtype, precision, batch = meta.dtype, meta.precision, meta.batch
    st = np.float16 if dtype == "fp16" else np.float32
    rng = np.random.default_rng()
    x = random_input(step.ops[0], batch, rng).astype(st).astype(np.float32)
    params = [(w.astype(st).astype(np.float32), b) for w, b in random_params(step.ops, rng)]
    res = rng.standard_normal(step.ops[-1].with_batch(batch).out_shape).astype(st).astype(np.float32) if step.residual else None
    xd = cp.asarray(x).astype(st)
    pd = [(cp.asarray(w).astype(st), None if b is None else cp.asarray(b)) for w, b in params]
    rd = None if res is None else cp.asarray(res).astype(st)
    out = cp.full(step.ops[-1].with_batch(batch).out_shape, np.nan, dtype=st)
    own, split = _forced_split(ks)
    tiles.cluster_split = split
    try:
        launch = kernels.prepare(step.kind, step.ops, step.tile, xd, pd, dtype=dtype, precision=precision,
                                 residual=rd, out=out)
        used = split(step.kind, step.ops, step.tile, batch, device_props(cp))
    finally:
        tiles.cluster_split = own
    row = {"kind": step.kind, "tile": str(step.tile), "split": used}
    launch()
    cp.cuda.runtime.deviceSynchronize()
    if ncu:
        return row
    ref = reference(step.kind, step.ops, x.astype(np.float64), params, residual=res)
    host = cp.asnumpy(out).astype(np.float64)
    row["rel_err"] = float(np.linalg.norm(host - ref) / np.linalg.norm(ref)) if np.isfinite(host).all() else None
    row["cold_us"] = time_kernel(launch, repeat=repeat, flush_l2=True).median_s * 1e6
    row["warm_us"] = time_kernel(launch, repeat=repeat, flush_l2=False).median_s * 1e6
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--splits", default="", help="comma-separated KS values to force on dw_pw launches")
    ap.add_argument("--ncu", action="store_true", help="launch each configuration once, untimed")
    ap.add_argument("records", nargs="+", help="RESULTS.json:RECORD_ID")
    args = ap.parse_args(argv)
    splits = [None] + [int(s) for s in args.splits.split(",") if s]
    rows = [] if args.ncu else [{"kind": "empty", **empty_floor(args.repeat)}]
    for spec in args.records:
        meta, steps = record_steps(spec)
        for i, step in enumerate(steps):
            for ks in splits if step.kind == "dw_pw" else [None]:
                try:
                    row = probe_step(step, meta, ks, args.repeat, args.ncu)
                except Exception as exc:  # keep probing the others
                    row = {"kind": step.kind, "tile": str(step.tile), "split": ks, "error": f"{type(exc).__name__}: {exc}"}
                row = {"record": spec, "step": i, **row}
                print(json.dumps(row), flush=True)
                rows.append(row)
    if not args.ncu:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "probe_records.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
