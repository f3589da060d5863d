"""pipeline.run_folder (whose a run folder is, its damaged records) and pipeline.machine (the GPUs a
job gets here), on folders of records written by records.make_record and a fake nvidia-smi."""
from __future__ import annotations

import json

import pytest

from cs336_systems.pipeline import machine, run_folder
from fake_gpus import fake_nvidia_smi
from cs336_systems.records import make_record, write_json_atomic


def _record(folder, ident, name, gpu):
    record = make_record(ident, {"point": name})
    record["provenance"].update(gpu=gpu, gpu_count=1 if gpu else 0)
    return write_json_atomic(folder / ident / "records" / f"{name}.json", record)


def test_an_empty_folder_has_no_owner(tmp_path):
    found = run_folder.scan(tmp_path / "results" / "new")
    assert found.records == 0 and run_folder.identity(tmp_path / "results" / "new", found) is None
    assert run_folder.conflict("results/new", None, "smoke", "CPU") is None


def test_an_older_folder_is_read_from_its_records(tmp_path):
    gpu_run, cpu_run = tmp_path / "h200", tmp_path / "smoke"
    _record(gpu_run, "A1", "a", "NVIDIA H200")
    _record(gpu_run, "C9", "c9", None)          # a closed-form record made on the CPU of the same run
    write_json_atomic(gpu_run / "C1" / "records" / "nccl_x2.json",
                      [make_record("C1", {"world": 2}) | {"provenance": {"gpu": "NVIDIA H200", "gpu_count": 2}}])
    _record(cpu_run, "A1", "a", None)
    assert run_folder.identity(gpu_run, run_folder.scan(gpu_run)) == run_folder.Identity("full", "NVIDIA H200")
    assert run_folder.identity(cpu_run, run_folder.scan(cpu_run)) == run_folder.Identity("smoke", "CPU")
    assert run_folder.scan(gpu_run).records == 3


def test_an_archive_says_what_it_is_and_is_kept_from_every_command(tmp_path):
    folder = tmp_path / "results" / "old"
    _record(folder, "A1", "a", "NVIDIA H100 80GB HBM3")
    assert run_folder.claim(folder, run_folder.Identity("full", "NVIDIA H100 80GB HBM3"))
    assert "archive" not in json.loads((folder / "run.json").read_text())        # a live run's file has none
    assert run_folder.archived(folder, run_folder.identity(folder, run_folder.scan(folder))) is None
    (folder / "run.json").write_text(json.dumps({"preset": "full", "device": "NVIDIA H100 80GB HBM3",
                                                 "archive": "measured on one H100 at abc; not re-measured"}))
    held = run_folder.identity(folder, run_folder.scan(folder))
    assert held.archive == "measured on one H100 at abc; not re-measured"
    line = run_folder.archived(folder, held)
    assert "is an archive (measured on one H100 at abc; not re-measured)" in line and "writeup/old/" in line
    assert "\n" not in line


def test_the_identity_file_wins_and_is_written_once(tmp_path):
    folder = tmp_path / "run"
    _record(folder, "A1", "a", "NVIDIA H100 80GB HBM3")
    assert run_folder.claim(folder, run_folder.Identity("full", "NVIDIA H100 80GB HBM3")) is not None
    assert run_folder.claim(folder, run_folder.Identity("smoke", "CPU")) is None       # the first one stays
    assert json.loads((folder / "run.json").read_text()) == {"preset": "full", "device": "NVIDIA H100 80GB HBM3"}
    (folder / "run.json").write_text(json.dumps({"preset": "full", "device": "NVIDIA H200"}))
    assert run_folder.identity(folder, run_folder.scan(folder)).device == "NVIDIA H200"


@pytest.mark.parametrize("preset, device, stops", [
    ("full", "NVIDIA H200", False),
    ("full", None, False),                     # no GPU visible (a CPU rebuild, a login node): preset only
    ("smoke", "CPU", True),
    ("full", "NVIDIA H100 80GB HBM3", True),
    ("smoke", None, True),
])
def test_only_the_owner_measures(preset, device, stops):
    held = run_folder.Identity("full", "NVIDIA H200")
    line = run_folder.conflict("results/h200", held, preset, device)
    assert (line is not None) == stops
    if stops:
        assert "\n" not in line and "results/h200/ holds records of preset full on NVIDIA H200" in line
        assert f"preset {preset}" in line and "run=h200 reuse_records=true" in line


def test_damaged_records_are_found_and_set_aside(tmp_path):
    folder = tmp_path / "run"
    good = _record(folder, "A1", "good", None)
    cut = _record(folder, "A1", "cut", None)
    cut.write_text(cut.read_text()[:40])
    stranger = folder / "B5" / "records" / "stranger.json"
    stranger.parent.mkdir(parents=True)
    stranger.write_text('{"not": "a record"}')
    bad_list = folder / "C1" / "records" / "gloo_x2.json"
    bad_list.parent.mkdir(parents=True)
    bad_list.write_text('[{"id": "C1"}]')
    warmup = folder / "A1" / "warmup" / "w.json"
    warmup.parent.mkdir(parents=True)
    warmup.write_text("")
    whole_model = folder / "B2" / "whole_model" / "small_forward.json"   # B2's whole-model rows are records too
    whole_model.parent.mkdir(parents=True)
    whole_model.write_text(json.dumps(make_record("B2", {"size": "small"}))[:-20])
    profile = folder / "E1" / "profiles" / "xl_ctx512_flash.json"       # and E1's kernel profiles
    profile.parent.mkdir(parents=True)
    profile.write_text('{"id": "E1"}')
    tuning = folder / "B5" / "tuning" / "sweep.json"     # not a record folder: never read
    tuning.parent.mkdir(parents=True)
    tuning.write_text("{}")
    found = run_folder.scan(folder)
    assert sorted(e.path.name for e in found.damaged) == ["cut.json", "gloo_x2.json", "small_forward.json",
                                                          "stranger.json", "w.json", "xl_ctx512_flash.json"]
    for ident in ("A1", "A4", "B2", "B5", "C1", "C8", "E1"):
        (folder / ident / "summary.json").parent.mkdir(parents=True, exist_ok=True)
        (folder / ident / "summary.json").write_text("{}")
    page = tmp_path / "writeup.md"
    page.write_text("old")
    lines = run_folder.set_aside_damaged(folder, found, {"A1": ["A1", "A4"], "C1": ["C1", "C8"]}, [page])
    assert not page.exists()
    assert len(lines) == 6 and all("\n" not in line and "moved to" in line for line in lines)
    assert good.exists() and not cut.exists() and (cut.parent / "cut.json.damaged").exists()
    # The reports that read a damaged record lose their summary, so Snakemake rebuilds them.
    assert {p.parent.name for p in folder.glob("*/summary.json")} == set()
    assert "rebuilds A1, A4" in next(line for line in lines if "cut.json" in line)
    assert tuning.exists() and run_folder.scan(folder).damaged == []


@pytest.fixture
def gpus(tmp_path, monkeypatch):
    """Make this machine show ``count`` GPUs called ``name``."""
    def show(count, name="NVIDIA H100 80GB HBM3"):
        folder = fake_nvidia_smi(tmp_path / "bin", count, name)
        monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return show


def test_gpus_a_job_gets(gpus, monkeypatch):
    gpus(2)
    assert machine.gpus_for_jobs(local=True, resources_gpu=None) == 2
    assert machine.gpus_for_jobs(local=True, resources_gpu=1) == 1
    assert machine.gpus_for_jobs(local=True, resources_gpu=8) == 2
    assert machine.gpus_for_jobs(local=False, resources_gpu=None) is None      # a cluster decides
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert machine.gpus_for_jobs(local=True, resources_gpu=2) == 1
    assert machine.gpu_names() == ["NVIDIA H100 80GB HBM3"]
    gpus(0)
    assert machine.gpus_for_jobs(local=True, resources_gpu=2) is None            # device_gate's question


def test_device_kind(gpus):
    gpus(1, "NVIDIA H200")
    assert machine.device_kind("cuda") == "NVIDIA H200"
    assert machine.device_kind("cpu") == "CPU"
    gpus(0)
    assert machine.device_kind("cuda") is None
