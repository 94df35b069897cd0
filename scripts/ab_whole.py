"""A kernel source or executor op change measured on whole models (GPU): the same plan compiled with an
old copy of one kernel source (`.cu`, `.cuh`) or of one executor op module (`fuseplanner/run/ops/*.py`:
its builders replace the current ones while the old build compiles) and with the current code,
whole-model CUDA-graph replays interleaved (5 rounds of 200, warm L2, `validation.tune.fastest`; then 50
replays each with L2 flushed between them), the steps of one kernel kind timed in graph mode (`library`
for op modules), and both builds checked against onnxruntime (arena poisoned with NaN first).

    git show OLD:fuseplanner/kernels/families/fused/fused_pw_pw.cu > old/fused_pw_pw.cu
    python3 scripts/ab_whole.py old/fused_pw_pw.cu pw_pw efficientnet_b0:fp16:8 mobilenet_v3_small:fp16:1 ...
    git show OLD:fuseplanner/run/ops/reduce.py > old/reduce.py
    python3 scripts/ab_whole.py old/reduce.py library efficientnet_b0:fp16:8 --gpu h200
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fuseplanner  # noqa: E402
from fuseplanner.core.kinds import CONTEXTS, DEFAULT_CONTEXT  # noqa: E402
from fuseplanner.kernels import _build  # noqa: E402
from fuseplanner.run.check import compare, reference_outputs  # noqa: E402
from fuseplanner.run.compiled import onnx_model  # noqa: E402
from fuseplanner.run.ops import registry  # noqa: E402
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


def with_old_ops(old: Path, build):
    """`build()` with the op builders of module file `old` (an old copy of one `fuseplanner/run/ops` module)
    registered in place of the current ones; the current registry is restored after."""
    saved = dict(registry.BUILDERS)
    spec = importlib.util.spec_from_file_location(f"fuseplanner.run.ops._old_{old.stem}", old)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)  # its @register decorators replace the current builders
        return build()
    finally:
        registry.BUILDERS.clear()
        registry.BUILDERS.update(saved)


def with_old(old: Path, build):
    return with_old_ops(old, build) if old.suffix == ".py" else with_old_source(old, build)


def _checks(model_name: str, builds, batch: int) -> list:
    """Each build's outputs against one onnxruntime run on the same fresh inputs (each arena poisoned with
    NaN first)."""
    rng = np.random.default_rng(3)
    x = {s.name: rng.standard_normal(s.shape).astype(np.float32) for s in builds[0].program.inputs}
    ref = reference_outputs(onnx_model(model_name, None, batch), x)
    out = []
    for m in builds:
        m._bound.arena.fill(255)
        out.append(compare(m(x), ref, m.program.dtype, m.program.precision))
    return out


def one(old: Path, kind: str, model: str, dtype: str, batch: int, context: str, spec: str) -> str:
    new = fuseplanner.compile(model, spec, dtype=dtype, batch=batch, context=context)
    before = with_old(old, lambda: fuseplanner.compile(model, spec, new.plan, dtype=dtype, batch=batch))
    check, check_old = _checks(model, (new, before), batch)
    lat = fastest({"old": before, "new": new}, 200, rounds=5)
    cold = {name: m.bench(50, cold_l2=True).median_s for name, m in (("old", before), ("new", new))}

    def steps(m) -> dict[str, float]:
        return {t.label: t.seconds for t in m.time_nodes(repeats=30, mode="graph") if t.kind == kind}

    a, b = steps(before), steps(new)
    so, sn = sum(a[k] for k in b if k in a) * 1e6, sum(b[k] for k in b if k in a) * 1e6
    return (f"{model} {dtype} b{batch}: whole old {lat['old'] * 1e6:.1f} us new {lat['new'] * 1e6:.1f} us "
            f"({100 * (lat['old'] - lat['new']) / lat['old']:+.1f}%), cold L2 old {cold['old'] * 1e6:.1f} new "
            f"{cold['new'] * 1e6:.1f} us; {len(b)} {kind} steps old {so:.1f} us new "
            f"{sn:.1f} us; check {check.error:.2e} ok={check.ok} (old build {check_old.error:.2e} "
            f"ok={check_old.ok})")  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path, help="the old copy of one kernel source or executor op module (its file "
                    "name names the source; a .py file is an op module)")
    ap.add_argument("kind", help="kernel kind whose steps are timed")
    ap.add_argument("configs", nargs="+", metavar="MODEL:DTYPE:BATCH")
    ap.add_argument("--context", choices=CONTEXTS, default=DEFAULT_CONTEXT, help="context the plan decides in")
    ap.add_argument("--gpu", default="h100", help="GPU spec the plan is made for (default h100)")
    args = ap.parse_args()
    for item in args.configs:
        model, dtype, batch = item.split(":")
        print(one(args.old, args.kind, model, dtype, int(batch), args.context, args.gpu), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
