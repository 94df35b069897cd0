"""Fuse decisions of saved validation runs, re-predicted with a spec, split by the DW kernel size of
each group (no GPU). A decision agrees when the planner's choice among the measured tiles (least
predicted fused time, fused when the unfused prediction reaches `fuse_min_speedup` times it) matches
the measured outcome (best measured fused tile against the measured unfused members).

    python3 scripts/decisions_by_dw_kernel.py --gpu h100 docs/validation/live-2026-11-23c/fp16b8/runs/*/results.json
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fuseplanner import fit, specs  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h100", help="spec name or TOML path")
    ap.add_argument("results", nargs="+", help="results.json files")
    args = ap.parse_args(argv)
    spec = specs.gpu(args.gpu)
    tau = float(spec.eff("fuse_min_speedup"))
    print("| run | DW kernel | groups | decisions agreeing |\n|---|---|---:|---:|")
    for path in args.results:
        samples = fit.load_samples([path])
        pred = fit._predictions(spec, samples)[:, 0]
        by: dict[str, dict[str, list[int]]] = {}
        for i, s in enumerate(samples):
            if s.group:
                by.setdefault(s.group, {"f": [], "u": []})["u" if s.role == "unfused" else "f"].append(i)
        tally: collections.Counter = collections.Counter()
        for d in by.values():
            if not d["f"] or not d["u"]:
                continue
            u = d["u"][0]
            planned = min(d["f"], key=lambda i: pred[i])
            fused_wins = min(samples[i].time_s for i in d["f"]) < samples[u].time_s
            dws = [op.kernel for st in samples[u].steps for op in st.ops if op.kind == "dw"]
            key = "x".join(map(str, dws[0])) if dws else "none"
            tally[(key, "n")] += 1
            tally[(key, "ok")] += (pred[u] >= tau * pred[planned]) == fused_wins
        for key in sorted({k for k, _ in tally}):
            print(f"| {Path(path).parent.name} | {key} | {tally[(key, 'n')]} | {tally[(key, 'ok')]} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
