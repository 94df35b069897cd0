#!/usr/bin/env bash
# Where fuseplanner kernels' global reads go (L1 hits vs L2 sectors), one device call:
#
#   bash scripts/probe_reads.sh OUTDIR [CASE:DTYPE:TILE ...]
#   bash scripts/probe_reads.sh OUTDIR --copy [PATTERN:MODE:VB ...]   # kernels/probe_copy.cu patterns
#
# Runs benchmarks/probe_reads.py under Nsight Compute (cold L2, one launch per config) with the L2
# read counters the validation uses plus L1/L2 request counters (those this ncu knows), and writes
# OUTDIR/probe_reads.csv (ncu's CSV) and OUTDIR/probe_reads.jsonl (the launched configs, in order).
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${1:?usage: scripts/probe_reads.sh OUTDIR [CONFIGS...]}
shift
mkdir -p "$OUTDIR"
STEM=probe_reads KERNELS="regex:_kernel|fused_"
if [[ ${1:-} == --copy ]]; then
  shift
  STEM=probe_copy KERNELS=probe_copy
fi
. scripts/wheels.sh
WANT="lts__t_sectors_srcunit_tex_op_read.sum lts__t_requests_srcunit_tex_op_read.sum
lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum
lts__t_sectors_srcunit_tex_op_write.sum lts__t_sectors_srcunit_ltcfabric_op_read.sum
l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum
l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum
l1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts.sum l1tex__t_requests_pipe_lsu_mem_global_op_ldgsts.sum
l1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts_cache_access.sum
l1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts_cache_access_lookup_hit.sum
l1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts_cache_bypass.sum
l1tex__m_xbar2l1tex_read_sectors.sum lts__t_sectors_srcunit_ltcfabric.sum
dram__bytes_read.sum launch__grid_size launch__cluster_dim_x launch__block_size"
ncu --query-metrics --chip gh100 > "$OUTDIR/metrics.txt" 2>&1 || ncu --query-metrics > "$OUTDIR/metrics.txt" 2>&1
M=""
for m in $WANT; do
  base=${m%.*}
  if grep -q "^${base}\b\|^${m}\b" "$OUTDIR/metrics.txt" || [[ $m == launch__* ]]; then M="${M:+$M,}$m"; else echo "skip $m"; fi
done
echo "metrics: $M"
ncu --csv --cache-control all --metrics "$M" -k "$KERNELS" \
  python3 "benchmarks/$STEM.py" "$@" > "$OUTDIR/$STEM.raw" 2> "$OUTDIR/ncu.err"
echo "ncu rc $?"
grep '^{' "$OUTDIR/$STEM.raw" > "$OUTDIR/$STEM.jsonl"
grep -v '^{' "$OUTDIR/$STEM.raw" > "$OUTDIR/$STEM.csv"
rm -f "$OUTDIR/$STEM.raw"
tail -3 "$OUTDIR/ncu.err"
cat "$OUTDIR/$STEM.jsonl"
wc -l "$OUTDIR/$STEM.csv"
