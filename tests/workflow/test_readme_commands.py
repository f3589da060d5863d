"""Every snakemake command README and docs/ show, run as written (the pages cannot drift from the code).

Commands run for real where this CPU machine can run them: the smoke preset's, and rebuilding the
committed runs from their records. A command that measures on GPUs runs as a dry run, and for real
only to check that it stops before any job with one line. Slurm's need its executor plugin and the
apptainer one a container runtime: dry runs, the runtime answered by a stand-in that only knows
its version. A command that asks a committed run for one part of it runs as a dry run on a copy of
that run.
"""
from __future__ import annotations

import filecmp
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from cs336_systems import deliverables
from workflow import readme
from workflow.test_snakemake import REPO, SNAKEMAKE, _show, env_for, job_stats, make_copy

COMMANDS = readme.commands()
def tracked_runs(repo: Path = REPO) -> list[str]:
    """The runs whose writeup git tracks: what is committed, not what a user's own runs left beside
    it (README's main command on a CPU makes results/smoke and writeup/smoke, which are ignored)."""
    tracked = subprocess.run(["git", "ls-files", "--", "writeup/*/writeup.md"], cwd=repo, capture_output=True,
                             text=True, check=True).stdout.split()
    return sorted(Path(path).parent.name for path in tracked)


def archive_of(run: str, repo: Path = REPO) -> str:
    """What an archived run is (its run.json's ``archive``), '' for a live one."""
    identity = repo / "results" / run / "run.json"
    return json.loads(identity.read_text()).get("archive", "") if identity.is_file() else ""


def committed_runs(repo: Path = REPO) -> list[str]:
    """The committed runs the DAG rebuilds: the tracked ones that are not archives."""
    return [run for run in tracked_runs(repo) if not archive_of(run, repo)]


COMMITTED_RUNS = committed_runs()
ARCHIVED_RUNS = [run for run in tracked_runs() if archive_of(run)]
MEASURING = {rule for d in deliverables.DELIVERABLES for rule in d.measures}    # every rule that makes records


def kind(command: str) -> str:
    if "--profile profiles/slurm" in command:
        return "slurm"
    run = re.search(r"\brun=(\S+)", command)
    if run and run.group(1) in COMMITTED_RUNS:
        whole = "reuse_records=true" in command and "sections=" in command and not re.search(r"\bresults/", command)
        return "rebuild" if whole else "committed-part"
    if "preset=full" in command:
        return "needs-gpu"
    return "smoke"


def by_kind(name: str) -> list[str]:
    return [c for c in COMMANDS if kind(c) == name]


def shell(copy: Path, command: str, timeout: float = 600, path_first: Path | None = None):
    env = env_for(copy)
    env["PATH"] = os.pathsep.join(str(p) for p in (path_first, SNAKEMAKE.parent) if p) + os.pathsep + env["PATH"]
    env["PWD"] = str(copy)
    return subprocess.run(["bash", "-c", command], cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)


def test_readme_shows_runnable_commands():
    """README shows the main command and --unlock; docs/committed-runs.md (which README links) one
    rebuild command per committed run; the rest is in docs/, and the pages together show every kind
    of command this file runs."""
    assert readme.main_command() == "snakemake --cores 1 --resources gpu=2"
    shown = readme.readme_commands()
    assert "snakemake --unlock" in shown and "](docs/committed-runs.md)" in readme.README.read_text()
    rebuilds = [c for c in readme.rebuild_page_commands() if kind(c) == "rebuild"]
    assert sorted(re.search(r"\brun=(\S+)", c).group(1) for c in rebuilds) == COMMITTED_RUNS
    assert len(COMMANDS) >= 12 and {kind(c) for c in COMMANDS} == {"smoke", "needs-gpu", "slurm", "rebuild",
                                                                   "committed-part"}
    for command in COMMANDS:
        assert not re.search(r"[<>…]", command), f"README or docs/ show a command with a placeholder: {command}"


def test_readme_links_every_page_of_docs():
    text = readme.README.read_text()
    for page in readme.pages()[1:]:
        assert f"](docs/{page.name})" in text, f"README does not link docs/{page.name}"


def test_readme_id_map_is_the_registry():
    """README's table from an ID to its code is what `python -m cs336_systems.deliverables` prints,
    row for row (readme.id_map_rows gives the rows to paste when the registry changes)."""
    assert "python -m cs336_systems.deliverables" in readme.id_map_section()
    assert readme.id_map_shown() == readme.id_map_rows()


def test_the_main_command_loads_the_default_profile(smoke):
    copy, proc, _ = smoke
    assert proc.returncode == 0, _show(proc)
    assert "Using workflow specific profile profiles/default" in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("command", by_kind("smoke"))
def test_smoke_machine_command(smoke, command, tmp_path):
    copy, first, _ = smoke
    assert first.returncode == 0, _show(first)
    shim = None
    if "--sdm apptainer" in command:
        shim = tmp_path / "bin"
        shim.mkdir()
        (shim / "apptainer").write_text('#!/bin/sh\n[ "$1" = --version ] && echo "apptainer version 1.3.4" && exit 0\n'
                                        'echo "stand-in apptainer: $*" >&2; exit 1\n')
        (shim / "apptainer").chmod(0o755)
    proc = shell(copy, readme.dry(command), path_first=shim)
    assert proc.returncode == 0, _show(proc)
    if shim is None:                    # the smoke tree is built: running it for real is cheap
        proc = shell(copy, command)
        assert proc.returncode == 0, _show(proc)
        if "--report" in command:
            assert (copy / command.split()[-1]).stat().st_size > 0


@pytest.mark.parametrize("command", by_kind("needs-gpu"))
def test_gpu_command_plans_and_stops_on_a_cpu_in_one_line(command, tmp_path):
    copy = make_copy(tmp_path)
    proc = shell(copy, readme.dry(command))
    assert proc.returncode == 0, _show(proc)
    assert job_stats(proc.stdout + proc.stderr)["A1_benchmark"] > 0
    proc = shell(copy, command)
    assert proc.returncode == 1, _show(proc)
    lines = [line for line in proc.stderr.splitlines() if "measures on CUDA GPUs" in line]
    assert len(lines) == 1 and "reuse_records=true" in lines[0] and "Traceback" not in proc.stderr, _show(proc)
    assert not list((copy / "results").rglob("*.json"))       # nothing started


@pytest.mark.parametrize("command", by_kind("slurm"))
def test_slurm_command_dry_run(command, tmp_path):
    import importlib.util
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("the slurm extra is not installed (.ci/setup-slurm.sh installs it)")
        pytest.skip("snakemake-executor-plugin-slurm is not installed (pip install -e '.[slurm]')")
    copy = make_copy(tmp_path)
    proc = shell(copy, command if "--unlock" in command else readme.dry(command))
    assert proc.returncode == 0, _show(proc)


def _copy_committed_run(copy: Path, run: str) -> None:
    for top in ("results", "writeup"):
        shutil.copytree(REPO / top / run, copy / top / run)


@pytest.mark.parametrize("command", by_kind("committed-part"))
def test_committed_run_command_dry_run(command, tmp_path):
    copy = make_copy(tmp_path)
    _copy_committed_run(copy, re.search(r"\brun=(\S+)", command).group(1))
    proc = shell(copy, readme.dry(command))
    assert proc.returncode == 0, _show(proc)
    assert "Unparsable value" not in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("command", by_kind("rebuild"))
def test_rebuilding_a_committed_run_measures_nothing_and_gives_its_tables_and_text(command, tmp_path):
    """Run for real on this CPU: only reports and the writeup run (no rule that makes records, C9's
    CPU one included), every record keeps its numbers, and every table comes out byte for byte as
    committed (so the committed tables are the code's), and so does the writeup's text: the reports
    decide and the templates word, so a summary key computed wrongly shows here."""
    run = re.search(r"\brun=(\S+)", command).group(1)
    copy = make_copy(tmp_path)
    _copy_committed_run(copy, run)
    (copy / "writeup" / run / "writeup.md").unlink()         # made again, not left as copied
    proc = shell(copy, command)
    assert proc.returncode == 0, _show(proc)
    assert (copy / "writeup" / run / "writeup.md").read_text() == (REPO / "writeup" / run / "writeup.md").read_text()
    ran = job_stats(proc.stdout + proc.stderr) if "Job stats:" in proc.stdout + proc.stderr else {}
    assert not [rule for rule in ran if rule in MEASURING], ran
    committed = REPO / "results" / run
    for path in committed.rglob("*"):
        rebuilt = copy / path.relative_to(REPO)
        if path.name == "table.csv":
            assert filecmp.cmp(path, rebuilt, shallow=False), f"{rebuilt.relative_to(copy)} differs from the committed one"
        elif "records" in path.parts and path.suffix == ".json":
            assert _without_provenance(path) == _without_provenance(rebuilt), f"{rebuilt.relative_to(copy)} changed"


def _without_provenance(path: Path):
    data = json.loads(path.read_text())
    for record in data if isinstance(data, list) else [data]:
        if isinstance(record, dict):
            record.pop("provenance", None)
    return data


@pytest.mark.parametrize("run", COMMITTED_RUNS)
def test_a_committed_writeup_hints_at_readmes_rebuild_command(run):
    """Each committed writeup tells its reader how to rebuild it with the exact command
    docs/committed-runs.md gives for that run (and the test above runs that command)."""
    text = (REPO / "writeup" / run / "writeup.md").read_text()
    hint = re.search(r"measuring nothing: `(snakemake [^`]+)`", text)
    assert hint, f"writeup/{run}/writeup.md has no rebuild command"
    assert kind(hint.group(1)) == "rebuild" and hint.group(1) in readme.rebuild_page_commands(), \
        f"{hint.group(1)!r} is not docs/committed-runs.md's rebuild command for {run}"


def test_readme_says_what_a_target_after_resources_does(tmp_path):
    """README or docs/ warn that a target after `--resources` is read as a resource; what they quote
    is what Snakemake prints."""
    text = readme.text()
    quoted = re.search(r"after `--resources` it stops with Python's `([^`]+)`", re.sub(r"\s+", " ", text))
    assert quoted, "neither README nor docs/ say what a target after --resources does"
    copy = make_copy(tmp_path)
    proc = shell(copy, "snakemake --cores 1 --resources gpu=2 results/smoke/A3/table.md")
    assert proc.returncode != 0 and quoted.group(1) in proc.stderr, _show(proc)
    proc = shell(copy, "snakemake --cores 1 --config run=x results/smoke/A3/table.md")
    assert proc.returncode != 0 and "Unparsable value" in proc.stderr, _show(proc)


def test_rebuilding_keeps_a_record_measured_from_a_newer_one(tmp_path):
    """Rebuilding h200 from its records (README's command) with some of a job's records newer than
    the others (E1's fused-adamw records: re-measured, or simply checked out later) plans no
    measurement."""
    command = next(c for c in by_kind("rebuild") if "run=h200" in c)
    copy = make_copy(tmp_path)
    _copy_committed_run(copy, "h200")
    records = copy / "results" / "h200" / "E1" / "records"
    later = max(p.stat().st_mtime for p in records.iterdir()) + 60
    for before in records.glob("*_fused-adamw.json"):
        os.utime(before, (later, later))
    proc = shell(copy, readme.dry(command))
    assert proc.returncode == 0, _show(proc)
    stats = job_stats(proc.stdout) if "Job stats:" in proc.stdout else {}
    assert "E1_step" not in stats and "E1_ladder" not in stats, stats


def test_a_committed_run_is_one_git_tracks_not_one_a_user_s_run_left(tmp_path):
    """README's main command on a CPU leaves results/smoke and writeup/smoke (git ignores them): the
    suite run after it must not take smoke for a committed run."""
    for run in ("h100", "h200", "smoke"):
        (tmp_path / "writeup" / run).mkdir(parents=True)
        (tmp_path / "writeup" / run / "writeup.md").write_text("# a writeup\n")
    (tmp_path / "results" / "h100").mkdir(parents=True)
    (tmp_path / "results" / "h100" / "run.json").write_text(json.dumps({"preset": "full", "device": "X",
                                                                         "archive": "kept as it was"}))
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", "writeup/h100/writeup.md", "writeup/h200/writeup.md"], cwd=tmp_path, check=True)
    assert committed_runs(tmp_path) == ["h200"] and tracked_runs(tmp_path) == ["h100", "h200"]
    assert COMMITTED_RUNS == ["h200"] and ARCHIVED_RUNS == ["h100"]


@pytest.mark.parametrize("run", ARCHIVED_RUNS)
def test_an_archived_writeup_opens_with_what_it_is_and_no_command_rebuilds_it(run, tmp_path):
    """Its first lines say it is an archive, in its run.json's words; README's and docs' commands
    leave it alone, and one asked to rebuild it stops in one line, changing nothing."""
    md = (REPO / "writeup" / run / "writeup.md").read_text()[:3000]
    assert "**An archive**: " + archive_of(run) in md and "measuring nothing: `snakemake" not in md
    page = re.sub(r"<[^>]+>", "", (REPO / "writeup" / run / "writeup.html").read_text())
    assert "An archive: " + archive_of(run).replace("`", "") in re.sub(r"\s+", " ", page)
    assert not [c for c in COMMANDS if f"run={run} " in c + " "]
    copy = make_copy(tmp_path)
    _copy_committed_run(copy, run)
    proc = shell(copy, f"snakemake --cores 2 --config preset=full run={run} reuse_records=true")
    lines = [line for line in proc.stderr.splitlines() if "is an archive" in line]
    assert proc.returncode != 0 and len(lines) == 1 and "Traceback" not in proc.stderr, _show(proc)


def test_readme_orients_in_at_most_120_lines():
    """What it is, install, run, test, where the results and the ID map are; the history of the
    committed runs and their costs live in docs/committed-runs.md."""
    assert len(readme.README.read_text().splitlines()) <= 120
