"""Before a reference run replaces main's notebook: what its records say, by deliverable.

    python lab/reference-runs/check_run.py results/h200 --pin 59b45a2 --kept C1,C2,C3,C4,C5,C6,C7,C8,C9,C10,C11,C12

Counts records by deliverable, status and commit, lists every oom and error with its reason, and
exits 1 where a record of a deliverable the run measured (not in --kept: those the run keeps from
earlier machines, as h200's C records from two and four H200s) names another commit than the pin,
or a record does not parse.
"""
from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

# stdlib-only modules of the package: this runs on a lent machine before its environment is set up
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
from cs336_systems.pipeline.run_folder import record_files, records_in  # noqa: E402
from cs336_systems.records import DamagedRecord  # noqa: E402


def records(run_dir: Path):
    """(deliverable, path, record or None) for every record file the pipeline reads
    (run_folder.record_files); None for a file that is not a record."""
    for path in record_files(run_dir):
        rel = path.relative_to(run_dir)
        try:
            found = records_in(path)
        except (DamagedRecord, OSError):
            yield rel.parts[0], rel, None
            continue
        for record in found:
            yield rel.parts[0], rel, record


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", type=Path)
    p.add_argument("--pin", required=True, help="the commit the run measured (a prefix will do)")
    p.add_argument("--kept", default="", help="comma-separated IDs whose records come from earlier machines")
    args = p.parse_args(argv)
    kept = {k for k in args.kept.split(",") if k}
    counts, problems = collections.Counter(), []
    for ident, rel, record in records(args.run_dir):
        if record is None:
            problems.append(f"does not parse: {rel}")
            continue
        commit = str(record.get("provenance", {}).get("commit", "?"))
        counts[ident, record["status"], commit[:7]] += 1
        if record["status"] in ("oom", "error"):
            print(f"  {record['status']:5} {rel}: {(record.get('reason') or record.get('message') or '')[:90]}")
        if ident not in kept and not commit.startswith(args.pin):
            problems.append(f"commit {commit[:7]}, not the pin: {rel}")
    for (ident, status, commit), n in sorted(counts.items()):
        print(f"{ident:4} {status:8} {commit} {n:4}")
    for line in problems:
        print("PROBLEM", line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
