#!/usr/bin/env bash
# Here, after a device call of refrun.sh or finish.sh: the run's folder in the checkout becomes
# exactly the one the call brought home (out.tgz holds all of it, so nothing older is kept).
#
#   bash lab/reference-runs/unpack.sh FILES_AT/out.tgz [--writeup]
#
# --writeup also replaces writeup/RUN: after finish.sh, whose writeup is rendered by this
# checkout's code. Without it the checkout's writeup stays (a refrun.sh call's writeup, where there
# is one, is the pinned code's).
set -eu
TAR=$1 WITH_WRITEUP=${2:-}
RUN=$(tar -tf "$TAR" | sed -n 's#^results/\([^/]*\)/.*#\1#p' | head -1)
[ -n "$RUN" ] || { echo "unpack: $TAR holds no results/<run>/"; exit 1; }
rm -rf "results/$RUN" && tar -xf "$TAR" "results/$RUN" && chmod -R u+w "results/$RUN"
if [ "$WITH_WRITEUP" = --writeup ]; then
  rm -rf "writeup/$RUN" && tar -xf "$TAR" "writeup/$RUN" && chmod -R u+w "writeup/$RUN"
fi
# counted as the pipeline lists record files (run_folder.record_files: B2's and E1's other folders too)
n=$(PYTHONPATH=src python3 -c "import sys; from cs336_systems.pipeline.run_folder import record_files; print(len(list(record_files(sys.argv[1]))))" "results/$RUN")
echo "results/$RUN: $n record files$( [ "$WITH_WRITEUP" = --writeup ] && echo ", writeup/$RUN")"
