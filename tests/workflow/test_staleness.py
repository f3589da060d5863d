"""An edit re-measures exactly the deliverables whose code it is: touched modules in a finished smoke
run, and the measuring jobs a dry run of README's main command then plans.

The expectations are written here by hand (what each deliverable is about), not derived from the
staleness crawler the pipeline uses, so a wrong edge in the code's imports shows as a failure.
"""
from __future__ import annotations

import shlex
import shutil

import pytest

from cs336_systems import deliverables
from workflow.readme import main_command
from workflow.test_snakemake import _show, job_stats, snakemake

MAIN = shlex.split(main_command())[1:]
MEASURING = {rule: d.id for d in deliverables.DELIVERABLES for rule in d.measures}


@pytest.mark.parametrize("module, remeasured", [
    ("memory/checkpointing.py", {"A6", "E1"}),          # A6's code: A6 and E1's checkpointed rung, not every workload user
    ("report/common.py", set()),                        # a report helper: reports and the writeup only
    ("attention/flash_triton.py", {"B3", "B5", "E1"}),  # our kernels: their checks, benchmark rows and E1's flash rungs
    ("precision/accumulation.py", {"A3"}),
])
def test_a_touched_module_remeasures_only_what_uses_it(smoke, tmp_path, module, remeasured):
    copy, first, _ = smoke
    assert first.returncode == 0, _show(first)
    shutil.copytree(copy, tmp_path / "repo", symlinks=True)
    copy = tmp_path / "repo"
    # An edit, not a touch: Snakemake 9 keeps its inputs' checksums and ignores a newer time alone.
    with open(copy / "src" / "cs336_systems" / module, "a") as f:
        f.write("# an edit\n")
    proc = snakemake(copy, *MAIN, "-n")
    assert proc.returncode == 0, _show(proc)
    stats = job_stats(proc.stdout) if "Job stats:" in proc.stdout else {}
    assert {MEASURING[rule] for rule in stats if rule in MEASURING} == remeasured, stats
    assert "writeup" in stats
