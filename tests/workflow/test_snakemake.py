"""The Snakemake DAG end to end, in a copy of the repository (the real tree is never touched).

The package is installed in editable mode from the real checkout, so the subprocesses get
``PYTHONPATH=<copy>/src:<copy>/cs336-basics``: the copy's modules (and therefore the copy's schema,
templates and source list) are the ones that run.
"""

import contextlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SNAKEMAKE = Path(sys.executable).with_name("snakemake")
COPIED = ["Snakefile", "config.yaml", "profiles", "workflow", "writeup/templates", "src", "cs336-basics"]
SMOKE_LIMIT_S = 600

pytestmark = pytest.mark.skipif(not SNAKEMAKE.exists(), reason=f"no snakemake next to {sys.executable}")


def assert_smoke_outputs(copy: Path) -> None:
    """A finished smoke run in ``copy``: both writeup files, and every A1 grid point's record ok."""
    for name in ("writeup.md", "writeup.html"):
        assert (copy / "writeup" / "smoke" / name).stat().st_size > 0
    grid = yaml.safe_load((copy / "config.yaml").read_text())["presets"]["smoke"]["A1"]
    records = sorted((copy / "results" / "smoke" / "A1" / "records").glob("*.json"))
    assert len(records) == len(list(itertools.product(grid["sizes"], grid["contexts"], grid["modes"],
                                                      grid["precisions"])))
    for path in records + sorted((copy / "results" / "smoke" / "A1" / "warmup").glob("*.json")):
        record = json.loads(path.read_text())
        assert record["status"] == "ok", (path.name, record.get("message"))


def make_copy(dest: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", ".snakemake")
    for rel in COPIED:
        src, dst = REPO / rel, dest / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, ignore=ignore)
        else:
            shutil.copy2(src, dst)
    return dest


def env_for(copy: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_JOB_ID", "PYTHONPATH")}
    env["PYTHONPATH"] = f"{copy / 'src'}{os.pathsep}{copy / 'cs336-basics'}"
    env["CS336_GPU_LOCK_DIR"] = str(copy / ".gpu-locks")
    env["MPLCONFIGDIR"] = str(copy / ".matplotlib")
    return env


def snakemake(copy: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(SNAKEMAKE), *args], cwd=copy, env=env_for(copy), capture_output=True, text=True,
                          timeout=timeout)


def job_stats(output: str) -> dict[str, int]:
    """The 'Job stats' table of a (dry) run: rule -> number of jobs."""
    lines = output.splitlines()
    start = lines.index("Job stats:")
    assert lines[start + 1].split() == ["job", "count"], lines[start:start + 3]
    stats = {}
    for line in lines[start + 3:]:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            break
        stats[parts[0]] = int(parts[1])
    total = stats.pop("total")
    assert sum(stats.values()) == total
    return stats


def planned_outputs(output: str) -> set[str]:
    return {p.strip() for line in output.splitlines() if line.strip().startswith("output:")
            for p in line.split(":", 1)[1].split(",")}


def _show(proc) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-6000:]}\n--- stderr\n{proc.stderr[-6000:]}"




def test_subprocesses_run_the_copy(tmp_path):
    copy = make_copy(tmp_path)
    probe = ("import cs336_systems, cs336_basics\n"
             "from cs336_systems.pipeline import sources\n"
             "print(cs336_systems.__file__, cs336_basics.__file__, sources._package_root('cs336_systems'),"
             " *sources.module_sources('cs336_systems.benchmark'), sep='\\n')")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=copy, env=env_for(copy), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    pkg_sys, pkg_basics, root, *inputs = proc.stdout.split("\n")[:-1]
    assert Path(pkg_sys) == copy / "src" / "cs336_systems" / "__init__.py"
    assert Path(pkg_basics) == copy / "cs336-basics" / "cs336_basics" / "__init__.py"
    assert Path(root) == copy / "src"
    assert inputs and all(not Path(p).is_absolute() and (copy / p).is_file() for p in inputs)


@pytest.mark.slow
def test_smoke_dag_completes(smoke):
    copy, proc, elapsed = smoke
    assert proc.returncode == 0, _show(proc)
    assert elapsed < SMOKE_LIMIT_S
    head = proc.stderr.splitlines()[:3]
    assert any("preset smoke" in line for line in head), head
    assert_smoke_outputs(copy)
    md = (copy / "writeup" / "smoke" / "writeup.md").read_text()
    assert "## A1." in md and "## A3." in md


@pytest.mark.slow
def test_every_report_writes_what_the_registry_declares(smoke):
    """A report writes nothing it does not declare: the files each leaves beside its records are
    exactly the registry's outputs for its ID (records, traces and other measured data sit in
    subfolders, which are the measuring jobs')."""
    from cs336_systems import deliverables

    copy, proc, _ = smoke
    assert proc.returncode == 0, _show(proc)
    for d in deliverables.DELIVERABLES:
        folder = copy / "results" / "smoke" / d.id
        written = {p.name for p in folder.iterdir() if p.is_file()}
        declared = {f for f in d.files if "/" not in f}
        assert written == declared, (d.id, written ^ declared)
        for pattern in (f for f in d.files if "{point}" in f):
            drawn = sorted(p.stem for p in (folder / pattern.split("/")[0]).iterdir())
            assert drawn == sorted(p.stem for p in (folder / "records").glob("*.json")), (d.id, drawn)

@pytest.mark.slow
def test_every_measuring_job_leaves_its_benchmark(smoke):
    """Snakemake's benchmark: beside each measuring job's log, and none for reports or the writeup
    (a rebuild from records on a CPU must not overwrite a GPU run's job times)."""
    from cs336_systems.pipeline import job_times

    copy, first, _ = smoke
    assert first.returncode == 0, _show(first)
    results = copy / "results" / "smoke"
    records = list(results.glob("*/records/**/*.json"))
    jobs = job_times.read_benchmarks(results)
    assert len(jobs) >= 20 and (jobs["s"] > 0).all()
    assert not [j for j in jobs["job"] if j.endswith(("report", "writeup"))]
    # Deliverables whose records another's job writes (C4's variants run in C3's job) have no benchmark of their own.
    from cs336_systems.deliverables import DELIVERABLES
    measured_elsewhere = {d.id for d in DELIVERABLES if not d.measures}
    assert {j.split("/")[0] for j in jobs["job"]} >= \
        {p.relative_to(results).parts[0] for p in records} - {"C9"} - measured_elsewhere


@pytest.mark.slow
def test_snakemake_log_reads_back_every_job_of_the_run(smoke):
    """pipeline.snakemake_log on this run's real console output: as many finished jobs as Snakemake
    counted steps, the benchmarked ones exactly the benchmark files, every report and the writeup
    among the others, and the elapsed time no less than the jobs' (to Snakemake's whole seconds)."""
    import re

    from cs336_systems.pipeline import job_times, snakemake_log

    copy, first, _ = smoke
    assert first.returncode == 0, _show(first)
    text = first.stdout + first.stderr
    (steps,) = set(re.findall(r"^(\d+) of \1 steps \(100%\) done$", text, re.M))
    jobs = snakemake_log.finished_jobs(text)
    assert len(jobs) == int(steps)
    benchmarks = job_times.read_benchmarks(copy / "results" / "smoke")
    assert int(jobs["benchmarked"].sum()) == len(benchmarks)
    others = set(jobs.loc[~jobs["benchmarked"], "rule"])
    assert {"writeup", "all"} <= others and all(r.endswith("_report") for r in others - {"writeup", "all"})
    assert snakemake_log.elapsed_seconds(text) >= jobs["s"].sum() - len(jobs)


@pytest.mark.slow
def test_second_run_has_nothing_to_do(smoke):
    copy, first, _ = smoke
    assert first.returncode == 0, _show(first)
    proc = snakemake(copy, "--cores", "2", "--config", "preset=smoke")
    assert proc.returncode == 0, _show(proc)
    assert "Nothing to be done" in proc.stdout + proc.stderr


@contextlib.contextmanager
def edited(target: Path):
    """``target`` with a comment appended (newer, different), put back byte for byte and time for time."""
    original, stat = target.read_bytes(), target.stat()
    try:
        time.sleep(0.05)
        with open(target, "a") as f:
            f.write("# an edit that changes nothing but the file\n")
        yield target
    finally:
        target.write_bytes(original)
        os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))


@pytest.mark.slow
def test_editing_the_benchmark_makes_only_a1_stale(smoke):
    copy, first, _ = smoke
    assert first.returncode == 0, _show(first)
    target = copy / "src" / "cs336_systems" / "benchmark.py"
    with edited(target):
        proc = snakemake(copy, "-n", "--cores", "2", "--config", "preset=smoke")
        assert proc.returncode == 0, _show(proc)
        out = proc.stdout + proc.stderr
        stats = job_stats(out)
        grid = yaml.safe_load((copy / "config.yaml").read_text())["presets"]["smoke"]["A1"]
        n_grid = len(grid["sizes"])          # one job per size: its points take turns
        n_study = len(grid["warmup_study"]["sizes"]) * len(grid["warmup_study"]["warmups"])
        # A4's full-vs-bf16 table and A2(a)'s comparison with A1's forward timing read A1 records,
        # so their reports rerun too; nothing else does.
        assert stats == {"A1_benchmark": n_grid, "A1_warmup_study": n_study, "A1_report": 1, "A2_report": 1,
                         "A4_report": 1, "writeup": 1, "all": 1}
        assert "src/cs336_systems/benchmark.py" in out          # the reason names the edited file
    proc = snakemake(copy, "-n", "--cores", "2", "--config", "preset=smoke")
    assert "Nothing to be done" in proc.stdout + proc.stderr, _show(proc)


@pytest.mark.slow
def test_editing_our_kernels_reruns_the_b5_rows_and_the_leaderboard(smoke):
    """A B5 row times every implementation in turns (a job is a comparison), so editing our kernels
    reruns each (dtype, d) row, writing every implementation's records again, and the leaderboard."""
    copy, first, _ = smoke
    assert first.returncode == 0, _show(first)
    target = copy / "src" / "cs336_systems" / "attention" / "flash_triton.py"
    with edited(target):
        proc = snakemake(copy, "-n", "--cores", "2", "--config", "preset=smoke")
        assert proc.returncode == 0, _show(proc)
        out = proc.stdout + proc.stderr
        b5 = yaml.safe_load((copy / "config.yaml").read_text())["presets"]["smoke"]["B5"]
        rows = {p for p in planned_outputs(out) if p.startswith("results/smoke/B5/records/")}
        assert "ours" in b5["impls"] and len(b5["impls"]) > 1
        assert rows == {f"results/smoke/B5/records/{i}_{t}_d{d}.json" for i in b5["impls"] for t in b5["dtypes"]
                        for d in b5["head_dims"]} | {"results/smoke/B5/records/leaderboard.json"}


def test_full_preset_plans_the_whole_grid(tmp_path):
    copy = make_copy(tmp_path)
    proc = snakemake(copy, "-n", "--config", "preset=full", "run=dryrun")
    assert proc.returncode == 0, _show(proc)
    out = proc.stdout + proc.stderr
    full = yaml.safe_load((copy / "config.yaml").read_text())["presets"]["full"]["A1"]
    grid = list(itertools.product(full["sizes"], full["contexts"], full["modes"], full["precisions"]))
    study = full["warmup_study"]
    points = list(itertools.product(study["sizes"], study["warmups"]))
    b5 = yaml.safe_load((copy / "config.yaml").read_text())["presets"]["full"]["B5"]
    rows = list(itertools.product(b5["impls"], b5["dtypes"], b5["head_dims"]))
    stats = job_stats(out)
    assert stats["A1_benchmark"] == len(full["sizes"])      # one job per size, one record per grid point
    assert stats["A1_warmup_study"] == len(points)
    b1 = yaml.safe_load((copy / "config.yaml").read_text())["presets"]["full"]["B1"]
    assert stats["B5_grid_row"] == len(b5["dtypes"]) * len(b5["head_dims"])     # the impls take turns in a row
    assert stats["B1_row"] == len(b1["head_dims"])                             # eager and compiled in turns
    # Every other rule runs once per run (a report, a single measurement, the writeup).
    presets = yaml.safe_load((copy / "config.yaml").read_text())["presets"]["full"]
    assert stats["C1_row"] == len(presets["C1"]["backends"]) * len(presets["C1"]["world_sizes"])
    from cs336_systems.distributed import variants
    ddp = presets["DDP"]["variants"]
    precisions = presets["DDP"]["precisions"]
    assert stats["C3_variants"] == len(precisions)          # every variant of a precision in one process group
    assert stats["A2_profile"] == len(presets["A2"]["sizes"]) * len(presets["A2"]["contexts"])
    assert stats["A5_snapshot"] == (len(presets["A5"]["contexts"]) * len(presets["A5"]["modes"])
                                    * len(presets["A5"]["precisions"]))
    assert stats["A6_checkpoint"] == 1                     # every group size in one job
    assert stats["B2_whole_model"] == len(presets["B2"]["sizes"]) * len(presets["B2"]["modes"])
    assert stats["A4_kernels"] == 1                         # one A1 point, fp32 and bf16 in one job
    e1 = presets["E1"]
    # a point's rungs and anchors in one job: the goal point's the whole ladder, every other point's the
    # rungs measured elsewhere beside the anchors
    goal = (e1["goal"]["size"], e1["goal"]["context"])
    e1_points = set(itertools.product(e1["sizes"], e1["contexts"])) | {goal}
    assert stats["E1_ladder"] == 1 and stats["E1_step"] == len(e1_points) - 1
    assert stats["E1_profile"] == len(e1["profiled"])           # at the goal point
    elsewhere = [r for r in e1["rungs"] if r in e1["rungs_elsewhere"]] + e1["anchors"]
    assert {p for p in planned_outputs(out) if p.startswith("results/dryrun/E1/records/")} == \
        {f"results/dryrun/E1/records/{s}_ctx{c}_{r}.json" for s, c in e1_points
         for r in (e1["rungs"] + e1["anchors"] if (s, c) == goal else elsewhere)}
    per_point = ("A1_benchmark", "A1_warmup_study", "B5_grid_row", "B1_row", "C1_row", "A2_profile",
                 "A5_snapshot", "A6_checkpoint", "B2_whole_model", "A4_kernels", "E1_step", "E1_profile",
                 "C3_variants")
    once = {k: v for k, v in stats.items() if k not in per_point}
    assert set(once.values()) == {1}, once
    from cs336_systems import deliverables
    # Every deliverable's report rule, named by its ID, runs once.
    assert {d.report_rule for d in deliverables.DELIVERABLES} | {
        "A4_dtypes", "A3_accumulation", "B3_checks", "B5_leaderboard", "writeup", "all"} <= set(once)
    for ident in variants.deliverables():                   # records land in the deliverable's own folder
        assert {p for p in planned_outputs(out) if p.startswith(f"results/dryrun/{ident}/records/")} == \
            {f"results/dryrun/{ident}/records/{variants.stem(v, p)}.json" for v in variants.of(ident, ddp) for p in precisions}
    planned = planned_outputs(out)
    assert {p for p in planned if p.startswith("results/dryrun/A1/records/")} == \
        {f"results/dryrun/A1/records/{s}_ctx{c}_{m}_{p}.json" for s, c, m, p in grid}
    assert {p for p in planned if p.startswith("results/dryrun/A1/warmup/")} == \
        {f"results/dryrun/A1/warmup/{s}_ctx{study['context']}_w{w}.json" for s, w in points}
    assert {p for p in planned if p.startswith("results/dryrun/B5/records/")} == \
        {f"results/dryrun/B5/records/{i}_{t}_d{d}.json" for i, t, d in rows} | {"results/dryrun/B5/records/leaderboard.json"}
    assert "writeup/dryrun/writeup.html" in planned
    assert not (copy / "results").exists()        # a dry run writes nothing


# None: the Snakefile's global `container:` directive (the Docker image) gives every rule its
# software environment, the one lint that was carried until the image existed.
ALLOWED_LINTS: set[str] = set()


def test_lint_is_clean_but_for_the_container(tmp_path):
    copy = make_copy(tmp_path)
    proc = snakemake(copy, "--lint", "--config", "preset=smoke")
    output = proc.stdout + proc.stderr
    found = {line.strip()[2:].rstrip(":") for line in output.splitlines() if line.strip().startswith("* ")}
    assert found <= ALLOWED_LINTS, "snakemake --lint:\n" + output


def _assert_one_line_config_error(proc, key):
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, _show(proc)
    assert "Traceback" not in out, out
    lines = [line for line in out.splitlines() if "config error at" in line]
    assert len(lines) == 1, out
    assert f"config error at {key}:" in lines[0], lines[0]
    return lines[0]


def test_unknown_preset_on_the_command_line(tmp_path):
    copy = make_copy(tmp_path)
    proc = snakemake(copy, "-n", "--config", "preset=fast")
    line = _assert_one_line_config_error(proc, "preset")
    assert "'fast'" in line and "smoke" in line and "full" in line


def test_negative_warmup_in_config_yaml(tmp_path):
    copy = make_copy(tmp_path)
    config = copy / "config.yaml"
    text = config.read_text()
    data = yaml.safe_load(text)
    data["presets"]["smoke"]["A1"]["warmup"] = -1
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = snakemake(copy, "-n", "--config", "preset=smoke")
    line = _assert_one_line_config_error(proc, "presets.smoke.A1.warmup")
    assert "-1" in line
    assert not (copy / "results").exists()


def test_traced_variant_that_is_not_measured(tmp_path):
    copy = make_copy(tmp_path)
    config = copy / "config.yaml"
    data = yaml.safe_load(config.read_text())
    data["presets"]["smoke"]["DDP"]["traced"] = ["naive", "bucketed-7"]
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = snakemake(copy, "-n", "--config", "preset=smoke")
    assert proc.returncode != 0
    assert "config error at presets.smoke.DDP.traced: 'bucketed-7' not in DDP.variants" in proc.stderr
    assert "Traceback" not in proc.stderr
