#!/usr/bin/env bash
# Validate the plans of several GPU specs for the same models on this GPU, counter-free, in one call; each
# plan's items are measured alone and `scripts/plan_totals.py` sums them (results to OUTDIR).
#
#   PLAN_SPECS="h100 path/to/other.toml" PLAN_RUNS="mobilenet_v2:fp32:8 efficientnet_b0:fp16:1" \
#     bash scripts/plans_gpu.sh OUTDIR
#
# PLAN_SPECS: GPU spec names or TOML paths (default "h100"); PLAN_RUNS: MODEL:DTYPE:BATCH triples (default
# "mobilenet_v2:fp32:1"); PLAN_TIMEOUT: seconds per validate run (default 120). Runs alternate between the
# specs model by model, so that clock drift hits each alike. Wheels in .whl/ are installed first. Runs are
# written under a scratch folder and packed into OUTDIR/plans.tar.gz after each (a timeout keeps the rest).
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${1:?usage: scripts/plans_gpu.sh OUTDIR}
RUNS=$(mktemp -d)/runs
mkdir -p "$RUNS" "$OUTDIR"
. scripts/wheels.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$RUNS/device.txt" 2>&1
results=()
for run in ${PLAN_RUNS:-mobilenet_v2:fp32:1}; do
  IFS=: read -r model dtype batch <<< "$run"
  i=0
  for spec in ${PLAN_SPECS:-h100}; do
    name="${model}-${dtype}-b${batch}-spec${i}"
    timeout "${PLAN_TIMEOUT:-120}" python3 -m fuseplanner.cli.main validate "$model" --gpu "$spec" --dtype "$dtype" \
      --batch "$batch" --tiles planned --no-ncu --out "$RUNS/$name" > "$RUNS/$name.log" 2>&1
    echo "$name exit $?" | tee -a "$RUNS/$name.log"
    find "$RUNS/$name" -name '*.png' -delete 2>/dev/null
    [ -f "$RUNS/$name/results.json" ] && results+=("$RUNS/$name/results.json")
    tar -C "$(dirname "$RUNS")" -czf "$OUTDIR/plans.tar.gz" runs
    i=$((i + 1))
  done
done
python3 scripts/plan_totals.py "${results[@]}" | tee "$RUNS/plan_totals.md"
tar -C "$(dirname "$RUNS")" -czf "$OUTDIR/plans.tar.gz" runs
