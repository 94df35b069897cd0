"""Command line shared by the scripts that re-read saved validation runs with a spec (no GPU):
`--gpu SPEC` and the results.json (or results.json.gz) files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fuseplanner import specs  # noqa: E402
from fuseplanner.errors import FusePlannerError  # noqa: E402


def parse(doc: str, argv=None):
    """(GpuSpec, results paths) from the command line of a script described by `doc`."""
    return parse_with(doc, argv)[:2]


def parse_with(doc: str, argv=None, options=None):
    """(GpuSpec, results paths, all arguments) of a script described by `doc`; `options(parser)` adds
    the script's own options."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--gpu", default="h100", help="spec name or TOML path")
    ap.add_argument("results", nargs="+", help="results.json(.gz) files of validation runs")
    if options is not None:
        options(ap)
    args = ap.parse_args(argv)
    missing = [p for p in args.results if not Path(p).is_file()]
    if missing:  # an unmatched glob arrives as its pattern: one line, exit 2
        ap.error(f"no such results file: {missing[0]}")
    try:
        return specs.gpu(args.gpu), args.results, args
    except FusePlannerError as e:  # an unknown spec or a bad TOML: one line, exit 2
        ap.error(str(e))


def launched_records(spec, path: str, kinds=()):
    """(run label, record, step, launched Work, blocks per SM, cluster split) of each single-kernel
    record of a saved run that Nsight Compute counted (of `kinds`, when given): the record's kernel as
    `cost.model.launched` reads and schedules it, before `coresident`."""
    from fuseplanner import fit, report, tiles
    from fuseplanner.cost import model

    data = report.load_results(path)
    meta = data["meta"]
    b, dtype = int(meta["batch"]), meta["dtype"]
    graph = fit._graph(path, meta["model"], b, {})
    run = f"{meta['model']} {dtype} b{b}"
    for r in data["records"]:
        me = r.get("measured") or {}
        if me.get("traffic") != "ncu" or len(r["step_kinds"]) != 1 or (kinds and r["kind"] not in kinds):
            continue
        st = fit._steps(r, graph, b)[0]
        km = model.context(st.kind, st.ops, dtype)
        smem = tiles.smem_bytes(st.kind, st.ops, st.tile, dtype)
        bps = model.blocks_per_sm(
            smem, st.tile.threads, tiles.regs_per_thread(st.kind, st.tile, dtype), spec.hw
        )[0]
        w, _, ks = model.launched(st.kind, st.ops, st.tile, dtype, b, spec, km, st.residual, meta.get("precision", "fp32"))
        yield run, r, st, w, bps, ks
