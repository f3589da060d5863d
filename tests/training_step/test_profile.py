"""E1's profile on the CPU: the step's operators by kind, per step, against the unprofiled step."""
import json

from cs336_systems.profiling.step_kernels import KINDS
from cs336_systems.training_step import profile

POINT = ["--size", "tiny", "--context", "16", "--batch", "2", "--warmup", "1", "--steps", "2", "--seed", "3",
         "--backend", "aot_eager", "--device", "cpu"]


def test_a_rung_s_profile_has_every_kind_per_step_and_its_steps_timed_apart(tmp_path):
    out = tmp_path / "p.json"
    assert profile.main([*POINT, "--rung", "fused-adamw", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["id"] == "E1" and record["status"] == "ok" and record["params"]["part"] == "profile"
    m = record["metrics"]
    assert set(m["kinds"]) == set(KINDS) and m["steps"] == 2 and len(m["count_per_step"]) == 2
    # Per step, the kinds add up to the operators' total, and the optimizer's fused kernel is there.
    assert abs(sum(k["ms"] for k in m["kinds"].values()) - m["time_ms"]) < 1e-6 * max(m["time_ms"], 1)
    assert m["kinds"]["optimizer"]["count"] > 0 and m["kinds"]["GEMM"]["count"] > 0
    assert m["step"]["n"] == 2 and m["busy_share"] is None            # busy time is a GPU's


def test_a_rung_that_needs_cuda_is_skipped_on_a_cpu(tmp_path):
    out = tmp_path / "p.json"
    assert profile.main([*POINT, "--rung", "anchor-sdpa-cudnn", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["status"] == "skipped" and "CUDA" in record["reason"]
