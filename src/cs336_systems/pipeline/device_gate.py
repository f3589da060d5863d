"""Stop a run that would measure on CUDA GPUs on a machine that has none, before any job starts.

Without this, ``--config preset=full`` on a laptop plans a few hundred measuring jobs and each one
fails on its own. The Snakefile's ``onstart`` hands over the jobs Snakemake is about to run (after
it has worked out what is stale, so rebuilding tables from records already on disk with
``reuse_records=true`` still runs on a CPU) and stops with one line if any of them needs a GPU.
"""
from __future__ import annotations

from collections import Counter
from typing import Iterable


def refusal(device: str, planned: Iterable[tuple[str, int]], cuda_visible: bool, local: bool,
            preset: str) -> str | None:
    """The one-line reason to stop, or None to go on.

    ``planned`` holds (rule name, GPUs it declares) for every job about to run. Jobs sent to a
    cluster (``local`` false) run on machines we cannot see from here, so they are never stopped.
    """
    if device != "cuda" or cuda_visible or not local:
        return None
    needing = Counter(rule for rule, gpus in planned if gpus > 0)
    if not needing:
        return None
    jobs = ", ".join(f"{rule} x{n}" if n > 1 else rule for rule, n in sorted(needing.items()))
    return (f"cs336-systems: preset {preset} measures on CUDA GPUs and this machine shows none, "
            f"so nothing was started ({sum(needing.values())} jobs would measure: {jobs}). "
            "To rebuild tables and the writeup from the records already here, add "
            "'reuse_records=true' (and 'sections=...' for a run that measured only some deliverables); "
            "to try the whole DAG on this machine, use 'preset=smoke'.")
