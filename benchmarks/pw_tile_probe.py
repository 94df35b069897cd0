"""Every feasible tile of one MobileNetV2 PW layer on the GPU, against PyTorch in the same run.

Times each tile `tiles.candidates` offers (optionally only some block sizes), cold L2, a short median,
then re-times the fastest few with long medians, checks them against the float64 reference (output
poisoned with NaN first) and times PyTorch's conv2d the same way (exact fp32 with TF32 off, TF32 with
it on, fp16). Shows how far the best existing tile is from the cost model's choice and from PyTorch.

    python3 benchmarks/pw_tile_probe.py OUTDIR --layer pw_320_1280 --batch 8 --mode fp32 [--threads 128,256]
    # -> OUTDIR/pw_tile_probe.{json,md}

With `--ncu`, launches only the `--only` tiles and PyTorch's convolution once each, inside an NVTX
range "probe" (after PyTorch's algorithm search), for `ncu --nvtx --nvtx-include "probe/"`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cupy as cp  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from bench_kernels import PW, TOL, make_op, rel_err  # noqa: E402

from fuseplanner import kernels  # noqa: E402
from fuseplanner.core.ir import Tile  # noqa: E402
from fuseplanner.kernels import (
    device_spec,  # noqa: E402
    tiles,  # noqa: E402
)
from fuseplanner.planning import search as planner  # noqa: E402
from fuseplanner.validation.reference import random_params, reference  # noqa: E402
from fuseplanner.validation.timing import time_kernel  # noqa: E402

MODES = {"fp32": ("fp32", "fp32"), "tf32": ("fp32", "tf32"), "fp16": ("fp16", "fp32")}


def torch_conv(op, x, w, b, dtype: str, precision: str):
    """PyTorch's conv2d of `op` on the CuPy arrays (cudnn.benchmark on; TF32 only for precision tf32)."""
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    tdt = torch.float16 if dtype == "fp16" else torch.float32
    xt = torch.as_tensor(x, device="cuda")
    wt = torch.as_tensor(w.reshape(op.c_out, op.c_in, 1, 1), device="cuda").to(tdt)
    bt = torch.as_tensor(b, device="cuda").to(tdt)
    return lambda: F.conv2d(xt, wt, bt)


def ncu_launches(op, tiles_, x, params, dtype: str, precision: str, gpu) -> int:
    """One launch per tile and one of PyTorch's convolution, inside the NVTX range "probe"."""
    fns = [kernels.prepare("pw", [op], t, x, params, dtype=dtype, precision=precision, gpu=gpu) for t in tiles_]
    conv = torch_conv(op, x, params[0][0], params[0][1], dtype, precision)
    for fn in [*fns, conv]:  # compile, and let cuDNN pick its algorithm, outside the range
        fn()
    cp.cuda.runtime.deviceSynchronize()
    torch.cuda.nvtx.range_push("probe")
    for fn in [*fns, conv]:
        fn()
    cp.cuda.runtime.deviceSynchronize()
    torch.cuda.nvtx.range_pop()
    print("launched:", ", ".join(str(t) for t in tiles_), "+ torch conv2d")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("--layer", default="pw_320_1280", help="prefix of a bench_kernels PW layer name")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--mode", choices=sorted(MODES), default="fp32")
    ap.add_argument("--threads", default="", help="comma-separated block sizes to keep (default: all)")
    ap.add_argument("--top", type=int, default=6, help="tiles re-timed with long medians and checked")
    ap.add_argument("--repeat", type=int, default=100)
    ap.add_argument("--only", default="", help="comma-separated tiles (THxTW/fTF/cTC/tTHREADS, or model: the cost model's) instead of every one")
    ap.add_argument("--ncu", action="store_true", help="launch the --only tiles and PyTorch once each, untimed")
    args = ap.parse_args()
    dtype, precision = MODES[args.mode]
    layers = [make_op("pw", ci, co, h, 1, a, args.batch) for ci, co, h, a in PW]
    op = next((o for o in layers if o.name.startswith(args.layer)), None)
    if op is None:
        print(f"error: no PW layer named {args.layer}*", file=sys.stderr)
        return 2
    gpu = device_spec(cp)
    rng = np.random.default_rng(0)
    np_dt = np.float16 if dtype == "fp16" else np.float32
    x_h = rng.standard_normal(op.in_shape).astype(np_dt)
    params_h = random_params([op], rng)
    x = cp.asarray(x_h)
    w, b = (cp.asarray(a) for a in params_h[0])
    params = [(w.astype(np_dt), b)]
    keep = {int(t) for t in args.threads.split(",") if t}
    cands = [t for t in tiles.candidates("pw", [op], dtype, gpu, precision) if not keep or t.threads in keep]
    model = planner.TileSearch(gpu, dtype, op.batch, "time", "ours", precision).best("pw", (op,)).tile
    if args.only:
        try:
            cands = [model if s == "model" else Tile.parse(s) for s in args.only.split(",")]
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    if args.ncu:
        return ncu_launches(op, cands, x, params, dtype, precision, gpu)
    t0 = time.time()
    rows = []
    for t in cands:
        fn = kernels.prepare("pw", [op], t, x, params, dtype=dtype, precision=precision, gpu=gpu)
        rows.append({"tile": str(t), "model": t == model, "defines": {k: v for k, v in fn.defines.items() if k in (
            "A_THR", "KVEC", "PVEC", "FLAT", "KS", "STAGES", "XU", "WU")},
            "search_us": time_kernel(fn, warmup=3, repeat=10, flush_l2=True).median_s * 1e6, "_t": t})
    rows.sort(key=lambda r: r["search_us"])
    ref = reference("pw", [op], x_h.astype(np.float64), params_h)
    top = rows[: args.top] + [r for r in rows[args.top:] if r["model"]]
    for r in top:
        fn = kernels.prepare("pw", [op], r["_t"], x, params, dtype=dtype, precision=precision, gpu=gpu)
        out = fn()
        out.fill(cp.nan)
        fn()
        r["rel_err"] = rel_err(cp.asnumpy(out), ref)
        r["ok"] = bool(r["rel_err"] < TOL[(dtype, precision)])
        r["cold_us"] = time_kernel(fn, repeat=args.repeat, flush_l2=True).median_s * 1e6
    torch_us = time_kernel(torch_conv(op, x, w, b, dtype, precision), repeat=args.repeat, flush_l2=True).median_s * 1e6
    for r in rows:
        r.pop("_t")
    device = cp.cuda.runtime.getDeviceProperties(0)["name"]
    device = device.decode() if isinstance(device, bytes) else str(device)
    result = {"device": device, "layer": op.name, "batch": args.batch, "mode": args.mode, "torch_cold_us": torch_us,
              "tiles": len(rows), "rows": rows, "seconds": time.time() - t0, "command": " ".join(sys.argv)}
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "pw_tile_probe.json").write_text(json.dumps(result, indent=1))
    lines = [f"{device}; {op.name} batch {args.batch} {args.mode}; {len(rows)} tiles; PyTorch (cold) "
             f"{torch_us:.2f} us", "", "| tile | model's | defines | search us | cold us | ratio | rel err |",
             "|---|---|---|---|---|---|---|"]
    for r in top:
        lines.append(f"| {r['tile']} | {'yes' if r['model'] else ''} | {r['defines']} | {r['search_us']:.2f} | "
                     f"{r['cold_us']:.2f} | {r['cold_us'] / torch_us:.2f} | {r['rel_err']:.1e}{'' if r['ok'] else ' FAIL'} |")
    (out / "pw_tile_probe.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(r["ok"] for r in top) else 1


if __name__ == "__main__":
    sys.exit(main())
