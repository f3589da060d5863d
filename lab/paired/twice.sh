#!/usr/bin/env bash
# Verdicts that reproduce: README's main command twice, into two scratch runs on one machine, for the
# same targets; `python lab/paired/verdicts.py results/<prefix>-1 results/<prefix>-2` then compares them.
#
#   bash lab/paired/twice.sh <pin-sha> <prefix> <wait-seconds> <target>...
#
# A target is a path under the run folder with RUN for the run's name, e.g. RUN/A1/records/xl_ctx128_forward_fp32.json
# (any record of a job asks for the whole job). Written for the lent GPU machines (../../../shared/gpu/README.md):
# the code comes from .carry/pin-<sha>.tar (`git archive HEAD -- . ':(exclude)results' | gzip > .carry/pin-<sha>.tgz`), so what
# the working tree holds beside the commit does not run, and records name the commit (CS336_GIT_COMMIT).
# The runs go on in the background in /tmp/twice, which a later call on the same machine waits on again;
# each call brings what the runs wrote so far home as $OUT/twice.tgz, with their logs and benchmark files.
set -euo pipefail
sha=$1 prefix=$2 wait_s=$3
shift 3
here=$PWD
work=/tmp/twice
if [ ! -e "$work/started" ]; then
  mkdir -p "$work"
  tar -xzf ".carry/pin-$sha.tgz" -C "$work"
  cp -r .carry "$work/.carry"
  targets_1=() targets_2=()
  for t in "$@"; do targets_1+=("results/$prefix-1/${t#RUN/}"); targets_2+=("results/$prefix-2/${t#RUN/}"); done
  cat > "$work/runs.sh" <<RUNS
set -u
cd $work && source .carry/env.sh
export CS336_GIT_COMMIT=$sha CS336_GIT_DIRTY=false
for n in 1 2; do
  start=\$(date +%s)
  if [ \$n = 1 ]; then targets="${targets_1[*]}"; else targets="${targets_2[*]}"; fi
  snakemake \$targets --cores 1 --resources gpu=2 --config preset=full run=$prefix-\$n > $work/run-\$n.log 2>&1
  echo "run \$n: exit \$? after \$(( \$(date +%s) - start )) s" >> $work/status
done
touch $work/done
RUNS
  touch "$work/started"
  setsid bash "$work/runs.sh" > "$work/runs.out" 2>&1 < /dev/null &
fi
end=$(( $(date +%s) + wait_s ))
while [ ! -e "$work/done" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 5; done
cat "$work/status" 2>/dev/null || echo "twice: still running"
cd "$work" && tar -czf "${OUT:-$here}/twice.tgz" --exclude='*.nsys-rep' --exclude='*.pickle' results run-*.log status 2>/dev/null || true
