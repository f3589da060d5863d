#!/usr/bin/env bash
# CI: what tests/slurm needs to run the smoke DAG on a local one-node Slurm, and C's jobs on a
# two-node one (two slurmd in their own network namespaces): Debian's Slurm and MUNGE, iproute2
# (`ip netns`, bridges, veth pairs) and util-linux (`nsenter`, `unshare`), and the Snakemake Slurm
# executor (the project's `slurm` extra) in the active venv.
# Installs only; it starts no daemon and makes no namespace (the tests make their own and remove
# them). Quick when done.
#   bash .ci/setup-slurm.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$PATH:/usr/sbin:/sbin"

missing=()
for tool in munged slurmctld slurmd sbatch squeue sinfo scontrol scancel srun ip nsenter unshare; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done

if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup-slurm: installing slurm-wlm, munge, iproute2 and util-linux (missing: ${missing[*]})"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    # Debian's policy-rc.d convention: exit 101 = "do not start services during this install".
    # Only if the machine has none of its own; removed again whatever happens.
    policy=/usr/sbin/policy-rc.d
    if [ ! -e "$policy" ]; then
        trap '$sudo rm -f "$policy"' EXIT
        printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
        $sudo chmod 755 "$policy"
    fi
    apt=(env DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=600)
    $sudo "${apt[@]}" update
    $sudo "${apt[@]}" install -y --no-install-recommends slurm-wlm munge iproute2 util-linux
fi

if ! python -c 'import snakemake_executor_plugin_slurm' >/dev/null 2>&1; then
    if [ -z "${VIRTUAL_ENV:-}" ]; then
        echo "setup-slurm: no virtual environment is active; activate the project's .venv first" >&2
        exit 1
    fi
    echo "setup-slurm: installing the project's [slurm] extra into $VIRTUAL_ENV"
    python -m pip install -q -e '.[slurm]'
fi

echo "setup-slurm: $(slurmctld -V), $(munged -V 2>&1 | awk '{print $1; exit}'),"\
     "snakemake-executor-plugin-slurm $(python -c 'import importlib.metadata as m; print(m.version("snakemake-executor-plugin-slurm"))')"
