"""The smoke DAG through the Slurm profile, on a real one-node Slurm started on this machine.

The test brings up MUNGE, slurmctld and slurmd by hand, with every config, key, socket, state and
log file in temporary folders: ``SLURM_CONF`` and ``-f`` point the daemons and the clients at the
test's slurm.conf, munged gets its own key and socket, and nothing under /etc is used or written. The
node has two fake GPUs, so ``gpu=1`` jobs really ask Slurm for a GPU. Then it runs
``snakemake --profile profiles/slurm --config preset=smoke`` in a copy of the repository
and checks that every job went through ``sbatch``. The daemons are stopped by PID afterwards.

Needs root (slurmd), Debian's ``slurm-wlm`` and ``munge``, and the ``slurm`` extra: ``.ci/setup-slurm.sh``
installs them. Without them the test is skipped, except under CI (``CI=true``), where it fails.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from workflow.test_snakemake import SNAKEMAKE, _show, assert_smoke_outputs, env_for, job_stats, make_copy

pytestmark = pytest.mark.slow

PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
DAEMONS = ["munged", "slurmctld", "slurmd"]
CLIENTS = ["sbatch", "srun", "squeue", "sinfo", "scontrol", "scancel", "timeout"]
PROFILE = "profiles/slurm"
RUN_LIMIT_S = 900          # `timeout -s KILL`: the plugin ignores SIGTERM while it polls (smoke DAG: ~60 jobs)
UP_LIMIT_S = 60            # until the node is idle
# Node size as slurm.conf declares it (SlurmdParameters=config_overrides: the machine may be
# smaller). Large enough for the profile's default mem_mb / cpus_per_task, so the test runs the
# profile's resource requests unchanged: C1's 4 ranks are 4 srun tasks of cpus_per_task 4 on the node.
NODE_CPUS, NODE_MEM_MB, NODE_GPUS = 16, 65536, 2


def _tool(name: str) -> str | None:
    return shutil.which(name, path=PATH)


def _unmet() -> list[str]:
    unmet = [f"`{name}` not found" for name in DAEMONS + CLIENTS if _tool(name) is None]
    if os.name != "posix" or os.geteuid() != 0:
        unmet.append("not running as root (slurmd must)")
    try:
        pwd.getpwnam("munge")
    except KeyError:
        unmet.append("no `munge` user (Debian's munge package creates it)")
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        unmet.append("snakemake-executor-plugin-slurm is not installed (pip install -e '.[slurm]')")
    if not SNAKEMAKE.exists():
        unmet.append(f"no snakemake next to the test's Python ({SNAKEMAKE})")
    return unmet


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# What the one-node and the two-node clusters' slurm.conf share: root daemons authenticated by MUNGE,
# and a scheduler with no accounting, mail or process tracking beyond what a test needs.
ROOT_MUNGE_CONF = ("SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge", "CredType=cred/munge")
DAEMON_CONF = ("SlurmctldDebug=info", "SlurmdDebug=info", "SchedulerType=sched/backfill",
               "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core", "ProctrackType=proctrack/linuxproc",
               "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
               "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/none", "MpiDefault=none",
               "MailProg=/bin/true")


class LocalSlurm:
    """munged + slurmctld + slurmd on localhost; every file under ``conf_dir`` and ``munge_dir``."""

    def __init__(self, conf_dir: Path, munge_dir: Path):
        self.conf_dir, self.munge_dir = conf_dir, munge_dir
        self.node = socket.gethostname().split(".")[0]
        self.conf = conf_dir / "slurm.conf"
        self.socket = munge_dir / "munge.socket"
        self.procs: dict[str, subprocess.Popen] = {}
        self.shims = conf_dir / "bin"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_"))}
        self.env.update(PATH=os.pathsep.join([str(self.shims), PATH]), SLURM_CONF=str(self.conf))

    # ---- configuration ---------------------------------------------------------------------
    def write_config(self) -> None:
        for sub in ("state", "spool"):
            (self.conf_dir / sub).mkdir(parents=True, exist_ok=True)
        d = self.conf_dir
        self.conf.write_text("\n".join([
            "ClusterName=cs336test",
            f"SlurmctldHost={self.node}(127.0.0.1)",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            *ROOT_MUNGE_CONF,
            f"AuthInfo=socket={self.socket}",
            f"StateSaveLocation={d / 'state'}",
            f"SlurmdSpoolDir={d / 'spool'}",
            f"SlurmctldPidFile={d / 'slurmctld.pid'}",
            f"SlurmdPidFile={d / 'slurmd.pid'}",
            f"SlurmctldLogFile={d / 'slurmctld.log'}",
            f"SlurmdLogFile={d / 'slurmd.log'}",
            *DAEMON_CONF,
            # Finished jobs stay visible to squeue (the profile's status command) for longer than the
            # whole run may take, so the test can still see the first job finished at the end.
            f"MinJobAge={2 * RUN_LIMIT_S}",
            "ReturnToService=2",
            "SlurmdParameters=config_overrides",
            "GresTypes=gpu",
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={NODE_CPUS} RealMemory={NODE_MEM_MB}"
            f" Gres=gpu:{NODE_GPUS} State=UNKNOWN",
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
            "",
        ]))
        # Inside a job the plugin runs `srun` with every SLURM_* variable removed, SLURM_CONF too, so
        # srun would look for /etc/slurm/slurm.conf, which a real cluster has and this one must not
        # touch. A shim first on PATH puts SLURM_CONF back and runs the real srun.
        self.shims.mkdir(exist_ok=True)
        shim = self.shims / "srun"
        shim.write_text(f'#!/bin/sh\nSLURM_CONF={self.conf} exec {_tool("srun")} "$@"\n')
        shim.chmod(0o755)
        # GPUs need File= (real character devices), or slurmd drops them and the node drains.
        devices = ["/dev/null", "/dev/zero"][:NODE_GPUS]
        (d / "gres.conf").write_text("".join(f"NodeName={self.node} Name=gpu File={dev}\n" for dev in devices))

    # ---- daemons ---------------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str], **kwargs) -> None:
        log = open(self.conf_dir / f"{name}.out", "w")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                            start_new_session=True, **kwargs)
        log.close()

    def start(self) -> None:
        self.start_controller()
        self._spawn("slurmd", [_tool("slurmd"), "-D", "-f", str(self.conf), "-N", self.node], cwd=self.conf_dir)
        self._wait(lambda: self.node_state() == "idle", UP_LIMIT_S, "the node did not become idle")

    def start_controller(self) -> None:
        """munged, with the test's own key, and slurmctld, answering."""
        munge = pwd.getpwnam("munge")
        self.munge_dir.chmod(0o755)         # munged: clients must reach its socket
        os.chown(self.munge_dir, munge.pw_uid, munge.pw_gid)
        key = self.munge_dir / "munge.key"           # the test's own key; /etc/munge is left alone
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        os.chown(key, munge.pw_uid, munge.pw_gid)
        self._spawn("munged", [_tool("munged"), "--foreground", f"--key-file={key}", f"--socket={self.socket}",
                               f"--pid-file={self.munge_dir / 'munged.pid'}", f"--log-file={self.munge_dir / 'munged.log'}",
                               f"--seed-file={self.munge_dir / 'munged.seed'}"],
                    user=munge.pw_uid, group=munge.pw_gid, extra_groups=[], cwd=self.munge_dir)
        self._wait(lambda: self.socket.exists(), 15, "munged did not create its socket")
        self._spawn("slurmctld", [_tool("slurmctld"), "-D", "-f", str(self.conf)], cwd=self.conf_dir)
        self._wait(lambda: self._run("scontrol", "ping").stdout.count("UP") > 0, 30, "slurmctld did not answer")

    def _wait(self, ready, limit_s: float, what: str) -> None:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            dead = [n for n, p in self.procs.items() if p.poll() is not None]
            if dead:
                raise RuntimeError(f"{', '.join(dead)} exited while starting Slurm\n{self.logs()}")
            if ready():
                return
            time.sleep(0.5)
        raise RuntimeError(f"{what} within {limit_s} s\n{self.logs()}")

    def _run(self, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess:
        try:
            return subprocess.run([_tool(argv[0]), *argv[1:]], env=self.env, capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired as e:
            return subprocess.CompletedProcess(e.cmd, 124, "", f"timed out after {timeout} s")

    def node_state(self) -> str:
        return self._run("sinfo", "-h", "-N", "-n", self.node, "-o", "%T").stdout.strip()

    def logs(self, tail: int = 40) -> str:
        parts = []
        for path in [*sorted(self.conf_dir.glob("*.log")), *sorted(self.conf_dir.glob("*.out")),
                     self.munge_dir / "munged.log"]:
            if path.exists():
                lines = path.read_text(errors="replace").splitlines()[-tail:]
                parts.append(f"--- {path.name}\n" + "\n".join(lines))
        return "\n".join(parts)

    def stop(self) -> None:
        """Cancel what is left of our jobs, then stop the daemons this object started, by PID."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            live = self._run("squeue", "-h", "-t", "PENDING,RUNNING,COMPLETING,CONFIGURING,SUSPENDED", "-o", "%i")
            ids = live.stdout.split()
            if ids:
                self._run("scancel", *ids)
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and self._run(
                        "squeue", "-h", "-t", "PENDING,RUNNING,COMPLETING,CONFIGURING", "-o", "%i").stdout.strip():
                    time.sleep(1)
        # Each running slurmstepd (one per job step) has a socket in our spool folder; let them end.
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and list((self.conf_dir / "spool").glob(f"{self.node}_*")):
            time.sleep(0.5)
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    unmet = _unmet()
    if unmet:
        reason = "a local Slurm cannot be started: " + "; ".join(unmet) + " (bash .ci/setup-slurm.sh installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    # munged runs as the munge user, which cannot enter pytest's private tmp folders.
    munge_dir = Path(tempfile.mkdtemp(prefix="cs336-munge-"))
    cluster = LocalSlurm(tmp_path_factory.mktemp("slurm"), munge_dir)
    try:
        cluster.write_config()
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(munge_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def slurm_run(slurm, tmp_path_factory):
    copy = make_copy(tmp_path_factory.mktemp("repo"))
    env = {k: v for k, v in env_for(copy).items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_"))}
    env.update(PATH=slurm.env["PATH"], SLURM_CONF=slurm.env["SLURM_CONF"])
    command = ["timeout", "-s", "KILL", str(RUN_LIMIT_S), str(SNAKEMAKE), "--profile", PROFILE,
               "--config", "preset=smoke",
               # The plugin waits 40 s before its first status check; a small local cluster needs less.
               "--slurm-init-seconds-before-status-checks", "2"]
    start = time.monotonic()
    proc = subprocess.run(command, cwd=copy, env=env, capture_output=True, text=True, timeout=RUN_LIMIT_S + 30)
    return copy, proc, time.monotonic() - start


def _explain(slurm, proc) -> str:
    return _show(proc) + "\n" + slurm.logs()


def test_smoke_dag_runs_through_sbatch(slurm, slurm_run):
    copy, proc, elapsed = slurm_run
    assert proc.returncode == 0, _explain(slurm, proc)
    out = proc.stdout + proc.stderr
    assert "preset smoke" in out
    assert elapsed < RUN_LIMIT_S

    assert_smoke_outputs(copy)

    # Every job of the DAG but `all` (which runs nothing) was one sbatch, and its ID is in the log.
    submitted = dict(re.findall(r"Job (\d+) has been submitted with SLURM jobid (\d+)", out))
    stats = job_stats(out)
    stats.pop("all", None)
    assert len(submitted) == sum(stats.values()), out
    slurm_ids = set(submitted.values())
    assert len(slurm_ids) == len(submitted)

    # Slurm knows them all, as finished (MinJobAge keeps them listed), and wrote a log for each
    # in the profile's log folder.
    states = dict(line.split() for line in slurm._run("squeue", "-h", "-t", "all", "-o", "%i %T").stdout.splitlines())
    assert {i: states.get(i) for i in slurm_ids} == {i: "COMPLETED" for i in slurm_ids}, states
    logs = {p.stem: p for p in (copy / "results" / "slurm-logs").rglob("*.log")}
    assert slurm_ids <= set(logs), sorted(logs)


def _job_fields(slurm, job_id: str) -> dict[str, str]:
    text = slurm._run("scontrol", "-o", "show", "job", job_id).stdout
    return dict(field.split("=", 1) for field in text.split() if "=" in field)


def test_gpu_rules_got_gpus_from_slurm(slurm, slurm_run):
    """`resources: gpu=1` became `sbatch --gpus=1` on one node; the rules without it asked for none."""
    copy, proc, _ = slurm_run
    assert proc.returncode == 0, _explain(slurm, proc)
    logs = copy / "results" / "slurm-logs"
    gpu_jobs = [p.stem for rule in ("rule_A1_benchmark", "rule_A1_warmup_study") for p in (logs / rule).rglob("*.log")]
    other_jobs = [p.stem for rule in ("rule_A3_accumulation", "rule_A1_report", "rule_A3_report", "rule_writeup")
                  for p in (logs / rule).rglob("*.log")]
    assert gpu_jobs and other_jobs
    for job_id in gpu_jobs:
        job = _job_fields(slurm, job_id)
        assert re.fullmatch(r"(gres:)?gpu:1", job.get("TresPerJob", "")), job
        assert job["NumNodes"] == "1", job
    for job_id in other_jobs:
        job = _job_fields(slurm, job_id)
        assert "gpu" not in job.get("TresPerJob", ""), job
