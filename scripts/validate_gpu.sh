#!/usr/bin/env bash
# Calibrate this GPU and validate models against the cost models, in one call; results to OUTDIR.
#
#   bash scripts/validate_gpu.sh OUTDIR
#
# Environment (optional): VALIDATE_RUNS: space-separated MODEL:DTYPE:TILES triples (when set, it replaces
# the next two); VALIDATE_MODELS (default "mobilenet_v2"), VALIDATE_CONFIGS: space-separated
# DTYPE:TILES pairs (default "fp32:planned fp16:planned"), VALIDATE_CALIBRATE=0 skips calibration, VALIDATE_ARGS: extra `validate` options,
# VALIDATE_TIMEOUT: seconds per validate run (default 150). Wheels in .whl/ (pydantic, absent on the
# GPU machine) are installed to /tmp/site first. Runs are written under a scratch folder and packed into
# OUTDIR/validation.tar.gz (one folder per run: results.json, report.md, plots, log).
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${1:?usage: scripts/validate_gpu.sh OUTDIR}
RUNS=$(mktemp -d)/runs
mkdir -p "$RUNS" "$OUTDIR"
. scripts/wheels.sh
export PYTHONUNBUFFERED=1
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
  ncu --version | tail -1
  python3 -c 'import cupy; print("cupy", cupy.__version__)'
} > "$RUNS/device.txt" 2>&1
cat "$RUNS/device.txt"
if [ "${VALIDATE_CALIBRATE:-1}" != 0 ]; then
  timeout 90 python3 -m fuseplanner.cli.main calibrate --gpu auto --out "$RUNS/calibrated.toml" 2>&1 | tee "$RUNS/calibrate.log"
fi
cal=()
[ -f "$RUNS/calibrated.toml" ] && cal=(--calibrate "$RUNS/calibrated.toml")
runs=${VALIDATE_RUNS:-}
if [ -z "$runs" ]; then
  for model in ${VALIDATE_MODELS:-mobilenet_v2}; do
    for cfg in ${VALIDATE_CONFIGS:-fp32:planned fp16:planned}; do runs="$runs $model:$cfg"; done
  done
fi
for run in $runs; do
  model=${run%%:*}; cfg=${run#*:}; dtype=${cfg%%:*}; tiles=${cfg##*:}
  name="${model}-${dtype}-${tiles}"
  echo "== $name"
  # shellcheck disable=SC2086
  timeout "${VALIDATE_TIMEOUT:-150}" python3 -m fuseplanner.cli.main validate "$model" --gpu auto --dtype "$dtype" \
    --tiles "$tiles" "${cal[@]}" --out "$RUNS/$name" ${VALIDATE_ARGS:-} 2>&1 | tee "$RUNS/$name.log" | tail -25
  echo "exit ${PIPESTATUS[0]}" >> "$RUNS/$name.log"
  tar -C "$(dirname "$RUNS")" -czf "$OUTDIR/validation.tar.gz" runs  # packed after every run: a timeout keeps the rest
done
tar -C "$(dirname "$RUNS")" -czf "$OUTDIR/validation.tar.gz" runs
