# Shared by refrun.sh and finish.sh (sourced, not run): README's main command for a run, the run a
# machine's card belongs to, and the tar of what a call brings home.

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
