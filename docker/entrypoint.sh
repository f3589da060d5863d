#!/bin/sh
# The image's entry point: `docker run IMAGE [snakemake arguments]` runs Snakemake in the working
# directory (/work, where the checkout is mounted). `docker run IMAGE snakemake ...` means the same;
# another program on the PATH runs as given (`docker run IMAGE nsys --version`, `... IMAGE bash`).
set -e
. /usr/local/lib/cs336/env.sh

case "${1:-}" in
    snakemake) shift ;;
    "" | -*) ;;
    *)
        # A target such as results/smoke/A1/table.md or a rule name is not a program on the PATH.
        if [ ! -e "$1" ] && command -v "$1" >/dev/null 2>&1; then
            exec "$@"
        fi
        ;;
esac
exec snakemake "$@"
