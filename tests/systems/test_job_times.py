"""pipeline.job_times: Snakemake's benchmark files summed by deliverable, against sums done here;
the command README or docs/ show for it; one-line errors for a folder without them."""
from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from cs336_systems.pipeline import job_times

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]      # README and the docs it links
HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def _write(run: Path, rng: random.Random) -> dict[str, list[float]]:
    """Benchmark files as Snakemake writes them, with random times; returns the seconds by ID."""
    truth: dict[str, list[float]] = {}
    for ident, jobs in (("A1", 3), ("C3", 2), ("B5", 1)):
        for k in range(jobs):
            s = round(rng.uniform(1, 500), 4)
            path = run / "benchmarks" / ident / f"job{k}.tsv"
            path.parent.mkdir(parents=True, exist_ok=True)
            rss = "NA" if k == 1 else f"{rng.uniform(100, 900):.2f}"
            path.write_text(HEADER + f"{s}\t0:00:{int(s) % 60:02d}\t{rss}\t1\t1\t1\t0\t0\t50\t{s / 2:.2f}\n")
            truth.setdefault(ident, []).append(s)
    return truth


def test_sums_by_deliverable_in_registry_order(tmp_path, seed, capsys):
    truth = _write(tmp_path, random.Random(seed))
    table = job_times.by_deliverable(job_times.read_benchmarks(tmp_path))
    assert list(table["deliverable"]) == ["A1", "B5", "C3"]
    for row in table.itertuples():
        assert row.jobs == len(truth[row.deliverable])
        assert row.total_s == pytest.approx(sum(truth[row.deliverable]))
        assert row.longest_s == pytest.approx(max(truth[row.deliverable]))
    assert job_times.main([str(tmp_path), "--out", str(tmp_path / "t.csv")]) == 0
    total = sum(sum(v) for v in truth.values())
    assert f"6 jobs, {total / 60:.1f} min one after another" in capsys.readouterr().out
    assert (tmp_path / "t.csv").read_text().startswith("deliverable,jobs,total_s")


def _record(path: Path, status: str, step_ms: list[float] | None = None, warmup_ms: list[float] | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    metrics = {} if step_ms is None else {"step": {"mean": sum(step_ms) / len(step_ms), "n": len(step_ms),
                                                    "samples": step_ms},
                                          "warmup_step_samples": warmup_ms or []}
    path.write_text(json.dumps({"id": path.parts[-3], "params": {}, "metrics": metrics, "status": status}))


def test_timed_steps_and_the_floor_come_from_the_jobs_records(tmp_path, seed, capsys):
    """A1's job0 and job2 hold step samples (job2's record sits in a sub-folder, as A1's warm-up
    study's do), job1 has no record; C3's job0 is skipped, job1 is ok without step samples."""
    rng = random.Random(seed)
    truth = _write(tmp_path, rng)
    (tmp_path / "benchmarks" / "A1" / "job2.tsv").rename(tmp_path / "benchmarks" / "A1" / "warmup.tsv")
    (tmp_path / "benchmarks" / "A1" / "warmup").mkdir()
    (tmp_path / "benchmarks" / "A1" / "warmup.tsv").rename(tmp_path / "benchmarks" / "A1" / "warmup" / "job2.tsv")
    steps = {k: [rng.uniform(1, 900) for _ in range(rng.randint(1, 9))] for k in (0, 2)}
    warm = {k: [rng.uniform(1, 900) for _ in range(rng.randint(0, 4))] for k in (0, 2)}
    _record(tmp_path / "A1" / "records" / "job0.json", "ok", steps[0], warm[0])
    _record(tmp_path / "A1" / "warmup" / "job2.json", "ok", steps[2], warm[2])
    _record(tmp_path / "C3" / "records" / "job0.json", "skipped")
    _record(tmp_path / "C3" / "records" / "job1.json", "ok")
    jobs = job_times.read_benchmarks(tmp_path)
    table = job_times.by_deliverable(jobs).set_index("deliverable")
    expected = sum(sum(steps[k]) + sum(warm[k]) for k in (0, 2)) / 1000
    assert table.loc["A1", "timed_s"] == pytest.approx(expected)
    assert table.loc["C3", "timed_s"] != table.loc["C3", "timed_s"]        # NaN: no step samples there
    assert job_times.process_floor(jobs) == pytest.approx(truth["C3"][0])
    assert job_times.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"per-job floor (median of 1 job whose record is skipped): {truth['C3'][0]:.1f} s" in out
    assert f"2 jobs whose records hold step samples: {(truth['A1'][0] + truth['A1'][2]) / 60:.1f} min" in out


def test_without_skipped_records_there_is_no_floor(tmp_path, seed, capsys):
    _write(tmp_path, random.Random(seed))
    assert job_times.process_floor(job_times.read_benchmarks(tmp_path)) is None
    assert job_times.main([str(tmp_path)]) == 0
    assert "floor" not in capsys.readouterr().out


def test_a_folder_without_benchmarks_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit):
        job_times.main([str(tmp_path)])
    err = capsys.readouterr().err
    assert "no such folder" in err and "Traceback" not in err


def test_readme_shows_the_command_and_it_runs(tmp_path, seed):
    """Every job_times command README and docs/ show (one run or several) runs on run folders of
    those names."""
    text = "\n".join(page.read_text() for page in PAGES)
    commands = set(re.findall(r"python -m cs336_systems\.pipeline\.job_times(?: results/[\w.-]+)+", text))
    assert commands
    rng = random.Random(seed)
    import os
    here = os.getcwd()
    try:
        os.chdir(tmp_path)
        for command in commands:
            for run in command.split()[3:]:
                if not Path(run).exists():
                    _write(Path(run), rng)
            assert job_times.main(command.split()[3:]) == 0, command
    finally:
        os.chdir(here)


def _rerun_log(run: Path, elapsed: float, exit_code: int) -> None:
    path = run / "logs" / "rerun.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"command: snakemake --cores 1\nmachine: vm; NVIDIA H200\ncommit: abc\nstarted: 2026-01-01T00:00:00Z\n"
                    f"exit: {exit_code}\nelapsed_s: {elapsed}\n--- its output ---\nelapsed_s: 999\n")


def test_the_no_op_rerun_comes_from_its_log(tmp_path, seed, capsys):
    rng = random.Random(seed)
    _write(tmp_path / "r", rng)
    assert job_times.no_op_rerun(tmp_path / "r") is None
    elapsed = round(rng.uniform(1, 60), 1)
    _rerun_log(tmp_path / "r", elapsed, 0)
    assert job_times.no_op_rerun(tmp_path / "r") == {"elapsed_s": elapsed, "exit": 0}
    assert job_times.main([str(tmp_path / "r")]) == 0
    assert f"the no-op rerun took {elapsed:.1f} s (exit 0;" in capsys.readouterr().out
    (tmp_path / "r" / "logs" / "rerun.log").write_text("command: x\nexit: 0\n")     # cut short: no elapsed_s
    assert job_times.no_op_rerun(tmp_path / "r") is None


def test_runs_side_by_side(tmp_path, seed, capsys):
    """Two runs with different deliverables: each row has the run's own jobs and minutes, blank
    where the run lacks the deliverable; the all-jobs row sums each run's jobs."""
    rng = random.Random(seed)
    one = _write(tmp_path / "one", rng)
    two = _write(tmp_path / "two", rng)
    for path in (tmp_path / "two" / "benchmarks" / "C3").iterdir():
        two["C3"] = []
        path.unlink()
    _rerun_log(tmp_path / "two", 4.2, 0)
    assert job_times.main([str(tmp_path / "one"), str(tmp_path / "two")]) == 0
    out = capsys.readouterr().out
    rows = {line.split(" | ")[0].strip("| *"): [c.strip(" *") for c in line.strip("|").split(" | ")[1:]]
            for line in out.splitlines() if line.startswith("| ")}
    assert rows["A1"] == ["3", f"{sum(one['A1']) / 60:.1f}", "3", f"{sum(two['A1']) / 60:.1f}"]
    assert rows["C3"] == ["2", f"{sum(one['C3']) / 60:.1f}", "", ""]
    total = {k: sum(sum(v) for v in t.values()) / 60 for k, t in (("one", one), ("two", two))}
    assert rows["all measuring jobs, one after another"] == ["6", f"{total['one']:.1f}", "4", f"{total['two']:.1f}"]
    assert "one: no timed rerun" in out and "two: the no-op rerun took 4.2 s (exit 0;" in out


def test_side_by_side_refuses_out_and_twin_names(tmp_path, seed, capsys):
    rng = random.Random(seed)
    _write(tmp_path / "a" / "h200", rng)
    _write(tmp_path / "b" / "h200", rng)
    with pytest.raises(SystemExit):
        job_times.main([str(tmp_path / "a" / "h200"), str(tmp_path / "b" / "h200")])
    assert "same name" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        job_times.main([str(tmp_path / "a" / "h200"), str(tmp_path / "b"), "--out", str(tmp_path / "t.csv")])


def test_compiling_is_the_compiled_jobs_untimed_median_less_the_eager_ones(tmp_path, seed, capsys):
    """E1 jobs with random wall and step times, some compiled: the estimate is the difference of the
    two groups' medians of wall time less timed steps, computed here with statistics.median; jobs
    that did not run, and a deliverable with too few jobs on one side, are left out."""
    import statistics

    rng = random.Random(seed)
    untimed: dict[bool, list[float]] = {True: [], False: []}
    for k in range(rng.randint(6, 12)):
        compiled = k % 2 == 0
        steps = [rng.uniform(10, 900) for _ in range(rng.randint(2, 6))]
        s = sum(steps) / 1000 + rng.uniform(2, 9) + (rng.uniform(10, 25) if compiled else 0.0)
        path = tmp_path / "benchmarks" / "E1" / f"job{k}.tsv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(HEADER + f"{s}\t0:00:01\t100\t1\t1\t1\t0\t0\t50\t1\n")
        _record(tmp_path / "E1" / "records" / f"job{k}.json", "ok", steps)
        record = json.loads((tmp_path / "E1" / "records" / f"job{k}.json").read_text())
        record["params"] = {"compiled": compiled}
        (tmp_path / "E1" / "records" / f"job{k}.json").write_text(json.dumps(record))
        untimed[compiled].append(s - sum(steps) / 1000)
    # an oom record that says compiled, and B2 with two compiled jobs only: neither counts
    for ident, k, status, compiled in (("E1", 99, "oom", True), ("B2", 0, "ok", True), ("B2", 1, "ok", True),
                                       ("B2", 2, "ok", False), ("B2", 3, "ok", False), ("B2", 4, "ok", False)):
        path = tmp_path / "benchmarks" / ident / f"job{k}.tsv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(HEADER + f"{rng.uniform(1, 99)}\t0:00:01\t100\t1\t1\t1\t0\t0\t50\t1\n")
        _record(tmp_path / ident / "records" / f"job{k}.json", status, [1.0])
        record = json.loads((tmp_path / ident / "records" / f"job{k}.json").read_text())
        record["params"] = {"compiled": compiled}
        (tmp_path / ident / "records" / f"job{k}.json").write_text(json.dumps(record))
    table = job_times.compiling(job_times.read_benchmarks(tmp_path))
    assert list(table["deliverable"]) == ["E1"]
    row = table.iloc[0]
    per_job = statistics.median(untimed[True]) - statistics.median(untimed[False])
    assert (row["compiled"], row["eager"]) == (len(untimed[True]), len(untimed[False]))
    assert row["per_job_s"] == pytest.approx(per_job) and row["total_s"] == pytest.approx(per_job * len(untimed[True]))
    assert job_times.main([str(tmp_path)]) == 0
    assert f"compiling costs about {per_job:.1f} s a compiled job, {per_job * len(untimed[True]) / 60:.1f} min" \
        in capsys.readouterr().out
    # side by side (docs/committed-runs.md's table), beside a run without compiled records: its cells stay blank
    _write(tmp_path / "other", rng)
    assert job_times.main([str(tmp_path), str(tmp_path / "other")]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| compiling"))
    assert [c.strip() for c in row.strip("|").split("|")[1:]] == \
        [str(len(untimed[True])), f"{per_job * len(untimed[True]) / 60:.1f}", "", ""]


def test_without_compiled_records_there_is_no_compiling_line(tmp_path, seed, capsys):
    _write(tmp_path, random.Random(seed))
    assert job_times.compiling(job_times.read_benchmarks(tmp_path)).empty
    assert job_times.main([str(tmp_path)]) == 0
    assert "compil" not in capsys.readouterr().out


def test_the_committed_runs_job_time_table_is_what_job_times_prints(capsys, monkeypatch):
    """docs/committed-runs.md quotes the command's output for the committed runs verbatim, between
    markers: a run measured again, or a change to what job_times prints, shows there until it is
    pasted anew."""
    text = (REPO / "docs" / "committed-runs.md").read_text()
    block = re.search(r"<!-- job_times -->\n(.*?)\n<!-- /job_times -->", text, flags=re.S)
    assert block, "docs/committed-runs.md has no job_times block"
    command = "python -m cs336_systems.pipeline.job_times results/h200 results/h100"
    assert f"`{command}`" in text
    monkeypatch.chdir(REPO)
    assert job_times.main(command.split()[3:]) == 0
    assert block.group(1) == capsys.readouterr().out.rstrip("\n")


def test_a_job_that_compares_several_points_counts_every_record_it_wrote(tmp_path, seed):
    """A1's grouped job ``xl`` wrote one record per point (``xl_ctx…``); ``small``'s records are another
    job's, and ``xl-big`` shares no part with ``xl``'s name although it starts like it."""
    rng = random.Random(seed)
    tsv = tmp_path / "benchmarks" / "A1" / "xl.tsv"
    tsv.parent.mkdir(parents=True)
    tsv.write_text(HEADER + "100\t0:01:40\t500\t1\t1\t1\t0\t0\t50\t60\n")
    mine = {f"xl_ctx{c}_{m}": [rng.uniform(1, 900) for _ in range(3)] for c in (128, 256) for m in ("forward", "train-step")}
    for name, steps in mine.items():
        _record(tmp_path / "A1" / "records" / f"{name}.json", "ok", steps, steps[:1])
    _record(tmp_path / "A1" / "records" / "small_ctx128_forward.json", "ok", [5000.0])
    _record(tmp_path / "A1" / "records" / "xl-big_ctx128_forward.json", "ok", [7000.0])
    jobs = job_times.read_benchmarks(tmp_path)
    assert len(jobs) == 1 and not jobs.loc[0, "skipped"]
    assert jobs.loc[0, "timed_s"] == pytest.approx(sum(sum(s) + s[0] for s in mine.values()) / 1000)


def test_the_one_job_of_a_deliverable_counts_every_record_of_its_folder(tmp_path, seed):
    rng = random.Random(seed)
    tsv = tmp_path / "benchmarks" / "A6" / "groups.tsv"
    tsv.parent.mkdir(parents=True)
    tsv.write_text(HEADER + "100\t0:01:40\t500\t1\t1\t1\t0\t0\t50\t60\n")
    steps = {k: [rng.uniform(1, 900) for _ in range(3)] for k in (0, 1, 2)}
    for k, samples in steps.items():
        _record(tmp_path / "A6" / "records" / f"group{k}.json", "ok", samples)
    jobs = job_times.read_benchmarks(tmp_path)
    assert jobs.loc[0, "timed_s"] == pytest.approx(sum(map(sum, steps.values())) / 1000)
    (tmp_path / "benchmarks" / "A6" / "other.tsv").write_text(tsv.read_text())     # two jobs: no guessing
    assert job_times.read_benchmarks(tmp_path)["timed_s"].isna().all()
