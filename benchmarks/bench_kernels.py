"""Layer-by-layer DW and PW kernels of MobileNetV2 (224x224) against PyTorch, in the same run.

For every unique DW/PW layer, batch 1 and 8, and each mode (exact fp32 vs PyTorch with TF32 off, TF32
vs PyTorch's default, fp16 vs fp16): pick the fastest of a few feasible candidate tiles (warm, short),
check it against the float64 reference, then time it and PyTorch's conv2d (with bias) with CUDA
events, L2 flushed and warm, medians. Our kernel also applies the layer's activation; PyTorch's time
is the convolution alone. Writes JSON and markdown to OUTDIR.

    python3 benchmarks/bench_kernels.py OUTDIR [--quick]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy as cp  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from fuseplanner import kernels  # noqa: E402
from fuseplanner.core.ir import Op  # noqa: E402
from fuseplanner.kernels import (
    device_spec,  # noqa: E402
    tiles,  # noqa: E402
)
from fuseplanner.planning import search as planner  # noqa: E402
from fuseplanner.validation.reference import random_params, reference  # noqa: E402
from fuseplanner.validation.timing import time_kernel  # noqa: E402

# (kind, C_in, C_out, H_in, stride, activation): the unique DW/PW layers of MobileNetV2 at 224
DW = [(32, 112, 1), (96, 112, 2), (144, 56, 1), (144, 56, 2), (192, 28, 1), (192, 28, 2), (384, 14, 1),
      (576, 14, 1), (576, 14, 2), (960, 7, 1)]
PW = [(32, 16, 112, None), (16, 96, 112, "relu6"), (96, 24, 56, None), (24, 144, 56, "relu6"), (144, 24, 56, None),
      (144, 32, 28, None), (32, 192, 28, "relu6"), (192, 32, 28, None), (192, 64, 14, None), (64, 384, 14, "relu6"),
      (384, 64, 14, None), (384, 96, 14, None), (96, 576, 14, "relu6"), (576, 96, 14, None), (576, 160, 7, None),
      (160, 960, 7, "relu6"), (960, 160, 7, None), (960, 320, 7, None), (320, 1280, 7, "relu6")]
MODES = [("fp32", "fp32"), ("fp32", "tf32"), ("fp16", "fp32")]
TOL = {("fp32", "fp32"): 1e-5, ("fp32", "tf32"): 2e-3, ("fp16", "fp32"): 1e-2}


def make_op(kind, c_in, c_out, h, s, act, batch):
    k = 3 if kind == "dw" else 1
    p = 1 if kind == "dw" else 0
    ho = (h + 2 * p - k) // s + 1
    epi = ("bias", act) if act else ("bias",)
    return Op(name=f"{kind}_{c_in}_{c_out}_{h}_s{s}", op_type="Conv", kind=kind, index=0, inputs=("x",),
              outputs=("y",), input_shapes=((batch, c_in, h, h),), output_shapes=((batch, c_out, ho, ho),),
              kernel=(k, k), stride=(s, s), pads=(p, p, p, p), groups=c_in if kind == "dw" else 1, epilogue=epi,
              has_bias=True)


def score(kind, op, t, sms, tc_path=False, fill_exp=0.7):
    """Heuristic rank of a tile (higher is better) to choose which candidates to time."""
    n, (ho, wo), c = op.batch, op.hw_out, op.c_out
    tiles_n = math.ceil(ho / t.th) * math.ceil(wo / t.tw) * math.ceil(c / t.tf)
    blocks = n * tiles_n
    useful = ho * wo * c / (tiles_n * t.th * t.tw * t.tf)
    fill = min(1.0, blocks / (2 * sms)) ** fill_exp
    opt = t.tf * t.th * t.tw / t.threads
    if kind == "dw":
        hh, ww = tiles.halo_window("dw", [op], t)
        s = op.stride[0]
        reuse = t.th * t.tw * s * s / (hh * ww)
        warps = min(1.0, blocks * t.threads / (sms * 1024)) ** 0.5  # loads in flight hide DRAM latency
        return useful * fill * reuse * warps * (1.0 if 1 <= opt <= 16 else 0.6) * (1.0 if t.tw >= min(wo, 8) else 0.7)
    p = t.th * t.tw
    inten = (t.tf * p / (t.tf + p)) ** 0.5
    base = useful * fill * inten * (1.0 if t.tc in (16, 32) else 0.8)
    if tc_path:  # mma tiles are 16 filters x 8 pixels; want several per warp
        return base * (1.0 if t.tf % 16 == 0 else 0.4) * (1.0 if p % 8 == 0 else 0.6) * (1.0 if 8 <= opt <= 64 else 0.5)
    return base * (1.0 if 4 <= opt <= 32 else 0.5)


def pick_tiles(kind, op, dtype, precision, gpu, k):
    """The cost model's best tile, then up to `k` shortlisted by the heuristic `score`."""
    cands = tiles.candidates(kind, [op], dtype, gpu, precision)
    model = planner.TileSearch(gpu, dtype, op.batch, "time", "ours", precision).best(kind, (op,)).tile
    sms = getattr(gpu, "sm_count", 132)
    tc_path = dtype == "fp16" or precision == "tf32"
    # half the picks favour filling the SMs, half favour big tiles (more reuse, fewer blocks)
    picks: list = [model] if model is not None else []
    for fill_exp in (0.7, 0.2):
        ranked = sorted(cands, key=lambda t: -score(kind, op, t, sms, tc_path, fill_exp))
        picks += [t for t in ranked if t not in picks][: (k + 1) // 2]
    return picks[: k + 1]


def rel_err(a, ref):
    return float(np.linalg.norm(a.astype(np.float64) - ref) / np.linalg.norm(ref))


def bench_layer(kind, op, dtype, precision, gpu, args, rng):
    np_dt = np.float16 if dtype == "fp16" else np.float32
    x_h = rng.standard_normal(op.in_shape).astype(np_dt)
    params_h = random_params([op], rng)
    x = cp.asarray(x_h)
    w, b = (cp.asarray(a) for a in params_h[0])
    w_store = w.astype(np_dt) if kind == "pw" else w
    params = [(w_store, b)]
    best = None
    for t in pick_tiles(kind, op, dtype, precision, gpu, args.candidates):
        fn = kernels.prepare(kind, [op], t, x, params, dtype=dtype, precision=precision, gpu=gpu)
        tm = time_kernel(fn, warmup=3, repeat=args.search_repeat, flush_l2=True).median_s
        if best is None or tm < best[0]:
            best = (tm, t, fn)
    _, tile, fn = best
    out = fn()
    out.fill(cp.nan)
    fn()
    ref = reference(kind, [op], x_h.astype(np.float64), params_h)
    err = rel_err(cp.asnumpy(out), ref)
    ours_cold = time_kernel(fn, repeat=args.repeat, flush_l2=True)
    ours_warm = time_kernel(fn, repeat=args.repeat, flush_l2=False)

    tdt = torch.float16 if dtype == "fp16" else torch.float32
    xt = torch.as_tensor(x, device="cuda")
    wt = torch.as_tensor(w.reshape(op.c_out, op.c_in // op.groups, *op.kernel), device="cuda").to(tdt)
    bt = torch.as_tensor(b, device="cuda").to(tdt)
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"

    def torch_fn():
        return F.conv2d(xt, wt, bt, stride=op.stride, padding=op.pads[:2], groups=op.groups)

    torch_cold = time_kernel(torch_fn, repeat=args.repeat, flush_l2=True)
    torch_warm = time_kernel(torch_fn, repeat=args.repeat, flush_l2=False)
    e = 2 if dtype == "fp16" else 4
    nbytes = (math.prod(op.in_shape) + math.prod(op.out_shape)) * e + w_store.nbytes + b.nbytes
    return {
        "layer": op.name, "kind": kind, "batch": op.batch, "dtype": dtype, "precision": precision,
        "tile": str(tile) + (f" KS{fn.defines['KS']}" if getattr(fn, "defines", {}).get("KS", 1) > 1 else ""),
        "defines": {k: v for k, v in getattr(fn, "defines", {}).items()},
        "rel_err": err, "tol": TOL[(dtype, precision)], "ok": err < TOL[(dtype, precision)],
        "ours_cold_us": ours_cold.median_us, "ours_warm_us": ours_warm.median_us,
        "torch_cold_us": torch_cold.median_us, "torch_warm_us": torch_warm.median_us,
        "ratio_cold": ours_cold.median_s / torch_cold.median_s, "ratio_warm": ours_warm.median_s / torch_warm.median_s,
        "bytes": nbytes,
    }


def copy_bandwidth() -> float:
    a = cp.empty(256 << 20, dtype=cp.uint8)
    b = cp.empty_like(a)
    t = time_kernel(lambda: cp.copyto(b, a), warmup=3, repeat=20, flush_l2=True)
    return 2 * a.nbytes / t.median_s


def markdown(rows, bw, device, torch_version) -> str:
    lines = [
        f"Device: {device}; PyTorch {torch_version}; copy bandwidth {bw / 1e12:.2f} TB/s (read + write).",
        "ratio = ours / PyTorch (below 1 is faster); floor = (input + output + weights) bytes / copy bandwidth;",
        "'% floor' = floor / our cold time. PyTorch times are conv2d with bias only (our kernels also apply",
        "the activation). Modes: fp32 = exact FP32 vs PyTorch with TF32 off; tf32 = TF32 tensor cores vs",
        "PyTorch's default (TF32 on); fp16 = fp16 storage vs PyTorch fp16. cudnn.benchmark on.",
        "",
        "| layer | batch | mode | tile | ours cold (us) | torch cold (us) | ratio cold | ours warm | torch warm | ratio warm | % floor | rel err |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        mode = "fp16" if r["dtype"] == "fp16" else r["precision"]
        floor = r["bytes"] / bw * 1e6
        lines.append(
            f"| {r['layer']} | {r['batch']} | {mode} | {r['tile']} | {r['ours_cold_us']:.2f} | {r['torch_cold_us']:.2f} "
            f"| {r['ratio_cold']:.2f} | {r['ours_warm_us']:.2f} | {r['torch_warm_us']:.2f} | {r['ratio_warm']:.2f} "
            f"| {100 * floor / r['ours_cold_us']:.0f}% | {r['rel_err']:.1e} |"
        )
    lines.append("")
    for kind in ("dw", "pw"):
        for mode in ("fp32", "tf32", "fp16"):
            sel = [r for r in rows if r["kind"] == kind and ("fp16" if r["dtype"] == "fp16" else r["precision"]) == mode]
            if not sel:
                continue
            rc = [r["ratio_cold"] for r in sel]
            geo = math.exp(sum(math.log(v) for v in rc) / len(rc))
            within = sum(v <= 1.25 for v in rc)
            lines.append(f"- {kind} {mode}: geomean ratio (cold) {geo:.2f}, worst {max(rc):.2f}, "
                         f"{within}/{len(rc)} within 1.25x of PyTorch")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("--quick", action="store_true", help="fewer layers and repeats")
    ap.add_argument("--candidates", type=int, default=6)
    ap.add_argument("--repeat", type=int, default=100)
    ap.add_argument("--search-repeat", type=int, default=15)
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--only", default="", help="comma-separated substrings: layers whose name has one of them")
    ap.add_argument("--modes", default="fp32,tf32,fp16", help="comma-separated: fp32 (exact), tf32, fp16")
    args = ap.parse_args()
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    torch.backends.cudnn.benchmark = True
    gpu = device_spec(cp)
    rng = np.random.default_rng(0)
    bw = copy_bandwidth()
    layers = [("dw", c, c, h, s, "relu6") for c, h, s in DW] + [("pw", ci, co, h, 1, a) for ci, co, h, a in PW]
    if args.quick:
        layers = layers[::3]
    rows = []
    t0 = time.time()
    for batch in (int(b) for b in args.batches.split(",")):
        for kind, ci, co, h, s, act in layers:
            op = make_op(kind, ci, co, h, s, act, batch)
            if args.only and not any(part in op.name for part in args.only.split(",")):
                continue
            for dtype, precision in MODES:
                if kind == "dw" and precision == "tf32":
                    continue
                mode = "fp16" if dtype == "fp16" else precision
                if mode not in args.modes.split(","):
                    continue
                r = bench_layer(kind, op, dtype, precision, gpu, args, rng)
                rows.append(r)
                write(out, rows, bw, t0)
                print(f"{op.name:>22} b{batch} {mode:4} {r['tile']:>18} ours {r['ours_cold_us']:7.2f} "
                      f"torch {r['torch_cold_us']:7.2f} ratio {r['ratio_cold']:.2f} warm {r['ratio_warm']:.2f} "
                      f"err {r['rel_err']:.1e}{'' if r['ok'] else ' FAIL'}", flush=True)
    print(write(out, rows, bw, t0)[-1500:])
    return 0 if all(r["ok"] for r in rows) else 1


def write(out: Path, rows: list, bw: float, t0: float) -> str:
    """Write the JSON and markdown results so far (called after every layer); returns the markdown."""
    device = cp.cuda.runtime.getDeviceProperties(0)["name"]
    device = device.decode() if isinstance(device, bytes) else str(device)
    result = {"device": device, "torch": torch.__version__, "copy_bandwidth_Bps": bw, "rows": rows,
              "seconds": time.time() - t0, "command": " ".join(sys.argv)}
    (out / "bench_kernels.json").write_text(json.dumps(result, indent=1))
    md = markdown(rows, bw, device, torch.__version__)
    (out / "bench_kernels.md").write_text(md)
    return md


if __name__ == "__main__":
    sys.exit(main())
