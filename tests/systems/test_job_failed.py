"""pipeline.job_failed: the one line a failed rule prints (traceback, empty log with and without a
full disk, ENOSPC in the log, missing log), the exit status passed through, and the shell idiom the
rules use, run for real."""
from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from collections import namedtuple

import pytest

from cs336_systems.pipeline import job_failed

PREFIX = "cs336-systems: job failed"
Usage = namedtuple("Usage", "total used free")

TRACEBACK = """\
step 1 loss 3.2
Traceback (most recent call last):
  File "/x/train.py", line 10, in <module>
    main()
  File "/x/train.py", line 7, in main
    raise RuntimeError("CUDA error: an illegal memory access was encountered")
    ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
RuntimeError: CUDA error: an illegal memory access was encountered
[W ProcessGroupNCCL.cpp:1] Warning: process group has NOT been destroyed

"""


def _run(argv: list[str], capsys) -> tuple[int, str]:
    status = job_failed.main(argv)
    err = capsys.readouterr().err
    assert err.endswith("\n") and err.count("\n") == 1, err
    return status, err.rstrip("\n")


def _full_disk(monkeypatch, free: int = 4096) -> None:
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(10 << 30, (10 << 30) - free, free))


def test_a_traceback_gives_its_exception_line(tmp_path, capsys):
    log = tmp_path / "job.log"
    log.write_text(TRACEBACK)
    status, line = _run([str(log), "1"], capsys)
    assert status == 1
    assert line == (f"{PREFIX} (exit 1): RuntimeError: CUDA error: an illegal memory access was encountered "
                    f"(log: {log})")


def test_without_a_traceback_the_last_non_empty_line(tmp_path, capsys):
    log = tmp_path / "job.log"
    log.write_text("loading\n\x1b[31mc9: --tokens must be 0 or more, got -1\x1b[0m\n\n  \n")
    assert _run([str(log), "2"], capsys) == (2, f"{PREFIX} (exit 2): c9: --tokens must be 0 or more, got -1 (log: {log})")


def test_a_traceback_the_program_went_on_from_is_not_the_reason(tmp_path, capsys):
    """A recorded error's traceback in the middle of a log; the job ended on a later message."""
    log = tmp_path / "job.log"
    log.write_text(TRACEBACK + "".join(f"row {i} ok\n" for i in range(20)) + "damaged record r.json: not JSON\n")
    assert _run([str(log), "1"], capsys)[1] == f"{PREFIX} (exit 1): damaged record r.json: not JSON (log: {log})"


def test_an_empty_log_on_a_disk_with_space(tmp_path, capsys):
    log = tmp_path / "job.log"
    log.write_text("")
    assert shutil.disk_usage(tmp_path).free >= job_failed.FULL_BELOW
    assert _run([str(log), "1"], capsys) == (1, f"{PREFIX} (exit 1): the command printed nothing (the log is empty) (log: {log})")


def test_an_empty_log_on_a_full_disk(tmp_path, monkeypatch, capsys):
    log = tmp_path / "logs" / "job.log"
    log.parent.mkdir()
    log.write_text("\n")
    _full_disk(monkeypatch)
    assert _run([str(log), "1"], capsys) == (
        1, f"{PREFIX} (exit 1): the disk holding {log.parent} is full (4096 bytes free); the log is empty (log: {log})")


def test_a_missing_log_under_a_missing_folder_on_a_full_disk(tmp_path, monkeypatch):
    """disk_usage of a folder that does not exist fails; the disk is measured at its nearest parent."""
    seen = []

    def usage(path):
        seen.append(path)
        if not path.exists():
            raise FileNotFoundError(path)
        return Usage(1 << 30, 1 << 30, 0)

    monkeypatch.setattr(shutil, "disk_usage", usage)
    log = tmp_path / "a" / "b" / "job.log"
    assert job_failed.explain(log, 1) == (
        f"{PREFIX} (exit 1): the disk holding {tmp_path} is full (0 bytes free); the log is missing (log: {log})")
    assert seen == [log.parent, log.parent.parent, tmp_path]


def test_a_missing_log_on_a_disk_with_space(tmp_path, capsys):
    log = tmp_path / "job.log"
    assert _run([str(log), "1"], capsys)[1] == (
        f"{PREFIX} (exit 1): the log was not created (the command's output went nowhere) (log: {log})")
    nowhere = tmp_path / "no" / "job.log"
    assert _run([str(nowhere), "1"], capsys)[1] == (
        f"{PREFIX} (exit 1): the log was not created: its folder {nowhere.parent} does not exist (log: {nowhere})")
    assert list(tmp_path.iterdir()) == []          # the probe for a writable folder leaves nothing


def test_a_disk_full_error_anywhere_in_the_log(tmp_path, capsys):
    log = tmp_path / "job.log"
    enospc = "OSError: [Errno 28] No space left on device: '/data/ckpt.pt'"
    log.write_text("x\n" * 200_000 + f"Traceback (most recent call last):\n  File \"a.py\", line 1\n{enospc}\n"
                   + "y\n" * 50 + "RuntimeError: PytorchStreamWriter failed writing file data/0: file write failed\n")
    assert _run([str(log), "1"], capsys)[1] == f"{PREFIX} (exit 1): a disk is full: {enospc} (log: {log})"
    for words in ("write failed: ENOSPC", "[errno 28] nothing else", "NO SPACE LEFT ON DEVICE"):
        log.write_text(f"start\n{words}\nend\n")
        assert _run([str(log), "1"], capsys)[1] == f"{PREFIX} (exit 1): a disk is full: {words} (log: {log})"
    log.write_text("[Errno 280] something else\n")
    assert _run([str(log), "1"], capsys)[1] == f"{PREFIX} (exit 1): [Errno 280] something else (log: {log})"


def test_a_log_with_output_on_a_full_disk_says_both(tmp_path, monkeypatch):
    log = tmp_path / "job.log"
    log.write_text(TRACEBACK)
    _full_disk(monkeypatch, free=0)
    assert job_failed.explain(log, 1) == (
        f"{PREFIX} (exit 1): RuntimeError: CUDA error: an illegal memory access was encountered; "
        f"the disk holding {tmp_path} is full (0 bytes free) (log: {log})")
    log.write_text("OSError: [Errno 28] No space left on device\n")
    assert job_failed.explain(log, 1) == (
        f"{PREFIX} (exit 1): the disk holding {tmp_path} is full (0 bytes free): "
        f"OSError: [Errno 28] No space left on device (log: {log})")


@pytest.mark.parametrize("given, expected", [("3", 3), ("137", 137), (" 2\n", 2), ("0", 1), ("x", 1),
                                             ("", 1), ("256", 1), ("-1", 1)])
def test_the_exit_status_passes_through(tmp_path, capsys, given, expected):
    log = tmp_path / "job.log"
    log.write_text("boom\n")
    status, line = _run([str(log), given], capsys)
    assert status == expected
    assert line.startswith(f"{PREFIX} (exit {expected}")


def test_a_signal_is_named_and_nothing_breaks_it(tmp_path, monkeypatch, capsys):
    log = tmp_path / "job.log"
    assert _run([str(log), "137"], capsys)[1].startswith(f"{PREFIX} (exit 137: killed by SIGKILL): ")
    assert _run([str(tmp_path), "1"], capsys)[1] == f"{PREFIX} (exit 1): the log is not a file (log: {tmp_path})"
    assert _run([], capsys)[0] == 1

    def broken(*args):
        raise RuntimeError("bug")

    monkeypatch.setattr(job_failed, "explain", broken)
    assert _run([str(log), "4"], capsys) == (4, f"{PREFIX} (exit 4) (log: {log}); could not say why: RuntimeError: bug")


def test_the_shell_idiom_the_rules_use(tmp_path):
    log = tmp_path / "job.log"
    python = shlex.quote(sys.executable)
    script = (f"{python} -c 'raise RuntimeError(\"boom\")' > {shlex.quote(str(log))} 2>&1 || "
              f"{python} -m cs336_systems.pipeline.job_failed {shlex.quote(str(log))} $?")
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr == f"{PREFIX} (exit 1): RuntimeError: boom (log: {log})\n"
    assert "Traceback" in log.read_text()
