"""C's jobs across two nodes of a real Slurm started here (two_nodes.TwoNodeSlurm: two slurmd, each
in its own network namespace at its own address, one slurmctld, MUNGE), through the Slurm profile.

``snakemake --profile profiles/slurm --config preset=smoke 'launch={nodes: 2}'`` runs the smoke
preset's C1 Gloo rows at world 2 and 4 (one and two ranks a node) and the data-parallel job of fp32
(C3_variants) with srun across both nodes; their records must say so, and C1's all-reduce sums must be
right. Then an sbatch job whose srun starts the toy DDP check on both nodes: every wrapper's weights
must end as PyTorch DDP's do in the same ranks.

Needs what test_slurm_smoke needs and Linux network namespaces (``ip netns``, a bridge, ``nsenter``,
``unshare``); ``.ci/setup-slurm.sh`` installs it. Without them the test is skipped, except under CI
(``CI=true``), where it fails.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from workflow.test_snakemake import SNAKEMAKE, _show, env_for, make_copy

from .test_slurm_smoke import PROFILE, _unmet
from .two_nodes import TwoNodeSlurm, netns_unmet

pytestmark = pytest.mark.slow

RUN_LIMIT_S = 900
JOB_LIMIT_S = 300
HERE = Path(__file__).resolve().parent
C1_ROWS = {2: 1, 4: 2}      # world size -> ranks a node on two nodes
C3_TARGET = "results/smoke/C3/records/torch-ddp_fp32.json"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    unmet = _unmet()
    unmet += netns_unmet() if not any("root" in u for u in unmet) else []
    if unmet:
        reason = "a two-node Slurm cannot be started: " + "; ".join(unmet) + " (bash .ci/setup-slurm.sh installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    munge_dir = Path(tempfile.mkdtemp(prefix="cs336-munge-"))     # munged cannot enter pytest's tmp folders
    two = TwoNodeSlurm(tmp_path_factory.mktemp("slurm2"), munge_dir)
    try:
        two.write_config()
        two.start()
        yield two
    finally:
        two.stop()
        shutil.rmtree(munge_dir, ignore_errors=True)


def _env(cluster, copy: Path) -> dict[str, str]:
    env = {k: v for k, v in env_for(copy).items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_"))}
    env.update(PATH=cluster.env["PATH"], SLURM_CONF=cluster.env["SLURM_CONF"])
    return env


@pytest.fixture(scope="module")
def c_run(cluster, tmp_path_factory):
    copy = make_copy(tmp_path_factory.mktemp("repo"))
    targets = [f"results/smoke/C1/records/gloo_x{w}.json" for w in C1_ROWS] + [C3_TARGET]
    command = ["timeout", "-s", "KILL", str(RUN_LIMIT_S), str(SNAKEMAKE), "--profile", PROFILE,
               "--config", "preset=smoke", "launch={nodes: 2}",
               "--slurm-init-seconds-before-status-checks", "2", *targets]
    start = time.monotonic()
    proc = subprocess.run(command, cwd=copy, env=_env(cluster, copy), capture_output=True, text=True,
                          timeout=RUN_LIMIT_S + 30)
    return copy, proc, time.monotonic() - start


def _explain(cluster, proc, copy: Path | None = None) -> str:
    logs = ""
    if copy is not None:
        for log in sorted((copy / "results" / "smoke" / "logs").rglob("*.log")):
            logs += f"\n--- {log.relative_to(copy)}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-30:])
    return _show(proc) + logs + "\n" + cluster.logs()


def test_c1_rows_ran_across_both_nodes(cluster, c_run):
    copy, proc, elapsed = c_run
    assert proc.returncode == 0, _explain(cluster, proc, copy)
    assert "srun --nodes 2 --ntasks-per-node 1" in proc.stdout + proc.stderr
    for world, per_node in C1_ROWS.items():
        records = json.loads((copy / f"results/smoke/C1/records/gloo_x{world}.json").read_text())
        assert records and all(r["status"] == "ok" for r in records), records
        for r in records:
            m = r["metrics"]
            # every rank's rank + 1 all-reduced to n(n+1)/2 before the timed calls (allreduce_bench)
            assert m["sum_checked"] and len(m["per_rank_median_ms"]) == world
            assert m["launch"] == {"launcher": "srun", "hosts": cluster.nodes, "nodes": 2,
                                   "ranks_per_node": per_node}, m["launch"]


def test_the_data_parallel_job_ran_across_both_nodes(cluster, c_run):
    copy, proc, _ = c_run
    assert proc.returncode == 0, _explain(cluster, proc, copy)
    records = [json.loads(p.read_text()) for p in (copy / "results/smoke").glob("C*/records/*_fp32.json")
               if not p.parent.parent.name == "C1"]
    assert len(records) > 5
    for r in records:
        assert r["status"] == "ok", r
        assert r["metrics"]["launch"] == {"launcher": "srun", "hosts": cluster.nodes, "nodes": 2,
                                          "ranks_per_node": 1}, r["metrics"]["launch"]
    # each job asked Slurm for the two nodes and ran its steps on them
    logs = copy / "results" / "slurm-logs"
    for rule in ("rule_C1_row", "rule_C3_variants"):
        for log in (logs / rule).rglob("*.log"):
            job = dict(f.split("=", 1) for f in cluster._run("scontrol", "-o", "show", "job", log.stem).stdout.split()
                       if "=" in f)
            assert job["NumNodes"] == "2" and job["JobState"] == "COMPLETED", job


def test_every_wrapper_matches_pytorch_ddp_across_nodes(cluster, tmp_path):
    """The toy DDP check of tests/distributed/test_ddp.py, one srun task a node: weights equal
    PyTorch DDP's in the same ranks, on both ranks."""
    out = tmp_path / "ddp.out"
    script = f"srun --nodes 2 --ntasks-per-node 1 --kill-on-bad-exit=1 {sys.executable} {HERE / 'ddp_across_nodes.py'}"
    submitted = cluster._run("sbatch", "--parsable", "--nodes", "2", "--ntasks-per-node", "1", "-c", "2",
                             "-t", "10", "-o", str(out), "--wrap", script)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip().split(";")[0]
    deadline = time.monotonic() + JOB_LIMIT_S
    state = ""
    while time.monotonic() < deadline:
        state = cluster._run("squeue", "-h", "-j", job_id, "-t", "all", "-o", "%T").stdout.strip()
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"):
            break
        time.sleep(1)
    text = out.read_text() if out.exists() else ""
    assert state == "COMPLETED", f"{state}\n{text}\n{cluster.logs()}"
    found = json.loads(next(line for line in text.splitlines() if line.startswith("{")))
    assert found["launch"] == {"launcher": "srun", "hosts": cluster.nodes, "nodes": 2, "ranks_per_node": 1}
    # test_ddp's tolerance (TIGHT's atol): the same arithmetic in the same ranks
    far = {name: apart for name, apart in found["apart"].items() if max(apart) > 1e-6}
    assert found["apart"] and not far, far
