"""Probe individual fused kernels: time given (pair, batch, mode, tile) configurations against an empty
kernel (the timing floor of one launch), check them against float64, and optionally launch each once
more for Nsight Compute (`--ncu`: no timing, one launch per config, so `ncu -k regex:fused` sees
exactly these).

    python3 benchmarks/probe_fused.py --out DIR CONFIG [CONFIG ...]
    CONFIG = kind:block:batch:mode:tile, e.g. dw_pw:b7:1:fp32:2x4/f32/c64/t256

The tile string is `Tile.__str__`'s form (THxTW/fTF/cTC/tTHREADS).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mbv2_pairs  # noqa: E402
import numpy as np  # noqa: E402
from bench_pairs import MODES, gpu_time, random_inputs, torch_fn  # noqa: E402

from fuseplanner.core.ir import Tile  # noqa: E402


def parse_tile(s: str) -> Tile:
    try:
        return Tile.parse(s)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None


def find_pair(kind: str, block: str, batch: int) -> dict:
    for p in mbv2_pairs.pairs(batch):
        if p["kind"] == kind and p["name"] == block:
            return p
    raise SystemExit(f"no {kind} pair named {block}")


def probe(cfg: str, repeat: int, ncu: bool, with_torch: bool) -> dict:
    import cupy as cp

    from fuseplanner import kernels
    from fuseplanner.validation.reference import reference

    kind, block, batch, mode, tile_s = cfg.split(":")
    batch, tile = int(batch), parse_tile(tile_s)
    pair = find_pair(kind, block, batch)
    dtype, precision = MODES[mode]
    ops, residual = pair["ops"], pair["residual"]
    x, params, xd, pd, out = random_inputs(ops, dtype, np.random.default_rng())
    launch = kernels.prepare(kind, ops, tile, xd, pd, dtype=dtype, precision=precision,
                             residual=xd if residual else None, out=out)
    if ncu:
        launch()
        cp.cuda.runtime.deviceSynchronize()
        return {"config": cfg}
    launch()
    cp.cuda.runtime.deviceSynchronize()
    ref = reference(kind, ops, x.astype(np.float64), params, residual=x if residual else None)
    host = cp.asnumpy(out).astype(np.float64)
    err = float(np.linalg.norm(host - ref) / np.linalg.norm(ref)) if np.isfinite(host).all() else float("nan")
    rec = {"config": cfg, "rel_err": err, "grid": list(launch.grid), "smem": launch.smem,
           "cold_us": gpu_time(launch, repeat, flush=True) * 1e6, "warm_us": gpu_time(launch, repeat, flush=False) * 1e6}
    if with_torch:
        import torch

        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.allow_tf32 = mode == "tf32"
        fn = torch_fn(kind, ops, params, dtype, residual)
        tx = torch.as_tensor(x, device="cuda")
        with torch.no_grad():
            rec["torch_cold_us"] = gpu_time(lambda: fn(tx), repeat, flush=True) * 1e6
    return rec


def empty_floor(repeat: int) -> dict:
    import cupy as cp

    k = cp.RawKernel('extern "C" __global__ void empty_k(float* p) { if (p) p[threadIdx.x] = 0.f; }', "empty_k")
    one = cp.RawKernel('extern "C" __global__ void one_k(const float* a, float* b) '
                       '{ int i = blockIdx.x * blockDim.x + threadIdx.x; b[i] = a[i] * 2.f; }', "one_k")
    a = cp.ones(132 * 256, dtype=cp.float32)
    b = cp.empty_like(a)

    def run_empty():
        k((132,), (256,), (np.uint64(0),))

    def run_one():
        one((132,), (256,), (a, b))

    return {"empty_cold_us": gpu_time(run_empty, repeat, flush=True) * 1e6,
            "empty_warm_us": gpu_time(run_empty, repeat, flush=False) * 1e6,
            "one_roundtrip_cold_us": gpu_time(run_one, repeat, flush=True) * 1e6}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--ncu", action="store_true", help="launch each config once, no timing (run under ncu)")
    ap.add_argument("--torch", action="store_true", help="also time PyTorch's unfused layers")
    ap.add_argument("configs", nargs="+")
    args = ap.parse_args(argv)
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    recs = [] if args.ncu else [empty_floor(args.repeat)]
    if recs:
        print(json.dumps(recs[0]), flush=True)
    for cfg in args.configs:
        try:
            r = probe(cfg, args.repeat, args.ncu, args.torch)
        except Exception as exc:  # keep probing the others
            r = {"config": cfg, "error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(r), flush=True)
        recs.append(r)
    if not args.ncu:
        (outdir / "probe.json").write_text(json.dumps(recs, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
