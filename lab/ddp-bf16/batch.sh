#!/usr/bin/env bash
# Does a larger per-rank batch make the bf16 data-parallel step GPU-bound enough for paired
# verdicts? One device call on two GPUs: train_bench in bf16 with the baseline, PyTorch DDP and our
# two best bucketed variants (or $VARIANTS), at each global batch given, 5 rounds (or $ROUNDS) of 3 timed steps; records come
# back in $OUT/records.tgz (gb<N>/<ID>/records/), logs as $OUT/gb<N>.log. Judged at home with
# lab/ddp-bf16/judge.py.
#
#   bash lab/ddp-bf16/batch.sh 8 16 32
#   VARIANTS="no-comm torch-ddp overlap bucketed-100" ROUNDS=4 bash lab/ddp-bf16/batch.sh 32
set -u
VARIANTS=${VARIANTS:-no-comm torch-ddp bucketed-1000 bucketed-bf16-1000}
ROUNDS=${ROUNDS:-5}
source .carry/env.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.total --format=csv
lscpu | grep -E "^(Model name|CPU\(s\)|NUMA node)" 
for gb in "$@"; do
  t0=$SECONDS
  python3 -m cs336_systems.distributed.train_bench \
    --variants $VARIANTS --size xl --context 512 \
    --global-batch "$gb" --world-size 2 --backend nccl --precision bf16 --warmup 2 --rounds "$ROUNDS" --steps 3 \
    --out-dir "/tmp/ddpb/gb$gb" > "$OUT/gb$gb.log" 2>&1
  echo "global batch $gb: exit $? in $((SECONDS - t0)) s"
  tail -3 "$OUT/gb$gb.log"
done
tar -czf "$OUT/records.tgz" -C /tmp/ddpb .
