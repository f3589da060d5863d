"""cs336_systems.benchmark: the CLI's validation, real tiny runs, and OOM / error records."""

import json
import subprocess
import sys

import pytest
import torch

from cs336_systems import benchmark as bm
from cs336_systems.models import MODEL_SIZES

FLAGS = ["--size", "--d-model", "--d-ff", "--num-layers", "--num-heads", "--context", "--batch", "--mode",
         "--warmup", "--steps", "--precision", "--compile", "--attention", "--device", "--out"]
TINY = ["--size", "tiny", "--context", "8", "--batch", "2", "--warmup", "1", "--steps", "2", "--device", "cpu"]


def _read(path):
    return json.loads(path.read_text())


def test_help_mentions_every_flag(capsys):
    with pytest.raises(SystemExit) as info:
        bm.main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for flag in FLAGS:
        assert flag in out, flag
    for size in MODEL_SIZES:                      # the size choices come from the size table
        assert size in out


BAD_ARGS = {
    "context 0": ["--size", "tiny", "--context", "0"],
    "negative batch": ["--size", "tiny", "--context", "8", "--batch", "-2"],
    "steps 0": ["--size", "tiny", "--context", "8", "--steps", "0"],
    "unknown size": ["--size", "huge", "--context", "8"],
    "size and dims": ["--size", "tiny", "--d-model", "8", "--context", "8"],
    "missing dims": ["--d-model", "64", "--d-ff", "128", "--context", "8"],
    "heads do not divide": ["--d-model", "64", "--d-ff", "128", "--num-layers", "1", "--num-heads", "5",
                            "--context", "8"],
    "negative warmup": ["--size", "tiny", "--context", "8", "--warmup", "-1"],
    "bad mode": ["--size", "tiny", "--context", "8", "--mode", "backward"],
    "bad precision": ["--size", "tiny", "--context", "8", "--precision", "fp8"],
    "bad device": ["--size", "tiny", "--context", "8", "--device", "gpu0"],
    "no context": ["--size", "tiny"],
    "negative memory limit": ["--size", "tiny", "--context", "8", "--memory-limit-gb", "-1"],
    "zero memory limit": ["--size", "tiny", "--context", "8", "--memory-limit-gb", "0"],
}


@pytest.mark.parametrize("argv", BAD_ARGS.values(), ids=BAD_ARGS.keys())
def test_bad_input_exits_2_with_one_line(argv, tmp_path, capsys):
    out = tmp_path / "rec.json"
    with pytest.raises(SystemExit) as info:
        bm.main([*argv, "--out", str(out)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and errors[0].startswith("python -m cs336_systems.benchmark: error: ")
    assert not out.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_cuda_device_without_cuda_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        bm.main(["--size", "tiny", "--context", "8", "--device", "cuda", "--out", str(tmp_path / "r.json")])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "CUDA is not available" in err and "Traceback" not in err


def test_bad_input_in_a_subprocess_has_no_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "cs336_systems.benchmark", "--context", "0", "--size", "tiny",
                           "--out", str(tmp_path / "r.json")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == \
        "python -m cs336_systems.benchmark: error: --context must be at least 1"


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("mode", bm.MODES)
def test_tiny_run_writes_an_ok_record(mode, precision, tmp_path):
    out = tmp_path / "rec.json"
    steps = 2
    assert bm.main([*TINY, "--mode", mode, "--precision", precision, "--out", str(out)]) == 0
    r = _read(out)
    assert r["id"] == "A1" and r["status"] == "ok"
    p = r["params"]
    assert (p["size"], p["context"], p["batch"], p["mode"], p["precision"], p["warmup"], p["steps"]) == \
        ("tiny", 8, 2, mode, precision, 1, steps)
    assert p["d_model"] == MODEL_SIZES["tiny"].d_model
    m = r["metrics"]
    phases = {"forward": ["forward"], "forward-backward": ["forward", "backward"],
              "train-step": ["forward", "backward", "optimizer"]}[mode]
    for phase in ["forward", "backward", "optimizer"]:
        assert (phase in m) == (phase in phases), phase
    for phase in phases + ["step"]:
        assert m[phase]["n"] == steps == len(m[phase]["samples"])
        assert all(s > 0 for s in m[phase]["samples"])
        assert m[phase]["mean"] == pytest.approx(sum(m[phase]["samples"]) / steps)
    for i in range(steps):
        assert m["step"]["samples"][i] == pytest.approx(sum(m[ph]["samples"][i] for ph in phases))
    assert len(m["warmup_step_samples"]) == 1
    assert m["parameters"] == MODEL_SIZES["tiny"].parameter_count()
    assert m["peak_memory_bytes"] is None          # CPU: no peak-memory counter


def test_explicit_dimensions_run(tmp_path):
    out = tmp_path / "rec.json"
    argv = ["--d-model", "32", "--d-ff", "64", "--num-layers", "1", "--num-heads", "2", "--vocab-size", "97",
            "--context", "4", "--batch", "1", "--warmup", "0", "--steps", "3", "--mode", "forward",
            "--device", "cpu", "--out", str(out)]
    assert bm.main(argv) == 0
    r = _read(out)
    assert r["status"] == "ok" and r["params"]["size"] == "custom"
    assert r["metrics"]["forward"]["n"] == 3 and r["metrics"]["warmup_step_samples"] == []
    assert r["metrics"]["parameters"] == bm.ModelSize(32, 64, 1, 2).parameter_count(vocab_size=97)


def test_injected_oom_is_recorded(monkeypatch, tmp_path):
    message = "CUDA out of memory. Tried to allocate 2 GiB"

    def fake_benchmark(*args, **kwargs):
        raise torch.OutOfMemoryError(message)

    monkeypatch.setattr(bm, "benchmark", fake_benchmark)
    out = tmp_path / "rec.json"
    assert bm.main([*TINY, "--out", str(out)]) == 0
    r = _read(out)
    assert r["status"] == "oom" and r["metrics"] == {}
    assert message in r["message"]


def test_injected_error_is_recorded(monkeypatch, tmp_path, capsys):
    def fake_benchmark(*args, **kwargs):
        raise ValueError("the kernel is wrong")

    monkeypatch.setattr(bm, "benchmark", fake_benchmark)
    out = tmp_path / "rec.json"
    assert bm.main([*TINY, "--out", str(out)]) == 0
    r = _read(out)
    assert r["status"] == "error" and r["metrics"] == {}
    assert r["message"] == "ValueError: the kernel is wrong"
    assert "Traceback" in capsys.readouterr().err          # the log keeps the traceback


def test_real_allocation_failure_on_cpu_is_an_oom_record(tmp_path):
    out = tmp_path / "rec.json"
    proc = subprocess.run([sys.executable, "-m", "cs336_systems.benchmark", "--size", "small", "--context", "64",
                           "--batch", "2", "--mode", "train-step", "--warmup", "0", "--steps", "1",
                           "--device", "cpu", "--memory-limit-gb", "0.3", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    r = _read(out)
    assert r["status"] == "oom", r
    assert "allocate" in r["message"].lower()
    assert r["params"]["memory_limit_gb"] == 0.3


@pytest.mark.parametrize("mode,changes", [("train-step", True), ("forward-backward", False), ("forward", False)])
def test_only_train_step_updates_parameters(mode, changes, monkeypatch, tmp_path):
    from cs336_systems import workload

    built = []
    real_build = workload.build_model

    def spy(*args, **kwargs):
        model = real_build(*args, **kwargs)
        built.append((model, {k: v.detach().clone() for k, v in model.state_dict().items()}))
        return model

    monkeypatch.setattr(workload, "build_model", spy)
    assert bm.main([*TINY, "--mode", mode, "--out", str(tmp_path / "r.json")]) == 0
    assert _read(tmp_path / "r.json")["status"] == "ok"
    (model, before), = built
    after = model.state_dict()
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    if changes:
        # AdamW moves every parameter that gets a gradient (all of them in this model).
        assert sorted(changed) == sorted(k for k, _ in model.named_parameters())
    else:
        assert changed == []
    assert all(p.grad is None for p in model.parameters())     # zero_grad(set_to_none=True) after each step
