#!/usr/bin/env bash
# One device call for the layer-by-layer kernels: the GPU tests (layer-by-layer and, unless
# FUSED_TESTS=0, the fused ones; none with LBL_TESTS=0), then the layers selected by ONLY against PyTorch at BATCHES in the
# three modes (exact fp32, TF32, fp16; DW has no TF32). Results to OUTDIR.
#
#   ONLY=pw_960_320,pw_320_1280 BATCHES=1,8 [MODES=fp32,tf32,fp16] bash scripts/lbl_check.sh OUTDIR
#   # tests -> OUTDIR/gpu_tests.log; rows -> OUTDIR/bench/bench_kernels.{md,json}
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${1:?usage: scripts/lbl_check.sh OUTDIR}
mkdir -p "$OUTDIR"
. scripts/wheels.sh
export PYTHONUNBUFFERED=1
s=$(date +%s)
if [ "${LBL_TESTS:-1}" != 0 ]; then
  tests=(tests/gpu/test_lbl_kernels.py)
  [ "${FUSED_TESTS:-1}" != 0 ] && tests+=(tests/gpu/test_fused_kernels.py)
  timeout "${TEST_TIMEOUT:-300}" python3 -m pytest -q -rs --durations=5 "${tests[@]}" > "$OUTDIR/gpu_tests.log" 2>&1
  echo "tests exit $? $(( $(date +%s) - s )) s"
  grep -E "^(FAILED|ERROR)" "$OUTDIR/gpu_tests.log" | head -20
fi
if [ -n "${ONLY:-}" ]; then
  timeout "${BENCH_TIMEOUT:-240}" python3 benchmarks/bench_kernels.py "$OUTDIR/bench" --batches "${BATCHES:-1,8}" \
    --candidates "${CANDIDATES:-4}" --repeat 50 --search-repeat 10 --only "$ONLY" --modes "${MODES:-fp32,tf32,fp16}" > "$OUTDIR/bench.log" 2>&1
  echo "bench exit $? $(( $(date +%s) - s )) s"
  grep -E "ratio" "$OUTDIR/bench.log" | grep -v "^|" | tail -80
fi
echo "total $(( $(date +%s) - s )) s"
