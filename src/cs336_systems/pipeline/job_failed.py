"""One line on stderr that says why a rule's command failed, then the command's own exit status.

A rule sends its command's output to its log and calls this only when the command failed:

    cmd > {log} 2>&1 || python -m cs336_systems.pipeline.job_failed {log} $?

Snakemake then shows, beside "Error in rule ...", a line such as

    cs336-systems: job failed (exit 1): RuntimeError: CUDA error: ... (log: results/h100/logs/C3/x.log)

instead of only the log's path. The line is the exception line of the log's last Python traceback,
else its last non-empty line; a log that mentions "No space left on device" (ENOSPC, errno 28) gets
"disk full" and the line that says so; a missing or empty log gets the free space of the disk
holding it, since a full disk is what most often leaves a log empty. The exit status is the one
given (1 where it is 0 or not a number), so the job still counts as failed.

It runs when something is already broken, possibly on a full disk: standard library only (starts in
tens of milliseconds), reads at most a bounded tail of the log besides one streaming scan, and
never lets a traceback of its own replace the line it owes.
"""
from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import sys
import tempfile
from pathlib import Path

PREFIX = "cs336-systems: job failed"
FULL_BELOW = 1 << 20              # bytes free under which a disk counts as full
_TAIL = 256 << 10                 # bytes of the log's end searched for the last traceback
_MAX_QUOTE = 300                  # characters of a log line quoted in the message
_AFTER_EXCEPTION = 10             # non-empty lines allowed after a traceback's exception line
_DISK_FULL = re.compile(rb"no space left on device|\bENOSPC\b|\berrno 28\b", re.IGNORECASE)
_TRACEBACK = re.compile(r"Traceback \(most recent call last\):\s*$")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# torch.distributed's launchers prefix each line a rank prints with its name.
_RANK_PREFIX = re.compile(r"^\[(?:rank|default)\d+\]:\s?")


def exit_status(text: str | None) -> int:
    """The command's status as this process's own: 1 where it would not read as a failure (0, not a
    number, or outside 1..255, which the shell would wrap around)."""
    try:
        status = int(str(text).strip())
    except ValueError:
        return 1
    return status if 1 <= status <= 255 else 1


def _status_words(status: int) -> str:
    """``exit 137: killed by SIGKILL`` for a status the shell gives a command a signal ended."""
    if status > 128:
        try:
            return f"exit {status}: killed by {signal.Signals(status - 128).name}"
        except ValueError:
            pass
    return f"exit {status}"


def _free_bytes(folder: Path) -> tuple[Path, int] | None:
    """(the folder measured, bytes free to this user) on the filesystem that holds ``folder``, or
    that would: its nearest existing parent. None where even that cannot be measured."""
    place = folder
    while True:
        try:
            return place, shutil.disk_usage(place).free
        except OSError:
            if place.parent == place:
                return None
            place = place.parent


def _clean(line: str) -> str:
    """A log line as a terminal showed it: colours removed, and for a line redrawn with carriage
    returns (progress bars) only its last drawing; cut to ``_MAX_QUOTE`` characters."""
    line = _ANSI.sub("", line)
    drawings = [part for part in line.split("\r") if part.strip()]
    line = _RANK_PREFIX.sub("", drawings[-1] if drawings else "").rstrip()
    return line if len(line) <= _MAX_QUOTE else line[: _MAX_QUOTE - 1] + "…"


def _tail_lines(log: Path) -> list[str]:
    """The log's last ``_TAIL`` bytes as lines, the first one dropped when the tail cut it."""
    with open(log, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - _TAIL))
        data = f.read()
    lines = data.decode("utf-8", errors="replace").split("\n")
    return lines[1:] if size > _TAIL else lines


def last_words(lines: list[str]) -> str | None:
    """The exception line of the last traceback in ``lines`` where the traceback ends the output,
    else the last non-empty line; None when every line is blank."""
    cleaned = [_clean(line) for line in lines]
    meaningful = [i for i, line in enumerate(cleaned) if line.strip()]
    if not meaningful:
        return None
    starts = [i for i, line in enumerate(cleaned) if _TRACEBACK.search(line)]
    if starts:
        # Frames and source lines are indented; the exception line is the first one that is not.
        exception = next((i for i in meaningful if i > starts[-1] and not cleaned[i][0].isspace()), None)
        # An uncaught exception is printed as the process ends, so little follows it (the rest of a
        # multi-line message, shutdown warnings). A traceback with much output after it was one the
        # program printed and went on from; what ended the job is further down.
        if exception is not None and sum(i > exception for i in meaningful) <= _AFTER_EXCEPTION:
            return cleaned[exception].strip()
    return cleaned[meaningful[-1]].strip()


def disk_full_line(log: Path) -> str | None:
    """The last line of the log that says a disk was full (ENOSPC), or None; the whole log is
    scanned, a chunk at a time, since the error may be far above the line the job ended on."""
    found = None
    carry = b""
    with open(log, "rb") as f:
        while chunk := f.read(1 << 20):
            block = carry + chunk
            lines = block.split(b"\n")
            carry = lines.pop()[-_TAIL:]
            if _DISK_FULL.search(block):
                found = next((line for line in reversed(lines) if _DISK_FULL.search(line)), found)
    if _DISK_FULL.search(carry):
        found = carry
    return _clean(found.decode("utf-8", errors="replace")) if found is not None else None


def _creatable(folder: Path) -> OSError | None:
    """The error creating and writing a file in ``folder`` gives, or None where that works."""
    try:
        with tempfile.TemporaryFile(dir=folder) as probe:
            probe.write(b"\n")
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as error:
        return error
    return None


def _why_no_output(log: Path, measured: tuple[Path, int] | None) -> str:
    """Why a missing or empty log holds nothing: a full disk where it is, else what we can tell."""
    folder = log.parent
    if measured is not None and measured[1] < FULL_BELOW:
        what = "empty" if log.exists() else "missing"
        return f"the disk holding {measured[0]} is full ({measured[1]} bytes free); the log is {what}"
    if log.is_file():
        return "the command printed nothing (the log is empty)"
    if log.exists():
        return "the log is not a file"
    if not folder.is_dir():
        return f"the log was not created: its folder {folder} does not exist"
    error = _creatable(folder)
    if error is not None and error.errno in (errno.ENOSPC, errno.EDQUOT):
        free = f"{measured[1]} bytes free" if measured is not None else "free space unknown"
        return f"the disk holding {folder} is full ({free}; {error.strerror}); the log is missing"
    if error is not None:
        return f"the log could not be created in {folder} ({error.strerror})"
    return "the log was not created (the command's output went nowhere)"


def explain(log: str | os.PathLike, status: int) -> str:
    """The one line for a job whose command exited with ``status`` and wrote ``log``."""
    log = Path(log)
    measured = _free_bytes(log.parent)
    full = measured is not None and measured[1] < FULL_BELOW
    head = f"{PREFIX} ({_status_words(status)})"
    try:
        words = last_words(_tail_lines(log)) if log.is_file() else None
        enospc = disk_full_line(log) if words is not None else None
    except OSError as error:
        return f"{head}: the log could not be read ({error.strerror}) (log: {log})"
    if words is None:
        return f"{head}: {_why_no_output(log, measured)} (log: {log})"
    disk = f"the disk holding {measured[0]} is full ({measured[1]} bytes free)" if full else None
    if enospc is not None:
        return f"{head}: {disk or 'a disk is full'}: {enospc} (log: {log})"
    if disk is not None:
        return f"{head}: {words}; {disk} (log: {log})"
    return f"{head}: {words} (log: {log})"


def _say(line: str) -> None:
    try:
        print(line.replace("\r", " ").replace("\n", " "), file=sys.stderr, flush=True)
    except Exception:  # noqa: BLE001 - stderr itself may be gone; the exit status still tells
        pass


def main(argv: list[str] | None = None) -> int:
    """``LOG STATUS`` → print the line, return the status (see ``exit_status``)."""
    argv = sys.argv[1:] if argv is None else argv
    status = exit_status(argv[1] if len(argv) > 1 else None)
    if not argv:
        _say(f"{PREFIX} (exit {status}): no log given (usage: python -m cs336_systems.pipeline.job_failed LOG STATUS)")
        return status
    try:
        _say(explain(argv[0], status))
    except Exception as error:  # noqa: BLE001 - the job's failure must still be reported, not ours
        _say(f"{PREFIX} ({_status_words(status)}) (log: {argv[0]}); could not say why: "
             f"{type(error).__name__}: {error}")
    return status


if __name__ == "__main__":
    sys.exit(main())
