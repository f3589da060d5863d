"""pipeline.job_times: Snakemake's benchmark files summed by deliverable, against sums done here;
the command README or docs/ show for it; one-line errors for a folder without them."""
from __future__ import annotations

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


def test_a_folder_without_benchmarks_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit):
        job_times.main([str(tmp_path)])
    err = capsys.readouterr().err
    assert "no such folder" in err and "Traceback" not in err


def test_readme_shows_the_command_and_it_runs(tmp_path, seed):
    text = "\n".join(page.read_text() for page in PAGES)
    (command,) = set(re.findall(r"python -m cs336_systems\.pipeline\.job_times results/[\w.-]+", text))
    run = command.split()[-1]
    _write(tmp_path / run, random.Random(seed))
    import os
    here = os.getcwd()
    try:
        os.chdir(tmp_path)
        assert job_times.main(command.split()[3:]) == 0
    finally:
        os.chdir(here)
