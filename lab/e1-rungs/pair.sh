# The new rungs beside the rung before them and the cuDNN anchor, in one job a point, on a lent GPU;
# then the top rung's kernel profile at the goal point. Run from the repository root:
#   bash lab/e1-rungs/pair.sh OUT_DIR [SIZE/CONTEXT ...]      (default 2.7B/1024 xl/1024)
# RUNGS="fp32 ..." to choose the rungs (fp32 first: the others' gradients are checked against it);
# PROFILE="rung ..." to profile those rungs at the goal point after the jobs.
set -u
out=$1; shift
points=${*:-2.7B/1024 xl/1024}
rungs=${RUNGS:-fused-adamw triton-adamw bf16-weights anchor-sdpa-cudnn anchor-liger}
mkdir -p "$out"
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-cache
for point in $points; do
  size=${point%/*}; context=${point#*/}; dir="$out/${size}_ctx${context}"; mkdir -p "$dir"
  outs=""; for r in $rungs; do outs="$outs $dir/$r.json"; done
  python -m cs336_systems.training_step.ladder --size "$size" --context "$context" --batch 4 --warmup 3 \
      --compile-mode blocks --rungs $rungs --rounds 4 --steps 2 --out $outs > "$dir/job.log" 2>&1
  echo "$point: exit $?"; grep -E "E1 .* (ok|oom|error)" "$dir/job.log"
done
for rung in ${PROFILE:-}; do
  python -m cs336_systems.training_step.profile --size 2.7B --context 1024 --batch 4 --warmup 3 --compile-mode blocks \
      --rung "$rung" --steps 8 --out "$out/profile_2.7B_ctx1024_$rung.json" > "$out/profile_$rung.log" 2>&1
  echo "profile $rung: exit $?"
done
# the records' commit: CS336_GIT_COMMIT where the copy's git is stale (a lent machine), else the checkout's
echo "${CS336_GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null)}" > "$out/commit.txt"
