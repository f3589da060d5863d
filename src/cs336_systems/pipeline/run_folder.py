"""A run folder (``results/<run>/``) and what it holds: whose it is, and which records are damaged.

**Identity.** The first measurement in a run folder fixes its preset and the kind of device it was
measured on; no other preset or device writes there, so a CPU smoke run can never overwrite the
records of a committed GPU run, and a table never mixes H200 and CPU rows. The identity is kept in
``results/<run>/run.json`` (written when a run first measures into the folder); a folder from
before that file existed is read from its records' provenance: the GPU names it holds (the full
preset) or none (the smoke preset, on CPUs).

**Damaged records.** A record cut short or replaced by something that is not a record is set aside
(``<name>.json.damaged``) while the Snakefile is read, before Snakemake decides what is stale, and
the summaries of the reports that read it are taken away, so the point is measured again and every
report that reads it sees the new record, instead of the first report to meet it moving it away
from under the others.

Kept free of torch: the Snakefile calls it while it is parsed (about 0.1 s for a thousand records).
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

from cs336_systems import deliverables
from cs336_systems.pipeline.machine import CPU
from cs336_systems.records import (DamagedRecord, read_record, read_record_list, set_aside,
                                   write_json_atomic)

IDENTITY_FILE = "run.json"


@dataclass(frozen=True)
class Identity:
    preset: str
    device: str     # a card's name ("NVIDIA H200"), or CPU
    # A run kept as it was last rendered, what it is in one line (its card, commits, why it is kept):
    # nothing measures into it or rebuilds it, and its writeup's first lines say so.
    archive: str = ""

    def describe(self) -> str:
        return f"preset {self.preset} on {self.device}"


# the folders under <ID>/ that measuring rules write records into, as the registry names them
RECORD_FOLDERS = tuple(deliverables.record_folders())


def record_files(folder: str | os.PathLike) -> Iterator[Path]:
    """Every record file of a run folder: ``<ID>/<one of RECORD_FOLDERS>/*.json``."""
    folder = Path(folder)
    for name in RECORD_FOLDERS:
        yield from sorted(folder.glob(f"*/{name}/*.json"))


def records_in(path: Path) -> list[dict]:
    """The records of one file (a record, or a JSON list of them: one process that measured a row)."""
    with open(path, "rb") as f:
        starts_a_list = f.read(4096).lstrip()[:1] == b"["
    return read_record_list(path) if starts_a_list else [read_record(path)]


@dataclass
class Scan:
    gpu_names: set[str]         # the cards the records say they were measured on
    records: int                # record files read
    damaged: list[DamagedRecord]


def scan(folder: str | os.PathLike) -> Scan:
    """Read every record of ``folder`` once: the cards they name, and those that are damaged."""
    names, count, damaged = set(), 0, []
    for path in record_files(folder):
        try:
            records = records_in(path)
        except DamagedRecord as error:
            damaged.append(error)
            continue
        count += 1
        names.update(r["provenance"].get("gpu") for r in records if isinstance(r.get("provenance"), dict))
    names.discard(None)
    return Scan(names, count, damaged)


def set_aside_damaged(folder: str | os.PathLike, found: Scan, readers: dict[str, list[str]],
                      writeup: list[str | os.PathLike]) -> list[str]:
    """Move every damaged record aside, and take away the summary of each deliverable that reads it
    (``readers``: ID -> the IDs whose reports read that ID's records, itself included) and the
    ``writeup`` files. Snakemake remakes a missing file only for a job that has to run anyway (a
    missing input of an up-to-date output counts as consumed), so the chain down to the record must
    be missing from the top; one line for each record, to print."""
    lines = []
    if found.damaged:
        for path in writeup:
            Path(path).unlink(missing_ok=True)
    for error in found.damaged:
        aside = set_aside(error)
        ident = error.path.parent.parent.name
        rebuilt = readers.get(ident, [ident])
        for reader in rebuilt:
            (Path(folder) / reader / "summary.json").unlink(missing_ok=True)
        lines.append(f"cs336-systems: damaged record {error.path} ({error.why}): moved to {aside.name}; "
                     f"this run measures it again and rebuilds {', '.join(rebuilt)}")
    return lines


def identity(folder: str | os.PathLike, found: Scan) -> Identity | None:
    """The preset and device kind ``folder`` belongs to, or None while it holds no record."""
    path = Path(folder) / IDENTITY_FILE
    if path.is_file():
        data = json.loads(path.read_text())
        return Identity(data["preset"], data["device"], data.get("archive", ""))
    if not found.records:
        return None
    if found.gpu_names:
        return Identity("full", " + ".join(sorted(found.gpu_names)))
    return Identity("smoke", CPU)


def archived(folder: str | os.PathLike, held: Identity | None) -> str | None:
    """Why no command may measure into or rebuild ``folder``, in one line, or None: it is an archive."""
    if held is None or not held.archive:
        return None
    run = Path(folder).name
    return (f"results folder {folder}/ is an archive ({held.archive}); it and writeup/{run}/ are kept as they "
            f"were last rendered, so nothing was started. Measure into a folder of your own (--config run=<name>)")


def conflict(folder: str | os.PathLike, held: Identity | None, preset: str, device: str | None) -> str | None:
    """Why this machine may not measure into ``folder``, in one line, or None. ``device`` None: not
    known from here (no GPU visible), so only the preset is compared."""
    if held is None or (held.preset == preset and device in (None, held.device)):
        return None
    here = f"preset {preset}" + (f" on {device}" if device else "")
    return (f"results folder {folder}/ holds records of {held.describe()}; this command would measure with "
            f"{here}, so nothing was started. Measure into a folder of its own (--config run=<name>), or "
            f"rebuild that run's tables from its records with --config preset={held.preset} "
            f"run={Path(folder).name} reuse_records=true")


def claim(folder: str | os.PathLike, here: Identity) -> Path | None:
    """Write ``folder``'s identity, unless it has one: the first run that measures into it owns it."""
    path = Path(folder) / IDENTITY_FILE
    if path.exists():
        return None
    return write_json_atomic(path, {k: v for k, v in asdict(here).items() if k != "archive" or v})
