#!/usr/bin/env bash
# One device call that measures a committed run's E1 section again on a lent one-GPU machine:
# README's main command for E1's summary (every point's job of rungs and anchors, the profiles at
# the goal point, the report), in the background outside the repository root, then E1's folder and
# Snakemake's log tarred into $OUT/out.tgz. The writeups are rebuilt at home with the rebuild
# command of docs/committed-runs.md, measuring nothing.
#
#   bash lab/reference-runs/e1_section.sh RUN SHA WAIT_S
#
# RUN: the committed run (h200, h100), whose card the machine must have (the run folder's guard
# refuses otherwise). SHA: the code's commit; .carry/pin-SHA.tgz holds it (git archive of SHA
# without results/ and writeup/), stamped into every record (CS336_GIT_COMMIT). The machine's copy
# drops the run's E1 records and profiles, so every one is measured at SHA. Later calls on the
# same machine wait on the same run; each brings home what it has written so far.
set -u
source "$(dirname "$0")/common.sh"
RUN=$1 SHA=$2 WAIT=$3
W=/tmp/e1section
T0=$SECONDS
if [ ! -d $W ]; then
  mkdir -p $W/results && tar -xzf ".carry/pin-$SHA.tgz" -C $W && cp -a .carry $W/ && cp -a "results/$RUN" $W/results/
  rm -f $W/results/$RUN/E1/records/*.json $W/results/$RUN/E1/profiles/*.json
fi
cd $W && source .carry/env.sh
export CS336_GIT_COMMIT=$SHA CS336_GIT_DIRTY=false
if first_call e1section; then
  in_background e1section "snakemake results/$RUN/E1/summary.json --cores 1 --resources gpu=2 --config preset=full" \
    "run=$RUN reuse_records=true"
  echo started
fi
while [ $((SECONDS - T0)) -lt "$WAIT" ] && [ ! -e /tmp/e1section.done ]; do sleep 5; done
# Snakemake's console output, kept in the run folder: pipeline.job_times reads it
mkdir -p "results/$RUN/logs/snakemake" && cp /tmp/e1section.log "results/$RUN/logs/snakemake/$(cat /tmp/e1section.start).log"
grep -E "^\[|Finished job|Error|error" /tmp/e1section.log | tail -6
[ -e /tmp/e1section.done ] && echo "snakemake exit $(cat /tmp/e1section.done)" || echo "still running"
tar -czf "$OUT/out.tgz" "results/$RUN/E1" "results/$RUN/logs"
