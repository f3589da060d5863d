"""B3 / B4 checks: the error measurement catches a wrong Function, the reports read the records."""
import json
from pathlib import Path

import pytest
import torch

from cs336_systems.attention import check
from cs336_systems.report import b2, flash_checks
from cs336_systems.records import make_record

TEMPLATES = Path(__file__).resolve().parents[2] / "writeup" / "templates"

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


@pytest.fixture
def inductor_afterwards():
    """check.main chooses the compiled backward's back end for the whole process: put Inductor back."""
    from cs336_systems.attention import backward

    yield backward
    backward.use_backend("inductor")


def test_cli_records_and_reports(tmp_path, inductor_afterwards):
    out = tmp_path / "checks.json"
    # aot_eager, as the smoke preset runs it: the same graph, no C++ built here
    assert check.main(["--shape", "1", "24", "16", "--bench-shape", "1", "32", "16", "--dtypes", "fp32",
                       "--device", DEVICE, "--backend", "aot_eager", "--out", str(out)]) == 0
    assert inductor_afterwards._BACKEND == ["aot_eager"]
    records = json.loads(out.read_text())
    assert {r["params"]["compile_backend"] for r in records} == {"aot_eager"}
    assert {(r["params"]["kind"], r["params"]["function"]) for r in records} == \
        {("error", f) for f in check.FUNCTIONS} | {("time", f) for f in check.TIMED}
    assert all(r["status"] == "ok" for r in records)
    for ident in ("B3", "B4"):
        assert flash_checks.main([ident, "--records", str(out), "--out-dir", str(tmp_path / ident)]) == 0
    b3 = json.loads((tmp_path / "B3" / "summary.json").read_text())
    b4 = json.loads((tmp_path / "B4" / "summary.json").read_text())
    assert b3["shape"] == [1, 24, 16] and set(b3["worst_ratio"]) == {"fp32"}
    timed = {r["params"]["function"]: r["metrics"]["backward_ms"] for r in records if r["params"]["kind"] == "time"}
    assert b4["accounting"]["fp32"]["quoted_ratio"] == pytest.approx(
        timed["triton-pytorch-backward"] / timed["triton"] if b4["accounting"]["fp32"]["faster_than_floor"]
        else timed["triton"] / timed["triton-pytorch-backward"])


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
    assert [(c.key, c.chosen) for c in choices] == [("bf16_d128", "fused"), ("bf16_d64", "dkdv+dq")]
    assert choices[1].separate_ms == pytest.approx(3.6) and choices[1].fused_over_separate == pytest.approx(3.9 / 3.6)
    # An entry tuned since the fused path left the kernels has no fused time and ran the two kernels.
    [later] = flash_checks.tuner_choices({"bf16_d64": {"measured": {"causal": True, "gpu": "GPU", "shape": [1, 8, 64],
                                                                    "ms": {"forward": 1.0, "dkdv": 2.0, "dq": 1.0}}}})
    assert later.fused_ms is None and later.fused_over_separate is None and later.chosen == "dkdv+dq"


# --- B4 counts FLOPs and bytes before it explains a time; B3 judges errors against plain attention's ---

def _time_record(function, dtype, ms, launch=None, commit="24a6f999d755f49243561872a5123685552b9bbb",
                 shape=(1, 8192, 64), precision="highest"):
    """A B4 timing record as ``attention.check`` writes it: what ran in ``launch`` (by default ours
    with IEEE fp32 products and the dK/dV, dQ kernels; the compiled PyTorch backward in fp32) and
    PyTorch's float32 matmul precision."""
    if launch is None:
        launch = ({"products": "ieee" if dtype == "fp32" else "tf32", "backward": "dkdv+dq"} if function == "triton"
                  else {"backward": "compiled-pytorch", "backward_arithmetic": "fp32"})
    metrics = {"forward_ms": 0.1, "backward_ms": ms, **({"launch": launch} if launch else {}),
               **({"float32_matmul_precision": precision} if precision else {})}
    record = make_record("B4", {"kind": "time", "function": function, "dtype": dtype, "causal": True,
                                "shape": list(shape), "device": "cuda"}, "ok", metrics)
    record["provenance"].update(commit=commit, dirty=False, gpu="NVIDIA H200")
    return record


@pytest.mark.parametrize("products", ["ieee", "tf32x3"])
def test_b4_explains_a_backward_only_where_its_flops_and_bytes_do(seed, products):
    import random

    from cs336_systems.accounting.hardware import H200_SXM

    rng = random.Random(seed)
    batch, n, d = 1, rng.choice([4096, 8192, 16384]), 64
    launch = {"products": products, "backward": "dkdv+dq"}
    times = {dtype: (rng.uniform(0.05, 8.0), rng.uniform(0.5, 4.0)) for dtype in ("bf16", "fp32")}
    records = [r for dtype, (ours, theirs) in times.items() for r in (
        _time_record("triton", dtype, ours, launch, shape=(batch, n, d)),
        _time_record("triton-pytorch-backward", dtype, theirs, shape=(batch, n, d)))]
    result = flash_checks.backward_accounting(records)
    for dtype, (ours, theirs) in times.items():
        a = result[dtype]
        # Independently: 7 causal-half products against 5 whole ones in fp32 (at precision "highest"),
        # S, P, dP, dS written and read once as fp32.
        flops_ours, flops_theirs = 7 * batch * n * n * d, 5 * 2 * batch * n * n * d
        # the longer of the two bounds, not their sum: the matmuls move those matrices themselves
        floor = max(flops_theirs / H200_SXM.fp32_flops * 1e3, 8 * batch * n * n * 4 / H200_SXM.hbm_bandwidth * 1e3)
        assert a.triton_flops == flops_ours and a.pytorch_flops == flops_theirs
        assert a.pytorch_floor_ms == pytest.approx(floor)
        assert a.faster_than_floor == (ours < floor)
        assert a.faster == (ours < floor or theirs > 1.75 * ours)
        assert a.slower_by_rate == (ours > theirs and flops_ours / ours < flops_theirs / theirs)
        if dtype == "fp32":
            top = H200_SXM.tf32_flops / 3 if products == "tf32x3" else H200_SXM.fp32_flops
            assert a.triton_of_peak == pytest.approx(flops_ours / ours / 1e-3 / top)
            assert a.triton_mode == products


def test_b4_opens_with_the_times_and_says_why_only_where_the_count_does(tmp_path):
    from pathlib import Path

    from cs336_systems.report.writeup import Renderer

    # bf16: ours under the PyTorch backward's floor; fp32: ours slower with fewer FLOPs (the h200 case).
    records = [_time_record("triton", "bf16", 0.29), _time_record("triton-pytorch-backward", "bf16", 1.64),
               _time_record("triton", "fp32", 4.47), _time_record("triton-pytorch-backward", "fp32", 1.62)]
    path = tmp_path / "checks.json"
    path.write_text(json.dumps(records))
    assert flash_checks.main(["B4", "--records", str(path), "--out-dir", str(tmp_path / "B4")]) == 0
    templates = Path(__file__).resolve().parents[2] / "writeup" / "templates"
    text = Renderer("md", tmp_path / "w" / "w.md", templates).section("B4", tmp_path / "B4" / "summary.json")
    body = " ".join(text.split())
    assert body.split("**Answer.** ")[1].startswith("At 1 × 8192 × 64, causal, the Triton backward takes 0.290 ms in bf16")
    assert "In bf16 it takes less than the PyTorch backward's floor alone" in body
    assert "In fp32 it does fewer FLOPs than the PyTorch backward (0.70×)" in body
    assert "In fp32 the Triton kernels' products ran as IEEE FMA on the CUDA cores" in body
    assert "code of" not in body                 # what ran is what the records say


def test_b4_floor_is_the_longer_bound_not_the_sum(seed, tmp_path):
    """A Triton time between the longer of the PyTorch backward's two bounds and their sum is not under
    its floor: the matmuls move S, P, dP and dS themselves, so the bounds may overlap. Such a time is
    "faster" only where the PyTorch median is beyond spread.HOST_SWING times it (one median a side)."""
    import random

    from cs336_systems.accounting.hardware import H200_SXM
    from cs336_systems.report.spread import HOST_SWING
    from cs336_systems.report.writeup import Renderer

    rng = random.Random(seed)
    batch, n, d = 1, 8192, 64
    flops = 5 * 2 * batch * n * n * d / H200_SXM.fp32_flops * 1e3
    traffic = 8 * batch * n * n * 4 / H200_SXM.hbm_bandwidth * 1e3
    ours = rng.uniform(max(flops, traffic), flops + traffic)         # under the sum, over the longer
    near, far = ours * rng.uniform(1.05, HOST_SWING * 0.98), ours * rng.uniform(HOST_SWING * 1.02, 4.0)
    records = [_time_record("triton", "bf16", ours), _time_record("triton-pytorch-backward", "bf16", near),
               _time_record("triton", "fp32", ours), _time_record("triton-pytorch-backward", "fp32", far)]
    result = flash_checks.backward_accounting(records)
    for a in result.values():
        assert a.pytorch_floor_ms == pytest.approx(max(flops, traffic))
        assert not a.faster_than_floor
    assert not result["bf16"].faster and result["fp32"].faster
    path = tmp_path / "checks.json"
    path.write_text(json.dumps(records))
    assert flash_checks.main(["B4", "--records", str(path), "--out-dir", str(tmp_path / "B4")]) == 0
    templates = Path(__file__).resolve().parents[2] / "writeup" / "templates"
    body = " ".join(Renderer("md", tmp_path / "w" / "w.md", templates).section("B4", tmp_path / "B4" / "summary.json").split())
    assert f"({ours / near:.2f}× the PyTorch backward's time, one median a side: not settled)" in body
    assert f"({far / ours:.2f}× faster)" in body
    assert "floor alone" not in body


def test_b4_says_the_floor_once_for_every_dtype_under_it(tmp_path):
    """Both dtypes under the PyTorch backward's floor: one sentence naming both, not one per dtype,
    and no slower-by-rate sentence."""
    from pathlib import Path

    from cs336_systems.report.writeup import Renderer

    records = [_time_record("triton", "bf16", 0.17), _time_record("triton-pytorch-backward", "bf16", 1.64),
               _time_record("triton", "fp32", 0.60), _time_record("triton-pytorch-backward", "fp32", 1.63)]
    path = tmp_path / "checks.json"
    path.write_text(json.dumps(records))
    assert flash_checks.main(["B4", "--records", str(path), "--out-dir", str(tmp_path / "B4")]) == 0
    summary = json.loads((tmp_path / "B4" / "summary.json").read_text())
    assert all(a["faster_than_floor"] for a in summary["accounting"].values())
    templates = Path(__file__).resolve().parents[2] / "writeup" / "templates"
    body = " ".join(Renderer("md", tmp_path / "w" / "w.md", templates).section("B4", tmp_path / "B4" / "summary.json").split())
    assert body.count("it takes less than the PyTorch backward's floor alone") == 1
    assert "In bf16 and fp32 it takes less than the PyTorch backward's floor alone" in body
    assert "yet is slower" not in body


def test_b3_calls_an_error_the_dtypes_rounding_only_within_the_factor(seed):
    import random

    rng = random.Random(seed)
    rows = []
    for dtype in ("fp32", "bf16"):
        for function in check.FUNCTIONS:
            row = {"function": function, "dtype": dtype, "causal": True, "status": "ok"}
            for q in check.QUANTITIES:
                row[f"{q}_plain"] = rng.uniform(1e-6, 1e-2)
                row[f"{q}_ours"] = row[f"{q}_plain"] * rng.uniform(0.1, 2 * flash_checks.SAME_ORDER)
            rows.append(row)
    import pandas as pd
    errors = pd.DataFrame(rows)
    worst = flash_checks.worst_ratio(errors)
    for dtype, part in errors.groupby("dtype"):
        ratio = max(r[f"{q}_ours"] / r[f"{q}_plain"] for _, r in part.iterrows() for q in check.QUANTITIES)
        assert worst[dtype].ratio == pytest.approx(ratio)
        assert worst[dtype].verdict == ("within" if ratio <= flash_checks.SAME_ORDER / flash_checks.NEAR else
                                           "beyond" if ratio >= flash_checks.SAME_ORDER * flash_checks.NEAR else "near")
        better = all(r["lse_ours"] < r["lse_plain"] for _, r in part.iterrows())
        assert (dtype in flash_checks.lse_better(errors)) == (better and dtype != "fp32")


@pytest.mark.parametrize("ratio,verdict,words", [
    (1.15, "within", "within 3×: the tiling and the online softmax lose nothing"),
    (3.31, "near", "near the 3× line (within 1.5× of it either way), which plain attention's own error moves"),
    (2.80, "near", "not decided"),
    (9.00, "beyond", "beyond 3×: more than the dtype's own rounding"),
])
def test_an_error_ratio_near_the_line_is_not_decided(ratio, verdict, words, tmp_path):
    """One commit's fp32 worst case read 3.31× plain attention's error on an H200 and under 3× on an
    H100 (plain's own error moves between cards): a ratio near the line decides neither way."""
    import pandas as pd
    from cs336_systems.report.writeup import Renderer

    row = {"function": "triton-pytorch-backward", "dtype": "fp32", "causal": True, "status": "ok"}
    for q in check.QUANTITIES:
        row[f"{q}_plain"], row[f"{q}_ours"] = 5e-7, 5e-7 * (ratio if q == "dq" else 1.0)
    worst = flash_checks.worst_ratio(pd.DataFrame([row]))["fp32"]
    assert worst.verdict == verdict and worst.quantity == "dq"
    from cs336_systems.report import contract
    from cs336_systems.report.common import run_provenance
    from cs336_systems.report.what_ran import what_ran
    path = tmp_path / "B3" / "summary.json"
    contract.write(path, flash_checks.B3Summary(
        provenance=run_provenance([make_record("B3", {"function": "triton"}, "ok", {})]), shape=[1, 24, 16],
        worst_ratio={"fp32": worst}, same_order=3.0, near_factor=flash_checks.NEAR, ragged=None,
        lse_better=[], ran=what_ran([])))
    pd.DataFrame([row]).to_csv(tmp_path / "B3" / "table.csv", index=False)
    text = Renderer("md", tmp_path / "w" / "w.md", TEMPLATES).section("B3", path)
    assert f"in fp32 {ratio:.2f}× (triton-pytorch-backward's dq, causal: " in text and words in text


def test_b4_points_at_b3_s_table_of_what_ran_only_where_its_timed_calls_ran_the_same(tmp_path):
    """B3 and B4 read one record file: the checked calls (B3) and the timed ones (B4). Where both ran
    the same kernels, B4 links B3's table instead of repeating it; where they did not, B4 has its own."""
    from cs336_systems.report.writeup import Renderer

    path = tmp_path / "checks.json"
    assert check.main(["--shape", "1", "24", "16", "--bench-shape", "1", "40", "16", "--dtypes", "fp32",
                       "--device", DEVICE, "--out", str(path)]) == 0
    records = json.loads(path.read_text())

    def b4_section(name):
        out = tmp_path / name
        assert flash_checks.main(["B4", "--records", str(path), "--out-dir", str(out)]) == 0
        return Renderer("md", tmp_path / "w" / "w.md", TEMPLATES).section("B4", out / "summary.json")

    same = b4_section("same")
    assert "which [B3. " in same and "| | what ran |" not in same
    for r in records:        # the timed calls launched another way than the checked ones
        if r["params"]["kind"] == "time" and r["params"]["function"] != "pytorch":
            r["metrics"]["launch"]["path"] = "direct"
    path.write_text(json.dumps(records))
    other = b4_section("other")
    assert "which [B3. " not in other and "| | what ran |" in other
