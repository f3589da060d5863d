"""Records: the unit of truth of every experiment.

A record is one JSON object ``{id, params, metrics, status, provenance}``:

- ``id``: the deliverable it belongs to (``"A1"``, ``"A3"``, ...);
- ``params``: what was asked for (one point of a grid);
- ``metrics``: what was measured (empty unless ``status == "ok"``);
- ``status``: ``ok``, ``oom``, ``skipped`` (with ``reason``) or ``error`` (with ``message``); a
  measurement that raised gets its ``oom`` / ``error`` and one-line message from
  ``timing.failure_status`` (or ``timing.attempt``, which runs it), the same in every experiment;
- ``provenance``: which machine, software and commit made it, and when.

Records are written atomically (temporary file in the same folder, then ``os.replace``) so a
killed job never leaves half a record for an aggregate rule to trip over.
"""
from __future__ import annotations

import datetime as _dt
import functools
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

STATUSES = ("ok", "oom", "skipped", "error")
# git finds the checkout from the package's own folder; the pathspecs below say ":(top)" for its root,
# so nothing here counts how deep the package sits.
_PACKAGE_DIR = Path(__file__).resolve().parent


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(_PACKAGE_DIR), *args], capture_output=True,
                             text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def git_state() -> dict[str, Any]:
    """Commit and dirty flag of the checkout; results/ and writeup/ do not count as dirt.

    ``CS336_GIT_COMMIT`` / ``CS336_GIT_DIRTY`` override, for copies of the tree made without
    ``.git`` (the lent GPU machines receive such a copy).
    """
    if os.environ.get("CS336_GIT_COMMIT"):
        dirty = os.environ.get("CS336_GIT_DIRTY")
        return {"commit": os.environ["CS336_GIT_COMMIT"],
                "dirty": None if dirty is None else dirty.lower() in ("1", "true", "yes")}
    return dict(_checkout_state())


# A process asks git and nvidia-smi once: a row job writes up to 120 records, and each question is
# a subprocess (~22 ms for nvidia-smi on an H200; git's status grows with the checkout). The code a
# process runs is what it loaded when it started, so the first answer is the one that holds.
@functools.cache
def _checkout_state() -> tuple[tuple[str, Any], ...]:
    commit = _git("rev-parse", "HEAD")
    if commit is None:
        return (("commit", "unknown"), ("dirty", None))
    status = _git("status", "--porcelain", "--", ":(top)", ":(top,exclude)results", ":(top,exclude)writeup")
    return (("commit", commit), ("dirty", bool(status)))


@functools.cache
def _driver_version() -> str | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None


def _triton_version() -> str | None:
    """Triton's version, without importing Triton where nothing loaded it (~0.3 s a process)."""
    if "triton" in sys.modules:
        return sys.modules["triton"].__version__
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("triton")
    except PackageNotFoundError:
        pass
    try:                            # a build installed under another name (pytorch-triton, ...)
        import triton
    except ImportError:
        return None
    return triton.__version__


def provenance() -> dict[str, Any]:
    """Machine, software versions, commit and UTC time, for the record being written now."""
    import torch

    info: dict[str, Any] = {
        **git_state(),
        "host": socket.gethostname(),
        "utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
    }
    info["triton"] = _triton_version()
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpu_count"] = torch.cuda.device_count()
        info["driver"] = _driver_version()
        info["cuda_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    else:
        info["gpu"] = None
        info["gpu_count"] = 0
        info["driver"] = None
    return info


def make_record(id: str, params: dict, status: str = "ok", metrics: dict | None = None,
                reason: str | None = None) -> dict[str, Any]:
    """Build a record; ``reason`` is required for ``skipped`` and ``error`` (the message)."""
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
    record: dict[str, Any] = {"id": id, "params": params, "metrics": metrics or {},
                              "status": status, "provenance": provenance()}
    if status == "skipped":
        record["reason"] = reason or "no reason given"
    if status in ("error", "oom") and reason:
        record["message"] = reason
    return record


def write_json_atomic(path: str | os.PathLike, data: Any) -> Path:
    """Write JSON to ``path`` through a temporary file in the same folder and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2, sort_keys=False, default=_jsonable)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):          # numpy / torch scalars
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


class DamagedRecord(ValueError):
    """A record file that cannot be read: cut short, not JSON, or JSON that is not a record."""

    def __init__(self, path: str | os.PathLike, why: str):
        super().__init__(f"{path}: {why}")
        self.path, self.why = Path(path), why


def _checked(record: Any, path: str | os.PathLike) -> dict[str, Any]:
    missing = {"id", "params", "metrics", "status", "provenance"} - (record.keys() if isinstance(record, dict) else set())
    if not isinstance(record, dict) or missing:
        raise DamagedRecord(path, f"not a record (missing {sorted(missing) if isinstance(record, dict) else 'everything'})")
    return record


def _load_json(path: str | os.PathLike) -> Any:
    with open(path) as f:
        try:
            return json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise DamagedRecord(path, f"not JSON ({exc})") from None


def read_record(path: str | os.PathLike) -> dict[str, Any]:
    return _checked(_load_json(path), path)


def read_record_list(path: str | os.PathLike) -> list[dict[str, Any]]:
    """A file holding a JSON list of records (one process that measured a whole row of a grid)."""
    records = _load_json(path)
    if not isinstance(records, list):
        raise DamagedRecord(path, "expected a JSON list of records")
    return [_checked(r, path) for r in records]


def set_aside(error: DamagedRecord) -> Path:
    """Rename a damaged record to ``<name>.damaged`` (replacing an older one) and return the new path.

    Its rule then sees the record as missing and measures it again, instead of the damage stopping
    every later run at the same report (or Snakemake deleting that report's outputs and calling the
    run done). The file stays beside the others for a person to look at.
    """
    aside = error.path.with_name(error.path.name + ".damaged")
    os.replace(error.path, aside)
    return aside


def log(message: str) -> None:
    """Progress line on stderr (Snakemake sends it to the rule's log file)."""
    print(message, file=sys.stderr, flush=True)
