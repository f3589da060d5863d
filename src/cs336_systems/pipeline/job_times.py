"""How long a run's jobs took, by deliverable, from the files Snakemake's ``benchmark:`` directive
leaves (``results/<run>/benchmarks/<ID>/<job>.tsv``, one per job, written when the job ends).

    python -m cs336_systems.pipeline.job_times results/h200 [--out times.csv]

Prints one row per deliverable (jobs, total and longest wall time, summed CPU time, largest
resident memory) and the total: the time the same jobs would take one after another on the
machine that ran them, an upper bound on a full rebuild there (Snakemake runs independent jobs
side by side where the cores and GPUs allow). A job that was cut off leaves no file, so the
sums cover the jobs that finished.
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import pandas as pd


def read_benchmarks(run_dir: Path) -> pd.DataFrame:
    """One row per job: its deliverable (the folder under ``benchmarks/``; ``-`` for the writeup),
    its name, and Snakemake's columns (``s`` wall seconds, ``max_rss`` MB, ``cpu_time`` seconds)."""
    folder = run_dir / "benchmarks"
    rows = []
    for path in sorted(folder.rglob("*.tsv")):
        with path.open(newline="") as f:
            for row in csv.DictReader(f, delimiter="\t"):
                parts = path.relative_to(folder).parts
                rows.append({"deliverable": parts[0] if len(parts) > 1 else "-",
                             "job": "/".join(parts)[: -len(".tsv")],
                             "s": _number(row.get("s")), "max_rss_MB": _number(row.get("max_rss")),
                             "cpu_s": _number(row.get("cpu_time"))})
    return pd.DataFrame(rows, columns=["deliverable", "job", "s", "max_rss_MB", "cpu_s"])


def _number(text: str | None) -> float:
    """Snakemake writes ``NA`` where it could not measure (e.g. memory of a job too short to sample)."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return float("nan")


def by_deliverable(jobs: pd.DataFrame) -> pd.DataFrame:
    table = jobs.groupby("deliverable", sort=False).agg(
        jobs=("job", "count"), total_s=("s", "sum"), longest_s=("s", "max"), cpu_s=("cpu_s", "sum"),
        max_rss_MB=("max_rss_MB", "max")).reset_index()
    order = {ident: i for i, ident in enumerate(_ids())}
    return table.sort_values("deliverable", key=lambda c: c.map(lambda d: order.get(d, len(order)))).reset_index(drop=True)


def _ids() -> list[str]:
    from cs336_systems.deliverables import IDS
    return list(IDS)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.pipeline.job_times", description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", type=Path, help="a run's results folder, e.g. results/h200")
    p.add_argument("--out", type=Path, help="also write the per-deliverable table as CSV")
    args = p.parse_args(argv)
    if not (args.run_dir / "benchmarks").is_dir():
        p.error(f"{args.run_dir}/benchmarks: no such folder (a run made before jobs were benchmarked, or not a run folder)")
    jobs = read_benchmarks(args.run_dir)
    if jobs.empty:
        p.error(f"{args.run_dir}/benchmarks holds no job files yet")
    table = by_deliverable(jobs)
    if args.out:
        table.round(1).to_csv(args.out, index=False)
    print(table.round(1).to_markdown(index=False))
    print(f"\n{len(jobs)} jobs, {jobs['s'].sum() / 60:.1f} min one after another "
          f"(the longest job {jobs['s'].max():.0f} s: {jobs.loc[jobs['s'].idxmax(), 'job']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
