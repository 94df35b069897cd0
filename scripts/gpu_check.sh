#!/usr/bin/env bash
# Run every GPU test and benchmark on a CUDA machine in one call; results (JSON + markdown) go to OUTDIR.
#
#   bash scripts/gpu_check.sh OUTDIR
#
# Environment (optional): GPU_CHECK_TESTS=0 skips the tests; GPU_CHECK_TESTPATH narrows them (default tests/gpu); GPU_CHECK_BENCH="bench_kernels" runs only
# benchmarks/<name>.py for the names listed (default: every benchmarks/bench_*.py); BENCH_ARGS is passed
# to each benchmark after OUTDIR; PYTEST_ARGS to pytest.
# Wheels in .whl/ (pydantic and its needs, absent on the GPU machine) are installed to /tmp/site first.
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${1:?usage: scripts/gpu_check.sh OUTDIR}
mkdir -p "$OUTDIR"
. scripts/wheels.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader \
  > "$OUTDIR/device.txt" 2>&1 || true

status_tests=skipped
if [ "${GPU_CHECK_TESTS:-1}" != 0 ]; then
  # shellcheck disable=SC2086
  python3 -m pytest ${GPU_CHECK_TESTPATH:-tests/gpu} -q -rs --junitxml="$OUTDIR/gpu_tests.xml" ${PYTEST_ARGS:-} 2>&1 | tee "$OUTDIR/gpu_tests.log" | tail -40
  rc=${PIPESTATUS[0]}
  status_tests=$([ "$rc" -eq 0 ] && echo passed || echo "failed (pytest exit $rc)")
fi

bench_status=()
names=${GPU_CHECK_BENCH:-$(cd benchmarks && ls bench_*.py 2>/dev/null | sed 's/\.py$//')}
for name in $names; do
  start=$(date +%s)
  # shellcheck disable=SC2086
  python3 "benchmarks/$name.py" "$OUTDIR" ${BENCH_ARGS:-} 2>&1 | tee "$OUTDIR/$name.log" | tail -60
  rc=${PIPESTATUS[0]}
  bench_status+=("\"$name\": {\"exit\": $rc, \"seconds\": $(( $(date +%s) - start ))}")
done

joined=$(IFS=,; echo "${bench_status[*]:-}")
cat > "$OUTDIR/gpu_check.json" <<JSON
{"tests": "$status_tests", "benchmarks": {${joined}}, "device": "$(head -1 "$OUTDIR/device.txt" | tr -d '"')"}
JSON
{
  echo "# GPU check"
  echo
  echo "- device: $(head -1 "$OUTDIR/device.txt")"
  echo "- tests (pytest tests/gpu): $status_tests"
  for name in $names; do
    [ -f "$OUTDIR/$name.md" ] && { echo; echo "## $name"; echo; cat "$OUTDIR/$name.md"; }
  done
} > "$OUTDIR/gpu_check.md"
cat "$OUTDIR/gpu_check.json"
[ "$status_tests" = passed ] || [ "$status_tests" = skipped ]
