# shellcheck shell=sh
# Sourced by the image's entry point, and (through BASH_ENV) by every bash that starts in the image:
# also the `bash -c` of each Snakemake job, including jobs that Snakemake runs with
# `apptainer exec`, which skips the entry point.
#
# When the working directory is a checkout of this project, its own code comes first on
# PYTHONPATH, ahead of the copy installed in the image. Snakemake lists the files under src/ and
# cs336-basics/ as inputs of the rules that run them, so the code that runs must be the code in
# the checkout: the files you edit, the files whose age makes a rule stale.
if [ -f "$PWD/src/cs336_systems/__init__.py" ] && [ -f "$PWD/cs336-basics/cs336_basics/__init__.py" ]; then
    case ":${PYTHONPATH:-}:" in
        *":$PWD/src:"*) ;;
        *) export PYTHONPATH="$PWD/src:$PWD/cs336-basics${PYTHONPATH:+:$PYTHONPATH}" ;;
    esac
fi

# `docker run --user "$(id -u):$(id -g)"` gives a user with no home in the image; matplotlib and
# torch want a writable cache.
if [ ! -w "${HOME:-/}" ]; then
    export HOME=/tmp/cs336-home
    mkdir -p "$HOME"
fi
