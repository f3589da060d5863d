"""How long a run's jobs took, by deliverable, from the files Snakemake's ``benchmark:`` directive
leaves (``results/<run>/benchmarks/<ID>/<job>.tsv``, one per job, written when the job ends).

    python -m cs336_systems.pipeline.job_times results/h200 [--out times.csv]
    python -m cs336_systems.pipeline.job_times results/h200 results/h100    # docs/committed-runs.md's table: runs side by side

Prints one row per deliverable (jobs, total and longest wall time, summed CPU time, largest
resident memory) and the total: the time the same jobs would take one after another on the
machine that ran them (Snakemake runs independent jobs side by side where the cores and GPUs
allow). Only measuring jobs have benchmark files; the reports and the writeup, which read
records, do not. A job that was cut off leaves no file, so the sums cover the jobs that finished.

Where the time goes: ``timed_s`` is the part of the jobs' time their records say was spent in
timed steps (warm-up and measured samples of ``metrics.step``; blank for deliverables whose
records time something else), so ``total_s - timed_s`` over those jobs is process start, model
building, compilation and writing; where records say which steps were compiled (E1's rungs),
compiling's share is estimated from compiled against eager jobs (``compiling``). A job whose record is ``skipped`` does no work at all: its time
is the per-job floor of starting the processes, importing torch and writing a record, printed
below the table where the run has such jobs.

What benchmark files do not time, the reports, the writeup and Snakemake's own time between jobs,
comes from Snakemake's console output of each invocation kept in the run's ``logs/snakemake/``
(``pipeline.snakemake_log``; the committed runs have them, and a user may copy
``.snakemake/log/*.snakemake.log`` there); with them the table has the whole DAG's time.

A run's ``logs/rerun.log``, where there is one, times README's main command run once more after
the run ended, on the same machine: the no-op rerun, Snakemake building the DAG and finding
nothing to do (the committed runs have one; ``lab/reference-runs/finish.sh`` writes it). With
several runs the output is the job-time table of docs/committed-runs.md: minutes by deliverable for each run side by
side, all measuring jobs, the floor, and each run's no-op rerun.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import pandas as pd

from cs336_systems.pipeline import snakemake_log


def read_benchmarks(run_dir: Path) -> pd.DataFrame:
    """One row per job: its deliverable (the folder under ``benchmarks/``; ``-`` for the writeup),
    its name, and Snakemake's columns (``s`` wall seconds, ``max_rss`` MB, ``cpu_time`` seconds)."""
    folder = run_dir / "benchmarks"
    rows = []
    for path in sorted(folder.rglob("*.tsv")):
        with path.open(newline="") as f:
            for row in csv.DictReader(f, delimiter="\t"):
                parts = path.relative_to(folder).parts
                records = _records_of(run_dir, parts)
                rows.append({"deliverable": parts[0] if len(parts) > 1 else "-",
                             "job": "/".join(parts)[: -len(".tsv")],
                             "s": _number(row.get("s")), "max_rss_MB": _number(row.get("max_rss")),
                             "cpu_s": _number(row.get("cpu_time")),
                             "timed_s": _timed_seconds(records),
                             "skipped": bool(records) and all(_status(r) == "skipped" for r in records),
                             "compiled": _compiled(records)})
    return pd.DataFrame(rows, columns=["deliverable", "job", "s", "max_rss_MB", "cpu_s", "timed_s", "skipped", "compiled"])


def _records_of(run_dir: Path, parts: tuple[str, ...]) -> list[dict]:
    """The records a job wrote, found from its benchmark file's place: ``benchmarks/<ID>/<name>.tsv``
    belongs to ``<ID>/records/<name>.json``, ``benchmarks/<ID>/<sub>/<name>.tsv`` to
    ``<ID>/<sub>/<name>.json`` (A1's warm-up study, B2's whole-model rows). A job that compares
    several points (a job is a comparison) is named by what its points share and writes one record
    each: where no record has the job's own name, its records are those in the same folder whose
    name holds every ``_``-separated part of it (A1's ``2.7B`` job: ``2.7B_ctx128_forward_fp32``, ...),
    or, for a deliverable measured by one job, every record of its folder (A6's ``groups`` job).
    Empty where there is none (a profile, a report) or none parses."""
    if len(parts) < 2:
        return []
    ident, *sub, name = parts
    name = name[: -len(".tsv")]
    folders = (run_dir / ident / "records" / Path(*sub), run_dir / ident / Path(*sub))
    for folder in folders:
        if (folder / f"{name}.json").is_file():
            return [r for r in [_read(folder / f"{name}.json")] if r is not None]
    wanted = set(name.split("_"))
    for folder in folders:
        found = [_read(p) for p in sorted(folder.glob("*.json")) if wanted <= set(p.stem.split("_"))]
        if found:
            return [r for r in found if r is not None]
    # The deliverable's one job (A6's group sizes): every record of its folder is that job's.
    if not sub and [p.name for p in (run_dir / "benchmarks" / ident).glob("*.tsv")] == [f"{name}.tsv"]:
        return [r for r in map(_read, sorted(folders[0].glob("*.json"))) if r is not None]
    return []


def _read(path: Path) -> dict | None:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _status(record: dict | None) -> str | None:
    return record.get("status") if record else None


def _compiled(records: list[dict]) -> bool | None:
    """Whether the records that ran (``ok``) say their step was compiled (``params.compiled``, as E1's
    rungs do); None where none ran, none says, or a job's records disagree (a job of several rungs)."""
    said = set()
    for record in records:
        params = record.get("params") if _status(record) == "ok" else None
        compiled = params.get("compiled") if isinstance(params, dict) else None
        if isinstance(compiled, bool):
            said.add(compiled)
    return said.pop() if len(said) == 1 else None


def _timed_seconds(records: list[dict]) -> float:
    """Seconds of timed steps in a job's records: their step samples and warm-up step samples
    (milliseconds); NaN where no record holds step samples."""
    total, found = 0.0, False
    for record in records:
        metrics = record.get("metrics")
        step = metrics.get("step") if isinstance(metrics, dict) else None
        if not isinstance(step, dict) or not isinstance(step.get("samples"), list):
            continue
        found = True
        total += sum(float(x) for x in [*step["samples"], *(metrics.get("warmup_step_samples") or [])]) / 1000.0
    return total if found else float("nan")


def _number(text: str | None) -> float:
    """Snakemake writes ``NA`` where it could not measure (e.g. memory of a job too short to sample)."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return float("nan")


def by_deliverable(jobs: pd.DataFrame) -> pd.DataFrame:
    table = jobs.groupby("deliverable", sort=False).agg(
        jobs=("job", "count"), total_s=("s", "sum"), timed_s=("timed_s", lambda t: t.sum(min_count=1)),
        longest_s=("s", "max"), cpu_s=("cpu_s", "sum"), max_rss_MB=("max_rss_MB", "max")).reset_index()
    order = {ident: i for i, ident in enumerate(_ids())}
    return table.sort_values("deliverable", key=lambda c: c.map(lambda d: order.get(d, len(order)))).reset_index(drop=True)


def process_floor(jobs: pd.DataFrame) -> float | None:
    """Median wall time of the jobs whose record is ``skipped`` (they start, decide and write, nothing
    else); None where the run has none."""
    skipped = jobs.loc[jobs["skipped"].astype(bool), "s"].dropna()
    return float(skipped.median()) if len(skipped) else None


LEAST_FOR_A_MEDIAN = 3      # jobs on each side before a difference of medians is worth printing


def compiling(jobs: pd.DataFrame) -> pd.DataFrame:
    """What compiling costs, estimated per deliverable whose records say which steps were compiled
    (E1's rungs): the median untimed seconds of a compiled job (wall time less its timed steps:
    process start, building, compiling, writing) less an eager job's of the same deliverable, whose
    start, building and writing are the same. One row per deliverable with at least
    ``LEAST_FOR_A_MEDIAN`` jobs on each side: ``compiled``, ``eager`` (jobs), their medians,
    ``per_job_s`` and ``total_s`` (per job times the compiled jobs). Nothing is recorded about the
    compiler itself, so this is a difference of two medians, not a measurement."""
    known = jobs[jobs["compiled"].notna() & jobs["timed_s"].notna()]
    rows = []
    for ident, group in known.groupby("deliverable", sort=False):
        untimed = group["s"] - group["timed_s"]
        side = group["compiled"].astype(bool)
        if side.sum() < LEAST_FOR_A_MEDIAN or (~side).sum() < LEAST_FOR_A_MEDIAN:
            continue
        compiled_s, eager_s = float(untimed[side].median()), float(untimed[~side].median())
        rows.append({"deliverable": ident, "compiled": int(side.sum()), "eager": int((~side).sum()),
                     "compiled_median_s": compiled_s, "eager_median_s": eager_s,
                     "per_job_s": compiled_s - eager_s, "total_s": (compiled_s - eager_s) * int(side.sum())})
    return pd.DataFrame(rows, columns=["deliverable", "compiled", "eager", "compiled_median_s", "eager_median_s",
                                       "per_job_s", "total_s"])


def _compiling_lines(name: str, jobs: pd.DataFrame) -> list[str]:
    return [f"{name}: {row.deliverable}'s {row.compiled} compiled jobs take a median {row.compiled_median_s:.1f} s "
            f"beyond their timed steps, its {row.eager} eager ones {row.eager_median_s:.1f} s: compiling costs about "
            f"{row.per_job_s:.1f} s a compiled job, {row.total_s / 60:.1f} min in all (a difference of medians)"
            for row in compiling(jobs).itertuples()]


def _ids() -> list[str]:
    from cs336_systems.deliverables import IDS
    return list(IDS)


def no_op_rerun(run_dir: Path) -> dict | None:
    """``elapsed_s`` and ``exit`` of the timed rerun in ``logs/rerun.log``; None where the run has no
    such log or it does not say both."""
    path = run_dir / "logs" / "rerun.log"
    if not path.is_file():
        return None
    header = path.read_text().split("\n--- its output ---", 1)[0]      # Snakemake's own output follows
    fields = dict(line.split(": ", 1) for line in header.splitlines() if ": " in line)
    try:
        return {"elapsed_s": float(fields["elapsed_s"]), "exit": int(fields["exit"])}
    except (KeyError, ValueError):
        return None


def beyond_benchmarks(run_dir: Path) -> dict | None:
    """From the run's Snakemake logs (``logs/snakemake/*.log``): how many invocations, the jobs
    without benchmark files that finished (``jobs``, ``s``: the reports and the writeup), and
    Snakemake's own time (``between_s``: each invocation's elapsed time less its finished jobs',
    over the invocations whose output says it). None where the run keeps no such logs."""
    logs = snakemake_log.read_logs(run_dir / "logs" / "snakemake")
    if not logs:
        return None
    others = [log["jobs"][~log["jobs"]["benchmarked"].astype(bool)] for log in logs]
    between = [log["elapsed_s"] - log["jobs"]["s"].sum() for log in logs if log["elapsed_s"] is not None]
    return {"invocations": len(logs), "jobs": sum(len(o) for o in others), "s": float(sum(o["s"].sum() for o in others)),
            "between_s": float(sum(between)), "timed_invocations": len(between)}


def side_by_side(runs: dict[str, pd.DataFrame], beyond: dict[str, dict | None] | None = None) -> str:
    """The job-time table of docs/committed-runs.md: per deliverable and run, jobs and minutes one after another; then
    each run's measuring jobs together, their timed steps, its per-job floor times its jobs; and
    where the run keeps Snakemake's logs (``beyond``, from ``beyond_benchmarks``), the reports and
    writeup, Snakemake's time between jobs, and the whole DAG."""
    names = list(runs)
    tables = {name: by_deliverable(jobs).set_index("deliverable") for name, jobs in runs.items()}
    order = [d for d in _ids() if any(d in t.index for t in tables.values())]
    order += sorted({d for t in tables.values() for d in t.index} - set(order))
    measured = {n: runs[n]["s"].sum() for n in names}
    floors = {n: f for n in names if (f := process_floor(runs[n])) is not None}
    logged = {n: extra for n, extra in (beyond or {}).items() if extra}
    # (label, {run: (jobs cell, minutes cell)}); a run missing from a row gets blank cells
    rows = [(d, {n: (str(int(t.loc[d, "jobs"])), f"{t.loc[d, 'total_s'] / 60:.1f}")
                 for n, t in tables.items() if d in t.index})
            for d in order]
    rows += [("**all measuring jobs, one after another**",
              {n: (f"**{len(runs[n])}**", f"**{measured[n] / 60:.1f}**") for n in names}),
             ("of it in timed steps", {n: ("", f"{runs[n]['timed_s'].sum() / 60:.1f}") for n in names}),
             ("per-job floor × jobs", {n: (f"{f:.1f} s", f"{len(runs[n]) * f / 60:.1f}") for n, f in floors.items()})]
    compiles = {n: c for n in names if not (c := compiling(runs[n])).empty}
    if compiles:
        rows.append(("compiling, estimated (see below)",
                     {n: (str(int(c["compiled"].sum())), f"{c['total_s'].sum() / 60:.1f}") for n, c in compiles.items()}))
    if logged:
        rows += [("reports and writeup (Snakemake's logs)",
                  {n: (str(e["jobs"]), f"{e['s'] / 60:.1f}") for n, e in logged.items()}),
                 ("Snakemake between jobs (its logs)", {n: ("", f"{e['between_s'] / 60:.1f}") for n, e in logged.items()}),
                 ("**whole DAG**",
                  {n: (f"**{len(runs[n]) + e['jobs']}**", f"**{(measured[n] + e['s'] + e['between_s']) / 60:.1f}**")
                   for n, e in logged.items()})]
    header = "| deliverable | " + " | ".join(f"{n}: jobs | {n}: min" for n in names) + " |"
    return "\n".join([header, "|:--|" + "--:|--:|" * len(names)]
                     + [f"| {label} | " + " | ".join(" | ".join(cells.get(n, ("", ""))) for n in names) + " |"
                        for label, cells in rows])


def _run_lines(run_dir: Path, jobs: pd.DataFrame, extra: dict | None, say_no_rerun: bool) -> list[str]:
    """The lines under a run's table: compiling's estimate, what its Snakemake logs add, its no-op
    rerun (or, with ``say_no_rerun``, that it has none)."""
    lines = _compiling_lines(run_dir.name, jobs)
    if (line := _beyond_line(run_dir.name, run_dir, extra)) is not None:
        lines.append(line)
    rerun = no_op_rerun(run_dir)
    if rerun is not None or say_no_rerun:
        lines.append(_rerun_line(run_dir.name, run_dir, rerun))
    return lines


def _beyond_line(name: str, run_dir: Path, extra: dict | None) -> str | None:
    if extra is None:
        return None
    return (f"{name}: Snakemake's logs of {_count(extra['invocations'], 'invocation')} ({run_dir}/logs/snakemake/): "
            f"{_count(extra['jobs'], 'job')} without benchmark files (reports, the writeup) took {extra['s'] / 60:.1f} min; "
            f"Snakemake's own time between jobs {extra['between_s'] / 60:.1f} min (over the "
            f"{_count(extra['timed_invocations'], 'invocation')} whose output gives the elapsed time)")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _rerun_line(name: str, run_dir: Path, rerun: dict | None) -> str:
    if rerun is None:
        return f"{name}: no timed rerun (no {run_dir}/logs/rerun.log)"
    return f"{name}: the no-op rerun took {rerun['elapsed_s']:.1f} s (exit {rerun['exit']}; {run_dir}/logs/rerun.log)"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.pipeline.job_times", description=__doc__.split("\n\n")[0])
    p.add_argument("run_dirs", type=Path, nargs="+", metavar="run_dir",
                   help="a run's results folder, e.g. results/h200; several give docs/committed-runs.md's table, side by side")
    p.add_argument("--out", type=Path, help="also write the per-deliverable table as CSV (one run)")
    args = p.parse_args(argv)
    runs = {}
    for run_dir in args.run_dirs:
        if not (run_dir / "benchmarks").is_dir():
            p.error(f"{run_dir}/benchmarks: no such folder (a run made before jobs were benchmarked, or not a run folder)")
        runs[run_dir.name] = read_benchmarks(run_dir)
        if runs[run_dir.name].empty:
            p.error(f"{run_dir}/benchmarks holds no job files yet")
    if len(runs) != len(args.run_dirs):
        p.error("two run folders with the same name: " + " ".join(map(str, args.run_dirs)))
    if len(runs) > 1:
        if args.out:
            p.error("--out writes one run's table; name one run folder")
        beyond = {run_dir.name: beyond_benchmarks(run_dir) for run_dir in args.run_dirs}
        print(side_by_side(runs, beyond))
        print()
        # a Markdown list under the table: docs/committed-runs.md holds this output as it is printed
        for run_dir in args.run_dirs:
            for line in _run_lines(run_dir, runs[run_dir.name], beyond[run_dir.name], say_no_rerun=True):
                print(f"- {line}")
        return 0
    (run_dir,) = args.run_dirs
    jobs = runs[run_dir.name]
    table = by_deliverable(jobs)
    if args.out:
        table.round(1).to_csv(args.out, index=False)
    print(table.round(1).to_markdown(index=False, missingval=""))
    print(f"\n{len(jobs)} jobs, {jobs['s'].sum() / 60:.1f} min one after another "
          f"(the longest job {jobs['s'].max():.0f} s: {jobs.loc[jobs['s'].idxmax(), 'job']})")
    timed = jobs["timed_s"].notna()
    if timed.any():
        print(f"{int(timed.sum())} jobs whose records hold step samples: {jobs.loc[timed, 's'].sum() / 60:.1f} min, "
              f"{jobs.loc[timed, 'timed_s'].sum() / 60:.1f} min of it in timed steps")
    floor = process_floor(jobs)
    if floor is not None:
        print(f"per-job floor (median of {_count(int(jobs['skipped'].sum()), 'job')} whose record is skipped): {floor:.1f} s; "
              f"{len(jobs)} jobs x floor = {len(jobs) * floor / 60:.1f} min")
    for line in _run_lines(run_dir, jobs, beyond_benchmarks(run_dir), say_no_rerun=False):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
