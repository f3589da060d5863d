"""A4(c): "the gain grows with size" only where every step exceeds the spread; bf16 slowdowns named
row by row; the kernel table's cause only where its numbers carry it; a run without the kernel
records says so. Synthetic records, answers known by construction."""
import json
import random
import statistics
from pathlib import Path

import pytest

from cs336_systems.profiling.step_kernels import KINDS
from cs336_systems.records import make_record, write_json_atomic
from cs336_systems.report import a4, writeup

TEMPLATES = Path(__file__).resolve().parents[2] / "writeup" / "templates"
STEPS = 10


def _timing(rng, mean, spread):
    samples = [mean + spread * rng.gauss(0, 1) for _ in range(STEPS)]
    return {"mean": statistics.fmean(samples), "std": statistics.stdev(samples), "n": STEPS, "samples": samples}


def timing_records(tmp_path, rng, bf16_forward):
    """forward+backward at context 512: fp32 forward 100 ms ± 0.1 everywhere; bf16 as given
    (mean, spread) per size; backward 2× forward in both precisions."""
    paths = []
    for size, (mean, spread) in bf16_forward.items():
        for precision, (m, s) in (("fp32", (100.0, 0.1)), ("bf16", (mean, spread))):
            params = {"size": size, "context": 512, "mode": "forward-backward", "precision": precision, "batch": 4,
                      "steps": STEPS}
            r = make_record("A1", params, "ok", {"forward": _timing(rng, m, s), "backward": _timing(rng, 2 * m, s)})
            paths.append(write_json_atomic(tmp_path / "A1" / f"{size}_{precision}.json", r))
    return paths


def dtypes_file(tmp_path):
    return write_json_atomic(tmp_path / "dtypes.json", [
        make_record("A4", {"part": "dtypes", "device": "cuda", "autocast_dtype": "bf16"}, "skipped", reason="no CUDA")])


def kernel_record(tmp_path, precision, *, kernels, casts, busy_ms, step_ms, gpu="NVIDIA H200", gemms=100):
    kinds = {k: {"count": 0.0, "ms": 0.0} for k in KINDS}
    kinds["cast"] = {"count": float(casts), "ms": 0.002 * casts}
    kinds["GEMM"] = {"count": float(gemms), "ms": busy_ms / 2}
    kinds["elementwise"] = {"count": float(kernels - casts - gemms), "ms": busy_ms / 2 - 0.002 * casts}
    rng = random.Random(1)
    metrics = {"unit": "CUDA kernels", "step": _timing(rng, step_ms, 0.2), "count_per_step": [kernels] * 3,
               "time_ms": busy_ms, "busy_ms": busy_ms, "busy_ms_per_step": [busy_ms + d for d in (-0.01, 0, 0.01)],
               "busy_share": busy_ms / step_ms, "kinds": kinds, "rows": [], "unattributed_per_step": 0.0}
    params = {"part": "kernels", "size": "small", "context": 128, "mode": "forward-backward", "batch": 4,
              "precision": precision, "device": "cuda"}
    r = make_record("A4", params, "ok", metrics)
    r["provenance"]["gpu"] = gpu
    return write_json_atomic(tmp_path / "kernels" / f"{precision}.json", r)


def report(tmp_path, timing, kernels=()):
    out = tmp_path / "A4"
    assert a4.main(["--dtypes", str(dtypes_file(tmp_path)), "--timing-records", *map(str, timing),
                    "--kernel-records", *map(str, kernels), "--out-dir", str(out)]) == 0
    text = writeup.Renderer("md", tmp_path / "w.md", TEMPLATES).section("A4", out / "summary.json")
    return json.loads((out / "summary.json").read_text()), text


@pytest.fixture
def rng():
    return random.Random(random.getrandbits(32))


def test_grows_with_size_is_refused_when_a_step_is_within_the_spread(tmp_path, rng):
    """The h100 A4(c) case: xl's bf16 forward (131 ± 36 ms) next to large's: the speedup may not
    have grown from large to xl, so "grows with size in every series" must not be written."""
    timing = timing_records(tmp_path, rng, {"small": (125.0, 1.0), "medium": (80.0, 1.0), "large": (55.0, 1.0),
                                            "xl": (52.0, 36.0), "2.7B": (25.0, 1.0)})
    s, text = report(tmp_path, timing)
    forward = s["speedup_trend"]["forward of forward+backward, context 512"]
    assert [st["direction"] for st in forward["steps"]] == ["higher", "higher", "within the spread", "higher"]
    assert forward["verdict"] == "not settled" and not s["speedup_grows_with_size"]
    assert "grows with model size" not in text
    assert "| not settled: large → xl within the spread |" in text
    # small's bf16 forward (125 ms against fp32's 100) is a slowdown the prose names
    assert [(r["size"], r["series"]) for r in s["bf16_slower"]] == [("small", "forward of forward+backward"),
                                                                     ("small", "backward of forward+backward")]
    assert "| small | 512 | forward of forward+backward | 100." in text


def test_grows_with_size_when_every_step_exceeds_the_spread(tmp_path, rng):
    timing = timing_records(tmp_path, rng, {"small": (90.0, 0.5), "medium": (60.0, 0.5), "large": (40.0, 0.5)})
    s, text = report(tmp_path, timing)
    assert s["speedup_grows_with_size"] and "In every series the gain grows with model size" in text
    assert "| yes, at every step beyond the spread |" in text
    assert not s["bf16_slower"] and "Where bf16 autocast is slower" not in text


def test_timings_say_which_a1_points_they_are(tmp_path, rng):
    """A4(c)'s timings are A1's benchmark run at A4's points only: the section names those points
    and does not send the reader to an A1 section the run may not build."""
    s, text = report(tmp_path, timing_records(tmp_path, rng, {"small": (90.0, 0.5), "xl": (40.0, 0.5)}))
    assert s["timing_grid"] == {"records": 4, "sizes": ["small", "xl"], "contexts": [512],
                                "modes": ["forward-backward"], "precisions": ["fp32", "bf16"]}
    assert "run for this section at 4 points: small, xl, context\n512, forward-backward, fp32 and bf16" in text
    assert "they are not A1's grid" in text and "From the A1 records" not in text


def test_missing_kernel_records_say_not_measured(tmp_path, rng):
    s, text = report(tmp_path, timing_records(tmp_path, rng, {"small": (90.0, 0.5)}))
    assert s["kernels"] is None
    assert "Not measured in this run" in text


def test_kernel_table_blames_launches_only_when_the_gpu_did_no_more_work(tmp_path, rng):
    timing = timing_records(tmp_path, rng, {"small": (90.0, 0.5)})
    same_busy = [kernel_record(tmp_path, "fp32", kernels=800, casts=0, busy_ms=5.0, step_ms=16.0),
                 kernel_record(tmp_path, "bf16", kernels=1100, casts=300, busy_ms=5.0, step_ms=22.0)]
    s, text = report(tmp_path, timing, same_busy)
    c = s["kernels"]["compare"]
    assert (c["extra_kernels"], c["extra_casts"], c["bf16_step_is"]) == (300, 300, "slower")
    assert c["launch_bound"] == {"fp32": True, "bf16": True} and c["slowdown_outside_kernels"]
    assert "bf16 runs 300 more kernels per step than fp32, net of +300 cast (" in text
    assert "So the slowdown is not kernel time" in text
    table = (tmp_path / "A4" / "kernels.md").read_text()
    assert "| cast " in table and "GPU busy (union of kernels)" in table

    more_busy = [kernel_record(tmp_path, "fp32", kernels=800, casts=0, busy_ms=5.0, step_ms=16.0),
                 kernel_record(tmp_path, "bf16", kernels=1100, casts=300, busy_ms=9.0, step_ms=22.0)]
    s, text = report(tmp_path, timing, more_busy)
    assert not s["kernels"]["compare"]["slowdown_outside_kernels"]
    assert "So the slowdown is not kernel time" not in text and "part of the slowdown is kernel time" in text


def test_the_net_kernel_count_is_split_into_the_kinds_that_moved(tmp_path, rng):
    """bf16 adds casts and runs fewer GEMMs and elementwise kernels: the net +198 says so, kind by kind."""
    timing = timing_records(tmp_path, rng, {"small": (90.0, 0.5)})
    kernels = [kernel_record(tmp_path, "fp32", kernels=800, casts=0, gemms=280, busy_ms=5.0, step_ms=16.0),
               kernel_record(tmp_path, "bf16", kernels=998, casts=414, gemms=100, busy_ms=5.0, step_ms=16.0)]
    s, text = report(tmp_path, timing, kernels)
    c = s["kernels"]["compare"]
    assert c["kernel_changes"] == [{"kind": "cast", "count": 414}, {"kind": "GEMM", "count": -180},
                                   {"kind": "elementwise", "count": -36}]
    assert "bf16 runs 198 more kernels per step than fp32, net of +414 cast, -180 GEMM, -36 elementwise (" in text
    fewer = [kernel_record(tmp_path, "fp32", kernels=900, casts=0, busy_ms=5.0, step_ms=16.0),
             kernel_record(tmp_path, "bf16", kernels=850, casts=50, busy_ms=5.0, step_ms=16.0)]
    s, text = report(tmp_path, timing, fewer)
    assert "bf16 runs 50 fewer kernels per step than fp32, net of +50 cast, -100 elementwise (" in text
