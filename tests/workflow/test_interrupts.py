"""Interrupting README's main command at a measuring job, then doing what README says: the DAG finishes
with every record whole and nothing left to do.

Each test works on its own copy of the finished smoke tree (timestamps and Snakemake's metadata
kept) with A3's measuring module edited, so the interrupted run has a real measuring job to cut off
and little else to do (A3's job, its report and the writeup).
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from workflow.readme import main_command
from workflow.test_snakemake import SNAKEMAKE, _show, env_for, snakemake

pytestmark = pytest.mark.slow
MAIN = shlex.split(main_command())[1:]


MEASURING_JOB = "A3_accumulation"       # what the edit below makes stale (test_staleness says so)


def _tree_after_an_edit(smoke, dest: Path) -> Path:
    """The finished smoke tree with A3's module edited, so its measuring job is stale (three jobs)."""
    copy, first, _ = smoke
    assert first.returncode == 0, _show(first)
    shutil.copytree(copy, dest, symlinks=True)
    with open(dest / "src" / "cs336_systems" / "precision" / "accumulation.py", "a") as f:
        f.write("# an edit that makes A3 stale\n")
    return dest


def _default_sigint() -> None:
    """In the child before exec: SIGINT as at a terminal. A process started in the background by a
    shell without job control (`pytest ... &`, a CI runner's `cmd &`) inherits SIGINT ignored, and
    Python then never turns it into KeyboardInterrupt: Ctrl-C would be tested as a no-op."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(copy: Path, log: Path) -> subprocess.Popen:
    out = open(log, "w")
    return subprocess.Popen([str(SNAKEMAKE), *MAIN], cwd=copy, env=env_for(copy), stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=_default_sigint)


def _wait_for(log: Path, text: str, proc: subprocess.Popen, limit_s: float = 120) -> None:
    deadline = time.monotonic() + limit_s
    while text not in log.read_text():
        assert proc.poll() is None, f"snakemake ended before {text!r}:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no {text!r} in {limit_s} s"
        time.sleep(0.2)


def _group_gone(pgid: int, limit_s: float = 120) -> None:
    """Wait until no process of the run's group is left (jobs a killed Snakemake left running)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.killpg(pgid, signal.SIGKILL)


def _assert_finished_and_whole(copy: Path) -> None:
    proc = snakemake(copy, *MAIN)
    assert proc.returncode == 0, _show(proc)
    proc = snakemake(copy, "-n", *MAIN)
    assert "Nothing to be done" in proc.stdout + proc.stderr, _show(proc)
    results = copy / "results" / "smoke"
    for path in results.rglob("*.json"):
        json.loads(path.read_text())                              # every record and summary whole
    assert not [p.name for p in results.rglob("*.tmp")]           # no half-written temporary files
    assert (copy / "writeup" / "smoke" / "writeup.html").stat().st_size > 0


def test_ctrl_c_then_the_same_command(smoke, tmp_path):
    copy = _tree_after_an_edit(smoke, tmp_path / "repo")
    proc = _start(copy, tmp_path / "first.log")
    _wait_for(tmp_path / "first.log", f"rule {MEASURING_JOB}:", proc)
    time.sleep(1.0)                                              # inside the job's process
    os.killpg(proc.pid, signal.SIGINT)                           # Ctrl-C: the whole foreground group
    assert proc.wait(timeout=120) != 0
    _group_gone(proc.pid)
    _assert_finished_and_whole(copy)


def test_kill_9_then_unlock_and_the_same_command(smoke, tmp_path):
    copy = _tree_after_an_edit(smoke, tmp_path / "repo")
    proc = _start(copy, tmp_path / "first.log")
    _wait_for(tmp_path / "first.log", f"rule {MEASURING_JOB}:", proc)
    time.sleep(1.0)
    os.kill(proc.pid, signal.SIGKILL)                            # Snakemake alone; its job runs on
    proc.wait(timeout=30)
    _group_gone(proc.pid)
    again = snakemake(copy, *MAIN)
    assert again.returncode != 0 and "cannot be locked" in again.stdout + again.stderr, _show(again)
    unlock = snakemake(copy, "--unlock")                         # README's one step
    assert unlock.returncode == 0, _show(unlock)
    _assert_finished_and_whole(copy)


def test_damaged_records_are_measured_again(smoke, tmp_path):
    """Two records two reports read (A1's and A4's), one cut to half its bytes, the other replaced by
    JSON that is not a record: README's command names each in one line, sets it aside before it
    plans, measures it again in the same run, and both reports read the new records."""
    copy, first, _ = smoke
    assert first.returncode == 0, _show(first)
    shutil.copytree(copy, tmp_path / "repo", symlinks=True)
    copy = tmp_path / "repo"
    records = copy / "results" / "smoke" / "A1" / "records"
    damage = {records / "tiny_ctx16_forward-backward_fp32.json": ("cut", "not JSON"),
              records / "tiny_ctx16_forward-backward_bf16.json": ("not a record", "not a record")}
    for record, (how, _) in damage.items():
        text = record.read_text()
        record.write_text(text[: len(text) // 2] if how == "cut" else '{"not": "a record"}')
    proc = snakemake(copy, *MAIN)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, _show(proc)
    assert "Missing files" not in out and "Traceback" not in out, _show(proc)
    for record, (_, why) in damage.items():
        assert f"damaged record results/smoke/A1/records/{record.name} ({why}" in out, _show(proc)
        assert (record.parent / (record.name + ".damaged")).exists()
        assert json.loads(record.read_text())["status"] == "ok"
        for report in ("A1", "A4"):      # both readers ran after the new record was written
            summary = copy / "results" / "smoke" / report / "summary.json"
            assert summary.stat().st_mtime >= record.stat().st_mtime, report
    _assert_finished_and_whole(copy)
