"""Fused MobileNetV2 layer pairs (and PW->PW, PW->DW->PW, transformer MLPs) vs PyTorch, on one GPU.

For every pair: our fused kernel with the best tile found by measurement over a shortlist of
`tiles.candidates` (and the cost model's pick when `fuseplanner.cost` exists), against PyTorch's
unfused convolutions with their activations, in the same process:
exact fp32 vs PyTorch with cudnn.allow_tf32 = False, tf32 vs PyTorch's default (TF32 on), fp16 vs fp16.
cudnn.benchmark on; CUDA events; medians of `--repeat` runs, L2 flushed (cold) and warm.
Writes results.json and results.md to --out.

    python3 benchmarks/bench_pairs.py --out /tmp/bench [--batches 1 8] [--modes fp32 tf32 fp16]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mbv2_pairs  # noqa: E402
import numpy as np  # noqa: E402

from fuseplanner.core.ir import Op, Tile, dtype_bytes  # noqa: E402
from fuseplanner.kernels import tiles  # noqa: E402

MODES = {"fp32": ("fp32", "fp32"), "tf32": ("fp32", "tf32"), "fp16": ("fp16", "fp32")}
SMS = 132


def mlp_pairs(batch: int) -> list[dict]:
    """Transformer MLPs (linear -> GELU -> linear over tokens): DeiT-Tiny and MobileViT-S-like."""
    out = []
    for name, tokens, c, hidden in (("deit_tiny_mlp", 197, 192, 768), ("mobilevit_mlp", 256, 144, 288)):
        def lin(n, ci, co, act, tokens=tokens):
            epi = ("bias", act) if act else ("bias",)
            return Op(name=n, op_type="MatMul", kind="linear", index=0, inputs=(n + "_x",), outputs=(n + "_y",),
                      input_shapes=((batch, tokens, ci),), output_shapes=((batch, tokens, co),), epilogue=epi,
                      has_bias=True)
        out.append({"kind": "pw_pw", "name": name, "ops": (lin("fc1", c, hidden, "gelu"), lin("fc2", hidden, c, None)),
                    "residual": False})
    return out


# ---- shortlist of tiles (measured afterwards) -----------------------------------------------------
def _block_cost(kind: str, ops, t: Tile, batch: int, tensor: bool) -> float:
    """Rough time proxy of a tile in cycles: waves x (chunks x load/sync latency + per-thread work)."""
    last = ops[-1]
    ho, wo = last.hw_out
    blocks = math.ceil(ho / t.th) * math.ceil(wo / t.tw) * math.ceil(last.c_out / t.tf) * batch
    p = t.th * t.tw
    pwf = 1 / 6 if tensor else 1.0
    hh, ww = tiles.halo_window(kind, ops, t)
    if kind == "pw_dw":
        k2 = ops[1].kernel[0] * ops[1].kernel[1]
        c = ops[0].c_in
        work = t.tf * hh * ww * c * pwf + t.tf * p * k2
        loads, chunks = c * hh * ww + t.tf * c, math.ceil(c / t.tc)
    elif kind == "dw_pw":
        k2 = ops[0].kernel[0] * ops[0].kernel[1]
        c = ops[0].c_in
        work = c * p * k2 + t.tf * p * c * pwf
        loads, chunks = c * hh * ww + t.tf * c, math.ceil(c / t.tc)
    elif kind == "pw_pw":
        c1, c2 = ops[0].c_in, ops[0].c_out
        work = (c2 * p * c1 + t.tf * p * c2) * pwf
        loads, chunks = c1 * p + c2 * c1 + t.tf * c2, math.ceil(c2 / t.tc) + 1
    else:
        c1, ce = ops[0].c_in, ops[0].c_out
        k2 = ops[1].kernel[0] * ops[1].kernel[1]
        work = (ce * hh * ww * c1 + t.tf * p * ce) * pwf + ce * p * k2
        loads, chunks = c1 * hh * ww + ce * c1 + t.tf * ce, math.ceil(ce / t.tc) + 1
    smem = tiles.smem_bytes(kind, ops, t, "fp32")
    per_sm = max(1, min(228 * 1024 // max(smem, 1), 2048 // t.threads, 32))
    waves = math.ceil(blocks / (SMS * per_sm))
    # resident blocks share the SM's issue slots: per-thread work scales with the blocks in flight
    share = min(per_sm, math.ceil(blocks / SMS)) * t.threads / 512
    return waves * (chunks * 1500 + (work + 2 * loads) / t.threads * max(1.0, share))


def shortlist(kind: str, ops, dtype: str, precision: str, batch: int, gpu, n: int = 8) -> list[Tile]:
    """The n best tiles by `_block_cost`, at most one per (th, tw, tf) so the list stays diverse."""
    cands = tiles.candidates(kind, ops, dtype, gpu, precision)
    tensor = dtype == "fp16" or precision == "tf32"
    cands = [t for t in cands if t.threads in (128, 256) and t.tc in (16, 32, 64)]
    out, seen = [], set()
    for t in sorted(cands, key=lambda t: _block_cost(kind, ops, t, batch, tensor)):
        if (t.th, t.tw, t.tf) not in seen:
            seen.add((t.th, t.tw, t.tf))
            out.append(t)
        if len(out) == n:
            break
    return out


# ---- compile in parallel (fills CuPy's on-disk kernel cache) ----------------------------------------
def _compile_one(job):
    kind, ops, tile, dtype, precision, biases, residual = job
    from fuseplanner.kernels import compile_kernel
    from fuseplanner.kernels.families.fused.launch import SOURCES, kernel_defines

    d = kernel_defines(kind, ops, tile, dtype, precision, biases, residual)
    src, name = SOURCES[kind]
    try:
        compile_kernel(src, name, d)
        return None
    except Exception as exc:  # report, keep going
        return f"{kind} {tile} {dtype}/{precision}: {exc}"


def precompile(jobs: list, workers: int) -> list[str]:
    import multiprocessing

    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as ex:
        return [e for e in ex.map(_compile_one, jobs, chunksize=4) if e]


# ---- PyTorch baseline -----------------------------------------------------------------------------
_TORCH_ACT = {None: None, "relu6": "relu6", "relu": "relu", "gelu": "gelu", "silu": "silu", "hardswish": "hardswish"}


def torch_fn(kind: str, ops, params, dtype: str, residual: bool):
    import torch
    import torch.nn.functional as F

    dt = torch.float16 if dtype == "fp16" else torch.float32
    acts = {"relu6": F.relu6, "relu": F.relu, "gelu": F.gelu, "silu": F.silu, "hardswish": F.hardswish}
    layers = []
    for op, (w, b) in zip(ops, params, strict=True):
        wt = torch.as_tensor(w, device="cuda", dtype=dt)
        bt = None if b is None else torch.as_tensor(b, device="cuda", dtype=dt)
        act = next((acts[e] for e in op.epilogue if e in acts), None)
        if op.kind == "linear":
            layers.append((lambda x, wt=wt, bt=bt: F.linear(x, wt, bt), act))
        else:
            layers.append((lambda x, wt=wt, bt=bt, op=op: F.conv2d(x, wt, bt, op.stride, op.pads[:2], op.dilation,
                                                                   op.groups), act))

    def run(x):
        y = x
        for f, act in layers:
            y = f(y)
            if act is not None:
                y = act(y)
        if residual:
            y = y + x
        return y

    return run


_SPIN = {}


def _spin(cycles: int) -> None:
    """Keep the GPU busy for `cycles` clocks so the CPU enqueues the timed region before it starts:
    the events then measure GPU time only, not Python launch overhead (PyTorch's or ours)."""
    import cupy as cp

    if "k" not in _SPIN:
        _SPIN["k"] = cp.RawKernel(
            'extern "C" __global__ void spin(long long n) { long long t = clock64(); while (clock64() - t < n) {} }',
            "spin")
    _SPIN["k"]((1,), (1,), (np.int64(cycles),))


def gpu_time(fn, repeat: int, flush: bool, spin_us: float = 100.0, warmup: int = 5) -> float:
    """Median GPU time (s) of fn() between CUDA events; L2 flushed before each run when `flush`."""
    import cupy as cp

    from fuseplanner.validation.timing import flush_l2

    for _ in range(warmup):
        fn()
    stream = cp.cuda.get_current_stream()
    evs = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(repeat)]
    for s, e in evs:
        if flush:
            flush_l2()
        _spin(int(spin_us * 1980))
        s.record(stream)
        fn()
        e.record(stream)
    evs[-1][1].synchronize()
    return statistics.median(cp.cuda.get_elapsed_time(s, e) for s, e in evs) * 1e-3


# ---- one pair -----------------------------------------------------------------------------------------
def floor_bytes(kind: str, ops, dtype: str, residual: bool) -> int:
    """Compulsory bytes of the fused kernel: input, output (+ residual) once, weights once (fp32)."""
    e = dtype_bytes(dtype)
    inp = math.prod(ops[0].in_shape) * e
    out = math.prod(ops[-1].out_shape) * e
    w = sum(math.prod(_wshape(op)) * 4 + op.c_out * 4 for op in ops)
    return inp + out + (out if residual else 0) + w


def _wshape(op: Op) -> tuple[int, ...]:
    from fuseplanner.validation.reference import weight_shape

    return weight_shape(op)


def random_inputs(ops, dtype: str, rng):
    """(x, params) on the host and (x, params, NaN-poisoned output) on the device for a pair."""
    import cupy as cp

    from fuseplanner.validation.reference import random_params

    np_dt = np.float16 if dtype == "fp16" else np.float32
    x = rng.standard_normal(ops[0].in_shape).astype(np_dt)
    params = random_params(ops, rng, bias=True)
    pd = [(cp.asarray(w), cp.asarray(b)) for w, b in params]
    return x, params, cp.asarray(x), pd, cp.full(ops[-1].out_shape, np.nan, dtype=np_dt)


def bench_pair(pair: dict, mode: str, batch: int, gpu, repeat: int, copy_bw: float, log) -> dict:
    import cupy as cp
    import torch

    from fuseplanner import kernels
    from fuseplanner.validation.reference import reference

    dtype, precision = MODES[mode]
    kind, ops, residual = pair["kind"], pair["ops"], pair["residual"]
    x, params, xd, pd, out = random_inputs(ops, dtype, np.random.default_rng(0))
    res = xd if residual else None
    ref = reference(kind, ops, x.astype(np.float64), params, residual=x if residual else None)
    best = None
    tried = []
    for tile in pair["shortlist"][(mode, batch)]:
        launch = kernels.prepare(kind, ops, tile, xd, pd, dtype=dtype, precision=precision, residual=res, out=out)
        t = gpu_time(launch, 20, flush=True, warmup=2)
        tried.append((str(tile), t))
        if best is None or t < best[1]:
            best = (tile, t, launch)
    tile, _, launch = best
    out.fill(np.nan)
    launch()
    cp.cuda.runtime.deviceSynchronize()
    host = cp.asnumpy(out).astype(np.float64)
    err = float(np.linalg.norm(host - ref) / np.linalg.norm(ref)) if np.isfinite(host).all() else float("nan")
    cold = gpu_time(launch, repeat, flush=True)
    warm = gpu_time(launch, repeat, flush=False)
    # PyTorch, like for like
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = mode == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
    tx = torch.as_tensor(x, device="cuda")
    fn = torch_fn(kind, ops, params, dtype, residual)
    with torch.no_grad():
        t_cold = gpu_time(lambda: fn(tx), repeat, flush=True)
        t_warm = gpu_time(lambda: fn(tx), repeat, flush=False)
    fb = floor_bytes(kind, ops, dtype, residual)
    floor_s = fb / copy_bw
    rec = {
        "kind": kind, "name": pair["name"], "mode": mode, "batch": batch,
        "shapes": [list(o.in_shape) for o in ops] + [list(ops[-1].out_shape)],
        "tile": str(tile), "tiles_tried": tried, "rel_err": err,
        "fused_cold_us": cold * 1e6, "fused_warm_us": warm * 1e6,
        "torch_cold_us": t_cold * 1e6, "torch_warm_us": t_warm * 1e6,
        "speedup_cold": t_cold / cold, "speedup_warm": t_warm / warm,
        "floor_us": floor_s * 1e6, "floor_fraction_cold": floor_s / cold,
        "cost_model_tile": pair.get("cost_tile", {}).get((mode, batch)),
    }
    log(f"{kind:9s} {pair['name']:14s} {mode:4s} b{batch}  fused {cold*1e6:7.2f}us ({tile})  torch {t_cold*1e6:7.2f}us"
        f"  x{t_cold/cold:5.2f}  warm x{t_warm/warm:5.2f}  err {err:.1e}  floor {floor_s/cold:5.1%}")
    return rec


def copy_bandwidth() -> float:
    import cupy as cp

    a = cp.empty(1 << 28, dtype=cp.uint8)
    b = cp.empty_like(a)
    from fuseplanner.validation.timing import time_kernel

    t = time_kernel(lambda: cp.copyto(b, a), warmup=3, repeat=20, flush_l2=False).median_s
    return 2 * a.nbytes / t


def cost_model_tile(kind, ops, dtype, precision, batch, gpu):
    try:
        from fuseplanner import cost
    except ImportError:
        return None
    try:
        best = None
        for t in tiles.candidates(kind, ops, dtype, gpu, precision):
            c = cost.estimate(kind, ops, t, dtype, batch, gpu, precision=precision)
            if c.feasible and (best is None or c.time_s < best[1]):
                best = (t, c.time_s)
        return None if best is None else best[0]
    except Exception as exc:  # the cost model is optional here
        return f"cost model failed: {exc}"


def markdown(records: list[dict]) -> str:
    lines = ["| kind | pair | mode | batch | tile | fused cold (us) | PyTorch cold (us) | speedup cold | speedup warm | "
             "floor fraction | rel err |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        lines.append(f"| {r['kind']} | {r['name']} | {r['mode']} | {r['batch']} | {r['tile']} | {r['fused_cold_us']:.2f} | "
                     f"{r['torch_cold_us']:.2f} | {r['speedup_cold']:.2f}x | {r['speedup_warm']:.2f}x | "
                     f"{r['floor_fraction_cold']:.1%} | {r['rel_err']:.1e} |")
    lines += ["", "| kind | mode | batch | pairs | median speedup (cold) | best | worst |", "|---|---|---|---|---|---|---|"]
    groups: dict = {}
    for r in records:
        groups.setdefault((r["kind"], r["mode"], r["batch"]), []).append(r["speedup_cold"])
    for (k, m, b), v in sorted(groups.items()):
        lines.append(f"| {k} | {m} | {b} | {len(v)} | {statistics.median(v):.2f}x | {max(v):.2f}x | {min(v):.2f}x |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    ap.add_argument("--kinds", nargs="+", default=list(tiles.FUSED_KINDS), choices=list(tiles.FUSED_KINDS))
    ap.add_argument("--repeat", type=int, default=100)
    ap.add_argument("--shortlist", type=int, default=6)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 4)
    ap.add_argument("--limit", type=int, default=0, help="at most this many pairs per kind (0: all)")
    args = ap.parse_args(argv)
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    import cupy as cp

    from fuseplanner.kernels import device_spec

    gpu = device_spec(cp)
    t0 = time.time()
    logf = open(outdir / "log.txt", "w")

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    pairs = []
    for batch in args.batches:
        ps = [p for p in mbv2_pairs.pairs(batch) + mlp_pairs(batch) if p["kind"] in args.kinds]
        if args.limit:
            kept, seen = [], {}
            for p in ps:
                seen[p["kind"]] = seen.get(p["kind"], 0) + 1
                if seen[p["kind"]] <= args.limit:
                    kept.append(p)
            ps = kept
        for p in ps:
            p["batch"] = batch
            p["shortlist"] = {}
            p["cost_tile"] = {}
            for mode in args.modes:
                dtype, precision = MODES[mode]
                p["shortlist"][(mode, batch)] = shortlist(p["kind"], p["ops"], dtype, precision, batch, gpu,
                                                          args.shortlist)
                ct = cost_model_tile(p["kind"], p["ops"], dtype, precision, batch, gpu)
                p["cost_tile"][(mode, batch)] = str(ct) if isinstance(ct, Tile) else ct
                if isinstance(ct, Tile) and ct not in p["shortlist"][(mode, batch)]:
                    p["shortlist"][(mode, batch)].append(ct)  # the cost model's pick is timed too
            pairs.append(p)
    jobs = []
    for p in pairs:
        for (mode, _b), tl in p["shortlist"].items():
            dtype, precision = MODES[mode]
            for t in tl:
                jobs.append((p["kind"], p["ops"], t, dtype, precision, tuple(True for _ in p["ops"]), p["residual"]))
    uniq = {(j[0], str([o.in_shape[1:] for o in j[1]]), str(j[2]), j[3], j[4], j[6]): j for j in jobs}
    errs = precompile(list(uniq.values()), args.workers)
    log(f"compiled {len(uniq)} kernels in {time.time() - t0:.0f}s, {len(errs)} failures")
    for e in errs[:10]:
        log("  " + e)
    bw = copy_bandwidth()
    log(f"device copy bandwidth {bw / 1e12:.2f} TB/s (read + write)")
    records = []
    for p in pairs:
        for mode in args.modes:
            try:
                records.append(bench_pair(p, mode, p["batch"], gpu, args.repeat, bw, log))
            except Exception as exc:
                log(f"FAILED {p['kind']} {p['name']} {mode} b{p['batch']}: {type(exc).__name__}: {exc}")
            (outdir / "results.json").write_text(json.dumps({"copy_bw": bw, "records": records}, indent=1))
    md = markdown(records)
    (outdir / "results.md").write_text(md)
    print(md)
    log(f"total {time.time() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
