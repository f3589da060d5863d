#!/usr/bin/env bash
# One device call of a reference run: README's main command in the background on a lent GPU
# machine, outside the repository root, then the run's new files tarred into $OUT.
#
#   bash lab/reference-runs/refrun.sh RUN SHA WAIT_S [go|stop]
#
# RUN: the run's name (results/RUN), or "auto" for the run of the machine's card (h200 on an H200,
# h100 on an H100: a call that asked for one card and was lent the other goes on with that one's run); SHA: the code's commit, stamped into every record (the copy
# on the machine has no usable git state). If .carry/pin-SHA.tar exists (git archive of SHA
# without results/), the code comes from it and only results/RUN and writeup/RUN from this
# checkout, so a run continued from a later checkout still measures SHA's code.
# WAIT_S: how long this call waits for the run; "stop" ends the run gracefully after the wait
# (Snakemake finishes the job in flight), for the last call before the machine goes back.
set -u
source "$(dirname "$0")/common.sh"
RUN=$(resolve_run "$1") || exit 1
SHA=$2 WAIT=$3 MODE=${4:-go}
echo "run: $RUN"
export CS336_GIT_COMMIT=$SHA CS336_GIT_DIRTY=false
# Each device call copies the checkout over the repository root; /tmp/work is out of its way,
# so what the background run writes is not overwritten by the next call's copy.
W=/tmp/work
if [ ! -d $W ]; then
  # a record in the checkout's folder from another commit would be kept as if this run made it
  # (reuse_records=true): the folder must be the run so far, not main's notebook; C records are
  # the exception, kept from the two- and four-GPU machines one GPU cannot replace
  python3 "$(dirname "$0")/check_run.py" results/$RUN --pin $SHA --kept C1,C2,C3,C4,C5,C6,C7,C8,C9,C10,C11,C12 \
    > /tmp/check_run.txt || { grep PROBLEM /tmp/check_run.txt | head -3; echo "results/$RUN is not the run so far of $SHA: nothing started"; exit 1; }
  mkdir -p $W
  if [ -f .carry/pin-$SHA.tar ]; then
    tar -xf .carry/pin-$SHA.tar -C $W && cp -a .carry $W/ && mkdir -p $W/results $W/writeup
    [ -d results/$RUN ] && cp -a results/$RUN $W/results/
    [ -d writeup/$RUN ] && cp -a writeup/$RUN $W/writeup/
    echo "code from .carry/pin-$SHA.tar, results/$RUN from the checkout"
  else
    cp -a . $W/ && echo "copied the checkout to $W"
  fi
fi
cd $W && source .carry/env.sh
# either mode starts the run when none is running: a "stop" call meant for a warm machine may find a
# fresh one (the last went back while idle), and a stop that only waited would spend its lease on nothing
if ! pgrep -f "snakemake --cores 1" >/dev/null && [ ! -e /tmp/smk.done ]; then
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
  (setsid bash -c "date -u +%FT%TZ >> /tmp/smk.start; $(run_command $RUN) > /tmp/smk.log 2>&1; echo \$? > /tmp/smk.done" > /dev/null 2>&1 &)
  echo started
fi
end=$((SECONDS+WAIT)); while [ $SECONDS -lt $end ] && [ ! -e /tmp/smk.done ]; do sleep 5; done
if [ "$MODE" = stop ] && [ ! -e /tmp/smk.done ]; then
  # the pattern also matches the wrapper that would write /tmp/smk.done, so a stopped run leaves
  # none and a later "go" on the same machine starts the command again (the machine stays lent
  # until 30 minutes held: stop before that, or the job in flight is lost with the machine)
  pkill -TERM -f "snakemake --cores 1"
  for _ in $(seq 60); do pgrep -f "snakemake --cores 1" >/dev/null || break; sleep 1; done
fi
# Snakemake's own output of this invocation, kept in the run folder: it times what the benchmark
# files do not (the reports, the writeup, Snakemake between jobs); pipeline.job_times reads it
if [ -e /tmp/smk.start ]; then
  mkdir -p results/$RUN/logs/snakemake && cp /tmp/smk.log results/$RUN/logs/snakemake/$(tail -1 /tmp/smk.start | tr -d ':-').log
fi
tar_run $RUN $OUT
cp /tmp/smk.log /tmp/smk.start $OUT/ 2>/dev/null
grep -E "of [0-9]+ steps" /tmp/smk.log | tail -1; grep -B2 -A8 "^Error in rule" /tmp/smk.log | tail -20
cat /tmp/smk.done 2>/dev/null; date -u
