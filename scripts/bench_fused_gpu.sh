#!/usr/bin/env bash
# One device call: the fused-kernel GPU tests, then the PW->DW and DW->PW pair benchmark against PyTorch
# (batch 1 and 8; exact fp32, TF32, fp16), results under OUTDIR (pairs/results.{json,md}, logs).
#
#   [REPEAT=50] [SHORTLIST=6] bash scripts/bench_fused_gpu.sh OUTDIR [KINDS...]     # default kinds: pw_dw dw_pw
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${1:?usage: scripts/bench_fused_gpu.sh OUTDIR [KINDS...]}
shift
KINDS=${*:-pw_dw dw_pw}
mkdir -p "$OUTDIR"
. scripts/wheels.sh
export PYTHONUNBUFFERED=1
timeout "${TEST_TIMEOUT:-240}" python3 -m pytest tests/gpu/test_fused_kernels.py -q -rs 2>&1 | tee "$OUTDIR/tests.log" | tail -6
# shellcheck disable=SC2086
timeout "${BENCH_TIMEOUT:-420}" python3 benchmarks/bench_pairs.py --out "$OUTDIR/pairs" --kinds $KINDS --batches 1 8 \
  --repeat "${REPEAT:-50}" --shortlist "${SHORTLIST:-6}" > "$OUTDIR/pairs.log" 2>&1
tail -14 "$OUTDIR/pairs.log"
