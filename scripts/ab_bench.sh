#!/usr/bin/env bash
# Same layers, two kernel sources, one device call: runs benchmarks/bench_kernels.py with the cost
# model's tile only (--candidates 0) on a copy of the tree whose kernels/NAME is replaced by OLD_SOURCE
# (or, when OLD_SOURCE is a directory, whose files are replaced by those under it: a change that also
# touches the launcher), then on this tree, and writes OUTDIR/{old,new}/bench_kernels.{md,json}.
#
#   git show HEAD~1:kernels/pw.cu > pw_old.cu   # inside the working tree, so that it travels to the GPU machine
#   ONLY=pw_ BATCHES=1,8 MODES=fp32,tf32,fp16 bash scripts/ab_bench.sh OUTDIR kernels/pw.cu pw_old.cu
#   mkdir ab_old && git archive HEAD fuseplanner kernels | tar -x -C ab_old
#   ONLY=dw_ MODES=fp32,fp16 bash scripts/ab_bench.sh OUTDIR kernels/dw.cu ab_old
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${1:?usage: scripts/ab_bench.sh OUTDIR kernels/NAME OLD_SOURCE}
TARGET=${2:?kernel source to replace, e.g. kernels/pw.cu}
OLD=${3:?the old version of it}
mkdir -p "$OUTDIR"
. scripts/wheels.sh
old=$(mktemp -d)
cp -r fuseplanner kernels benchmarks gpu_specs models "$old"/
if [ -d "$OLD" ]; then cp -r "$OLD"/. "$old"/; else cp "$OLD" "$old/$TARGET"; fi
s=$(date +%s)
for tree in "$old" "$PWD"; do
  name=$([ "$tree" = "$PWD" ] && echo new || echo old)
  (cd "$tree" && PYTHONPATH=$tree:${PYTHONPATH:-} timeout "${BENCH_TIMEOUT:-280}" python3 benchmarks/bench_kernels.py "$OUTDIR/$name" \
    --batches "${BATCHES:-1,8}" --candidates 0 --repeat 50 --search-repeat 3 --only "${ONLY:-pw_}" \
    --modes "${MODES:-fp32,tf32,fp16}" > "$OUTDIR/$name.log" 2>&1
   echo "$name exit $? $(( $(date +%s) - s )) s")
done
rm -rf "$old"
