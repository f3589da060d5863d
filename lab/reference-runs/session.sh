#!/usr/bin/env bash
# Here, before a session's first refrun.sh call (about 4 minutes, no GPU): what those calls need that
# a fresh checkout lacks, and the working tree as they must find it.
#
#   bash lab/reference-runs/session.sh prepare SHA RUN FROM   # FROM: the commit whose results/RUN is the run so far
#   bash lab/reference-runs/session.sh restore                # after the last call's out.tgz is unpacked and committed
#
# prepare: .carry (../shared/gpu/prepare-carry.sh with the writeup's renderer, slimmed by slim_carry.sh
# with nvtx kept, since A2 profiles under nsys, and Liger-Kernel's wheel without its dependencies, for
# E1's anchor), the pin .carry/pin-SHA.tar (git archive of SHA without the committed runs, gzipped:
# refrun.sh's tar reads it either way), results/RUN as FROM left it, and the folders no call needs out
# of the working tree, which a call copies whole (64 MiB with .carry): the other runs' results and
# writeups and the lab's committed runs. restore brings those back from HEAD.
set -eu
cd "$(git rev-parse --show-toplevel)"
LEFT_OUT="results/h100 writeup/h100 writeup/h200 lab/paired/runs lab/e1-rungs"
case "${1:-}" in
  prepare)
    [ $# -eq 4 ] || { echo "usage: session.sh prepare SHA RUN FROM" >&2; exit 2; }
    SHA=$(git rev-parse --quiet --verify "$2^{commit}") || { echo "session.sh: no commit $2" >&2; exit 2; }
    RUN=$3 FROM=$4
    git cat-file -e "$FROM:results/$RUN" 2>/dev/null || { echo "session.sh: $FROM has no results/$RUN" >&2; exit 2; }
    [ -d .carry/wheels ] || bash ../shared/gpu/prepare-carry.sh markdown-it-py mdit-py-plugins jinja2 jsonschema tabulate
    [ -d .carry-spare ] || bash lab/reference-runs/slim_carry.sh keep-nvtx
    liger=$(sed -n 's/.*"\(liger-kernel==[^"]*\)".*/\1/p' pyproject.toml | head -1)
    ls .carry/nodeps/liger_kernel-*.whl >/dev/null 2>&1 || python3 -m pip download -q --no-deps --only-binary=:all: \
      --python-version 3.12 --platform manylinux2014_x86_64 --platform any -d .carry/nodeps "$liger"
    rm -f .carry/pin-*.tar
    git archive "$SHA" -- . ':(exclude)results' ':(exclude)writeup/h100' ':(exclude)writeup/h200' ':(exclude)lab' \
      | gzip > ".carry/pin-$SHA.tar"
    git checkout --no-overlay "$FROM" -- "results/$RUN"
    # shellcheck disable=SC2086
    rm -rf $LEFT_OUT
    python3 lab/reference-runs/check_run.py "results/$RUN" --pin "$SHA" --kept C1,C2,C3,C4,C5,C6,C7,C8,C9,C10,C11,C12 | tail -3
    echo "ready: bash lab/reference-runs/refrun.sh auto $SHA 540 go (then 500 stop), unpack.sh after each call"
    ;;
  restore)
    # shellcheck disable=SC2086
    git checkout -- $LEFT_OUT
    ;;
  *) echo "usage: session.sh prepare SHA RUN FROM | session.sh restore" >&2; exit 2 ;;
esac
