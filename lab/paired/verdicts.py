"""Do two runs of the same command reach the same verdicts? The check behind "verdicts that reproduce".

    python lab/paired/verdicts.py results/scratch-1 results/scratch-2            # every deliverable
    python lab/paired/verdicts.py results/scratch-1 results/scratch-2 --ids A1,E1 --json out.json

A compared pair is two records of one job (``metrics.turns.job``) that agree on every held key
(``HELD``: the point both sides are measured at — mode, size, context, sequence length, head
dimension, dtype) and differ in something else (the precision, the implementation, the rung, the
group size), or two variants inside one record that took turns (B2(b)'s eager and compiled), one
pair a phase. For each pair ``report.spread.judge`` gives a verdict on the time its report judges:
the step, or for B5 a kernel call's CUDA-graph time where both sides have it, else its do_bench median
(``report.b5_grid.judged``) — "higher", "lower" or within the spread. A pair is matched across the two runs by the two records'
places in their run folders, so both runs must be of the same grid.

Prints, per deliverable: the pairs found in both runs, how many each run decided (not "within"),
how many verdicts agree, and the paired spread as a share of the step (median and largest). The
last lines list the pairs that disagree.
"""
from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from pathlib import Path

from cs336_systems.pipeline.run_folder import record_files, records_in
from cs336_systems.report.spread import judge, round_samples
from cs336_systems.rounds import SETTLE_TRIAL_ROUNDS, keeps_settling

# What both sides of a compared pair hold equal; anything else that differs is what is compared.
HELD = ("mode", "size", "context", "seq", "seq_len", "d", "head_dim", "dtype", "batch", "shape", "pass")
# What a round times, in the order a report prefers it: a step (phases timed between synchronisations),
# or a kernel call's GPU time in CUDA graphs (B5's ``graph_ms``), else its do_bench median (``ms``, which
# carries the host's launch time: B5 judges on it only where a side has no graph time).
TIMED = ("step", "graph_ms", "ms")


def gpu_bound(ident: str, a: dict, b: dict, timed: str) -> bool:
    """Whether a pair is one of the verdicts issue's GPU-bound points, where each run must decide most of
    its pairs: A1 `xl` from context 512 on, E1's graphed rungs against the anchors, B5's graph times."""
    pa, pb = a["params"], b["params"]
    if ident == "A1":
        return pa.get("size") == "xl" and int(pa.get("context", 0)) >= 512
    if ident == "E1":
        graphed = [p.get("cuda_graphs") and not p.get("anchor") for p in (pa, pb)]
        return any(graphed) and any(p.get("anchor") for p in (pa, pb))
    return ident == "B5" and timed == "graph_ms"


def pairs_of(folder: Path, ids: set[str] | None = None) -> dict[tuple, tuple[dict, dict]]:
    """Every compared pair of ``folder``: (ID, place of a, place of b) -> (record a, record b)."""
    by_job: dict[str, list[tuple[str, dict]]] = {}
    for path in record_files(folder):
        for index, record in enumerate(records_in(path)):
            if ids and record.get("id") not in ids or record.get("status") != "ok":
                continue
            job = (record.get("metrics") or {}).get("turns", {}).get("job")
            if job:
                place = f"{path.relative_to(folder)}#{index}"
                by_job.setdefault(job, []).append((place, record))
    pairs = {}
    for path in record_files(folder):
        for index, record in enumerate(records_in(path)):
            if ids and record.get("id") not in ids or record.get("status") != "ok":
                continue
            pairs.update(_variant_pairs(record, f"{path.relative_to(folder)}#{index}"))
    for members in by_job.values():
        for (pa, a), (pb, b) in itertools.combinations(sorted(members, key=lambda m: m[0]), 2):
            held_equal = all(a["params"].get(k) == b["params"].get(k) for k in HELD)
            if held_equal and a["params"] != b["params"]:
                pairs[(a["id"], pa, pb)] = (a, b)
    return pairs


def _variant_pairs(record: dict, place: str) -> dict[tuple, tuple[dict, dict]]:
    """The pairs inside one record whose ``metrics.variants`` took turns (B2(b): eager and compiled
    in one job), one a phase its rounds time: (ID, place/variant:phase, ...) -> (variant a, variant b),
    each a record of its own whose rounds hold that phase only as ``step``."""
    variants = {name: v for name, v in ((record.get("metrics") or {}).get("variants") or {}).items()
                if isinstance(v, dict) and v.get("status", "ok") == "ok" and (v.get("turns") or {}).get("job")}
    out = {}
    for (na, va), (nb, vb) in itertools.combinations(sorted(variants.items()), 2):
        phases = [p for p in (va.get("rounds") or [{}])[0] if p in (vb.get("rounds") or [{}])[0]]
        for phase in phases:
            a, b = ({"id": record["id"], "params": {**record["params"], "variant": name},
                     "metrics": {"turns": v["turns"], "rounds": [{"step": r[phase]} for r in v["rounds"]]}}
                    for name, v in ((na, va), (nb, vb)))
            out[(record["id"], f"{place}/{na}:{phase}", f"{place}/{nb}:{phase}")] = (a, b)
    return out


def _timed(*records: dict) -> str:
    """The first of ``TIMED`` that every one of ``records`` timed in its rounds."""
    firsts = [(r["metrics"].get("rounds") or [{}])[0] for r in records]
    return next((phase for phase in TIMED if all(phase in first for first in firsts)), "step")


def _median(record: dict, phase: str) -> float:
    return statistics.median(t for r in round_samples(record, phase) for t in r)


def first_rounds(record: dict, rounds: int) -> dict:
    """``record`` as a job of only its first ``rounds`` rounds would have left it: the rotation is the
    same, so what fewer rounds would decide can be read off a longer job."""
    metrics = dict(record["metrics"])
    for key in ("rounds", "host_ms_per_round", "settle_ms_per_round"):
        if key in metrics:
            metrics[key] = metrics[key][:rounds]
    return {**record, "metrics": metrics}


def tried_settling(record: dict) -> dict:
    """``record`` as the settling ``rounds.keeps_settling`` decides would have timed it, from a record
    whose entrant settled every turn: where the rule stops it after the trial rounds, each later turn's
    first timed step is what its settling step cost (the first step after another entrant's turn), the
    others move up one, and the last is not taken. Only the step total changes; a record that did not
    settle, or that the rule keeps settling, is returned as it is."""
    metrics = record.get("metrics") or {}
    settles, rounds_ = metrics.get("settle_ms_per_round"), metrics.get("rounds")
    if not settles or not rounds_ or len(settles) != len(rounds_) or keeps_settling(settles, rounds_):
        return record
    tried = [r if i < SETTLE_TRIAL_ROUNDS or not r.get("step") else {**r, "step": [s[0], *r["step"][:-1]]}
             for i, (s, r) in enumerate(zip(settles, rounds_))]
    return {**record, "metrics": {**metrics, "rounds": tried}}


def verdicts(folder: Path, ids: set[str] | None = None, rounds: int | None = None,
             settling_tried: bool = False) -> dict[tuple, dict]:
    """Each pair's verdict, paired difference and spread (also as a share of the faster side's step);
    with ``rounds``, judged on each job's first that many rounds only; with ``settling_tried``, on the
    records as today's settling rule would have timed them (``tried_settling``)."""
    out = {}
    for key, (a, b) in pairs_of(folder, ids).items():
        if settling_tried:
            a, b = tried_settling(a), tried_settling(b)
        if rounds:
            a, b = first_rounds(a, rounds), first_rounds(b, rounds)
        phase = _timed(a, b)
        result = judge(a, b, phase)
        step = min(_median(a, phase), _median(b, phase))
        out[key] = {"verdict": result.verdict, "decided": result.decided, "difference_ms": result.difference,
                    "spread_ms": result.spread,
                    "spread_share": result.spread / step if step else float("nan"), "rounds": result.rounds,
                    "timed": phase, "gpu_bound": gpu_bound(key[0], a, b, phase)}
    return out


def agreement(first: dict[tuple, dict], second: dict[tuple, dict]) -> dict[str, dict]:
    """Per deliverable: pairs in both runs, decided in each, agreeing, and the spread as a share of the step."""
    table: dict[str, dict] = {}
    for key in sorted(first.keys() & second.keys()):
        a, b = first[key], second[key]
        row = table.setdefault(key[0], {"pairs": 0, "decided_1": 0, "decided_2": 0, "agree": 0, "opposite": 0,
                                        "shares": [], "disagree": []})
        row["pairs"] += 1
        row["decided_1"] += a["decided"]
        row["decided_2"] += b["decided"]
        row["opposite"] += {a["verdict"], b["verdict"]} == {"higher", "lower"}
        if a["verdict"] == b["verdict"]:
            row["agree"] += 1
        else:
            row["disagree"].append(f"{key[1]} vs {key[2]}: {a['verdict']} / {b['verdict']}")
        row["shares"] += [a["spread_share"], b["spread_share"]]
    return table


def round_spreads(folder: Path, pattern: str) -> dict[str, tuple[float, float, int]]:
    """For each ok record whose place (``<ID>/records/<name>.json``) matches ``pattern``: the median of
    its round medians (ms), how far the farthest round's median is from it as a share of it, and the
    rounds. How steady one point is across rounds, where the step is bound by the GPU."""
    out = {}
    for path in sorted(folder.glob(pattern)):
        for index, record in enumerate(records_in(path)):
            if record.get("status") != "ok" or not record["metrics"].get("rounds"):
                continue
            medians = [statistics.median(r) for r in round_samples(record, _timed(record))]
            centre = statistics.median(medians)
            out[f"{path.relative_to(folder)}#{index}"] = (centre, max(abs(m - centre) for m in medians) / centre,
                                                          len(medians))
    return out


def markdown(table: dict[str, dict]) -> str:
    lines = ["| deliverable | pairs | decided (run 1) | decided (run 2) | agree | opposite | spread ÷ step: median | largest |",
             "|:--|--:|--:|--:|--:|--:|--:|--:|"]
    for ident, row in table.items():
        shares = [s for s in row["shares"] if s == s]       # nan where a side was not settled
        lines.append(f"| {ident} | {row['pairs']} | {row['decided_1']} | {row['decided_2']} | "
                     f"{row['agree']} ({row['agree'] / row['pairs']:.0%}) | {row['opposite']} | "
                     + (f"{statistics.median(shares):.2%} | {max(shares):.2%} |" if shares else "– | – |"))
    total = sum(r["pairs"] for r in table.values())
    agree = sum(r["agree"] for r in table.values())
    if total:
        lines.append(f"| **all** | {total} | {sum(r['decided_1'] for r in table.values())} | "
                     f"{sum(r['decided_2'] for r in table.values())} | {agree} ({agree / total:.0%}) | "
                     f"{sum(r['opposite'] for r in table.values())} | | |")
    for ident, row in table.items():
        lines += [f"- {ident} disagrees: {line}" for line in row["disagree"]]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("first", type=Path, help="a run folder, results/<run>")
    p.add_argument("second", type=Path, help="another run folder of the same grid")
    p.add_argument("--ids", help="comma-separated deliverables (default: every one with paired records)")
    p.add_argument("--json", type=Path, help="also write every pair's verdicts here")
    p.add_argument("--steady", metavar="GLOB", action="append", default=[],
                   help="also list how steady each matching record is across rounds in both runs, "
                        "e.g. 'A1/records/xl_*_fp32.json' (repeatable)")
    args = p.parse_args(argv)
    for folder in (args.first, args.second):
        if not folder.is_dir():
            p.error(f"{folder} is not a folder")
    ids = set(args.ids.split(",")) if args.ids else None
    first, second = verdicts(args.first, ids), verdicts(args.second, ids)
    if not first.keys() & second.keys():
        print(f"no compared pair is in both {args.first} and {args.second} (records measured in rounds, "
              "metrics.turns)", file=sys.stderr)
        return 1
    print(markdown(agreement(first, second)))
    for pattern in args.steady:
        one, two = round_spreads(args.first, pattern), round_spreads(args.second, pattern)
        print(f"\n| {pattern} | run 1: median of rounds | farthest round | run 2: median of rounds | farthest round |")
        print("|:--|--:|--:|--:|--:|")
        for place in sorted(one.keys() | two.keys()):
            cells = [f"{x[0]:.1f} ms | {x[1]:.2%}" if x else "– | –" for x in (one.get(place), two.get(place))]
            print(f"| {place} | {cells[0]} | {cells[1]} |")
    if args.json:
        args.json.write_text(json.dumps({"first": {" | ".join(k): v for k, v in first.items()},
                                         "second": {" | ".join(k): v for k, v in second.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
