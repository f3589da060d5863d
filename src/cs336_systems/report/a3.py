"""A3 report: accumulation results as a table, error against number of terms, summary numbers.

    python -m cs336_systems.report.a3 --record accumulation.json --out-dir DIR
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from cs336_systems.report.common import load_records, run_provenance, save_figure, write_summary, write_table


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
    at = {n: {row["variant"]: {"value": row["value"], "abs_error": row["abs_error"], "rel_error": row["rel_error"]}
              for _, row in part.iterrows()} for n, part in df.groupby("terms")}
    course_n = 1000 if 1000 in at else max(at)
    write_summary(args.out_dir / "summary.json", {
        "provenance": run_provenance(records),
        "course_terms": course_n,
        "at_course_terms": at[course_n],
        "largest_terms": int(max(at)),
        "at_largest_terms": at[max(at)],
    })
    print(f"A3 report: {len(df)} rows -> {args.out_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
