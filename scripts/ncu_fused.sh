#!/usr/bin/env bash
# Nsight Compute sections (full set) of fused kernels, one device call:
#
#   bash scripts/ncu_fused.sh OUTDIR CONFIG [CONFIG ...]     # CONFIG as in benchmarks/probe_fused.py
#
# First times every config against PyTorch (probe_fused.py --torch, cold L2), then launches each once
# under ncu --set full and writes OUTDIR/probe.json, OUTDIR/fused.ncu-rep and OUTDIR/details.txt (the
# per-kernel section tables, in config order).
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${1:?usage: scripts/ncu_fused.sh OUTDIR CONFIG...}
shift
mkdir -p "$OUTDIR"
. scripts/wheels.sh
python3 benchmarks/probe_fused.py --out "$OUTDIR" --torch --repeat 50 "$@" 2>&1 | tee "$OUTDIR/probe.log"
ncu --set full --cache-control all --import-source no -k "regex:fused_" -o "$OUTDIR/fused" \
  python3 benchmarks/probe_fused.py --out "$OUTDIR" --ncu "$@" > "$OUTDIR/ncu.log" 2>&1
echo "ncu rc $?"
tail -3 "$OUTDIR/ncu.log"
ncu --import "$OUTDIR/fused.ncu-rep" --page details > "$OUTDIR/details.txt" 2>&1
wc -l "$OUTDIR/details.txt"
