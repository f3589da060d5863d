"""A3 report: accumulation results as a table, error against number of terms, summary numbers.

    python -m cs336_systems.report.a3 --record accumulation.json --out-dir DIR
"""
from __future__ import annotations

import argparse
import math
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from cs336_systems.report import contract
from cs336_systems.report.common import load_records, run_provenance, save_figure, write_table
from cs336_systems.report.contract import Summary


# Stored mantissa bits (the leading 1 is implicit, so the precision is one bit more).
STORED_BITS = {"fp16": 10, "bf16": 7, "fp32": 23}
TERM = 0.01


def rounded(x: float, fmt: str) -> float:
    """``x`` rounded to the nearest ``fmt`` value (ties to even), without torch: fp16 through
    struct's half format, bf16 as the top 16 bits of the fp32 pattern."""
    if fmt == "fp16":
        return struct.unpack("<e", struct.pack("<e", x))[0]
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    if fmt == "bf16":
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def stall_sum(fmt: str, term: float = TERM) -> float:
    """Where a running sum kept in ``fmt`` stops growing when ``term`` is added again and again: the
    first power of two 2^e at which half the spacing of ``fmt`` numbers, 2^(e − bits − 1), reaches
    the term, so each addition rounds back to the sum (a tie rounds to the even neighbour, and 2^e's
    mantissa is even). Below it every addition moves the sum by at least one spacing, so it keeps
    climbing until it gets there."""
    t = rounded(term, fmt)
    e = math.floor(math.log2(t)) + STORED_BITS[fmt]
    while 2.0 ** (e - STORED_BITS[fmt] - 1) < t:
        e += 1
    return 2.0 ** e


@dataclass(frozen=True)
class Sum:
    """A running sum after some number of terms, as fp32 holds it."""
    value: float
    abs_error: float


@dataclass(frozen=True)
class Stall:
    """Where a running sum kept in one format stops growing: the closed form and the sum measured."""
    predicted: float
    measured: float
    stored_bits: int
    matches: bool


@dataclass(frozen=True)
class Checks:
    stall: dict[str, Stall]
    upcasts_agree: bool
    fp16_term: float
    # the fp32 sum of N fp16 terms is N × fp16(0.01) up to fp32's own rounding (relative 2^-24 per step)
    mixed_is_term_rounding: bool


@dataclass(frozen=True)
class A3Summary(Summary):
    term: float
    course_terms: int
    course_exact: float
    at_course_terms: dict[str, Sum]
    largest_terms: int
    largest_exact: float
    at_largest_terms: dict[str, Sum]
    checks: Checks


CONTRACTS = {"A3": A3Summary}


def _value(at: dict[str, Sum], variant: str) -> float | None:
    return at[variant].value if variant in at else None


def checks(at: dict[int, dict[str, Sum]], largest: int, course: int) -> Checks:
    """What the A3 prose says, computed from the rows: where the low-precision sums stall against
    the closed form, whether the implicit and explicit upcasts agree at every length, and whether
    the fp32 accumulator of fp16 terms is off by exactly the fp16 rounding of 0.01, repeated."""
    measured = {fmt: _value(at[largest], f"{fmt} += {fmt}") for fmt in ("fp16", "bf16")}
    stall = {fmt: Stall(stall_sum(fmt), m, STORED_BITS[fmt], m == stall_sum(fmt))
             for fmt, m in measured.items() if m is not None}
    same = all(_value(row, "fp32 += fp16") == _value(row, "fp32 += fp16.to(fp32)") for row in at.values())
    fp16_term = rounded(TERM, "fp16")
    mixed = _value(at[course], "fp32 += fp16")
    return Checks(stall, same, fp16_term, mixed is not None
                  and abs(mixed - course * fp16_term) <= course * course * fp16_term * 2.0 ** -24)


def plot_error(df: pd.DataFrame, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for variant, part in df.groupby("variant", sort=False):
        # An exact sum has error 0, which a log axis cannot show: draw it at the axis floor.
        ax.plot(part["terms"], part["rel_error"].clip(lower=1e-9), marker="o", label=variant)
    ax.set(xscale="log", yscale="log", xlabel="number of terms (each 0.01)", ylabel="relative error |sum − n/100| / (n/100)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save_figure(fig, path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.report.a3", description=__doc__.split("\n\n")[0])
    p.add_argument("--record", required=True)
    p.add_argument("--out-dir", required=True, type=Path)
    args = p.parse_args(argv)
    records = load_records([args.record])
    df = pd.DataFrame(records[0]["metrics"]["rows"])
    write_table(df[["variant", "terms", "value", "exact", "abs_error", "rel_error"]], args.out_dir)
    plot_error(df, args.out_dir / "error_vs_terms.png")
    at = {n: {row["variant"]: Sum(row["value"], row["abs_error"]) for _, row in part.iterrows()}
          for n, part in df.groupby("terms")}
    course_n = 1000 if 1000 in at else max(at)
    largest = int(max(at))
    contract.write(args.out_dir / "summary.json", A3Summary(
        provenance=run_provenance(records), term=TERM, course_terms=course_n, course_exact=course_n / 100,
        at_course_terms=at[course_n], largest_terms=largest, largest_exact=largest / 100,
        at_largest_terms=at[largest], checks=checks(at, largest, course_n)))
    print(f"A3 report: {len(df)} rows -> {args.out_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
