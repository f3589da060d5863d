"""The jobs one Snakemake invocation ran, read from its console output (the same text Snakemake
keeps in ``.snakemake/log/*.snakemake.log``): each job's rule, start and end, and whether it had a
``benchmark:`` file. ``pipeline.job_times`` uses it for what benchmark files do not time: the
reports, the writeup, and Snakemake's own time between jobs.

Snakemake stamps each job's start and end to the second: a job's time here is good to about a
second, and a job that never finished (failed, or cut off) is left out.
"""
from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

import pandas as pd

_STAMP = r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]\n"
_START = re.compile(_STAMP + r"(?:local)?rule (\w+):\n(.*?)(?=\n\n|\n\[|\Z)", re.M | re.S)
_END = re.compile(_STAMP + r"Finished jobid: (\d+) \(Rule: (\w+)\)", re.M)
_JOBID = re.compile(r"^\s+jobid: (\d+)$", re.M)
_ELAPSED = re.compile(r"^Elapsed time: (?:(\d+) days?, )?(\d+):(\d\d):(\d\d(?:\.\d+)?)$", re.M)


def _time(stamp: str) -> datetime:
    return datetime.strptime(" ".join(stamp.split()), "%a %b %d %H:%M:%S %Y")


def finished_jobs(text: str) -> pd.DataFrame:
    """One row per job that finished: ``rule``, ``jobid``, ``start``, ``end``, ``s`` (end - start,
    whole seconds) and ``benchmarked`` (the job had a benchmark file, so job_times counts it from
    there)."""
    starts = {}
    for stamp, rule, body in _START.findall(text):
        jobid = _JOBID.search(body)
        if jobid:
            starts[int(jobid.group(1))] = (rule, _time(stamp), "\n    benchmark: " in "\n" + body)
    rows = []
    for stamp, jobid, rule in _END.findall(text):
        if int(jobid) in starts and starts[int(jobid)][0] == rule:
            _, start, benchmarked = starts[int(jobid)]
            end = _time(stamp)
            rows.append({"rule": rule, "jobid": int(jobid), "start": start, "end": end,
                         "s": (end - start).total_seconds(), "benchmarked": benchmarked})
    return pd.DataFrame(rows, columns=["rule", "jobid", "start", "end", "s", "benchmarked"])


def elapsed_seconds(text: str) -> float | None:
    """The invocation's own ``Elapsed time:`` line, which Snakemake prints when it ends (also when
    it was stopped); None where the output was cut before it."""
    match = _ELAPSED.search(text)
    if not match:
        return None
    days, hours, minutes, seconds = match.groups()
    return int(days or 0) * 86400 + int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def read_logs(folder: Path) -> list[dict]:
    """Every ``*.log`` in ``folder`` (one per invocation, in name order): its path, finished jobs
    and elapsed time."""
    logs = []
    for path in sorted(folder.glob("*.log")) if folder.is_dir() else []:
        text = path.read_text()
        logs.append({"path": path, "jobs": finished_jobs(text), "elapsed_s": elapsed_seconds(text)})
    return logs
