"""Launch the copy probe (kernels/probe_copy.cu) once per pattern so that Nsight Compute can read
what the L2 read counter sees for one global -> shared copy pattern and instruction: whether L2
serves the sectors the blocks ask for, or more (the linear and fp16 weight copies of the kernels read
1.3-1.5x their sectors, docs/validation.md), independent of any kernel's math.

    python3 scripts/gpu_run.py OUT probe-copy[:PATTERN:MODE:VB,...]    # on the GPU, under ncu
    python3 benchmarks/probe_copy.py --report OUT                    # CPU: counters vs sectors asked for

PATTERN names one of PATTERNS; optional fields after VB: kbN (each block's shared memory, N KB, which
the L1 gives up: kb200 leaves it about 28 KB), padN (N bytes between the shared rows, as the
kernels pad their stages) and ksN (thread-block clusters of N consecutive blocks, as the dw_pw split
reduction launches); MODE is cg (cp.async.cg), ca (cp.async.ca), ld (ld.global + st.shared) or nc
(ld.global.nc); VB the bytes per thread and instruction (4, 8, 16; cg needs 16). Every block records
its SM (%smid) in the jsonl, and the report counts the distinct SMs and TPCs among each region's
readers beside what L2 saw.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: name -> (blocks, SEG bytes per row, ROWS, PITCH, REGION, DIV, NDIST, what it mimics)
PATTERNS = {
    # 512 KB read once, 4 KB contiguous per block
    "once": (128, 256, 16, 256, 4096, 1, 128, "stream, read once"),
    # 4 MB read once
    "once4m": (1024, 256, 16, 256, 4096, 1, 1024, "stream, read once, 4 MB"),
    # lin64's weights: 8 filter tiles of 16 rows x 256 B, each read by 16 consecutive blocks
    "w16": (128, 256, 16, 256, 4096, 16, 8, "lin64 W: 4 KB tiles, 16 consecutive blocks each"),
    # lin64's tokens: 16 token tiles of 4 KB, block b reads tile b % 16 (8 times each)
    "x8": (128, 256, 16, 256, 4096, 1, 16, "lin64 X: 4 KB tiles, every 16th block"),
    # the same with 64-byte row segments (16-channel chunks)
    "x8s64": (128, 64, 64, 256, 16384, 1, 16, "lin64 X, 64-byte segments"),
    # 64 KB per block in flight at once, one block per SM, 8.4 MB read once
    "big": (132, 256, 256, 256, 65536, 1, 132, "64 KB per block in flight, read once"),
    # the same with three blocks per SM
    "big3": (396, 256, 256, 256, 65536, 1, 396, "64 KB per block in flight, 3 blocks per SM, read once"),
    # the classifier's weights: 20 column chunks of 256 B over 256 rows 5,120 B apart, read once
    "cls": (20, 256, 256, 5120, 256, 1, 20, "1280x1000 classifier W chunk columns, read once"),
}
#: Readers of one region: cR = R consecutive blocks read each 4 KB region (a PW weight chunk read by
#: the spatial tiles of a filter tile), sN = block b reads region b % N (an input window read by the
#: filter tiles, N spatial tiles apart); 264 blocks (two per SM on the H100) either way. A suffix
#: .B.K sets the blocks (B) and each region's size (K KB, read as 256-byte rows): c15.15.960 is a
#: squeeze-excite W1 of 960 KB read by 15 blocks.
SWEEP_BLOCKS = 264


def pattern(name: str) -> tuple:
    """PATTERNS[name], or the parametric cR / sN patterns above."""
    if name in PATTERNS:
        return PATTERNS[name]
    kind, spec = name[:1], name[1:].split(".")
    if kind not in ("c", "s") or len(spec) not in (1, 3) or not all(x.isdigit() and int(x) > 0 for x in spec):
        raise KeyError(name)
    r, blocks, kb = (int(spec[0]), SWEEP_BLOCKS, 4) if len(spec) == 1 else map(int, spec)
    if r > blocks:
        raise KeyError(name)
    rows = kb * 4
    if kind == "c":
        return (blocks, 256, rows, 256, kb * 1024, r, -(-blocks // r), f"{r} consecutive blocks per {kb} KB region")
    return (blocks, 256, rows, 256, kb * 1024, 1, r, f"block b reads {kb} KB region b % {r}")


MODES = {"cg": 0, "ca": 1, "ld": 2, "nc": 3, "cgn": 4, "can": 5, "cgz": 6}
DEFAULT = [
    *(f"{p}:{m}:16" for p in PATTERNS for m in MODES),
    *(f"{p}:{m}:16:kb{kb}" for p in ("big", "big3") for m in ("cg", "ca", "ld") for kb in (72, 200)),
    *(f"{p}:{m}:{vb}" for p in ("once", "w16") for m in ("ca", "can") for vb in (4, 8)),
    # padded shared rows (the kernels' stages)
    *(f"{p}:{m}:16:pad{pad}" for p in ("once", "x8", "w16") for m in ("cg", "ca", "ld") for pad in (16, 32, 64, 128)),
    *(f"once:ca:{vb}:pad{pad}" for vb in (4, 8) for pad in (4, 8, 16, 32) if pad % vb == 0),
    # how many readers of the same sectors reach L2
    *(f"c{r}:ca:16:pad16" for r in (1, 2, 4, 8, 16, 33, 66, 132, 264)),
    *(f"s{n}:ca:16:pad16" for n in (2, 4, 16, 66, 132)),
]
SMEM_MAX = 65536
THREADS = 256


def parse(cfg: str) -> tuple[str, int, int, int, int, int]:
    try:
        name, mode, vb, *opts = cfg.split(":")
        extra = {o[:3] if o.startswith("pad") else o[:2]: int(o[3:] if o.startswith("pad") else o[2:]) for o in opts}
        ks = extra.get("ks", 1)
        if ks < 1 or pattern(name)[0] % ks:
            raise ValueError
        if set(extra) - {"kb", "pad", "ks"} or mode not in MODES or int(vb) not in (4, 8, 16) or (mode in ("cg", "cgn", "cgz") and vb != "16"):
            raise ValueError
    except (ValueError, KeyError):
        raise SystemExit(f"bad copy probe config {cfg!r}: PATTERN:MODE:VB, e.g. once:cg:16") from None
    return name, MODES[mode], int(vb), extra.get("kb", 0) * 1024, extra.get("pad", 0), ks


def asked_sectors(name: str) -> int:
    """Sectors the blocks' copies ask for (each block's rows, whole sectors; every block counted)."""
    blocks, seg, rows, *_ = pattern(name)
    return blocks * rows * -(-seg // 32)


def distinct_sectors(name: str) -> int:
    """Distinct sectors over all blocks (what DRAM must deliver)."""
    blocks, seg, rows, pitch, region, div, ndist, _ = pattern(name)
    used = {(b // div) % ndist for b in range(blocks)}
    s = set()
    for d in used:
        for r in range(rows):
            lo = d * region + r * pitch
            s.update(range(lo // 32, (lo + seg - 1) // 32 + 1))
    return len(s)


def launch_once(cfg: str) -> dict:
    import cupy as cp

    from fuseplanner.kernels import compile_kernel, launch

    name, mode, vb, dyn, pad, ks = parse(cfg)
    blocks, seg, rows, pitch, region, div, ndist, _ = pattern(name)
    smem = min(rows * (seg + pad), SMEM_MAX)  # every unit its own slot up to 64 KB
    dyn = max(dyn, smem)
    defines = {"MODE": mode, "VB": vb, "SEG": seg, "ROWS": rows, "PITCH": pitch, "REGION": region, "DIV": div,
               "NDIST": ndist, "THREADS": THREADS, "SMEM": smem, "PAD": pad, "KS": ks}  # fmt: skip
    kernel = compile_kernel("probe_copy.cu", "probe_copy", defines)
    nbytes = max((ndist - 1) * region + (rows - 1) * pitch + seg, 1)
    src = cp.random.standard_normal(-(-nbytes // 4) + 8, dtype=cp.float32)
    sink = cp.full(blocks, cp.nan, dtype=cp.float32)
    where = cp.full(blocks, 0xFFFFFFFF, dtype=cp.uint32)
    launch(kernel, (blocks, 1, 1), THREADS, dyn, (src, sink, where))
    cp.cuda.runtime.deviceSynchronize()
    return {"config": cfg, "grid": [blocks, 1, 1], "finite": bool(cp.isfinite(sink).all()), "sm": where.get().tolist()}


def reader_units(name: str, sms: list[int], unit: int) -> int:
    """Sectors the blocks would read if L2 saw one read per region and distinct `unit` of SMs among
    its readers (`unit` 1: per SM, as L1 would merge them; 2: per TPC, the two SMs of %smid 2k and
    2k + 1), from the SM each block ran on."""
    blocks, seg, rows, _, _, div, ndist, _ = pattern(name)
    per: dict[int, set[int]] = {}
    for b, sm in enumerate(sms[:blocks]):
        per.setdefault((b // div) % ndist, set()).add(sm // unit)
    return sum(len(v) for v in per.values()) * rows * -(-seg // 32)


def report(folder: Path) -> None:
    from probe_reads import counters

    sms = {}
    for line in (folder / "probe_copy.jsonl").read_text().splitlines():
        if line.startswith("{") and '"sm"' in line:
            r = json.loads(line)
            sms[r["config"]] = r["sm"]
    print("| config | pattern | asked | distinct | per SM | per TPC | L2 read | L2 / asked | L2 requests | L1 lookups "
          "| L1 hits | L2->L1 | fabric |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for cfg, m in counters(folder, "probe_copy"):
        name = cfg.split(":")[0]
        asked = asked_sectors(name)
        g = m.get
        where = sms.get(cfg)
        units = [f"{reader_units(name, where, u):,}" if where else "" for u in (1, 2)]
        print(f"| {cfg} | {pattern(name)[-1]} | {asked:,} | {distinct_sectors(name):,} | {units[0]} | {units[1]} "
              f"| {g('lts__t_sectors_srcunit_tex_op_read.sum', 0):,.0f} "
              f"| {g('lts__t_sectors_srcunit_tex_op_read.sum', 0) / asked:.2f} "
              f"| {g('lts__t_requests_srcunit_tex_op_read.sum', 0):,.0f} "
              f"| {g('l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum', 0):,.0f} "
              f"| {g('l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum', 0):,.0f} "
              f"| {g('l1tex__m_xbar2l1tex_read_sectors.sum', 0):,.0f} "
              f"| {g('lts__t_sectors_srcunit_ltcfabric.sum', 0):,.0f} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("configs", nargs="*", default=DEFAULT)
    ap.add_argument("--report", metavar="DIR", help="compare DIR's counters with the sectors asked for (no GPU)")
    args = ap.parse_args(argv)
    if args.report:
        report(Path(args.report))
        return 0
    from probe_reads import launch_all

    launch_all(args.configs, launch_once)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
