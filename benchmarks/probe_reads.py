"""Launch chosen kernels once each (no timing) so that Nsight Compute can read where their global
reads go: which of the bytes the cost model counts reach L2, and which L1 serves. The evidence behind
the read model of `fuseplanner.cost` (docs/cost_model.md, "What reaches L2"); run it with
`scripts/gpu_run.py OUT probe-reads`, which wraps it in `ncu` and writes the CSV.

    python3 benchmarks/probe_reads.py [CASE:DTYPE:TILE ...]      # default: the built-in list
    python3 benchmarks/probe_reads.py --report DIR [--gpu h100]   # CPU: DIR's counters vs the model

CASE names one of CASES (a kernel kind and its ops); TILE is `Tile.__str__`'s form THxTW/fTF/cTC/tTHREADS.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from mbv2_pairs import conv  # noqa: E402

from fuseplanner.core.ir import Op, Tile  # noqa: E402


def linear(name: str, tokens: int, c_in: int, c_out: int) -> Op:
    """A token-major linear Op record [1, tokens, c_in] -> [1, tokens, c_out] with bias."""
    return Op(name=name, op_type="MatMul", kind="linear", index=0, inputs=(name + "_in",), outputs=(name + "_out",),
              input_shapes=((1, tokens, c_in),), output_shapes=((1, tokens, c_out),), epilogue=("bias",),
              has_bias=True)  # fmt: skip


#: name -> (kernel kind, ops, residual)
CASES = {
    # MobileNetV2 block 7's DW -> PW at 14x14 (rows of 28/56 bytes: several rows share a sector)
    "dwpw14": ("dw_pw", (conv("d", "dw", 384, 384, 14, 14, 3), conv("p", "pw", 384, 64, 14, 14, act=None)), False),
    # MobileNetV2 block 15's DW -> PW at 7x7
    "dwpw7": ("dw_pw", (conv("d", "dw", 960, 960, 7, 7, 3), conv("p", "pw", 960, 160, 7, 7, act=None)), False),
    # the last projection and the head conv of MobileNetV2 (weight-dominated)
    "pwpw7": ("pw_pw", (conv("a", "pw", 960, 320, 7, 7, act=None), conv("b", "pw", 320, 1280, 7, 7)), False),
    # a squeeze-excite pair on a 1x1 map (MobileNetV3-Large)
    "se672": ("pw_pw", (conv("a", "pw", 672, 168, 1, 1, act="relu"), conv("b", "pw", 168, 672, 1, 1)), False),
    # a layer-by-layer DW at 7x7
    "dw7": ("dw", (conv("d", "dw", 960, 960, 7, 7, 3),), False),
    # MobileNetV2's 16 -> 96 expansion at 112x112 (write-heavy: output 6x the input)
    "pw112": ("pw", (conv("e", "pw", 16, 96, 112, 112),), False),
    # the expansion + DW of MobileNetV2 block 7 (14x14)
    "pwdw14": ("pw_dw", (conv("e", "pw", 64, 384, 14, 14), conv("d", "dw", 384, 384, 14, 14, 3)), False),
    # MnasNet's 192 -> 1152 expansion at 7x7 (weight-dominated; odd output rows)
    "pw7": ("pw", (conv("e", "pw", 192, 1152, 7, 7),), False),
    # MobileViT-XXS transformer linears (256 tokens of 64 channels) and a 1280 -> 1000 classifier
    "lin64": ("linear", (linear("l", 256, 64, 128),), False),
    "lin128": ("linear", (linear("l", 256, 128, 64),), False),
    "cls": ("linear", (linear("l", 1, 1280, 1000),), False),
}

DEFAULT = [
    *(f"dwpw14:{dt}:14x4/f{tf}/c32/t64" for dt in ("fp16", "fp32") for tf in (8, 16, 32, 64)),
    *(f"dwpw14:{dt}:4x14/f8/c32/t64" for dt in ("fp16", "fp32")),
    *(f"dwpw7:{dt}:7x4/f{tf}/c8/t64" for dt in ("fp16", "fp32") for tf in (32, 160)),
    *(f"dwpw7:{dt}:2x4/f32/c32/t128" for dt in ("fp16", "fp32")),
    *(f"pwpw7:{dt}:1x4/f{tf}/c{tc}/t256" for dt in ("fp16", "fp32") for tf, tc in ((256, 16), (128, 16))),
    *(f"se672:{dt}:1x1/f256/c{tc}/t256" for dt in ("fp16", "fp32") for tc in (16, 32)),
    *(f"dw7:{dt}:2x4/f8/c8/t64" for dt in ("fp16", "fp32")),
    *(f"dw7:{dt}:7x4/f16/c16/t64" for dt in ("fp16", "fp32")),
    *(f"pwdw14:{dt}:4x4/f32/c64/t128" for dt in ("fp16", "fp32")),
    *(f"pw112:{dt}:4x16/f96/c16/t256" for dt in ("fp16", "fp32")),
]


def parse_tile(s: str) -> Tile:
    try:
        return Tile.parse(s)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None


def launch_once(cfg: str) -> dict:
    import cupy as cp

    from fuseplanner import kernels
    from fuseplanner.validation.reference import random_params

    name, dtype, tile_s = cfg.split(":")
    kind, ops, residual = CASES[name]
    tile = parse_tile(tile_s)
    np_dt = np.float16 if dtype == "fp16" else np.float32
    rng = np.random.default_rng(0)
    xd = cp.asarray(rng.standard_normal(ops[0].in_shape).astype(np_dt))
    pd = [(cp.asarray(w), cp.asarray(b)) for w, b in random_params(ops, rng, bias=True)]
    out = cp.full(ops[-1].out_shape, np.nan, dtype=np_dt)
    launch = kernels.prepare(kind, ops, tile, xd, pd, dtype=dtype, residual=xd if residual else None, out=out)
    launch()
    cp.cuda.runtime.deviceSynchronize()
    return {"config": cfg, "grid": list(launch.grid), "finite": bool(cp.isfinite(out).all())}


COLUMNS = {
    "lts__t_sectors_srcunit_tex_op_read.sum": "L2 read",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": "L1 lookups",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum": "L1 hits",
    "l1tex__m_xbar2l1tex_read_sectors.sum": "L2->L1",
    "lts__t_requests_srcunit_tex_op_read.sum": "L2 requests",
}


def counters(folder: Path, stem: str = "probe_reads") -> list[tuple[str, dict[str, float]]]:
    """(config, {metric: value}) per launched config, from the folder of a probe-reads task of
    scripts/gpu_run.py (`stem`.csv and `stem`.jsonl)."""
    from fuseplanner.validation.ncu import parse_csv

    per = [dict(k.metrics) for k in parse_csv((folder / f"{stem}.csv").read_text())]
    cfgs = [json.loads(line)["config"] for line in (folder / f"{stem}.jsonl").read_text().splitlines()
            if line.startswith("{") and '"error"' not in line]
    if len(cfgs) != len(per):
        raise SystemExit(f"{len(cfgs)} launched configs but {len(per)} profiled kernels in {folder}")
    return list(zip(cfgs, per, strict=True))


def report(folder: Path, gpu_name: str) -> None:
    """Print each config's modelled L2 read sectors beside the counters (a markdown table)."""
    from fuseplanner.cost import estimate
    from fuseplanner.hw.spec import gpu

    spec = gpu(gpu_name)
    print("| config | model | " + " | ".join(COLUMNS.values()) + " | L2 read / model | model write | L2 write |")
    print("|---|---:|" + "---:|" * (len(COLUMNS) + 3))
    for cfg, m in counters(folder):
        name, dtype, tile_s = cfg.split(":")
        kind, ops, residual = CASES[name]
        cost = estimate(kind, ops, parse_tile(tile_s), dtype, 1, spec, residual=residual)
        pred = cost.gma_read_bytes / 32
        cells = " | ".join(f"{m.get(k, float('nan')):,.0f}" for k in COLUMNS)
        ratio = m["lts__t_sectors_srcunit_tex_op_read.sum"] / pred
        wr = m.get("lts__t_sectors_srcunit_tex_op_write.sum", float("nan"))
        print(f"| {cfg} | {pred:,.0f} | {cells} | {ratio:.2f} | {cost.gma_write_bytes / 32:,.0f} | {wr:,.0f} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("configs", nargs="*", default=DEFAULT)
    ap.add_argument("--list", action="store_true", help="print the configs and exit")
    ap.add_argument("--report", metavar="DIR", help="compare DIR's counters with the model (no GPU)")
    ap.add_argument("--gpu", default="h100", help="spec for --report")
    args = ap.parse_args(argv)
    if args.report:
        report(Path(args.report), args.gpu)
        return 0
    if args.list:
        print("\n".join(args.configs))
        return 0
    launch_all(args.configs, launch_once)
    return 0


def launch_all(configs, launch) -> None:
    """Launch each config once, printing one JSON line per config (its result, or its error: the
    kernel order must stay, the CSV rows are matched by position)."""
    for cfg in configs:
        try:
            r = launch(cfg)
        except Exception as exc:
            r = {"config": cfg, "error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
