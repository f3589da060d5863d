"""README's commands on any machine: the DAG plans what the machine's GPUs can measure, a run folder
belongs to the preset and card that first measured into it, and the jobs run the checkout's code.

A machine's GPUs are faked with an ``nvidia-smi`` of the test's own on PATH (the pipeline reads
nothing else to count and name them: ``pipeline.machine``). Committed runs are copied into a
temporary checkout; the real tree is never touched.
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from cs336_systems import deliverables
from fake_gpus import fake_nvidia_smi
from workflow.readme import main_command
from workflow.test_snakemake import REPO, SNAKEMAKE, _show, env_for, job_stats, make_copy, planned_outputs, snakemake

MAIN = shlex.split(main_command())[1:]

def _with_gpus(copy: Path, count: int, name: str) -> dict:
    """The copy's environment on a machine that shows ``count`` GPUs called ``name``."""
    bin_dir = fake_nvidia_smi(copy / ".fake-bin", count, name)
    env = env_for(copy)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    return env


def _run(copy: Path, env: dict, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(SNAKEMAKE), *args], cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)


def _with_committed(copy: Path, run: str) -> Path:
    shutil.copytree(REPO / "results" / run, copy / "results" / run)
    shutil.copytree(REPO / "writeup" / run, copy / "writeup" / run)
    return copy


def _digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


MULTI_GPU_IDS = [d.id for d in deliverables.DELIVERABLES if d.needs == deliverables.RANKS]   # not C9's closed forms
MULTI_GPU_RULES = ("C1_row", "C3_variants")      # C3_variants: every data-parallel variant, one job per precision


@pytest.mark.parametrize("gpus", [1, 2])
def test_readme_main_command_plans_what_the_gpus_can_measure(tmp_path, gpus):
    """One GPU: no job that needs two, and the writeup is reached. Two: the data-parallel jobs too."""
    copy = make_copy(tmp_path)
    proc = _run(copy, _with_gpus(copy, gpus, "NVIDIA H100 80GB HBM3"), *MAIN, "-n")
    assert proc.returncode == 0, _show(proc)
    stats = job_stats(proc.stdout)
    assert "writeup" in stats and "A1_benchmark" in stats
    multi = {rule for rule in stats if rule in MULTI_GPU_RULES}
    if gpus == 1:
        assert not multi, stats
        assert not [rule for rule in stats if rule.split("_")[0] in MULTI_GPU_IDS], stats
    else:
        assert {"C1_row", "C3_variants"} <= multi, stats


def test_one_gpu_writes_the_multi_gpu_sections_text(tmp_path):
    """README's main command on one GPU with only the C sections chosen: C9 (closed form, a CPU job)
    is measured, the writeup is built, and each C section that needs two GPUs says so and what one
    job had; a section not chosen says it was not measured. The same command on a real one-GPU
    machine must write the same sections (checked on an H100 before this was resolved)."""
    copy = make_copy(tmp_path)
    chosen = ",".join(ident for ident in deliverables.IDS if ident.startswith("C"))
    proc = _run(copy, _with_gpus(copy, 1, "NVIDIA H100 80GB HBM3"), *MAIN,
                "--config", "preset=full", "run=onegpu", f"sections={chosen}")
    assert proc.returncode == 0, _show(proc)
    text = (copy / "writeup" / "onegpu" / "writeup.md").read_text()
    for ident in MULTI_GPU_IDS:
        assert (f"needs 2 GPUs; this run's jobs had 1 (measure it on a 2-GPU machine with "
                f"`sections={chosen}`)") in text.split(f"## {ident}. ", 1)[1].split("\n## ", 1)[0], ident
    assert f"not measured in this run: rebuild with `sections={chosen},A1`" in text
    assert "this run's jobs had 0" not in text and "## C9. " in text


def test_one_gpu_renders_a_bigger_machines_records_and_keeps_them(tmp_path):
    """On one H200, run h200 (whose C records come from two and four H200s) plans the C reports from
    those records and no job that would measure them again (which would replace them by skips)."""
    copy = _with_committed(make_copy(tmp_path), "h200")
    for module in ("report/ddp.py", "report/c1.py", "distributed/train_bench.py", "distributed/allreduce_bench.py"):
        with open(copy / "src" / "cs336_systems" / module, "a") as f:    # an edit to the code that reports and measures C
            f.write("# an edit\n")
    proc = _run(copy, _with_gpus(copy, 1, "NVIDIA H200"), *MAIN, "--config", "run=h200", "-n")
    assert proc.returncode == 0, _show(proc)
    stats = job_stats(proc.stdout)
    assert {"C1_report", "C3_report", "C8_report", "C12_report", "writeup"} <= set(stats), stats
    assert not set(stats) & set(MULTI_GPU_RULES), stats
    planned = planned_outputs(proc.stdout)
    remeasured = [p for p in planned if "/records/" in p and p.split("/")[2] in MULTI_GPU_IDS]
    assert not remeasured, remeasured


@pytest.mark.parametrize("run", ["h200"])
def test_a_cpu_run_never_writes_into_a_gpu_run(tmp_path, run):
    """The command a writeup used to suggest (run=<a GPU run>, smoke picked on a CPU) stops in one line
    before any job, naming the folder and what it holds, and changes nothing; a dry run stops too."""
    copy = _with_committed(make_copy(tmp_path), run)
    before = _digests(copy / "results") | _digests(copy / "writeup")
    for dry in ([], ["-n"]):
        proc = snakemake(copy, "--cores", "1", "--config", f"run={run}", *dry)
        lines = [line for line in proc.stderr.splitlines() if "holds records of" in line]
        assert proc.returncode != 0 and len(lines) == 1, _show(proc)
        assert f"results folder results/{run}/ holds records of preset full on NVIDIA H" in lines[0]
        assert "this command would measure with preset smoke on CPU" in lines[0]
        assert "Traceback" not in proc.stdout + proc.stderr
    assert _digests(copy / "results") | _digests(copy / "writeup") == before


def test_a_rebuild_of_a_gpu_run_in_another_preset_measures_nothing(tmp_path):
    """reuse_records=true with another preset may render the folder's own records, never add its own:
    the smoke records it would measure are refused before the first job."""
    copy = _with_committed(make_copy(tmp_path), "h200")
    with open(copy / "src" / "cs336_systems" / "report" / "a1.py", "a") as f:   # A1's report is stale: it needs records
        f.write("# an edit\n")
    before = _digests(copy / "results")
    proc = snakemake(copy, "--cores", "1", "--config", "preset=smoke", "run=h200", "reuse_records=true")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, _show(proc)
    assert "holds records of preset full on NVIDIA H200" in out and "(it would measure: " in out, _show(proc)
    assert _digests(copy / "results") == before


def test_another_gpu_kind_may_not_measure_into_a_run(tmp_path):
    """run=h200 on an H100 stops while the Snakefile is read, naming both cards."""
    copy = _with_committed(make_copy(tmp_path), "h200")
    proc = _run(copy, _with_gpus(copy, 1, "NVIDIA H100 80GB HBM3"), *MAIN, "--config", "run=h200", "-n")
    assert proc.returncode != 0, _show(proc)
    assert ("holds records of preset full on NVIDIA H200; this command would measure with preset full on "
            "NVIDIA H100 80GB HBM3") in proc.stderr, _show(proc)


def test_the_second_checkout_runs_its_own_code(tmp_path):
    """With the package installed (editable) from another checkout and no PYTHONPATH, a job in this
    checkout runs this checkout's edited code, and its record names this checkout's commit, dirty."""
    copy = make_copy(tmp_path)
    git = lambda *args: subprocess.run(["git", "-C", str(copy), *args], capture_output=True, text=True, check=True)
    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "init")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "copy")
    head = git("rev-parse", "HEAD").stdout.strip()
    module = copy / "src" / "cs336_systems" / "precision" / "accumulation.py"
    future = "from __future__ import annotations\n"
    assert future in module.read_text()
    module.write_text(module.read_text().replace(
        future, future + "import sys\nprint('ran the second checkout', file=sys.stderr)\n", 1))
    env = {k: v for k, v in env_for(copy).items() if k != "PYTHONPATH"}
    proc = subprocess.run([str(SNAKEMAKE), "--cores", "1", "results/smoke/A3/records/accumulation.json"], cwd=copy,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, _show(proc)
    assert "ran the second checkout" in (copy / "results/smoke/logs/A3/accumulation.log").read_text()
    provenance = json.loads((copy / "results/smoke/A3/records/accumulation.json").read_text())["provenance"]
    assert provenance["commit"] == head and provenance["dirty"] is True
    # The rule lists the copy's own files as its inputs (paths inside the copy), not the installed ones.
    dry = subprocess.run([str(SNAKEMAKE), "--cores", "1", "-n", "--forceall", "results/smoke/A3/records/accumulation.json"],
                         cwd=copy, env=env, capture_output=True, text=True, timeout=300)
    inputs = {p.strip() for line in dry.stdout.splitlines() if line.strip().startswith("input:")
              for p in line.split(":", 1)[1].split(",")}
    assert "src/cs336_systems/precision/accumulation.py" in inputs, _show(dry)
    assert not any(str(REPO) in p for p in inputs), inputs


def test_a_smoke_run_claims_its_folder(smoke):
    copy, first, _ = smoke
    assert first.returncode == 0, _show(first)
    assert json.loads((copy / "results" / "smoke" / "run.json").read_text()) == {"preset": "smoke", "device": "CPU"}
