"""A3: summing 0.01 many times in low precision.

    python -m cs336_systems.precision.accumulation --terms 10 100 1000 --out rec.json

Each variant adds the same addend, rounded to the addend's dtype, to an accumulator of the
accumulator's dtype, one addition at a time (as a loop in a training script would), and records
the running sum after each requested number of terms. The exact answer is ``terms / 100``.
"""
from __future__ import annotations

import argparse
import sys

import torch

from cs336_systems.records import log, make_record, write_json_atomic

ADDEND = 0.01


# name -> (accumulator dtype, addend dtype, upcast explicitly before adding)
VARIANTS: dict[str, tuple[torch.dtype, torch.dtype, bool]] = {
    "fp32 += fp32": (torch.float32, torch.float32, False),
    "fp16 += fp16": (torch.float16, torch.float16, False),
    "fp32 += fp16": (torch.float32, torch.float16, False),            # implicit type promotion
    "fp32 += fp16.to(fp32)": (torch.float32, torch.float16, True),
    "bf16 += bf16": (torch.bfloat16, torch.bfloat16, False),           # beyond the course's list
    "fp32 += bf16": (torch.float32, torch.bfloat16, False),
}


def running_sums(accumulator: torch.dtype, addend: torch.dtype, upcast: bool,
                 checkpoints: list[int]) -> dict[int, float]:
    """The accumulator's value after each number of terms in ``checkpoints``."""
    total = torch.tensor(0, dtype=accumulator)
    x = torch.tensor(ADDEND, dtype=addend)
    if upcast:
        x = x.to(accumulator)
    wanted, values = set(checkpoints), {}
    for n in range(1, max(checkpoints) + 1):
        total += x
        if n in wanted:
            values[n] = float(total)
    return values


def accumulation_table(checkpoints: list[int]) -> list[dict]:
    rows = []
    for name, (acc, add, upcast) in VARIANTS.items():
        for n, value in running_sums(acc, add, upcast, checkpoints).items():
            exact = n * ADDEND
            rows.append({"variant": name, "accumulator": str(acc).removeprefix("torch."),
                         "addend": str(add).removeprefix("torch."), "terms": n, "value": value,
                         "exact": exact, "abs_error": abs(value - exact), "rel_error": abs(value - exact) / exact})
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.precision.accumulation", description=__doc__.split("\n\n")[0])
    p.add_argument("--terms", type=int, nargs="+", default=[1000], help="numbers of terms to report")
    p.add_argument("--out", required=True, help="where the JSON record goes")
    args = p.parse_args(argv)
    if min(args.terms) < 1:
        p.error("--terms must all be at least 1")
    checkpoints = sorted(set(args.terms))
    log(f"A3 accumulation: {len(VARIANTS)} variants up to {checkpoints[-1]} terms")
    rows = accumulation_table(checkpoints)
    write_json_atomic(args.out, make_record("A3", {"addend": ADDEND, "terms": checkpoints}, "ok", {"rows": rows}))
    log(f"A3 ok -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
