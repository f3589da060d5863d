"""distributed.ranks: where a rank stands, read from torchrun's or srun's environment, and a job's
ranks run under torchrun (Gloo) with what they return gathered to rank 0."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cs336_systems.distributed import ranks
from cs336_systems.distributed.ranks import Launch, LaunchError, expand_hostlist, from_environment

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize("hostlist, hosts", [
    ("node1", ["node1"]),
    ("a,b", ["a", "b"]),
    ("gpu[01-03,07]", ["gpu01", "gpu02", "gpu03", "gpu07"]),
    ("gpu[8-10],login", ["gpu8", "gpu9", "gpu10", "login"]),
    ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
    ("10.0.0.[1-2]", ["10.0.0.1", "10.0.0.2"]),
])
def test_slurm_host_lists_expand_in_order(hostlist, hosts):
    assert expand_hostlist(hostlist) == hosts


@pytest.mark.parametrize("bad", ["gpu[01-", "gpu]", "gpu[a-b]", "gpu[3-1]", ""])
def test_a_host_list_that_cannot_be_read_says_so_in_one_line(bad):
    with pytest.raises(LaunchError) as info:
        expand_hostlist(bad)
    assert "\n" not in str(info.value)


TORCHRUN = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "x"}
SRUN = {"SLURM_PROCID": "2", "SLURM_STEP_NUM_TASKS": "4", "SLURM_LOCALID": "0", "SLURM_NTASKS": "4",
        "SLURM_STEP_NODELIST": "node[1-2]", "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_JOB_ID": "1234",
        "SLURM_STEP_ID": "0"}


def test_torchrun_s_environment():
    launch = from_environment(TORCHRUN)
    assert (launch.launcher, launch.rank, launch.world_size, launch.local_rank) == ("torchrun", 3, 4, 1)
    assert launch.init_method == "tcp://10.1.2.3:29500"


def test_srun_s_environment_puts_the_rendezvous_on_the_step_s_first_host():
    launch = from_environment(SRUN)
    assert (launch.launcher, launch.rank, launch.world_size, launch.local_rank) == ("srun", 2, 4, 0)
    assert launch.hosts == ("node1", "node2") and launch.master_addr == "node1"
    # every task of the step derives the same port; another step of the job gets another
    assert launch.master_port == ranks.srun_port(1234, 0) == from_environment(SRUN | {"SLURM_PROCID": "0"}).master_port
    assert ranks.srun_port(1234, 1) != launch.master_port
    assert from_environment(SRUN | {"MASTER_PORT": "4242"}).master_port == 4242
    assert launch.as_dict()["nodes"] == 2


def test_a_batch_script_s_own_shell_is_no_rank_and_nothing_set_is_none():
    assert from_environment(SRUN | {"SLURM_STEP_ID": "batch"}) is None
    assert from_environment({k: v for k, v in SRUN.items() if k != "SLURM_STEP_ID"}) is None
    assert from_environment({}) is None


@pytest.mark.parametrize("env, missing", [
    ({k: v for k, v in TORCHRUN.items() if k != "MASTER_PORT"}, "MASTER_PORT"),
    ({k: v for k, v in SRUN.items() if k != "SLURM_STEP_NODELIST"}, "SLURM_STEP_NODELIST"),
    (TORCHRUN | {"RANK": "four"}, "'four' is not a number"),
    (TORCHRUN | {"RANK": "4"}, "rank 4 of 4"),
])
def test_a_launcher_s_environment_in_part_is_one_line_naming_what_is_wrong(env, missing):
    with pytest.raises(LaunchError, match=missing):
        from_environment(env)


def test_an_ipv6_rendezvous_is_bracketed():
    assert Launch("torchrun", 0, 1, 0, "fe80::1", 1, ("h",)).init_method == "tcp://[fe80::1]:1"


def _torchrun(tmp_path, nproc, **env):
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
               str(HERE / "launched_job.py")]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=240,
                          env=os.environ | {"OMP_NUM_THREADS": "1"} | env)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@pytest.mark.slow
def test_under_torchrun_every_rank_s_value_reaches_rank_0_in_rank_order(tmp_path):
    (out,) = _torchrun(tmp_path, 3)
    assert [g["rank"] for g in out["gathered"]] == [0, 1, 2]
    assert all(g["sum"] == 1 + 2 + 3 and g["world_size"] == 3 for g in out["gathered"])
    assert out["launch"]["launcher"] == "torchrun" and out["launch"]["world_size"] == 3


@pytest.mark.slow
@pytest.mark.parametrize("fail_rank", [1, 0])
def test_under_torchrun_a_rank_that_raises_ends_every_rank_at_once_and_rank_0_records_it(tmp_path, fail_rank):
    """The others wait in an all-reduce the failed rank never joins; they end without waiting for
    its 60 s limit, and rank 0 hands the failure, named by its rank, to the job's recorder."""
    start = time.monotonic()
    (line,) = _torchrun(tmp_path, 2, FAIL_RANK=str(fail_rank))
    assert line == {"failed_rank": fail_rank, "detail": f"RuntimeError: rank {fail_rank} was told to fail"}
    assert time.monotonic() - start < 50


@pytest.mark.slow
def test_tasks_given_srun_s_environment_find_each_other(tmp_path):
    """What srun gives two tasks of one step on one host, set by hand: they meet on the first host."""
    env = os.environ | {"OMP_NUM_THREADS": "1", "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NODELIST": "localhost",
                        "SLURM_JOB_ID": str(os.getpid()), "SLURM_STEP_ID": "0", "SLURM_LOCALID": "0"}
    procs = [subprocess.Popen([sys.executable, str(HERE / "launched_job.py")], cwd=tmp_path, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=env | {"SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank)})
             for rank in range(2)]
    outs = [p.communicate(timeout=240) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outs]
    (first,) = [json.loads(line) for line in outs[0][0].splitlines() if line.startswith("{")]
    assert [g["sum"] for g in first["gathered"]] == [3.0, 3.0]
    assert first["launch"]["launcher"] == "srun" and first["launch"]["hosts"] == ["localhost"]
    assert outs[1][0].strip() == ""
