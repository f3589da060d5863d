"""pipeline.snakemake_log: jobs read back from Snakemake's console output, written here in the
shape Snakemake prints (the smoke DAG's real output is checked in tests/workflow/test_snakemake.py);
and job_times' rows built from such logs, against sums done here."""
from __future__ import annotations

import random
from datetime import datetime, timedelta

import pytest

from cs336_systems.pipeline import job_times, snakemake_log


def _stamp(t: datetime) -> str:
    return "[" + t.strftime("%a %b ") + f"{t.day:2d}" + t.strftime(" %H:%M:%S %Y") + "]"


def _log(rng: random.Random, jobs: list[tuple[str, bool, bool]], start: datetime) -> tuple[str, list[float], float]:
    """Snakemake's output for ``jobs`` (rule, benchmarked, finishes), run one after another with
    random gaps; returns the text, each finished job's seconds, and the elapsed time printed."""
    out, seconds, t = ["Building DAG of jobs...", "Execute 1 jobs..."], [], start
    for jobid, (rule, benchmarked, finishes) in enumerate(jobs, start=1):
        t += timedelta(seconds=rng.randint(0, 2))
        body = [f"localrule {rule}:", "    input: a, b", f"    output: out{jobid}.json", f"    jobid: {jobid}"]
        if benchmarked:
            body.append(f"    benchmark: results/r/benchmarks/{rule}/{jobid}.tsv")
        body += ["    reason: Missing output files", "    resources: tmpdir=/tmp"]
        out += ["", _stamp(t), *body, "Select jobs to execute..."]
        took = rng.randint(0, 400)
        t += timedelta(seconds=took)
        if finishes:
            out += [_stamp(t), f"Finished jobid: {jobid} (Rule: {rule})", f"{jobid} of {len(jobs)} steps done"]
            seconds.append(took)
        else:
            out += [_stamp(t), f"Error in rule {rule}:", f"    jobid: {jobid}"]
    elapsed = (t - start).total_seconds() + rng.random()
    hours, rest = divmod(elapsed, 3600)
    out += ["Complete log(s): x.log", f"Elapsed time: {int(hours)}:{int(rest // 60):02d}:{rest % 60:09.6f}"]
    return "\n".join(out) + "\n", seconds, elapsed


def test_finished_jobs_and_elapsed_time(seed):
    rng = random.Random(seed)
    jobs = [(rng.choice(["A1_benchmark", "E1_step", "A1_report", "writeup"]), rng.random() < 0.5, rng.random() < 0.8)
            for _ in range(rng.randint(5, 30))]
    jobs.append(("all", False, True))
    text, seconds, elapsed = _log(rng, jobs, datetime(2026, 1, rng.randint(1, 9), rng.randint(0, 23), 5, 7))
    found = snakemake_log.finished_jobs(text)
    finished = [job for job in jobs if job[2]]
    assert list(found["rule"]) == [rule for rule, _, _ in finished]
    assert list(found["benchmarked"]) == [b for _, b, _ in finished]
    assert list(found["s"]) == seconds
    assert snakemake_log.elapsed_seconds(text) == pytest.approx(elapsed, abs=1e-5)
    assert snakemake_log.elapsed_seconds(text.split("Complete log")[0]) is None       # cut before the end


def test_elapsed_time_over_a_day():
    assert snakemake_log.elapsed_seconds("Elapsed time: 1 day, 2:03:04.5\n") == 86400 + 2 * 3600 + 3 * 60 + 4.5


def test_job_times_counts_what_the_benchmarks_leave_out(tmp_path, seed, capsys):
    """Two invocations' logs in logs/snakemake/: the reports and writeup they finished, and each
    invocation's elapsed time less its finished jobs, become the table's last rows."""
    rng = random.Random(seed)
    run = tmp_path / "r"
    bench = run / "benchmarks" / "A1" / "p.tsv"
    bench.parent.mkdir(parents=True)
    bench.write_text("s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
                     "120.0\t0:02:00\t100\t1\t1\t1\t0\t0\t50\t60\n")
    (run / "logs" / "snakemake").mkdir(parents=True)
    others, between = [], 0.0
    for k in range(2):
        jobs = [("A1_benchmark", True, True), ("A1_report", False, True), ("writeup", False, k == 1)]
        text, seconds, elapsed = _log(rng, jobs, datetime(2026, 2, 1 + k, 9))
        (run / "logs" / "snakemake" / f"{k}.log").write_text(text)
        finished = [job for job in jobs if job[2]]
        others += [s for s, job in zip(seconds, finished) if not job[1]]
        between += elapsed - sum(seconds)
    extra = job_times.beyond_benchmarks(run)
    assert extra["jobs"] == len(others) and extra["s"] == pytest.approx(sum(others))
    assert extra["between_s"] == pytest.approx(between, abs=1e-5)
    (tmp_path / "q" / "benchmarks" / "B5").mkdir(parents=True)
    (tmp_path / "q" / "benchmarks" / "B5" / "x.tsv").write_text(bench.read_text())
    assert job_times.main([str(run), str(tmp_path / "q")]) == 0
    out = capsys.readouterr().out
    rows = {line.split(" | ")[0].strip("| *"): [c.strip(" *") for c in line.strip("|").split(" | ")[1:]]
            for line in out.splitlines() if line.startswith("| ")}
    assert (f"r: Snakemake's logs of 2 invocations ({run}/logs/snakemake/): {len(others)} job"
            f"{'' if len(others) == 1 else 's'} without benchmark files") in out
    assert "(over the 2 invocations whose output gives the elapsed time)" in out
    assert rows["reports and writeup (Snakemake's logs)"] == [str(len(others)), f"{sum(others) / 60:.1f}", "", ""]
    assert rows["whole DAG"] == [str(1 + len(others)), f"{(120 + sum(others) + between) / 60:.1f}", "", ""]
