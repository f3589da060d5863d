"""cs336_systems.records: atomic JSON writes, record construction, provenance."""

import json
import random
import string

import pytest

from cs336_systems import records
from cs336_systems.records import STATUSES, make_record, provenance, read_record, write_json_atomic

PROVENANCE_KEYS = {"commit", "dirty", "host", "utc", "python", "torch", "cuda", "triton", "gpu", "gpu_count"}


def _random_payload(rng: random.Random) -> dict:
    word = lambda: "".join(rng.choices(string.ascii_letters + "±µ é", k=rng.randint(1, 12)))  # noqa: E731
    return {word(): [rng.random(), rng.randint(-10**9, 10**9), word(), None, rng.random() < 0.5]
            for _ in range(rng.randint(3, 10))}


def _leftovers(folder, name):
    return sorted(p.name for p in folder.iterdir() if p.name != name)


def test_write_json_atomic_round_trips_and_leaves_no_temp_file(tmp_path, seed):
    data = _random_payload(random.Random(seed))
    target = tmp_path / "deep" / "er" / "rec.json"          # missing parents are created
    assert write_json_atomic(target, data) == target
    assert json.loads(target.read_text()) == data
    assert _leftovers(target.parent, target.name) == []


def test_write_json_atomic_serialises_numpy_torch_scalars_and_paths(tmp_path):
    import numpy as np
    import torch

    data = {"np": np.float32(1.5), "npi": np.int64(7), "t": torch.tensor(2.25), "p": tmp_path / "x"}
    write_json_atomic(tmp_path / "r.json", data)
    assert json.loads((tmp_path / "r.json").read_text()) == {"np": 1.5, "npi": 7, "t": 2.25, "p": str(tmp_path / "x")}


def test_failed_dump_keeps_old_file_and_removes_temp_file(tmp_path, seed):
    target = tmp_path / "rec.json"
    old = _random_payload(random.Random(seed))
    write_json_atomic(target, old)
    before = target.read_bytes()
    with pytest.raises(TypeError, match="not JSON serialisable"):
        write_json_atomic(target, {"fine": 1, "bad": object()})
    assert target.read_bytes() == before
    assert json.loads(before) == old
    assert _leftovers(tmp_path, target.name) == []


def test_make_record_rejects_unknown_status():
    with pytest.raises(ValueError, match="status"):
        make_record("A1", {}, status="fine")
    with pytest.raises(ValueError):
        make_record("A1", {}, status="OK")       # case matters


@pytest.mark.parametrize("status", STATUSES)
def test_make_record_shape(status):
    params = {"size": "tiny", "context": random.randint(1, 999)}
    metrics = {"step": {"mean": random.random()}} if status == "ok" else None
    r = make_record("A1", params, status, metrics, reason="why" if status != "ok" else None)
    assert {"id", "params", "metrics", "status", "provenance"} <= r.keys()
    assert r["id"] == "A1" and r["params"] == params and r["status"] == status
    assert r["metrics"] == (metrics or {})


def test_skipped_record_gets_a_reason():
    assert make_record("A1", {}, "skipped", reason="needs 2 GPUs")["reason"] == "needs 2 GPUs"
    assert make_record("A1", {}, "skipped")["reason"]          # a default reason, never empty


@pytest.mark.parametrize("status", ["oom", "error"])
def test_oom_and_error_keep_their_message(status):
    msg = f"boom {random.random()}"
    assert make_record("A1", {}, status, reason=msg)["message"] == msg


def test_make_record_round_trips_through_read_record(tmp_path):
    r = make_record("A3", {"terms": [1, 10]}, "ok", {"rows": [{"value": 0.1}]})
    write_json_atomic(tmp_path / "r.json", r)
    assert read_record(tmp_path / "r.json") == r


def test_read_record_rejects_non_records(tmp_path):
    write_json_atomic(tmp_path / "x.json", {"id": "A1", "params": {}})
    with pytest.raises(ValueError, match="not a record"):
        read_record(tmp_path / "x.json")


def test_provenance_keys_and_values():
    import platform

    import torch

    p = provenance()
    assert PROVENANCE_KEYS <= p.keys()
    assert p["python"] == platform.python_version()
    assert p["torch"] == torch.__version__
    assert p["cuda"] == torch.version.cuda
    assert p["gpu_count"] == (torch.cuda.device_count() if torch.cuda.is_available() else 0)
    assert (p["gpu"] is None) == (not torch.cuda.is_available())
    assert p["utc"].endswith("+00:00")
    assert isinstance(p["commit"], str) and p["commit"]


def test_git_commit_env_override(monkeypatch):
    fake = "".join(random.choices("0123456789abcdef", k=40))
    monkeypatch.setenv("CS336_GIT_COMMIT", fake)
    monkeypatch.setenv("CS336_GIT_DIRTY", "1")
    p = make_record("A1", {}, "ok")["provenance"]
    assert p["commit"] == fake and p["dirty"] is True
    monkeypatch.setenv("CS336_GIT_DIRTY", "0")
    assert records.git_state() == {"commit": fake, "dirty": False}


def test_git_state_without_override_reads_the_checkout(monkeypatch):
    monkeypatch.delenv("CS336_GIT_COMMIT", raising=False)
    state = records.git_state()
    head = records._git("rev-parse", "HEAD")
    assert state["commit"] == (head if head is not None else "unknown")


def test_a_process_asks_git_and_nvidia_smi_once_for_all_its_records(monkeypatch):
    monkeypatch.delenv("CS336_GIT_COMMIT", raising=False)
    calls = []
    real_run = records.subprocess.run

    def counting_run(cmd, *args, **kwargs):
        calls.append(cmd[0])
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(records.subprocess, "run", counting_run)
    records._checkout_state.cache_clear()
    records._driver_version.cache_clear()
    first = [make_record("B5", {"seq": s}, "ok")["provenance"] for s in range(5)]
    asked = len(calls)
    assert asked <= 3                  # git rev-parse, git status, nvidia-smi where there is one
    assert {p["commit"] for p in first} == {first[0]["commit"]}
    make_record("B5", {"seq": 6}, "ok")
    assert len(calls) == asked


@pytest.mark.parametrize("damage", ["cut", "not-json", "not-a-list"])
def test_a_damaged_record_names_its_file(tmp_path, damage):
    path = tmp_path / "row.json"
    write_json_atomic(path, [make_record("B1", {"seq": 64}, "ok", {"ms": random.Random(3).random()})])
    text = path.read_text()
    path.write_text({"cut": text[: len(text) // 2], "not-json": "\x00\xff", "not-a-list": "{}"}[damage])
    with pytest.raises(records.DamagedRecord) as info:
        records.read_record_list(path)
    assert info.value.path == path and str(path) in str(info.value)
