"""A kernel source change measured on whole models (GPU): the same plan compiled with an old copy of one
kernel source and with the current one, whole-model CUDA-graph replays interleaved (5 rounds of 200,
warm L2, `validation.tune.fastest`), the steps of one kernel kind timed in graph mode, and the current
build checked against onnxruntime (arena poisoned with NaN first).

    git show OLD:fuseplanner/kernels/families/fused/fused_pw_pw.cu > old/fused_pw_pw.cu
    python3 scripts/ab_whole.py old/fused_pw_pw.cu pw_pw efficientnet_b0:fp16:8 mobilenet_v3_small:fp16:1 ...
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fuseplanner  # noqa: E402
from fuseplanner.core.kinds import CONTEXTS, DEFAULT_CONTEXT  # noqa: E402
from fuseplanner.kernels import _build  # noqa: E402
from fuseplanner.run.check import compare, reference_outputs  # noqa: E402
from fuseplanner.run.compiled import onnx_model  # noqa: E402
from fuseplanner.validation.tune import fastest  # noqa: E402


def with_old_source(old: Path, build):
    """`build()` with kernel source `old.name` read from `old` (compiled kernels cached apart)."""
    current = _build.source_path
    _build.source_path = lambda source: old if source == old.name else current(source)
    _build._compile_cached.cache_clear()
    try:
        return build()
    finally:
        _build.source_path = current
        _build._compile_cached.cache_clear()


def one(old: Path, kind: str, model: str, dtype: str, batch: int, context: str) -> str:
    new = fuseplanner.compile(model, "h100", dtype=dtype, batch=batch, context=context)
    before = with_old_source(old, lambda: fuseplanner.compile(model, "h100", new.plan, dtype=dtype, batch=batch))
    rng = np.random.default_rng(3)
    x = {s.name: rng.standard_normal(s.shape).astype(np.float32) for s in new.program.inputs}
    new._bound.arena.fill(255)
    check = compare(new(x), reference_outputs(onnx_model(model, None, batch), x), dtype, "fp32")
    lat = fastest({"old": before, "new": new}, 200, rounds=5)

    def steps(m) -> dict[str, float]:
        return {t.label: t.seconds for t in m.time_nodes(repeats=30, mode="graph") if t.kind == kind}

    a, b = steps(before), steps(new)
    so, sn = sum(a[k] for k in b if k in a) * 1e6, sum(b[k] for k in b if k in a) * 1e6
    return (f"{model} {dtype} b{batch}: whole old {lat['old'] * 1e6:.1f} us new {lat['new'] * 1e6:.1f} us "
            f"({100 * (lat['old'] - lat['new']) / lat['old']:+.1f}%); {len(b)} {kind} steps old {so:.1f} us new "
            f"{sn:.1f} us; check {check.error:.2e} ok={check.ok}")  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path, help="the old copy of one kernel source (its file name names the source)")
    ap.add_argument("kind", help="kernel kind whose steps are timed")
    ap.add_argument("configs", nargs="+", metavar="MODEL:DTYPE:BATCH")
    ap.add_argument("--context", choices=CONTEXTS, default=DEFAULT_CONTEXT, help="context the plan decides in")
    args = ap.parse_args()
    for item in args.configs:
        model, dtype, batch = item.split(":")
        print(one(args.old, args.kind, model, dtype, int(batch), args.context), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
