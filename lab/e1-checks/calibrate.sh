#!/usr/bin/env bash
# What a rung computes, on a GPU: E1's job at the full preset's build for a few points, every rung and
# anchor, so the report's tolerances for the losses after the warm-up's updates and the first
# gradients' error per group (report.e1's doc) rest on GPU numbers, not only the CPU's.
#
#   bash lab/e1-checks/calibrate.sh OUT_DIR SIZE/CONTEXT ...      (on a lent GPU, in the repository root)
#
# Writes OUT_DIR/<size>_ctx<context>/<rung>.json and a log per point.
set -u
out=$1; shift
source .carry/env.sh
rungs="fp32 bf16 flash compiled fused-adamw checkpointed anchor-sdpa-flash anchor-sdpa-cudnn"
for point in "$@"; do
  size=${point%/*} context=${point#*/}
  dir="$out/${size}_ctx$context"; mkdir -p "$dir"
  outs=""; for r in $rungs; do outs="$outs $dir/$r.json"; done
  TORCHINDUCTOR_CACHE_DIR=/tmp/inductor python3 -m cs336_systems.training_step.ladder --size "$size" --context "$context" \
    --batch 4 --warmup 3 --seed 0 --compile-mode blocks --backend inductor --checkpoint-group 4 \
    --rounds 4 --steps 2 --rungs $rungs --out $outs > "$dir/job.log" 2>&1
  echo "$point: exit $?"; grep -E "^E1 " "$dir/job.log"
done
