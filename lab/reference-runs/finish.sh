#!/usr/bin/env bash
# The end of a reference run, on the machine that ran it, once refrun.sh's run has ended:
# README's main command again with this checkout's code, then once more, timed: the no-op rerun.
#
#   bash lab/reference-runs/finish.sh RUN SHA
#
# RUN: as refrun.sh was given it ("auto" finds the run refrun.sh chose on this machine).
# SHA: this checkout's commit. The measuring run is pinned to an older commit whose writeup
# templates may have been fixed since; the second invocation is what a user does after pulling
# such a fix: the same command, which keeps every record (reuse_records=true) and renders what is
# stale with the new code. Only the writeup may have failed in the pinned run; any other failure
# stops here, so no record is ever made by code other than the pin's.
# The second invocation's output joins the run's Snakemake logs (results/RUN/logs/snakemake/).
# The third should find nothing to do; its output and time go to results/RUN/logs/rerun.log.
# pipeline.job_times reads both.
set -u
source "$(dirname "$0")/common.sh"
RUN=$(resolve_run "$1") || exit 1
SHA=$2
W=${REFRUN_DIR:-/tmp/work}
CMD=$(run_command $RUN)
[ -e /tmp/smk.done ] || { echo "the run has not ended (no /tmp/smk.done): call refrun.sh again first"; exit 1; }
failed=$(grep -oE "^Error in rule [A-Za-z0-9_]+" /tmp/smk.log | awk '{print $4}' | sort -u | grep -vx writeup)
[ -z "$failed" ] || { echo "rules other than the writeup failed in the run: $failed"; exit 1; }
# this checkout's code over the run's; the run's results, writeup, Snakemake state and carry stay
tar -cf - --exclude=./results --exclude=./writeup/$RUN --exclude=./.snakemake --exclude=./.carry --exclude=./.git . \
  | tar -xf - -C $W
cd $W
[ -f .carry/env.sh ] && source .carry/env.sh
export CS336_GIT_COMMIT=$SHA CS336_GIT_DIRTY=false
started=$(date -u +%Y%m%dT%H%M%SZ)
$CMD > /tmp/finish.log 2>&1
rc=$?
mkdir -p results/$RUN/logs/snakemake && cp /tmp/finish.log results/$RUN/logs/snakemake/$started.log
echo "second invocation: exit $rc"; grep -E "of [0-9]+ steps|Nothing to be done" /tmp/finish.log | tail -1
if [ $rc -eq 0 ]; then
  start=$(date -u +%FT%TZ) t0=$(date +%s.%N)
  $CMD > /tmp/noop.out 2>&1
  rc=$? t1=$(date +%s.%N)
  { echo "command: $CMD"
    echo "machine: $(hostname); $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
    echo "commit: $SHA"
    echo "started: $start"
    echo "exit: $rc"
    echo "elapsed_s: $(python3 -c "print(round($t1 - $t0, 1))")"
    echo "--- its output ---"
    cat /tmp/noop.out
  } > results/$RUN/logs/rerun.log
  head -6 results/$RUN/logs/rerun.log | tail -2
fi
tar_run $RUN ${OUT:-/tmp}
cp /tmp/finish.log ${OUT:-/tmp}/ 2>/dev/null
exit $rc
