"""A/A pairs on the GPU: one configuration entered twice in one job, judged by the one judge. The
share of them called different is the judge's false-positive rate on that machine, the figure
``report.spread``'s calibration promises to hold at or below 5 %.

    python -m cs336_systems.training_step.ladder --size 2.7B --context 1024 --rounds 10 --steps 1 \\
        --rungs cuda-graphs fused-adamw cuda-graphs fused-adamw --out a.json b.json c.json d.json
    python lab/paired/aa.py lab/paired/runs/aa-<sha>          # every record under it, recursively

A pair is two records of one job (``metrics.turns.job``) whose params differ only in ``again``
(the second entry's mark: ``training_step.ladder``, ``benchmark``). Prints each pair's verdict,
difference and interval, then "called different in K of M A/A pairs". Exit status 1 where no pair is found.
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

from cs336_systems.report.spread import judge

sys.path.insert(0, str(Path(__file__).resolve().parent))
from verdicts import _timed  # noqa: E402 - the lab's sibling module: the time a report judges


def records_under(folder: Path) -> list[tuple[str, dict]]:
    out = []
    for path in sorted(folder.rglob("*.json")):
        data = json.loads(path.read_text())
        for index, record in enumerate(data if isinstance(data, list) else [data]):
            if isinstance(record, dict) and record.get("status") == "ok" and (record.get("metrics") or {}).get("rounds"):
                out.append((f"{path.relative_to(folder)}#{index}", record))
    return out


def aa_pairs(folder: Path) -> list[tuple[str, str, dict, dict]]:
    """(place of the first entry, place of the second, first, second) for every A/A pair under ``folder``."""
    pairs = []
    for (pa, a), (pb, b) in itertools.combinations(records_under(folder), 2):
        if a["metrics"]["turns"].get("job") != b["metrics"]["turns"].get("job"):
            continue
        if {k: v for k, v in a["params"].items() if k != "again"} != {k: v for k, v in b["params"].items() if k != "again"}:
            continue
        if bool(a["params"].get("again")) != bool(b["params"].get("again")):
            first, second = ((pa, a), (pb, b)) if not a["params"].get("again") else ((pb, b), (pa, a))
            pairs.append((first[0], second[0], first[1], second[1]))
    return pairs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path, help="a folder of records (searched recursively)")
    args = p.parse_args(argv)
    pairs = aa_pairs(args.folder)
    if not pairs:
        print(f"no A/A pair (one job, params differing only in 'again') under {args.folder}", file=sys.stderr)
        return 1
    called = 0
    for first, second, a, b in pairs:
        phase = _timed(a, b)
        v = judge(b, a, phase)
        called += v.decided
        print(f"{first} vs {second} ({phase}, {v.rounds} rounds, {v.set_aside} set aside): {v.verdict}, "
              f"difference {v.difference:+.3f} ms in [{v.low:+.3f}, {v.high:+.3f}]")
    print(f"called different in {called} of {len(pairs)} A/A pairs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
