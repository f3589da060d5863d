"""How many verdicts two runs of one command share: the count the verdicts issue is checked by.

    python lab/paired/agreement.py lab/paired/runs/h200-<commit>        # holds a/ and b/, each a results/<run>/ tree
    python lab/paired/agreement.py lab/paired/runs/h200-<commit> --ids A1,E1
    python lab/paired/agreement.py lab/paired/runs/h200-<commit> --rounds 8      # as if each job had stopped at 8
    python lab/paired/agreement.py lab/paired/runs/h200-<commit> --settling-tried   # as today's settling rule would time it

Prints ``N of M verdicts agree, D opposite, decided a/b`` over every compared pair found in both runs
(``verdicts.py``: two records of one job that hold the point equal), then the table per deliverable
and the pairs that disagree. Exit status 1 when the two runs share no compared pair.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import verdicts as paired_verdicts  # noqa: E402 - the lab's sibling module, not a package


def line(table: dict[str, dict]) -> str:
    total = sum(r["pairs"] for r in table.values())
    return (f"{sum(r['agree'] for r in table.values())} of {total} verdicts agree, "
            f"{sum(r['opposite'] for r in table.values())} opposite, decided "
            f"{sum(r['decided_1'] for r in table.values())}/{sum(r['decided_2'] for r in table.values())}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path, help="a folder holding a/ and b/, two run folders of the same grid")
    p.add_argument("--ids", help="comma-separated deliverables (default: every one with paired records)")
    p.add_argument("--rounds", type=int, help="judge each job's first ROUNDS rounds only: what fewer rounds would "
                                              "have decided (the rotation is the same)")
    p.add_argument("--settling-tried", action="store_true",
                   help="judge records whose entrants settled every turn as today's rule (rounds.keeps_settling) "
                        "would have timed them: settling stopped after the trial rounds where it bought nothing")
    args = p.parse_args(argv)
    if args.rounds is not None and args.rounds < 1:
        p.error("--rounds must be at least 1")
    a, b = args.folder / "a", args.folder / "b"
    for run in (a, b):
        if not run.is_dir():
            p.error(f"{run} is not a folder (expected {args.folder}/a and {args.folder}/b)")
    ids = set(args.ids.split(",")) if args.ids else None
    first, second = (paired_verdicts.verdicts(run, ids, args.rounds, args.settling_tried) for run in (a, b))
    if not first.keys() & second.keys():
        print(f"no compared pair is in both {a} and {b}", file=sys.stderr)
        return 1
    table = paired_verdicts.agreement(first, second)
    print(line(table))
    bound = [key for key in first.keys() & second.keys() if first[key]["gpu_bound"]]
    if bound:
        print(f"GPU-bound points (A1 xl ctx >= 512, E1 graphed rungs vs anchors, B5 graph times): "
              f"{sum(first[k]['verdict'] == second[k]['verdict'] for k in bound)} of {len(bound)} agree, "
              f"decided {sum(first[k]['decided'] for k in bound)}/{sum(second[k]['decided'] for k in bound)}")
    print(paired_verdicts.markdown(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
