#!/usr/bin/env bash
# One device call that measures a committed run's C family again on a lent two-GPU machine: README's
# main command for the data-parallel jobs (one process group per precision, every variant and the
# baseline taking turns) and C1's rows, in the background outside the repository root, then what it
# wrote tarred into $OUT/out.tgz. The reports and the writeup are rebuilt at home with the rebuild
# command of docs/committed-runs.md, measuring nothing.
#
#   bash lab/reference-runs/c_family.sh RUN SHA WAIT_S
#
# RUN: the committed run (h200, h100); the machine's card must be the run's, or the run folder's
# guard refuses before any job (a call that asked for two H200s may be lent H100s: pass needs_h200).
# SHA: the code's commit; .carry/pin-SHA.tgz holds it (git archive of SHA without results/ and the
# runs' writeups), stamped into every record (CS336_GIT_COMMIT).
# Before the first call, remove from the working tree the records and traces to measure again
# (results/RUN/C3 C4 C6 C8 C11 C12 records/ and traces/; C1's records to remeasure its rows): the
# machine's first call copies results/RUN from it. Or name one precision in REMEASURE (REMEASURE=bf16):
# the machine's copy drops that precision's data-parallel records and traces itself, and only that
# precision's job runs. The first call also runs the GPU tests of tests/distributed (their log comes
# back as gpu-tests.log) unless SKIP_GPU_TESTS=1. Later calls on the same machine wait on the same
# run; each brings home what it has written so far.
set -u
source "$(dirname "$0")/common.sh"
RUN=$1 SHA=$2 WAIT=$3
REMEASURE=${REMEASURE:-} SKIP_GPU_TESTS=${SKIP_GPU_TESTS:-0}
W=/tmp/cfamily
T0=$SECONDS
if [ ! -d $W ]; then
  mkdir -p $W/results && tar -xzf ".carry/pin-$SHA.tgz" -C $W && cp -a .carry $W/ && cp -a "results/$RUN" $W/results/
  if [ -n "$REMEASURE" ]; then
    rm -f $W/results/$RUN/C*/records/*_"$REMEASURE".json $W/results/$RUN/C*/traces/*_"$REMEASURE".json.gz
  fi
fi
cd $W && source .carry/env.sh
export CS336_GIT_COMMIT=$SHA CS336_GIT_DIRTY=false
if first_call cfamily; then
  if [ "$SKIP_GPU_TESTS" != 1 ]; then
    python3 -m pytest -q -p no:cacheprovider -m gpu tests/distributed > "$OUT/gpu-tests.log" 2>&1
    echo "GPU tests of tests/distributed: exit $?"
  fi
  targets="results/$RUN/C3/records/no-comm_fp32.json results/$RUN/C3/records/no-comm_bf16.json"
  for backend in gloo nccl; do for world in 2 4 6; do targets="$targets results/$RUN/C1/records/${backend}_x$world.json"; done; done
  in_background cfamily "snakemake $targets --cores 1 --resources gpu=2 --config preset=full run=$RUN reuse_records=true"
  echo started
fi
while [ $((SECONDS - T0)) -lt "$WAIT" ] && [ ! -e /tmp/cfamily.done ]; do sleep 5; done
# Snakemake's console output, kept in the run folder: pipeline.job_times reads it
mkdir -p "results/$RUN/logs/snakemake" && cp /tmp/cfamily.log "results/$RUN/logs/snakemake/$(cat /tmp/cfamily.start).log"
grep -E "of [0-9]+ steps" /tmp/cfamily.log | tail -1
grep -c "oom" results/$RUN/logs/C3/variants_*.log 2>/dev/null
cat /tmp/cfamily.done 2>/dev/null || echo "still running"
tar -czf "$OUT/out.tgz" $(ls -d results/$RUN/C1 results/$RUN/C3 results/$RUN/C4 results/$RUN/C6 results/$RUN/C8 results/$RUN/C11 \
  results/$RUN/C12 results/$RUN/logs/C1 results/$RUN/logs/C3 results/$RUN/logs/snakemake results/$RUN/benchmarks/C1 \
  results/$RUN/benchmarks/C3 2>/dev/null)
