"""`fuseplanner gpus`: the bundled GPU specs (or given ones), as a table or JSON."""

from __future__ import annotations

import argparse
import json
import sys

from fuseplanner.hw.spec import GpuSpec, detect, gpu, list_gpus


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "gpus",
        help="list the GPU specs the cost models know",
        description="List the bundled GPU specs (or the named ones / TOML paths): SMs, caches, shared "
        "memory, bandwidths, peak rates, launch overhead, and where each GPU's fitted kernel parameters come "
        "from (its own fit, or borrowed from another GPU). Values marked * are calibrated measurements that "
        "override the datasheet; values marked ~ are estimates.",
    )
    p.add_argument("specs", nargs="*", metavar="GPU", help="bundled names or paths to TOML specs (default: all)")
    p.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    p.add_argument("--sources", action="store_true", help="also print the source note of every number (after the table, or in the JSON)")
    p.add_argument("--detect", action="store_true", help="only the spec matching the local GPU (needs CuPy)")
    p.set_defaults(func=run)


def record(spec: GpuSpec, sources: bool = False) -> dict:
    """One spec as a JSON-ready dict: every field, `effective` values (measured where calibrated), the
    kernel fit (`fit`: provenance and values) and what limits trust in its predictions (`warnings`)."""
    d = spec.summary()
    d["device_names"] = list(spec.device_names)
    d["estimated"] = list(spec.estimated)
    d["warnings"] = spec.warnings()
    if sources:
        d["sources"] = dict(spec.sources)
        d["fit"]["sources"] = dict(spec.fit.sources)
    return d


def fit_label(spec: GpuSpec) -> str:
    """Where the spec's kernel parameters come from: its own fit (with its record count) or a borrowed one
    (with how many values its [refit] table gives it)."""
    if spec.fit.borrowed:
        return f"from {spec.fit.source_gpu}" + (f", {len(spec.refit)} refit" if spec.refit else "")
    return f"own ({spec.fit.record_count} rec)" if spec.fit.record_count else "own"


def _table(specs: list[GpuSpec]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="GPU specs (* = calibrated measurement, ~ = estimate; `--json --sources` for every number's source)")
    for col in ("name", "cc", "SMs", "L2 MiB", "smem/blk KiB", "DRAM GB/s", "L2 GB/s", "FP32 TF/s",
                "FP16 TC TF/s", "launch us", "kernel fit"):  # fmt: skip
        t.add_column(col, justify="left" if col == "name" else "right")

    def mark(s: GpuSpec, field: str, scale: float, fmt: str = "{:.0f}") -> str:
        v = s.eff(field)
        if v is None:
            return "-"
        return fmt.format(v / scale) + ("*" if field in s.measured else "~" if field in s.estimated else "")

    for s in specs:
        t.add_row(
            s.name, s.compute_capability, str(s.sm_count), f"{s.l2_bytes / 2**20:g}",
            f"{s.smem_per_block_bytes / 1024:g}", mark(s, "dram_bw_bytes_per_s", 1e9),
            mark(s, "l2_bw_bytes_per_s", 1e9), mark(s, "fp32_flops", 1e12, "{:.1f}"),
            mark(s, "fp16_tc_flops", 1e12, "{:.0f}"), mark(s, "launch_overhead_s", 1e-6, "{:.1f}"), fit_label(s),
        )  # fmt: skip
    console = Console()
    console.width = max(console.width, 130)  # never truncate names or numbers on a narrow/piped output
    console.print(t)


def run(args: argparse.Namespace) -> int:
    if args.detect:
        found = detect()
        if found is None:
            sys.stderr.write("error: no local GPU matches a bundled spec (CuPy missing, no device, or unknown GPU)\n")
            return 2
        specs = [found]
    else:
        specs = [gpu(s) for s in args.specs] if args.specs else list_gpus()
    if args.json:
        json.dump([record(s, args.sources) for s in specs], sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _table(specs)
        if args.sources:
            _print_sources(specs)
    return 0


def _print_sources(specs: list[GpuSpec]) -> None:
    """Every spec's source notes, one `name.field: source` line each."""
    for s in specs:
        sys.stdout.write(f"\n{s.name} sources:\n")
        for field, text in sorted(dict(s.sources).items()):
            sys.stdout.write(f"  {field}: {text}\n")
