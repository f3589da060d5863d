"""What each turn's settling step buys: per record, the untimed first step of its turns (the step
after another entrant's turn, ``metrics.settle_ms_per_round``) against the timed steps that follow it.

    python lab/paired/settle.py lab/paired/runs/h200-<commit>/a [--ids A1,E1]

Prints one row a record: the median settling step, the median timed step, their ratio and the
largest ratio of any round. Where the settling step costs what a timed one does, the first step
after a switch pays nothing for what the other entrant left, and that entrant need not settle (one
step a turn saved); where it costs more, the settling step keeps that cost out of the timed rounds.
Records without settling times (self-timed turns, records from before they were kept) are left out.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from cs336_systems.pipeline.run_folder import record_files, records_in


def settle_rows(folder: Path, ids: set[str] | None = None) -> list[dict]:
    """Per record with settling times: its place, the medians of its settling and timed steps, and
    the largest per-round ratio of the one to the other."""
    rows = []
    for path in record_files(folder):
        for index, record in enumerate(records_in(path)):
            metrics = record.get("metrics") or {}
            settles, rounds = metrics.get("settle_ms_per_round"), metrics.get("rounds")
            if record.get("status") != "ok" or not settles or not rounds or (ids and record.get("id") not in ids):
                continue
            pairs = [(statistics.median(s), statistics.median(r["step"])) for s, r in zip(settles, rounds)
                     if s and r.get("step")]
            if not pairs:
                continue
            settle = statistics.median(s for s, _ in pairs)
            timed = statistics.median(t for _, t in pairs)
            rows.append({"place": f"{path.relative_to(folder)}#{index}", "settle_ms": settle, "timed_ms": timed,
                         "ratio": settle / timed, "largest": max(s / t for s, t in pairs)})
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path, help="a run folder, results/<run>/")
    p.add_argument("--ids", help="comma-separated deliverables (default: every one with settling times)")
    args = p.parse_args(argv)
    if not args.folder.is_dir():
        p.error(f"{args.folder} is not a folder")
    rows = settle_rows(args.folder, set(args.ids.split(",")) if args.ids else None)
    if not rows:
        print(f"no record under {args.folder} has settling times (metrics.settle_ms_per_round)", file=sys.stderr)
        return 1
    print("| record | settling step (ms) | timed step (ms) | settling ÷ timed | largest of a round |")
    print("|:--|--:|--:|--:|--:|")
    for r in rows:
        print(f"| {r['place']} | {r['settle_ms']:.2f} | {r['timed_ms']:.2f} | {r['ratio']:.3f} | {r['largest']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
