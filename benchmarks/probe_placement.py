"""Probe block placement on the GPU: how many blocks of a launch run at once, on how many SMs, in how
many rounds, with and without thread-block clusters, against what the cost model's wave count
assumes (every SM holds `blocks_per_sm` blocks, clusters or not).

Each launch runs kernels/probe_placement.cu (every block records its SM and its start and end on the
global timer and spins a fixed time); the shared memory per block sets the blocks per SM.

    python3 benchmarks/probe_placement.py --out DIR [--gpu h100] [--blocks 132,224,256] [--clusters 1,8]

Writes DIR/placement.json and DIR/placement.md. The question it answers (docs/validation.md, "Time
model: where the remaining decision misses come from"): do DW->PW launches in clusters of 8 get all
132 SMs x blocks-per-SM slots per round, or only the SMs of whole 8-SM groups per GPC?
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fuseplanner.cost.time import blocks_per_sm  # noqa: E402
from fuseplanner.hw import spec as specs  # noqa: E402


def ints(s: str) -> list[int]:
    return [int(v) for v in s.split(",") if v]


def smem_for(per_sm: int, hw) -> int:
    """Dynamic shared memory (KiB-aligned) at which exactly `per_sm` blocks fit on an SM."""
    return (hw.smem_per_sm_bytes // per_sm - hw.smem_reserved_per_block_bytes) // 1024 * 1024


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for placement.json and placement.md")
    ap.add_argument("--gpu", default="auto", help="spec of the GPU (auto: detect)")
    ap.add_argument("--blocks", type=ints, default=[112, 120, 132, 224, 240, 256, 264, 360])
    ap.add_argument("--clusters", type=ints, default=[1, 2, 4, 8])
    ap.add_argument("--per-sm", type=ints, default=[1, 2, 3], help="blocks per SM to force with shared memory")
    ap.add_argument("--threads", type=int, default=256)
    ap.add_argument("--spin-us", type=float, default=200.0)
    args = ap.parse_args(argv)
    from fuseplanner.core.errors import FusePlannerError
    from fuseplanner.validation.timing import probe_placement

    try:
        spec = specs.detect() if args.gpu == "auto" else specs.gpu(args.gpu)
        if spec is None:
            raise FusePlannerError("no GPU spec matches this device: pass --gpu")
        hw = spec.hw
        rows = []
        for per_sm in args.per_sm:
            smem = smem_for(per_sm, hw)
            bps, _ = blocks_per_sm(smem, args.threads, 32, hw)
            for ks in args.clusters:
                for blocks in args.blocks:
                    if blocks % ks:
                        continue
                    p = probe_placement(blocks, args.threads, smem, ks, args.spin_us)
                    rows.append({"cluster": ks, "threads": args.threads, "smem_bytes": smem, "model_blocks_per_sm": bps,
                                 "model_rounds": math.ceil(blocks / (hw.sm_count * bps)), **p.as_dict()})
                    print(json.dumps(rows[-1]), flush=True)
    except FusePlannerError as exc:
        raise SystemExit(f"error: {exc}") from None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "placement.json").write_text(json.dumps({"gpu": spec.name, "spin_us": args.spin_us, "rows": rows}, indent=1))
    lines = [f"# Block placement on {spec.name} (blocks spin {args.spin_us:g} us)", "",
             "| cluster | smem/block (KiB) | blocks/SM (model) | blocks | rounds (model) | rounds | "
             "blocks in round 1 | SMs in round 1 | SMs used | max blocks on one SM | span (us) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['cluster']} | {r['smem_bytes'] // 1024} | {r['model_blocks_per_sm']} | {r['blocks']} | "
                     f"{r['model_rounds']} | {r['rounds']} | {r['first_round_blocks']} | {r['first_round_sms']} | "
                     f"{r['sms']} | {r['max_per_sm']} | {r['span_ns'] / 1e3:.0f} |")
    (out / "placement.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / 'placement.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
