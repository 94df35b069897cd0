#!/usr/bin/env bash
# One device call for the pw/linear cluster split (2026-11-23): the layer-by-layer GPU tests and the
# DW->PW split tests, the deep PW layers against PyTorch (batch 1 and 8, three modes), and a
# counter-free MobileViT-XXS sweep with the planner's layer-by-layer residual Adds. Results to OUTDIR.
#
#   bash scripts/lbl_split_check.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${1:?usage: scripts/lbl_split_check.sh OUTDIR}
mkdir -p "$OUTDIR"
. scripts/wheels.sh
export PYTHONUNBUFFERED=1
s=$(date +%s)
timeout 200 python3 -m pytest -q -rs tests/gpu/test_lbl_kernels.py "tests/gpu/test_fused_kernels.py::test_dw_pw_every_cluster_split" \
  > "$OUTDIR/gpu_tests.log" 2>&1; echo "tests exit $? $(( $(date +%s) - s )) s"; tail -4 "$OUTDIR/gpu_tests.log"
timeout 190 python3 benchmarks/bench_kernels.py "$OUTDIR/bench" --batches 1,8 --candidates 4 --repeat 50 --search-repeat 10 \
  --only pw_384,pw_576,pw_960,pw_160_960,pw_320,pw_96_576 > "$OUTDIR/bench.log" 2>&1
echo "bench exit $? $(( $(date +%s) - s )) s"; grep -E "^- pw" "$OUTDIR/bench/bench_kernels.md"
VALIDATE_CALIBRATE=0 VALIDATE_TIMEOUT=110 VALIDATE_ARGS="--no-ncu" VALIDATE_RUNS="mobilevit_xxs:fp32:sweep" \
  bash scripts/validate_gpu.sh "$OUTDIR" 2>&1 | grep -E "GMA|TIME|fuse dec|correct"
echo "total $(( $(date +%s) - s )) s"
