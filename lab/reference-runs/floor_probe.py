"""Where the per-job floor goes: the pieces every measuring job pays before and after its work,
each timed in fresh processes (medians of --repeats), on the machine it runs on.

    python lab/reference-runs/floor_probe.py [--repeats 5]

The floor is what a job whose record is ``skipped`` takes (``pipeline.job_times`` prints it): two
Python processes (``gpu_lease`` and the measuring module), torch's import, provenance (CUDA's
device query, ``nvidia-smi`` for the driver, git), writing the record, and the exit.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time

PIECES = {
    "python, nothing": "pass",
    "import torch": "import torch",
    "import torch + cuda query": "import torch; torch.cuda.is_available() and torch.cuda.get_device_name(0)",
    "import torch + a CUDA context": "import torch\nif torch.cuda.is_available(): torch.zeros(1, device='cuda')",
    "import torch + triton": "import torch, triton",
    "provenance()": "from cs336_systems.records import provenance; provenance()",
    "import the E1 ladder": "import cs336_systems.training_step.ladder",
}


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - start


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    rows = [(name, [timed([sys.executable, "-c", code]) for _ in range(args.repeats)]) for name, code in PIECES.items()]
    smi = shutil.which("nvidia-smi")
    if smi:
        rows.append(("nvidia-smi -L", [timed([smi, "-L"]) for _ in range(args.repeats)]))
        rows.append(("nvidia-smi driver query", [timed([smi, "--query-gpu=driver_version", "--format=csv,noheader"])
                                                 for _ in range(args.repeats)]))
    print("| piece | median (s) | min (s) | max (s) |\n|:--|--:|--:|--:|")
    for name, times in rows:
        print(f"| {name} | {statistics.median(times):.2f} | {min(times):.2f} | {max(times):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
