"""A1's MFU, what bounds each step, and bf16 against fp32, on synthetic records whose answers are known.

The h200 writeup once had bf16 slower than fp32 at short contexts without a word; these tests build
such tables and check that the report names every slowdown beyond the spread, and only those."""
import json
import random
import statistics
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from cs336_systems.models import get_size
from cs336_systems.records import make_record, write_json_atomic
from cs336_systems.report import a1, writeup
from cs336_systems.workload import build_workload

TEMPLATES = Path(__file__).resolve().parents[2] / "writeup" / "templates"
BATCH, STEPS = 2, 10
PHASES = {"forward": ["forward"], "forward-backward": ["forward", "backward"]}


def _summary(samples):
    return {"mean": statistics.fmean(samples), "std": statistics.stdev(samples), "n": len(samples), "samples": samples}


def record(rng, context, mode, precision, step_ms, spread_ms, gpu="NVIDIA H200"):
    """A point whose step takes ``step_ms`` ± about ``spread_ms``; its phases split the step."""
    params = {"size": "tiny", "context": context, "batch": BATCH, "mode": mode, "warmup": 1, "steps": STEPS,
              "precision": precision, "attention": "naive", "device": "cuda", "vocab_size": 10_000}
    steps = [step_ms + spread_ms * rng.gauss(0, 1) for _ in range(STEPS)]
    shares = [1 / len(PHASES[mode])] * len(PHASES[mode])
    metrics = {phase: _summary([s * share for s in steps]) for phase, share in zip(PHASES[mode], shares)}
    metrics["step"] = _summary(steps)
    r = make_record("A1", params, "ok", metrics)
    r["provenance"]["gpu"] = gpu
    return r


def build(tmp_path, records, profiles=()):
    paths = [write_json_atomic(tmp_path / "r" / f"{i}.json", r) for i, r in enumerate(records)]
    ppaths = [write_json_atomic(tmp_path / "p" / f"{i}.json", r) for i, r in enumerate(profiles)]
    out = tmp_path / "A1"
    assert a1.main(["--records", *map(str, paths), "--profiles", *map(str, ppaths), "--out-dir", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    text = writeup.Renderer("md", tmp_path / "w.md", TEMPLATES).section("A1", out / "summary.json")
    return summary, text


@pytest.fixture
def rng():
    return random.Random(random.getrandbits(32))


def test_bf16_slower_is_named_only_beyond_the_spread(tmp_path, rng):
    records = [
        # context 16: bf16 5 ms slower, but each mean has a 10 ms spread: not settled
        record(rng, 16, "forward-backward", "fp32", 40.0, 10.0), record(rng, 16, "forward-backward", "bf16", 45.0, 10.0),
        # context 32: bf16 10 ms slower with 0.5 ms spread: a slowdown the prose must name
        record(rng, 32, "forward-backward", "fp32", 20.0, 0.5), record(rng, 32, "forward-backward", "bf16", 30.0, 0.5),
    ]
    s, text = build(tmp_path, records)
    assert [(c["context"], c["bf16_is"]) for c in s["bf16_slower"]] == [(32, "slower")]
    assert [(c["context"], c["bf16_is"]) for c in s["bf16_within_spread"]] == [(16, "within the spread")]
    slow = s["bf16_slower"][0]
    assert f"| tiny | 32 | forward-backward | {slow['bf16_ms']:.2f} ± {slow['bf16_std_ms']:.2f} |" in text
    assert "bf16 is slower at 1:" in text and "1 lie within the spread (tiny ctx 16 forward-backward)" in text


def test_mfu_against_a_step_of_known_flops(tmp_path, rng):
    """The table's MFU is PyTorch's own FLOP count of the step over its time and the H200's peak."""
    torch.manual_seed(0)
    workload = build_workload(get_size("tiny"), context=16, batch=BATCH, mode="forward-backward", precision="bf16")
    with FlopCounterMode(display=False) as counter:
        workload.step()
    flops = counter.get_total_flops()
    step_ms = flops / (0.01 * 989e12) * 1e3             # 1 % of the bf16 peak
    records = [record(rng, 16, "forward-backward", "bf16", step_ms, step_ms * 1e-4),
               record(rng, 16, "forward", "fp32", 1.0, 0.01, gpu=None),                 # a CPU run: no peak
               record(rng, 32, "forward", "fp32", 1.0, 0.01, gpu="NVIDIA GeForce RTX 4090")]
    s, text = build(tmp_path, records)
    df = a1.records_frame([json.loads(p.read_text()) for p in sorted((tmp_path / "r").glob("*.json"))])
    bf16 = df[df["precision"] == "bf16"].iloc[0]
    mean = statistics.fmean(json.loads((tmp_path / "r" / "0.json").read_text())["metrics"]["step"]["samples"])
    assert bf16["flops"] == flops
    assert bf16["mfu"] == pytest.approx(flops / (mean / 1e3) / 989e12)
    assert df[df["precision"] == "fp32"]["mfu"].isna().all()
    assert "a CPU run: no peak" in s["mfu_peaks"] and any("not in the peak table" in b for b in s["mfu_peaks"])
    assert s["mfu_best"]["bf16"]["mfu"] == pytest.approx(0.01, rel=1e-3)
    assert "| bf16 |" in text and "| 1.0 % | H200 SXM dense bf16 tensor cores, 989 TFLOP/s |" in text


def test_flat_in_work_and_profiled_launch_bound(tmp_path, rng):
    records = [record(rng, 16, "forward", "fp32", 10.0, 0.2), record(rng, 32, "forward", "fp32", 10.1, 0.2),
               record(rng, 16, "forward", "bf16", 10.0, 0.2), record(rng, 32, "forward", "bf16", 20.0, 0.2)]
    # An A2 profile of fp32 forward at context 32: 300 kernels, 3 of its 10 ms busy.
    kernel_ns = 3e6
    profile = make_record("A2", {"size": "tiny", "context": 32, "batch": BATCH}, "ok", {
        "table_unit": "CUDA kernels", "source": "nsys",
        "modes": {"forward": {"status": "ok", "python_ms": {"forward": {"mean": 10.0, "samples": [10.0, 10.0]}},
                              "ranges": [{"domain": "forward", "range": "forward", "instances": 2, "avg_ns": 10e6}],
                              "tables": {"forward": [{"name": "sgemm", "total_ns": kernel_ns, "instances": 300}]}}}})
    s, text = build(tmp_path, records, [profile])
    flat = {(b["context"], b["precision"]) for b in s["flat_in_work"]}
    assert flat == {(16, "fp32")}          # twice the work no slower; bf16's doubled time settles nothing
    assert [(b["context"], b["precision"]) for b in s["launch_bound"]] == [(32, "fp32")]
    table = (tmp_path / "A1" / "table.md").read_text()
    # A2's kernel time over A1's own step (10.1 ms here), not over A2's profiled step
    assert "launches: kernels 30 % of step" in table and "flat in work" in table
    # one table row per launch-bound point, not one long sentence
    row = next(line for line in text.splitlines() if line.startswith("| tiny | 32 | forward | 300 |"))
    assert "| 3.0 |" in row and "| 30 % |" in row
    assert s["launch_bound"][0]["kernels"] == 300 and s["launch_bound"][0]["kernel_ms"] == pytest.approx(3.0)
    # one definition of an A2 profile's busy share: A2(a)'s for the forward
    from cs336_systems.report import a2
    assert a2.table_a([profile])["gpu_busy"].tolist() == pytest.approx([0.3])


def test_busy_share_is_a2_kernel_time_over_a1s_own_step(tmp_path, rng):
    """A2's profiled step (20 ms under the profiler) is not A1's (10 ms): 6 ms of kernels fill 60 %
    of A1's step, so the point is not launch-bound, though 6 / 20 = 30 % of A2's own step."""
    records = [record(rng, 32, "forward", "fp32", 10.0, 0.01)]
    profile = make_record("A2", {"size": "tiny", "context": 32, "batch": BATCH}, "ok", {
        "table_unit": "CUDA kernels", "source": "nsys",
        "modes": {"forward": {"status": "ok", "python_ms": {"forward": {"mean": 20.0, "samples": [20.0, 20.0]}},
                              "ranges": [{"domain": "forward", "range": "forward", "instances": 2, "avg_ns": 20e6}],
                              "tables": {"forward": [{"name": "sgemm", "total_ns": 6e6, "instances": 300}]}}}})
    s, _ = build(tmp_path, records, [profile])
    assert s["launch_bound"] == [] and s["profiled_points"] == 1
    assert "kernels 60 % of step" in (tmp_path / "A1" / "table.md").read_text()


def paired_pair(rng, job_a="j1", job_b="j1", drift=(10.0, 30.0, 20.0, 40.0), gap=0.5):
    """fp32 and bf16 forward+backward records of one point, 4 rounds of 3 steps: every round moves
    both by a large drift (a busy host), bf16 ``gap`` ms slower in every round. Paired, the
    difference per round is ``gap`` with almost no scatter: slower. Unpaired, the drift makes each
    mean's spread ~ 10 ms: within the spread."""
    out = []
    for precision, job, extra in (("fp32", job_a, 0.0), ("bf16", job_b, gap)):
        rounds = [[d + extra + 0.01 * rng.gauss(0, 1) for _ in range(3)] for d in drift]
        steps = [t for r in rounds for t in r]
        r = record(rng, 32, "forward-backward", precision, 1.0, 0.0)
        m = r["metrics"]
        m["forward"], m["backward"] = _summary([t / 2 for t in steps]), _summary([t / 2 for t in steps])
        m["step"] = _summary(steps)
        m["rounds"] = [{"forward": [t / 2 for t in rr], "backward": [t / 2 for t in rr], "step": rr} for rr in rounds]
        m["turns"] = {"job": job, "with": ["fp32", "bf16"], "rounds": 4, "steps": 3, "warmup": 1}
        r["params"]["rounds"] = 4
        out.append(r)
    return out


@pytest.mark.parametrize("one_job", [True, False])
def test_bf16_verdict_is_paired_within_one_job_only(tmp_path, rng, one_job):
    """The same samples: measured in one job the per-round difference decides (slower); in two jobs
    the comparison spans processes and the means' spread leaves it open."""
    records = paired_pair(rng, "j1", "j1" if one_job else "j2")
    s, text = build(tmp_path, records)
    (c,) = a1.bf16_against_fp32(a1.mark_launch_bound(a1.records_frame(records), records=records), records)
    assert c["judged"] == ("paired" if one_job else "across processes")
    assert c["bf16_is"] == ("slower" if one_job else "within the spread")
    assert c["phases"] == {"forward": c["bf16_is"], "backward": c["bf16_is"]}
    assert len(s["bf16_slower"]) == (1 if one_job else 0)
    assert (s["bf16_paired"], s["bf16_across_processes"]) == ((1, 0) if one_job else (0, 1))
    assert s["grouped"] is True and s["rounds"] == 4
    table = (tmp_path / "A1" / "table.md").read_text()
    assert ("slower (paired)" if one_job else "within the spread (across processes)") in table
    assert ("each pair timed in turns in one process" in text) == one_job
