"""Run a command on exactly k GPUs of this machine, none of which another job holds.

    python -m cs336_systems.pipeline.gpu_lease --gpus 1 -- python -m cs336_systems.benchmark ...

Snakemake's ``resources: gpu=k`` bounds how many GPUs the running jobs need together, but it
does not say *which* GPUs a job gets. This wrapper picks k free devices from the pool
(``CUDA_VISIBLE_DEVICES`` if set, else every GPU ``nvidia-smi -L`` lists), holds an exclusive
file lock on each while the command runs, and sets ``CUDA_VISIBLE_DEVICES`` for it — so two
timing jobs never share a GPU even when the user's ``--resources gpu=N`` overstates the machine.

Without GPUs (the smoke preset on a CPU) and under Slurm (which already allotted the job its
devices) the command simply runs.
"""
from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def gpu_pool() -> list[str]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d.strip() for d in visible.split(",") if d.strip() and d.strip() != "-1"]
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.stdout.splitlines()) if line.startswith("GPU ")]


def lock_dir() -> Path:
    path = Path(os.environ.get("CS336_GPU_LOCK_DIR", Path(tempfile.gettempdir()) / f"cs336-gpu-locks-{os.getuid()}"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def acquire(count: int, pool: list[str], poll_seconds: float = 1.0) -> tuple[list[str], list]:
    """Block until ``count`` devices of ``pool`` are locked by us; return them and their lock files."""
    waited, folder = 0.0, lock_dir()
    while True:
        held, files = [], []
        for device in pool:
            f = open(folder / f"gpu{device}.lock", "w")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.close()
                continue
            held.append(device)
            files.append(f)
            if len(held) == count:
                return held, files
        for f in files:
            f.close()           # closing releases the lock
        if waited % 30 < poll_seconds:
            print(f"gpu_lease: waiting for {count} free GPU(s) of {pool}", file=sys.stderr, flush=True)
        time.sleep(poll_seconds)
        waited += poll_seconds


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.pipeline.gpu_lease", description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", type=int, required=True, help="how many GPUs the command needs")
    p.add_argument("--up-to", action="store_true",
                   help="lease as many of the --gpus as this machine has; the command records what it could not run")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("no command given (put it after --)")
    if args.gpus < 1:
        p.error(f"--gpus must be at least 1, got {args.gpus}")
    pool = gpu_pool()
    if not pool or os.environ.get("SLURM_JOB_ID"):
        return subprocess.call(command)
    if args.up_to:
        args.gpus = min(args.gpus, len(pool))
    if args.gpus > len(pool):
        p.error(f"the command needs {args.gpus} GPUs; this machine shows {len(pool)} ({','.join(pool)})")
    devices, locks = acquire(args.gpus, pool)
    print(f"gpu_lease: CUDA_VISIBLE_DEVICES={','.join(devices)}", file=sys.stderr, flush=True)
    try:
        return subprocess.call(command, env={**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(devices)})
    finally:
        for f in locks:
            f.close()


if __name__ == "__main__":
    sys.exit(main())
