"""The E1 command line on the CPU: valid records, the loss it records checked independently, skips."""
import importlib.util
import json
import math
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from cs336_systems.models import build_model, get_size, random_batch
from cs336_systems.records import STATUSES, make_record, write_json_atomic
from cs336_systems.report.e1 import LOSS_RTOL
from cs336_systems.training_step import ladder

POINT = ["--size", "tiny", "--context", "16", "--batch", "2", "--warmup", "1", "--steps", "2", "--seed", "3",
         "--backend", "aot_eager", "--device", "cpu"]


def run(tmp_path, rung, *extra) -> dict:
    out = tmp_path / f"{rung}.json"
    assert ladder.main([*POINT, "--rung", rung, *extra, "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["id"] == "E1" and record["status"] in STATUSES and record["params"]["rung"] == rung
    return record


def float64_loss(seed=3, context=16, batch=2) -> float:
    """fp32 eager's first loss, computed apart: the same seeded init and batch, a float64 forward."""
    from cs336_basics.nn_utils import cross_entropy

    torch.manual_seed(seed)
    model = build_model(get_size("tiny"), context)
    inputs, targets = random_batch(batch, context)
    with torch.no_grad():
        return cross_entropy(model.double()(inputs), targets).item()


def test_fp32_and_an_anchor_write_records_whose_losses_check_out(tmp_path):
    fp32 = run(tmp_path, "fp32")
    assert fp32["status"] == "ok", fp32.get("message")
    m = fp32["metrics"]
    assert m["step"]["n"] == 2 and m["step"]["median"] > 0 and m["tokens_per_s"] == pytest.approx(2 * 16 / (m["step"]["median"] / 1e3))
    assert set(m) >= {"forward", "backward", "optimizer", "loss", "peak_memory_bytes"}
    assert fp32["params"]["optimizer"].startswith("cs336_basics.optimizer.AdamW")
    assert fp32["metrics"]["loss"] == pytest.approx(float64_loss(), rel=1e-5)

    anchor = run(tmp_path, "anchor-sdpa-flash")       # bf16, SDPA's CPU flash kernel, aot_eager, fused AdamW
    assert anchor["status"] == "ok", anchor.get("message")
    p = anchor["params"]
    assert (p["precision"], p["compiled"], p["compile_backend"], p["optimizer"]) == \
        ("bf16", True, "aot_eager", "torch.optim.AdamW(fused=True)")
    assert abs(anchor["metrics"]["loss"] / fp32["metrics"]["loss"] - 1) <= LOSS_RTOL


def test_what_needs_cuda_is_skipped_on_a_cpu_with_why(tmp_path):
    record = run(tmp_path, "anchor-sdpa-cudnn")
    assert record["status"] == "skipped" and "CUDA" in record["reason"]


def test_the_checkpointed_rung_runs_only_where_the_rung_before_ran_out_of_memory(tmp_path):
    params = {"rung": "fused-adamw"}
    write_json_atomic(tmp_path / "fits.json", make_record("E1", params, "ok", {}))
    write_json_atomic(tmp_path / "oom.json", make_record("E1", params, "oom", reason="CUDA out of memory"))
    write_json_atomic(tmp_path / "error.json", make_record("E1", params, "error", reason="head dimension 80"))
    fits = run(tmp_path, "checkpointed", "--previous", str(tmp_path / "fits.json"))
    assert fits["status"] == "skipped" and fits["reason"] == "not needed: the previous rung (fused-adamw) fits"
    failed = run(tmp_path, "checkpointed", "--previous", str(tmp_path / "error.json"))
    assert failed["status"] == "skipped" and "head dimension 80" in failed["reason"]
    if importlib.util.find_spec("cs336_systems.attention.flash_op") is None:
        pytest.skip("compiling our FlashAttention needs its torch.library custom op (issue 32, item 1)")
    # In its own process, as the rule runs it: the Triton interpreter must be chosen before our
    # kernels are first imported, and another test of this process may have imported them.
    out = tmp_path / "ran.json"
    proc = subprocess.run([sys.executable, "-m", "cs336_systems.training_step.ladder", *POINT, "--rung", "checkpointed",
                           "--previous", str(tmp_path / "oom.json"), "--checkpoint-group", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ran = json.loads(out.read_text())
    assert ran["status"] == "ok", ran.get("message")
    assert ran["params"]["checkpoint_group"] == 1 and ran["params"]["attention"] == "flash"


def test_bad_options_stop_in_one_line(capsys):
    with pytest.raises(SystemExit):
        ladder.main([*POINT, "--rung", "fp32", "--warmup", "0", "--out", "x.json"])
    assert "--warmup must be at least 1 (the first warm-up step gives the loss)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ladder.main([*POINT, "--rung", "bf16", "--previous", "x.json", "--out", "x.json"])
    assert "--previous is for the checkpointed rung only" in capsys.readouterr().err


def test_a_previous_record_that_is_missing_or_damaged_stops_in_one_line(tmp_path, capsys):
    cut_short = tmp_path / "cut.json"
    cut_short.write_text(json.dumps(make_record("E1", {"rung": "fused-adamw"}, "oom", reason="x"))[:40])
    not_a_record = tmp_path / "list.json"
    not_a_record.write_text("[1, 2]")
    for path, said in ((tmp_path / "absent.json", "No such file or directory"),
                       (cut_short, "not JSON"), (not_a_record, "not a record")):
        with pytest.raises(SystemExit) as stop:
            ladder.main([*POINT, "--rung", "checkpointed", "--previous", str(path), "--out", str(tmp_path / "x.json")])
        err = capsys.readouterr().err
        assert stop.value.code == 2 and f"--previous {path}: {said}" in err and "Traceback" not in err
    assert not (tmp_path / "x.json").exists()


def test_the_loss_tolerance_tells_bf16_rounding_from_a_wrong_attention():
    """The report's tolerance (report.e1's doc says why) on the tiny model: bf16 autocast inside it,
    attention that ignores the causal mask outside it."""
    from cs336_basics.model import set_attention
    from cs336_basics.nn_utils import cross_entropy

    torch.manual_seed(0)
    model = build_model(get_size("tiny"), 16)
    inputs, targets = random_batch(2, 16)
    with torch.no_grad():
        fp32 = cross_entropy(model(inputs), targets).item()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            bf16 = cross_entropy(model(inputs), targets).item()
        set_attention(model, lambda q, k, v, is_causal: F.scaled_dot_product_attention(q, k, v, is_causal=False))
        unmasked = cross_entropy(model(inputs), targets).item()
    assert abs(bf16 / fp32 - 1) < LOSS_RTOL < abs(unmasked / fp32 - 1)
    assert not math.isclose(unmasked, fp32, rel_tol=LOSS_RTOL)
