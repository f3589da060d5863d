"""cs336_systems.pipeline.gpu_lease: picks free devices from the pool, exclusively, in subprocesses."""

import fcntl
import os
import subprocess
import sys
import time

import pytest

LEASE = [sys.executable, "-m", "cs336_systems.pipeline.gpu_lease"]
PRINT_DEVICES = [sys.executable, "-c", "import os; print(os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>'))"]


@pytest.fixture
def env(tmp_path):
    e = {k: v for k, v in os.environ.items() if k != "SLURM_JOB_ID"}
    e.update(CUDA_VISIBLE_DEVICES="0,1", CS336_GPU_LOCK_DIR=str(tmp_path / "locks"))
    return e


def _lease(gpus, command, env, timeout=60):
    return subprocess.run([*LEASE, "--gpus", str(gpus), "--", *command], env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_one_gpu_of_the_pool(env):
    proc = _lease(1, PRINT_DEVICES, env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() in {"0", "1"}
    assert f"CUDA_VISIBLE_DEVICES={proc.stdout.strip()}" in proc.stderr


def test_two_gpus(env):
    proc = _lease(2, PRINT_DEVICES, env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0,1"


def test_concurrent_leases_get_different_devices(env, tmp_path):
    child = ("import os, sys, time; t0 = time.time(); time.sleep(1.5); "
             "open(sys.argv[1], 'w').write(f\"{os.environ['CUDA_VISIBLE_DEVICES']} {t0} {time.time()}\")")
    outs = [tmp_path / f"dev{i}.txt" for i in range(2)]
    procs = [subprocess.Popen([*LEASE, "--gpus", "1", "--", sys.executable, "-c", child, str(out)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for out in outs]
    for p in procs:
        p.wait(timeout=60)
        assert p.returncode == 0, p.stderr.read()
    (dev_a, start_a, end_a), (dev_b, start_b, end_b) = (out.read_text().split() for out in outs)
    assert sorted([dev_a, dev_b]) == ["0", "1"]
    # Two free devices: both held at the same time, not one after the other.
    assert float(start_a) < float(end_b) and float(start_b) < float(end_a)


def test_lease_waits_for_a_held_device(env, tmp_path):
    lock_dir = tmp_path / "locks"
    lock_dir.mkdir()
    with open(lock_dir / "gpu0.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)       # another job holds GPU 0
        one = _lease(1, PRINT_DEVICES, env)
        assert one.returncode == 0 and one.stdout.strip() == "1"
        two = subprocess.Popen([*LEASE, "--gpus", "2", "--", *PRINT_DEVICES], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1.5)
        assert two.poll() is None             # still waiting for GPU 0
    out, err = two.communicate(timeout=30)    # GPU 0 released: it goes on
    assert two.returncode == 0, err
    assert out.strip() == "0,1"
    assert "waiting" in err


def test_more_gpus_than_the_pool(env):
    proc = _lease(3, PRINT_DEVICES, env)
    assert proc.returncode == 2
    assert proc.stdout == ""                  # the command never ran
    assert "needs 3 GPUs" in proc.stderr and "shows 2" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_up_to_leases_what_the_pool_has(env):
    proc = subprocess.run([*LEASE, "--gpus", "6", "--up-to", "--", *PRINT_DEVICES], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0,1"


def test_no_gpus_runs_the_command_unchanged(env):
    env["CUDA_VISIBLE_DEVICES"] = ""
    proc = _lease(1, PRINT_DEVICES, env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""          # the environment passed through untouched
    env["CUDA_VISIBLE_DEVICES"] = "-1"
    assert _lease(2, PRINT_DEVICES, env).stdout.strip() == "-1"


@pytest.mark.parametrize("code", [0, 3, 17])
def test_exit_code_passes_through(env, code):
    assert _lease(1, [sys.executable, "-c", f"raise SystemExit({code})"], env).returncode == code
    env["CUDA_VISIBLE_DEVICES"] = ""
    assert _lease(1, [sys.executable, "-c", f"raise SystemExit({code})"], env).returncode == code


def test_under_slurm_the_command_runs_directly(env):
    env["SLURM_JOB_ID"] = "12345"
    env["CUDA_VISIBLE_DEVICES"] = "3"
    proc = _lease(2, PRINT_DEVICES, env)      # more than the pool: Slurm decided, not us
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "3"
    assert "gpu_lease" not in proc.stderr


def test_missing_command(env):
    proc = subprocess.run([*LEASE, "--gpus", "1"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "no command given" in proc.stderr
