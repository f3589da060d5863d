"""A4(c): bf16 against fp32 by the judge (paired within the rounds of A1's one job a size); "the gain
grows with size" never claimed across separate jobs; bf16 slowdowns named row by row; the kernel
table's cause only where its numbers carry it; a run without the kernel records says so. Synthetic
records, answers known by construction."""
import json
import random
import statistics
from pathlib import Path

import pytest

from cs336_systems.profiling.step_kernels import KINDS
from cs336_systems.records import make_record, write_json_atomic
from cs336_systems.report import a4, writeup
from cs336_systems.report.spread import NOT_SETTLED, WITHIN, judge_rounds

TEMPLATES = Path(__file__).resolve().parents[2] / "writeup" / "templates"
ROUNDS, STEPS = 10, 3


def _summary(samples):
    return {"mean": statistics.fmean(samples), "std": statistics.stdev(samples), "n": len(samples), "samples": samples}


def _in_turns(rng, per_round: dict, drift: list[float]) -> dict:
    """Per precision, its rounds (``per_round[precision][i]``: that turn's level), each round scaled
    by ``drift[i]`` on every side (a slower host slows every phase alike): the metrics of one job's
    records, phase by phase."""
    out = {}
    for precision, phases in per_round.items():
        rounds = [{phase: [levels[i] * drift[i] * (1 + 1e-4 * rng.gauss(0, 1)) for _ in range(STEPS)]
                   for phase, levels in phases.items()} for i in range(len(drift))]
        metrics = {phase: _summary([t for r in rounds for t in r[phase]]) for phase in phases}
        out[precision] = metrics | {"rounds": rounds}
    return out


def timing_records(tmp_path, rng, bf16_forward, *, one_job=True, bf16_backward=None):
    """forward+backward at context 512, one job a size whose precisions took turns in ``ROUNDS``
    rounds (``one_job`` False: each precision its own process): fp32 forward 100 ms a round; bf16's
    forward per round as given per size; backward twice forward (bf16's as ``bf16_backward`` gives it)."""
    paths = []
    for size, bf16 in bf16_forward.items():
        levels = {"fp32": [100.0] * ROUNDS, "bf16": bf16}
        backward = {"fp32": [200.0] * ROUNDS, "bf16": (bf16_backward or {}).get(size, [2 * x for x in bf16])}
        drift = [rng.uniform(0.8, 1.2) for _ in range(ROUNDS)]
        metrics = _in_turns(rng, {p: {"forward": lv, "backward": backward[p]} for p, lv in levels.items()}, drift)
        for precision, m in metrics.items():
            job = f"{size}" if one_job else f"{size}-{precision}"
            m["turns"] = {"job": job, "with": list(levels), "rounds": ROUNDS, "steps": STEPS, "warmup": 1}
            params = {"size": size, "context": 512, "mode": "forward-backward", "precision": precision, "batch": 4,
                      "steps": STEPS, "rounds": ROUNDS}
            r = make_record("A1", params, "ok", m)
            paths.append(write_json_atomic(tmp_path / "A1" / f"{size}_{precision}.json", r))
    return paths


def steady(ms):
    return [ms] * ROUNDS


def swinging(ms, by):
    """A level that swings ``by`` either way round to round: the judge cannot call its side."""
    return [ms + by * (-1) ** i for i in range(ROUNDS)]


def dtypes_file(tmp_path):
    return write_json_atomic(tmp_path / "dtypes.json", [
        make_record("A4", {"part": "dtypes", "device": "cuda", "autocast_dtype": "bf16"}, "skipped", reason="no CUDA")])


def kernel_record(tmp_path, precision, *, kernels, casts, busy_ms, step_ms, gpu="NVIDIA H200", gemms=100, job="k"):
    """One precision's record of the kernel job: its steps timed in ``ROUNDS`` rounds of one job
    (``job``), then profiled."""
    kinds = {k: {"count": 0.0, "ms": 0.0} for k in KINDS}
    kinds["cast"] = {"count": float(casts), "ms": 0.002 * casts}
    kinds["GEMM"] = {"count": float(gemms), "ms": busy_ms / 2}
    kinds["elementwise"] = {"count": float(kernels - casts - gemms), "ms": busy_ms / 2 - 0.002 * casts}
    rng = random.Random(f"{precision} {job}")
    rounds = [{"step": [step_ms + 0.2 * rng.gauss(0, 1) for _ in range(STEPS)]} for _ in range(ROUNDS)]
    metrics = {"unit": "CUDA kernels", "step": _summary([t for r in rounds for t in r["step"]]), "rounds": rounds,
               "turns": {"job": job, "with": ["fp32", "bf16"], "rounds": ROUNDS, "steps": STEPS, "warmup": 1},
               "count_per_step": [kernels] * 3,
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


def test_bf16_against_fp32_is_the_judge_s_per_round_speedup(tmp_path, rng):
    """small's bf16 forward 125 ms against fp32's 100 in every round: slower, named row by row;
    xl's swings 30 ms either way round to round: within the spread; medium clearly faster."""
    # medium's bf16 backward 80 ms against forward's 50: backward gains more (2.5× against 2×)
    timing = timing_records(tmp_path, rng, {"small": steady(125.0), "medium": steady(50.0), "xl": swinging(100.0, 30.0)},
                            bf16_backward={"medium": steady(80.0)})
    s, text = report(tmp_path, timing)
    # the independent reference: the judge on the records' own rounds, speedup = fp32 / bf16
    records = {p.stem: json.loads(p.read_text()) for p in timing}
    for size, expected in (("small", "lower"), ("medium", "higher"), ("xl", WITHIN)):
        rounds = {pr: [r["forward"] for r in records[f"{size}_{pr}"]["metrics"]["rounds"]] for pr in ("fp32", "bf16")}
        assert judge_rounds(rounds["fp32"], rounds["bf16"], ratio=True).verdict == expected
    assert [(r["size"], r["series"]) for r in s["bf16_slower"]] == [("small", "forward of forward+backward"),
                                                                     ("small", "backward of forward+backward")]
    assert [r["size"] for r in s["bf16_within_spread"]] == ["xl", "xl"] and s["bf16_not_settled"] == []
    assert s["timing_paired"] == 6
    assert "| small | 512 | forward of forward+backward | " in text
    table = (tmp_path / "A4" / "timing.md").read_text()
    assert f"slower (paired, {ROUNDS} rounds)" in table and f"within the spread (paired, {ROUNDS} rounds)" in table
    # backward's speedup against forward's, round by round; the reference from the rounds themselves
    for size in ("small", "medium", "xl"):
        per = {ph: [[statistics.median(f[ph]) / statistics.median(b[ph])]
                    for f, b in zip(records[f"{size}_fp32"]["metrics"]["rounds"], records[f"{size}_bf16"]["metrics"]["rounds"])]
               for ph in ("forward", "backward")}
        assert f"{size} ctx 512" in s["backward_vs_forward"][judge_rounds(per["backward"], per["forward"], ratio=True).verdict]
    assert "medium ctx 512" in s["backward_vs_forward"]["higher"]
    assert "backward gains more at medium ctx 512" in text


def test_the_gain_is_never_said_to_grow_across_separate_jobs(tmp_path, rng):
    """Each size is its own job, one speedup a size: however clean each size's paired speedup, a
    step from one size to the next compares two jobs and is not settled, and the prose says so."""
    timing = timing_records(tmp_path, rng, {"small": steady(90.0), "medium": steady(60.0), "large": steady(40.0)})
    s, text = report(tmp_path, timing)
    forward = s["speedup_trend"]["forward of forward+backward, context 512"]
    assert forward["sizes"] == ["small", "medium", "large"] and forward["speedups"][0] < forward["speedups"][-1]
    assert "grows with model size" not in text and "growing at every size" not in text
    assert "so these records do not settle how the speedup moves with size." in text
    assert "the trends across sizes below compare separate jobs, one speedup\na size: the judge settles no such step" in text
    assert not s["bf16_slower"] and "Where bf16 autocast is slower" not in text


def test_precisions_from_two_jobs_stop_the_report_in_one_line(tmp_path, rng, capsys):
    """A1's benchmark times a point's precisions taking turns in one job; records of one point from
    two jobs are no shape it writes, so the report does not word them: it stops, naming the point
    and the jobs, in one line."""
    timing = timing_records(tmp_path, rng, {"small": steady(125.0)}, one_job=False)
    with pytest.raises(SystemExit):
        a4.main(["--dtypes", str(dtypes_file(tmp_path)), "--timing-records", *map(str, timing),
                 "--out-dir", str(tmp_path / "A4")])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.endswith("small ctx 512 forward-backward not measured in one job: fp32 in job small-fp32, "
                          "bf16 in job small-bf16")


def test_timings_say_which_a1_points_they_are(tmp_path, rng):
    """A4(c)'s timings are A1's benchmark run at A4's points only: the section names those points
    and does not send the reader to an A1 section the run may not build."""
    s, text = report(tmp_path, timing_records(tmp_path, rng, {"small": steady(90.0), "xl": steady(40.0)}))
    assert s["timing_grid"] == {"records": 4, "sizes": ["small", "xl"], "contexts": [512],
                                "modes": ["forward-backward"], "precisions": ["fp32", "bf16"]}
    assert "run for this section at 4 points: small, xl, context\n512, forward-backward, fp32 and bf16" in text
    assert "they are not A1's grid" in text and "From the A1 records" not in text


def test_missing_kernel_records_say_not_measured(tmp_path, rng):
    s, text = report(tmp_path, timing_records(tmp_path, rng, {"small": steady(90.0)}))
    assert s["kernels"] is None
    assert "Not measured in this run" in text


def test_kernel_table_blames_nothing_the_profiles_do_not_settle(tmp_path, rng):
    """The step is paired (one timing job): bf16 slower beyond the spread. The GPU's busy time comes
    from two profiles run one after the other, not in turns: one profile a side, not settled, so the
    prose does not split the slowdown between kernel time and launches."""
    timing = timing_records(tmp_path, rng, {"small": steady(90.0)})
    same_busy = [kernel_record(tmp_path, "fp32", kernels=800, casts=0, busy_ms=5.0, step_ms=16.0),
                 kernel_record(tmp_path, "bf16", kernels=1100, casts=300, busy_ms=5.0, step_ms=22.0)]
    s, text = report(tmp_path, timing, same_busy)
    c = s["kernels"]["compare"]
    assert (c["extra_kernels"], c["extra_casts"], c["bf16_step_is"], c["step_judged"]) == (300, 300, "slower", "paired")
    assert c["step_low_ms"] < 6.0 < c["step_high_ms"] and c["rounds"] == ROUNDS
    assert c["bf16_busy_is"] == NOT_SETTLED and not c["slowdown_outside_kernels"]
    assert c["launch_bound"] == {"fp32": True, "bf16": True}
    assert "bf16 runs 300 more kernels per step than fp32, net of +300 cast (" in text
    assert "slower beyond the spread, paired per round (the judge's interval of bf16's step minus fp32's:" in text
    assert "So the slowdown is not kernel time" not in text and "part of the slowdown is kernel time" not in text
    assert "Whether bf16's kernels keep the GPU busy longer than fp32's these records do not settle" in text
    table = (tmp_path / "A4" / "kernels.md").read_text()
    assert "| cast " in table and "GPU busy (union of kernels)" in table

    # the two precisions' steps from separate jobs: the step itself is not settled
    apart = [kernel_record(tmp_path, "fp32", kernels=800, casts=0, busy_ms=5.0, step_ms=16.0, job="a"),
             kernel_record(tmp_path, "bf16", kernels=1100, casts=300, busy_ms=9.0, step_ms=22.0, job="b")]
    s, text = report(tmp_path, timing, apart)
    assert s["kernels"]["compare"]["bf16_step_is"] == NOT_SETTLED
    assert "these records do not settle which is faster (the two ran in separate processes)" in text


def test_the_net_kernel_count_is_split_into_the_kinds_that_moved(tmp_path, rng):
    """bf16 adds casts and runs fewer GEMMs and elementwise kernels: the net +198 says so, kind by kind."""
    timing = timing_records(tmp_path, rng, {"small": steady(90.0)})
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


@pytest.mark.parametrize("busy_share, idle", [(0.3, True), (0.5, None), (0.7, False)])
def test_the_gpu_is_called_idle_most_of_the_step_only_over_both_ranges(rng, busy_share, idle):
    """Busy time under the profiler and the step timed without it never took turns: "idle most of the
    step" holds only where the longest busy step is under half the fastest timed step (and its
    opposite only where the shortest is at least half the slowest); a busy time at half the median
    step, inside the steps' scatter, settles neither."""
    step_ms = rng.uniform(20.0, 80.0)
    steps = [step_ms * (1 + rng.uniform(-0.1, 0.1)) for _ in range(10)]
    busy = [busy_share * step_ms * (1 + rng.uniform(-0.01, 0.01)) for _ in range(10)]
    assert a4.LAUNCH_BOUND_BUSY == 0.5
    assert a4.idle_most({"busy_ms_per_step": busy, "step": {"samples": steps}}) is idle
