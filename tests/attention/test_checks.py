"""B3 / B4 checks: the error measurement catches a wrong Function, the reports read the records."""
import json

import pytest
import torch

from cs336_systems.attention import check
from cs336_systems.report import b2, flash_checks
from cs336_systems.records import make_record

# The checks' own device: asking for "cpu" on a CUDA machine would switch the test process to
# Triton's interpreter (the CLI sets TRITON_INTERPRET for CPU runs) and spoil later tests.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def test_errors_of_our_functions_are_at_the_dtypes_rounding():
    errors = check.max_errors("triton", torch.float32, True, (2, 37, 16), DEVICE)
    for quantity in check.QUANTITIES:
        assert errors["ours"][quantity] < 1e-4, quantity
        assert errors["plain"][quantity] < 1e-4, quantity


def test_a_wrong_backward_shows_up_in_the_errors(monkeypatch):
    from cs336_systems.attention.flash_pytorch import FlashAttentionPytorch

    class HalfGradients(FlashAttentionPytorch):
        @staticmethod
        def backward(ctx, grad_out):
            return tuple(None if g is None else 0.5 * g for g in FlashAttentionPytorch.backward(ctx, grad_out))

    monkeypatch.setattr(check, "function", lambda name: HalfGradients)
    errors = check.max_errors("pytorch", torch.float32, False, (1, 20, 16), DEVICE)["ours"]
    assert errors["o"] < 1e-5 and errors["lse"] < 1e-5
    assert min(errors["dq"], errors["dk"], errors["dv"]) > 1e-2


def test_cli_records_and_reports(tmp_path):
    out = tmp_path / "checks.json"
    assert check.main(["--shape", "1", "24", "16", "--bench-shape", "1", "32", "16", "--dtypes", "fp32",
                       "--device", DEVICE, "--out", str(out)]) == 0
    records = json.loads(out.read_text())
    assert {(r["params"]["kind"], r["params"]["function"]) for r in records} == \
        {("error", f) for f in check.FUNCTIONS} | {("time", f) for f in check.TIMED}
    assert all(r["status"] == "ok" for r in records)
    for ident in ("B3", "B4"):
        assert flash_checks.main([ident, "--records", str(out), "--out-dir", str(tmp_path / ident)]) == 0
    b3 = json.loads((tmp_path / "B3" / "summary.json").read_text())
    b4 = json.loads((tmp_path / "B4" / "summary.json").read_text())
    assert b3["shape"] == [1, 24, 16] and set(b3["worst_ratio"]) == {"fp32"}
    timed = {r["params"]["function"]: r["metrics"]["backward_ms"] for r in records if r["params"]["kind"] == "time"}
    assert b4["backward"]["fp32"]["speedup"] == pytest.approx(timed["triton-pytorch-backward"] / timed["triton"])


def _b1_record(d, seq, compiled, forward_ms, status="ok"):
    params = {"d": d, "seq": seq, "batch": 2, "iters": 3, "compiled": compiled, "device": "cpu"}
    metrics = {"forward_ms": forward_ms, "backward_ms": 2 * forward_ms, "memory_before_backward_bytes": None,
               "accounting_bytes": {"saved": 1, "forward_peak": 1, "backward_peak": 1}} if status == "ok" else {}
    return make_record("B1", params, status, metrics, reason=None if status == "ok" else "out of memory")


def test_b2_pairs_eager_and_compiled_points(tmp_path):
    eager = [_b1_record(16, 64, False, 4.0), _b1_record(16, 128, False, 0, "oom")]
    compiled = [_b1_record(16, 64, True, 2.0), _b1_record(16, 128, True, 5.0)]
    for name, rows in (("eager.json", eager), ("compiled.json", compiled)):
        (tmp_path / name).write_text(json.dumps(rows))
    assert b2.main(["--rows", str(tmp_path / "eager.json"), str(tmp_path / "compiled.json"),
                    "--out-dir", str(tmp_path / "B2")]) == 0
    summary = json.loads((tmp_path / "B2" / "summary.json").read_text())
    assert summary["speedup"]["forward"] == {"median": 2.0, "min": 2.0, "max": 2.0}
    assert [(p["d"], p["seq"]) for p in summary["fits_only_compiled"]] == [(16, 128)]
    assert summary["at_longest"]["seq"] == 64


def test_a_failing_case_is_recorded_with_its_message():
    def broken():
        raise RuntimeError("kernel exploded")
    record = check._attempt("B3", {"kind": "error", "function": "triton", "dtype": "fp32", "causal": False,
                                   "device": "cpu"}, broken)
    assert record["status"] == "error" and record["message"] == "RuntimeError: kernel exploded"


def test_b4_states_the_backward_the_tuner_measured_faster():
    def entry(fused, dkdv, dq):
        return {"measured": {"backward": "fused" if fused < dkdv + dq else "dkdv+dq", "causal": True, "gpu": "GPU",
                             "shape": [16, 16384, 64], "ms": {"forward": 1.0, "dkdv": dkdv, "dq": dq, "fused": fused}}}
    choices = flash_checks.tuner_choices({"bf16_d64": entry(3.9, 2.2, 1.4), "bf16_d128": entry(1.5, 1.0, 0.6)})
    assert [(c["key"], c["chosen"]) for c in choices] == [("bf16_d128", "fused"), ("bf16_d64", "dkdv+dq")]
    assert choices[1]["separate_ms"] == pytest.approx(3.6) and choices[1]["fused_over_separate"] == pytest.approx(3.9 / 3.6)
    # An entry tuned since the fused path left the kernels has no fused time and ran the two kernels.
    [later] = flash_checks.tuner_choices({"bf16_d64": {"measured": {"causal": True, "gpu": "GPU", "shape": [1, 8, 64],
                                                                    "ms": {"forward": 1.0, "dkdv": 2.0, "dq": 1.0}}}})
    assert later["fused_ms"] is None and later["fused_over_separate"] is None and later["chosen"] == "dkdv+dq"
