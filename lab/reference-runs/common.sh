# Shared by the device calls' scripts here (sourced, not run): README's main command for a run, the
# run a machine's card belongs to, the tar of what a call brings home, and a lab run's first call
# and background command.

# README's main command, measuring into results/$1 and keeping every record there
run_command() {
  echo "snakemake --cores 1 --resources gpu=2 --config preset=${REFRUN_PRESET:-full} run=$1 reuse_records=true"
}

# "auto": the committed run of this machine's card (h200 or h100), chosen on the machine's first
# call and kept in /tmp/refrun.run, so a session whose lent card is not the one it asked for
# continues the run that card belongs to; any other name is used as given
resolve_run() {
  if [ "$1" != auto ]; then echo "$1"; return; fi
  if [ -s /tmp/refrun.run ]; then cat /tmp/refrun.run; return; fi
  local card
  card=$(nvidia-smi -L 2>/dev/null | head -1)
  case "$card" in
    *H200*) echo h200 | tee /tmp/refrun.run ;;
    *H100*) echo h100 | tee /tmp/refrun.run ;;
    *) echo "refrun: no committed run for the card '${card:-none}'; name the run" >&2; return 1 ;;
  esac
}

# the run's records, logs, tables and writeup, into $2/out.tgz (compressed: with its writeup a
# run is over the 16 MiB a file that the device tool brings back); raw Nsight reports, snapshots and
# SQLite exports stay behind: the records and summaries hold what the writeup needs; so do the
# compilers' caches under results/<run>/cache (Inductor's kernels: hundreds of MB, rebuilt where missing)
tar_run() {
  tar -czf "$2/out.tgz" --exclude='*.nsys-rep' --exclude='*.pickle' --exclude='*.sqlite' --exclude="results/$1/cache" \
    "results/$1" $( [ -d "writeup/$1" ] && echo "writeup/$1" )
}

# A device call's lab run (c_family.sh, e1_section.sh): on the machine's first call, mark it started,
# note when (Snakemake's log is kept under that time: /tmp/$1.start) and the card's clocks, and
# return 0; on a later call of the same machine return 1
first_call() {
  [ -e "/tmp/$1.started" ] && return 1
  touch "/tmp/$1.started"
  date -u +%Y%m%dT%H%M%SZ > "/tmp/$1.start"
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv || true
}

# "$2..." in the background, beyond this device call (the machine's next call finds it running):
# its output in /tmp/$1.log, its exit status in /tmp/$1.done
in_background() {
  local name=$1
  shift
  (setsid bash -c "{ $*; } > /tmp/$name.log 2>&1; echo \$? > /tmp/$name.done" > /dev/null 2>&1 &)
}
