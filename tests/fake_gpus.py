"""A machine's GPUs, faked: an ``nvidia-smi`` of our own that lists ``count`` cards called ``name``.

The pipeline counts and names GPUs only through ``nvidia-smi`` (``pipeline.machine``,
``pipeline.gpu_lease``), so a folder holding this script first on PATH is a machine with those cards.
"""
from __future__ import annotations

from pathlib import Path

SCRIPT = """#!/bin/sh
i=0
while [ $i -lt {count} ]; do
  case "$*" in
    *query-gpu=index,name*) echo "$i, {name}" ;;
    *query-gpu=*) echo "580.00" ;;
    *) echo "GPU $i: {name} (UUID: GPU-fake-$i)" ;;
  esac
  i=$((i+1))
done
"""


def fake_nvidia_smi(folder: Path, count: int, name: str = "NVIDIA H100 80GB HBM3") -> Path:
    """Write the fake ``nvidia-smi`` into ``folder`` (made if missing) and return the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    smi = folder / "nvidia-smi"
    smi.write_text(SCRIPT.format(count=count, name=name))
    smi.chmod(0o755)
    return folder
