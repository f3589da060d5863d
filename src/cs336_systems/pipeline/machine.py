"""What this machine gives the DAG: how many GPUs one job can get, and which card they are.

The Snakefile reads both before it plans anything, so that a one-GPU machine plans only what one
GPU can measure (a deliverable that needs two is not scheduled; its section says so) and a run
folder measured on one kind of card is never written into from another (``run_folder``).

Everything here is read without importing torch: the GPU count from ``gpu_lease.gpu_pool`` (the
devices ``CUDA_VISIBLE_DEVICES`` leaves, or every one ``nvidia-smi -L`` lists), the names from
``nvidia-smi --query-gpu=index,name``. Tests fake a machine with a ``nvidia-smi`` of their own on PATH.
"""
from __future__ import annotations

import shutil
import subprocess

from cs336_systems.pipeline.gpu_lease import gpu_pool

CPU = "CPU"     # the device kind of a run measured on CPUs (the smoke preset)


def gpus_for_jobs(local: bool, resources_gpu: int | None) -> int | None:
    """The most GPUs one job can get here, or None where no limit is known from here.

    Jobs sent to a cluster (``local`` false) run on machines the scheduler picks, so any count may
    be asked of it. On this machine a job gets at most the visible GPUs, and at most what
    ``--resources gpu=N`` allows (Snakemake clips a job's request to it). A machine that shows no
    GPU gives None too: whether a GPU preset may run there is ``device_gate``'s question, not one
    of how many GPUs a job gets.
    """
    if not local:
        return None
    visible = len(gpu_pool())
    if visible == 0:
        return None
    return visible if resources_gpu is None else min(visible, resources_gpu)


def gpu_names() -> list[str]:
    """The names of the GPUs a job here can get (``NVIDIA H100 80GB HBM3``), in pool order."""
    pool = gpu_pool()
    smi = shutil.which("nvidia-smi")
    if not pool or smi is None:
        return []
    try:
        out = subprocess.run([smi, "--query-gpu=index,name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    names = {}
    for line in out.stdout.splitlines():
        index, _, name = line.partition(",")
        if name.strip():
            names[index.strip()] = name.strip()
    # CUDA_VISIBLE_DEVICES may name devices by UUID: then every listed card counts.
    return [names[d] for d in pool if d in names] or list(names.values())


def device_kind(preset_device: str) -> str | None:
    """The kind of device this machine measures a preset on: ``CPU`` for a CPU preset, the card's
    name for a CUDA one, None where no GPU is visible (a login node, a CPU-only rebuild)."""
    if preset_device == "cpu":
        return CPU
    names = sorted(set(gpu_names()))
    return " + ".join(names) if names else None
