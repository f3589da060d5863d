"""B2 report: whole-model records only, B1 rows only, or both; each renders its writeup section."""
import json
import random
import statistics
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cs336_systems import compile_bench
from cs336_systems.records import make_record
from cs336_systems.report import b2
from cs336_systems.report.b2_whole_model import SAME
from cs336_systems.report.writeup import Renderer
from cs336_systems.rounds import Job, Outcome

TEMPLATES = Path(__file__).resolve().parents[2] / "writeup" / "templates"


def _job(name: str, rounds: int) -> Job:
    """The job of one compile_bench process: eager and compiled take turns, one timed step a turn."""
    return Job(name, ("eager", "compiled"), rounds, steps=1, warmup=3)


def _measured(job: Job, name: str, rounds: list[dict[str, list[float]]], peak_bytes: int = 2**30,
              first_calls_overhead_seconds: float = 1.0, initial_loss: float = 9.21) -> dict:
    """A variant as compile_bench records it: ``rounds.Outcome.metrics`` of its turns in ``job`` (each
    round: phase -> its samples; the step is their sum), and what compile_bench adds to them."""
    rounds = [r | {"step": [sum(s) for s in zip(*r.values())]} for r in rounds]
    outcome = Outcome(name, rounds=rounds, warmup_steps=[1.0] * job.warmup, steps_per_turn=job.steps)
    return {"status": "ok", **outcome.metrics(job), "first_forward_ms": 1.0,
            "first_calls_overhead_seconds": first_calls_overhead_seconds, "initial_loss": initial_loss,
            "peak_memory_bytes": peak_bytes}


def _variant(rng: random.Random, job: Job, name: str, step_ms: float, **extra) -> dict:
    rounds = [{phase: [rng.uniform(0.9, 1.1) * step_ms * share]
               for phase, share in (("forward", 0.3), ("backward", 0.6), ("optimizer", 0.1))}
              for _ in range(job.rounds)]
    return _measured(job, name, rounds, **extra)


def _whole_record(rng: random.Random, size: str, mode: str, eager_ms: float, compiled_ms: float,
                  eager_status: str = "ok") -> dict:
    """A record shaped by compile_bench's own functions (turns, speed-ups, loss check), from random samples."""
    job = _job(f"{size}-{mode}", len(DRIFT))
    eager = (_variant(rng, job, "eager", eager_ms) if eager_status == "ok"
             else {"status": eager_status, "message": "CUDA out of memory"})
    compiled = _variant(rng, job, "compiled", compiled_ms, initial_loss=9.21 + 1e-6,
                        first_calls_overhead_seconds=rng.uniform(5, 30))
    variants = {"eager": eager, "compiled": compiled}
    metrics = {"variants": variants, "loss_check": compile_bench.loss_check(eager, compiled),
               "speedup": compile_bench.speedups(eager, compiled), "parameters": 1,
               "compile_seconds": compiled["first_calls_overhead_seconds"], "compiled_graphs": 1}
    params = {"size": size, "context": 512, "batch": 4, "mode": mode, "compile": "blocks", "warmup": job.warmup,
              "steps": job.steps, "rounds": job.rounds}
    return make_record("B2", params, compile_bench.overall_status(variants), metrics)


def _b1_rows(tmp_path: Path) -> list[str]:
    def row(seq, compiled, forward_ms):
        params = {"d": 16, "seq": seq, "batch": 2, "iters": 3, "compiled": compiled, "device": "cpu"}
        metrics = {"forward_ms": forward_ms, "backward_ms": 2 * forward_ms, "memory_before_backward_bytes": 2**20,
                   "accounting_bytes": {"saved": 1, "forward_peak": 1, "backward_peak": 1}}
        return make_record("B1", params, "ok", metrics)
    paths = []
    for name, rows in (("eager.json", [row(64, False, 3.0)]), ("compiled.json", [row(64, True, 1.5)])):
        (tmp_path / name).write_text(json.dumps(rows))
        paths.append(str(tmp_path / name))
    return paths


# A drift that moves every entrant of a round alike, over the 8 rounds of a job.
DRIFT = [1.0, 1.01, 0.99, 1.02, 0.98, 1.0, 1.01, 0.99]


def _in_turns(metrics: dict, job: str = "b1-job") -> dict:
    """B1 ``metrics`` as a row job in turns writes them: each round's forward and backward means its
    times under the round's drift."""
    rounds = [{"forward": [metrics["forward_ms"] * k], "backward": [metrics["backward_ms"] * k]} for k in DRIFT]
    return metrics | {"rounds": rounds, "turns": {"job": job, "with": ["eager", "compiled"], "rounds": len(DRIFT)}}


def _whole_files(tmp_path: Path, records: list[dict]) -> list[str]:
    paths = []
    for r in records:
        path = tmp_path / f"{r['params']['size']}_{r['params']['mode']}.json"
        path.write_text(json.dumps(r))
        paths.append(str(path))
    return paths


def _render(out_dir: Path) -> str:
    renderer = Renderer("md", out_dir.parent / "writeup" / "w.md", TEMPLATES)
    text = renderer.section("B2", out_dir / "summary.json")
    Renderer("html", out_dir.parent / "writeup" / "w.html", TEMPLATES).section("B2", out_dir / "summary.json")
    return text


def test_whole_model_records_only(tmp_path, seed):
    rng = random.Random(seed)
    records = [_whole_record(rng, "small", "forward", 10.0, 5.0), _whole_record(rng, "small", "train-step", 30.0, 20.0),
               _whole_record(rng, "xl", "train-step", 0, 90.0, eager_status="oom")]
    out = tmp_path / "B2"
    assert b2.main(["--whole-model", *_whole_files(tmp_path, records), "--out-dir", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["attention_points"] == 0 and summary["speedup"] is None
    w = summary["whole_model"]
    expected = [r["metrics"]["variants"]["eager"]["step"]["mean"] / r["metrics"]["variants"]["compiled"]["step"]["mean"]
                for r in records[:2]]
    assert w["step_speedup"]["median"] == pytest.approx(statistics.median(expected))
    assert w["best"]["mode"] == ("forward" if expected[0] > expected[1] else "train-step")
    assert w["both_ok"] == 2 and w["points"] == 3
    assert w["fits_only_compiled"] == ["xl train-step"] and "eager oom" in w["not_ok"][0]
    assert w["loss_checks"] == {"checked": 2, "passed": 2, "max_abs_diff": pytest.approx(1e-6), "rtol": 1e-4,
                                "failed": []}
    table = (out / "whole_model.csv").read_text().splitlines()
    assert len(table) == 4 and "OOM" in table[-1]
    assert (out / "whole_model_speedup.png").stat().st_size > 0
    assert (out / "table.csv").read_text().startswith("d,seq,")      # (a)'s table exists, empty
    text = _render(out)
    assert "did not make" in text and "whole model, compiled against eager." in text
    assert "regional" in text and "xl train-step" in text


def test_b1_rows_only_keeps_part_a(tmp_path):
    out = tmp_path / "B2"
    assert b2.main(["--rows", *_b1_rows(tmp_path), "--out-dir", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["attention_points"] == 1 and summary["speedup"]["forward"]["median"] == 2.0
    assert summary["whole_model"] is None
    assert (out / "whole_model.csv").read_text().startswith("size,mode,")
    text = _render(out)
    assert "runs forward at 2.00× eager's speed" in text and "was not measured in this run" in text


def test_both_parts(tmp_path, seed):
    out = tmp_path / "B2"
    whole = _whole_files(tmp_path, [_whole_record(random.Random(seed), "medium", "forward-backward", 12.0, 8.0)])
    assert b2.main(["--rows", *_b1_rows(tmp_path), "--whole-model", *whole, "--out-dir", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["provenance"]["records"] == 3
    assert summary["speedup"]["forward"]["median"] == 2.0 and summary["whole_model"]["points"] == 1
    text = _render(out)
    assert "runs forward at 2.00× eager's speed" in text and "medium" in text


@pytest.mark.parametrize("args, fragment", [
    ([], "nothing to report"),
    (["--whole-model", "MISSING"], "No such file"),
    (["--whole-model", "B1LIST"], "not a record"),
    (["--whole-model", "B1RECORD"], "not a B2 whole-model record"),
])
def test_bad_input_is_one_line(tmp_path, capsys, args, fragment):
    eager, _ = _b1_rows(tmp_path)
    (tmp_path / "b1_record.json").write_text(json.dumps(json.loads(Path(eager).read_text())[0]))
    names = {"MISSING": str(tmp_path / "missing.json"), "B1LIST": eager, "B1RECORD": str(tmp_path / "b1_record.json")}
    with pytest.raises(SystemExit) as exc:
        b2.main([names.get(a, a) for a in args] + ["--out-dir", str(tmp_path / "B2")])
    if exc.value.code == 2:                              # argparse's one line
        errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    else:                                                # a damaged record: one line, left for the next run
        errors = [str(exc.value.code)]
        assert errors[0].startswith("damaged record ") and Path(names[args[1]]).exists()
    assert len(errors) == 1 and "\n" not in errors[0] and fragment in errors[0]


def _peak_rows(tmp_path: Path, compiled_backward_peak: int, eager_oom_during: str | None) -> list[str]:
    """B1 rows at two lengths with peaks; at the longer one eager ran out of memory during a pass."""
    def row(seq, compiled, forward_ms, backward_peak, status="ok", during=None):
        params = {"d": 16, "seq": seq, "batch": 2, "iters": 3, "compiled": compiled, "device": "cuda"}
        if status != "ok":
            return make_record("B1", params, status, {"failed_during": during}, reason="CUDA out of memory")
        metrics = {"forward_ms": forward_ms, "backward_ms": 2 * forward_ms, "memory_before_backward_bytes": 4 * 2**20,
                   "forward_peak_bytes": 6 * 2**20, "backward_peak_bytes": backward_peak,
                   "accounting_bytes": {"saved": 1, "forward_peak": 1, "backward_peak": 1}}
        return make_record("B1", params, "ok", _in_turns(metrics))
    eager = [row(64, False, 0.05, 10 * 2**20), row(4096, False, 3.0, 10 * 2**20),
             row(8192, False, 0, 0, "oom", eager_oom_during)]
    compiled = [row(64, True, 0.08, compiled_backward_peak), row(4096, True, 2.0, compiled_backward_peak),
                row(8192, True, 8.0, compiled_backward_peak)]
    paths = []
    for name, rows in (("eager.json", eager), ("compiled.json", compiled)):
        (tmp_path / name).write_text(json.dumps(rows))
        paths.append(str(tmp_path / name))
    return paths


@pytest.mark.parametrize("compiled_peak_mib, lower", [(7, True), (10, False)])
def test_part_a_says_what_the_memory_data_show(tmp_path, compiled_peak_mib, lower):
    """#20 item 7: B2(a) said compiled attention keeps 'the memory the same' beside a length that
    fits only compiled. The memory held for backward and the backward peak are compared from the
    rows, and the pass in which eager ran out is named only when the record says it."""
    out = tmp_path / "B2"
    assert b2.main(["--rows", *_peak_rows(tmp_path, compiled_peak_mib * 2**20, "backward"),
                    "--out-dir", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    mem = summary["memory"]
    assert mem["held_for_backward"]["outcome"] == "same" and mem["backward_peak"]["lower"] == (2 if lower else 0)
    assert mem["backward_peak"]["max"] == pytest.approx(compiled_peak_mib / 10)
    assert summary["fits_only_compiled"] == [{"d": 16, "seq": 8192, "eager_failed_during": "backward",
                                              "eager_needed_at_least_MiB": None,
                                              "compiled_backward_peak_MiB": compiled_peak_mib}]
    assert summary["only_compiled_memory"] is None          # the message holds no numbers: eager's need is unknown
    assert summary["forward_losses"]["seqs"] == [64] and summary["forward_losses"]["all_shorter_than_wins"]
    assert summary["forward_losses"]["extra_us"] == [pytest.approx(30.0)]
    text = _render(out)
    assert "Eager ran out during backward, as its records say" in text
    assert ("backward peak: 0.700–0.700, lower at every one of the 2 points" in text) is lower
    assert "do not hold both compiled's backward peak and what eager's failing pass needed" in text
    # the answer does not say "the same memory" of a backward whose peak is lower
    answer = text.split("**(a)")[0]
    assert "saves\nthe same memory for backward" in answer
    assert ("but peaks lower during it, at every one of the 2 points both ran\n(0.70–0.70× eager's backward peak)"
            in answer) is lower


def test_records_without_peaks_say_so(tmp_path):
    out = tmp_path / "B2"
    assert b2.main(["--rows", *_b1_rows(tmp_path), "--out-dir", str(out)]) == 0
    assert "hold no forward or backward peaks" in _render(out)


def _b1_oom_rows(tmp_path: Path) -> list[str]:
    """Eager runs out at the longer length with an allocator message (no recorded pass) holding three
    N × N matrices, more than forward ever holds, and asking for one more, with reserved-but-unallocated
    memory that would have covered it; compiled runs there."""
    from cs336_systems.attention.sweep import attention_memory
    batch, d, seq = 8, 16, 4096

    def row(seq, compiled, status="ok", message=None):
        params = {"d": d, "seq": seq, "batch": batch, "iters": 3, "compiled": compiled, "device": "cuda"}
        metrics = {"accounting_bytes": attention_memory(batch, seq, d)}
        if status == "ok":
            metrics |= {"forward_ms": 1.0, "backward_ms": 2.0, "memory_before_backward_bytes": 2**20}
        return make_record("B1", params, status, metrics, reason=message)

    acc = attention_memory(batch, seq, d)
    square = acc["backward_peak"] - acc["forward_peak"]
    held = acc["saved"] + 2 * square
    gib = lambda n: f"{n / 2**30:.2f} GiB"                                           # noqa: E731
    message = (f"OutOfMemoryError: CUDA out of memory. Tried to allocate {gib(square)}. GPU 0 has a total capacity "
               f"of {gib(4 * acc['backward_peak'])} of which {gib(square / 4)} is free. Including non-PyTorch memory, "
               f"this process has {gib(held + square)} memory in use. Of the allocated memory {gib(held)} is allocated "
               f"by PyTorch, and {gib(square)} is reserved by PyTorch but unallocat")
    eager = [row(1024, False), row(seq, False, "oom", message)]
    compiled = [row(1024, True), row(seq, True)]
    paths = []
    for name, rows in (("eager.json", eager), ("compiled.json", compiled)):
        (tmp_path / name).write_text(json.dumps(rows))
        paths.append(str(tmp_path / name))
    return paths


def test_a_pass_the_records_do_not_name_is_not_known(tmp_path):
    """Records that do not name the pass: the section says so, whatever the tensors held at the failure."""
    out = tmp_path / "B2"
    assert b2.main(["--rows", *_b1_oom_rows(tmp_path), "--out-dir", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    (point,) = summary["fits_only_compiled"]
    assert point["eager_failed_during"] is None
    assert summary["only_compiled_pass_known"] is None and summary["only_compiled_passes"] == []
    text = _render(out)
    assert "do not say in which pass eager ran out" in text
    assert "fragmentation" not in text


def _shared_and_only_compiled(tmp_path: Path, rng: random.Random, higher: int, compiled_over_need: float) -> list[str]:
    """B1 rows with peaks: eager and compiled both run at four lengths, compiled's backward peak higher
    than eager's at ``higher`` of them and lower at the rest; at the fifth eager runs out in backward
    holding its closed-form peak and asking for one N × N matrix (an allocator message), and compiled
    runs, its backward peak ``compiled_over_need`` times what eager needed at least."""
    from cs336_systems.attention.sweep import attention_memory
    batch, d = 8, 16

    def row(seq, compiled, backward_peak=None, message=None):
        params = {"d": d, "seq": seq, "batch": batch, "iters": 3, "compiled": compiled, "device": "cuda"}
        metrics = {"accounting_bytes": attention_memory(batch, seq, d)}
        if message:
            return make_record("B1", params, "oom", metrics | {"failed_during": "backward"}, reason=message)
        metrics |= {"forward_ms": 1.0, "backward_ms": 2.0, "memory_before_backward_bytes": 2**20,
                    "forward_peak_bytes": backward_peak // 2, "backward_peak_bytes": backward_peak}
        return make_record("B1", params, "ok", metrics)

    eager, compiled = [], []
    for i, seq in enumerate((512, 1024, 2048, 4096)):
        peak = int(attention_memory(batch, seq, d)["backward_peak"] * rng.uniform(1.2, 2))
        eager.append(row(seq, False, peak))
        compiled.append(row(seq, True, int(peak * (rng.uniform(1.05, 1.3) if i < higher else rng.uniform(0.5, 0.95)))))
    acc = attention_memory(batch, 8192, d)
    square = acc["backward_peak"] - acc["forward_peak"]
    gib = lambda n: f"{n / 2**30:.2f} GiB"                                           # noqa: E731
    message = (f"OutOfMemoryError: CUDA out of memory. Tried to allocate {gib(square)}. GPU 0 has a total capacity "
               f"of {gib(4 * acc['backward_peak'])} of which {gib(square / 4)} is free. Including non-PyTorch memory, "
               f"this process has {gib(acc['backward_peak'] + square)} memory in use. Of the allocated memory "
               f"{gib(acc['backward_peak'])} is allocated by PyTorch, and {gib(square)} is reserved by PyTorch but unallocat")
    need = float(gib(acc["backward_peak"])[:-4]) * 2**30 + float(gib(square)[:-4]) * 2**30
    eager.append(row(8192, False, message=message))
    compiled.append(row(8192, True, int(need * compiled_over_need)))
    paths = []
    for name, rows in (("eager.json", eager), ("compiled.json", compiled)):
        (tmp_path / name).write_text(json.dumps(rows))
        paths.append(str(tmp_path / name))
    return paths


@pytest.mark.parametrize("higher, compiled_over_need", [(0, 0.6), (1, 0.6), (0, 1.2)])
def test_part_a_says_what_the_memory_data_show_where_only_compiled_ran(tmp_path, seed, higher, compiled_over_need):
    """Peak memory repeats from run to run, so the words follow the comparison the rows hold: at how
    many of the shared points compiled peaks lower, and, where only compiled ran, its backward peak
    against what eager's failing pass needed at least (held plus the request). "Needs less" is said
    where both show it, "does not show" only where the numbers do not."""
    rng = random.Random(seed)
    out = tmp_path / "B2"
    assert b2.main(["--rows", *_shared_and_only_compiled(tmp_path, rng, higher, compiled_over_need),
                    "--out-dir", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    peak = summary["memory"]["backward_peak"]
    assert (peak["points"], peak["lower"], peak["higher"]) == (4, 4 - higher, higher)
    (point,) = summary["fits_only_compiled"]
    assert point["compiled_backward_peak_MiB"] == pytest.approx(point["eager_needed_at_least_MiB"] * compiled_over_need,
                                                                rel=1e-6)
    shown = compiled_over_need < 1
    assert summary["only_compiled_memory"] == ("lower" if shown else "not lower")
    text = " ".join(_render(out).split())
    answer = text.split("**(a)")[0]
    assert ("peaks lower during it, at every one of the 4 points both ran" in answer) is (higher == 0)
    assert ("peaks lower during it, at 3 of the 4 points both ran" in answer) is (higher == 1)
    assert ("eager needed at least)" in answer) is shown
    assert ("compiled needs less memory there too" in text) is shown
    assert ("as at every point both ran" in text) is (shown and higher == 0)
    assert ("do not show that compiled needs less memory there" in text) is not shown
    assert ("lower at 3 and higher at 1 of the 4 points" in text) is (higher == 1)


def _timed(rng: random.Random, mean: float, jitter: float, n: int = 5) -> list[float]:
    return [mean * (1 + rng.uniform(-jitter, jitter)) for _ in range(n)]


def _variant_of(job: Job, name: str, mode: str, forward_ms, backward_ms, optimizer, peak_bytes) -> dict:
    """A variant from its phase times (optimizer: one sample a round; a forward times only forward)
    and its peak, sample i round i's of ``job`` under the round's drift (compile_bench's record)."""
    n = len(optimizer)
    samples = {"forward": [forward_ms * k for k in DRIFT[:n]]}
    if mode == "train-step":
        samples |= {"backward": [backward_ms * k for k in DRIFT[:n]], "optimizer": optimizer}
    return _measured(job, name, [{phase: [s[i]] for phase, s in samples.items()} for i in range(n)], peak_bytes)


def _record_of(size: str, mode: str, eager: dict, compiled: dict) -> dict:
    variants = {"eager": eager, "compiled": compiled}
    metrics = {"variants": variants, "loss_check": compile_bench.loss_check(eager, compiled),
               "speedup": compile_bench.speedups(eager, compiled), "parameters": 1,
               "compile_seconds": 5.0, "compiled_graphs": 1}
    turns = eager.get("turns") or compiled.get("turns") or {}
    params = {"size": size, "context": 512, "batch": 4, "mode": mode, "compile": "blocks",
              "warmup": turns.get("warmup"), "steps": turns.get("steps"), "rounds": turns.get("rounds")}
    return make_record("B2", params, "ok", metrics)


def _differ(a: list[float], b: list[float]) -> str:
    """An independent two-standard-error test of two means: 'slower' if b's is larger beyond it."""
    se = (statistics.variance(a) / len(a) + statistics.variance(b) / len(b)) ** 0.5
    gap = statistics.fmean(b) - statistics.fmean(a)
    return "slower" if gap > 2 * se else "faster" if gap < -2 * se else "within"


def test_whole_model_memory_and_the_uncompiled_optimizer(tmp_path, seed):
    """B2(b) states how much lower compiled peaks are per mode, and the optimizer phase (not compiled)
    by its range and the judge's verdict per size, paired over the rounds the variants took turns in:
    a compiled optimizer 0.7x or 1.4x eager's in every round is faster or slower, the same samples
    within the spread."""
    rng = random.Random(seed)
    records, cuts, factors = [], {"forward": [], "train-step": []}, {}
    for size in ("small", "medium", "large"):
        for mode in ("forward", "train-step"):
            eager_peak = rng.uniform(2, 60) * 2**30
            cut = rng.uniform(0.0, 0.04) if mode == "forward" else rng.uniform(0.1, 0.3)
            cuts[mode].append(cut)
            eager_opt = _timed(rng, rng.uniform(10, 50), 0.01, n=len(DRIFT))
            factor = rng.choice([0.7, 1.0, 1.4])
            compiled_opt = eager_opt if factor == 1.0 else [t * factor * rng.uniform(0.99, 1.01) for t in eager_opt]
            if mode == "train-step":
                factors[size] = factor
            job = _job(f"{size}-{mode}", len(DRIFT))
            eager = _variant_of(job, "eager", mode, 20.0, 40.0, eager_opt, eager_peak)
            compiled = _variant_of(job, "compiled", mode, 15.0, 30.0, compiled_opt, eager_peak * (1 - cut))
            records.append(_record_of(size, mode, eager, compiled))
    out = tmp_path / "B2"
    assert b2.main(["--whole-model", *_whole_files(tmp_path, records), "--out-dir", str(out)]) == 0
    w = json.loads((out / "summary.json").read_text())["whole_model"]
    for mode, values in cuts.items():
        got = w["peak_memory"]["by_mode"][mode]
        assert (got["min"], got["max"]) == (pytest.approx(min(values)), pytest.approx(max(values)))
        assert (got["points"], got["lower"], got["higher"]) == (3, sum(c > SAME for c in values), 0)
    assert w["peak_memory"]["only_with_backward"] is (min(cuts["train-step"]) > max(cuts["forward"]))
    ratios = [r["metrics"]["speedup"]["optimizer"] for r in records if r["params"]["mode"] == "train-step"]
    opt = w["optimizer"]
    assert (opt["ratio"]["min"], opt["ratio"]["max"]) == (pytest.approx(min(ratios)), pytest.approx(max(ratios)))
    expected = {"compiled_slower": 1.4, "compiled_faster": 0.7, "within": 1.0}
    for key, factor in expected.items():
        assert opt[key] == [s for s, f in factors.items() if f == factor]
    assert opt["not_settled"] == []
    # compiled forward and backward are faster (0.75x) in every round: the judge says so
    assert w["forward_and_backward_faster"] is True
    text = _render(out)
    assert f"yet its ratio ranges\n{min(ratios):.2f}–{max(ratios):.2f}×" in text
    flat = " ".join(text.split())
    assert (f"a training step peaks lower than eager at every one of the 3 sizes, by "
            f"{100 * min(cuts['train-step']):.1f} %–{100 * max(cuts['train-step']):.1f} %") in flat
    lower = w["peak_memory"]["by_mode"]["forward"]["lower"]
    assert ("peaks lower than eager at " + ("every one of the 3 sizes," if lower == 3 else f"{lower} of the 3 sizes,")) in flat
    assert "these records do not settle whether it differs" not in flat
    assert "Forward and backward are faster compiled at every point." in flat
    # each size is its own process: how the speed-up moves with size is not settled either way
    assert set(w["size_trend"]["train-step"]) == {"first", "last"}
    assert ("one process a size measures no spread across processes, so these records do not settle how the "
            "speed-up moves with size.") in flat


def test_no_whole_model_records_write_a_placeholder_the_section_does_not_show(tmp_path, monkeypatch):
    """The declared figure exists, says what is missing and has no axes to read as an empty plot;
    the section does not embed it."""
    drawn = []
    monkeypatch.setattr(b2.whole, "save_figure", lambda fig, path: (drawn.append(fig), path.write_bytes(b"png")))
    out = tmp_path / "B2"
    assert b2.main(["--rows", *_b1_rows(tmp_path), "--out-dir", str(out)]) == 0
    (fig,) = drawn
    assert fig.axes == [] and [t.get_text() for t in fig.texts] == [b2.whole.PLACEHOLDER]
    assert "not measured in this run" in b2.whole.PLACEHOLDER and (out / "whole_model_speedup.png").exists()
    md = _render(out)
    html = Renderer("html", out.parent / "writeup" / "w.html", TEMPLATES).section("B2", out / "summary.json")
    assert "](whole_model_speedup.png" not in md and "whole_model_speedup.png)" not in md
    assert "B2(b): eager ÷ compiled step time" not in html and "B2(a): eager ÷ compiled time per call" in html


# --- paired verdicts: eager and compiled from one job are judged per round -------------------------

def _b1_pair(seq: int, eager_rounds: list[float], compiled_rounds: list[float], job: str | None) -> list[dict]:
    """Eager and compiled records at one point, each forward mean the mean of its rounds; with ``job``
    they carry the turns of one job (B1's rows since they take turns)."""
    records = []
    for compiled, rounds in ((False, eager_rounds), (True, compiled_rounds)):
        params = {"d": 16, "seq": seq, "batch": 2, "iters": 3, "compiled": compiled, "device": "cpu"}
        metrics = {"forward_ms": statistics.fmean(rounds), "backward_ms": 1.0, "memory_before_backward_bytes": 2**20,
                   "accounting_bytes": {"saved": 1, "forward_peak": 1, "backward_peak": 1}}
        if job:
            metrics["rounds"] = [{"forward": [t], "backward": [1.0]} for t in rounds]
            metrics["turns"] = {"job": job, "with": ["eager", "compiled"], "rounds": len(rounds), "steps": 1, "warmup": 2}
        records.append(make_record("B1", params, "ok", metrics))
    return records


@pytest.mark.parametrize("turns", [True, False])
def test_part_a_calls_compiled_slower_only_beyond_the_paired_spread(tmp_path, turns):
    """At 64 compiled's mean forward is about 8 % above eager's, but its rounds scatter around eager's
    by more than that: paired, within the spread. At 128 compiled is slower by 5 % in every round,
    with less scatter: slower. From two processes (no turns) neither is settled."""
    records = (_b1_pair(64, [1.0] * 8, [1.25, 0.9, 1.15, 0.95, 1.2, 0.92, 1.1, 1.13], "j64" if turns else None)
               + _b1_pair(128, [t * k for t, k in zip([2.0] * 8, DRIFT)],
                          [2.1 * k + 0.001 * i for i, k in enumerate(DRIFT)], "j128" if turns else None))
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps(records))
    out = tmp_path / "B2"
    assert b2.main(["--rows", str(rows), "--out-dir", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    judged = summary["forward_judged"]
    common = {"points": 2, "faster": 0, "few_rounds": 0, "min_rounds": 5}
    if turns:
        assert judged == common | {"paired": 2, "unpaired": 0, "within": 1, "slower": 1, "not_settled": 0}
        assert summary["forward_losses"]["seqs"] == [128]
    else:
        assert judged == common | {"paired": 0, "unpaired": 2, "within": 0, "slower": 0, "not_settled": 2}
        assert summary["forward_losses"] is None
    text = " ".join(_render(out).split())
    assert ("beyond the spread of the per-round differences; within it at 1 of the 2 points" in text) == turns
    assert ("these records do not settle at any point whether compiled or eager is faster" in text) != turns


def test_part_a_paired_in_too_few_rounds_is_not_settled(tmp_path):
    """A smoke run's three rounds: paired, yet fewer than the judge needs, so nothing is called."""
    records = _b1_pair(64, [1.0, 1.0, 1.0], [2.0, 2.0, 2.0], "smoke-job")
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps(records))
    out = tmp_path / "B2"
    assert b2.main(["--rows", str(rows), "--out-dir", str(out)]) == 0
    judged = json.loads((out / "summary.json").read_text())["forward_judged"]
    assert (judged["paired"], judged["not_settled"], judged["few_rounds"], judged["slower"]) == (1, 1, 1, 0)
    text = " ".join(_render(out).split())
    assert "At 1 of the 1 points these records do not settle which is faster: 1 took turns in fewer rounds than the 5 the judge needs." in text


def test_part_b_judges_the_optimizer_per_round_where_the_variants_took_turns(tmp_path):
    """The compiled run's optimizer is 2 % slower in every round, with a round-to-round drift of 20 %
    that moves both variants alike: the paired verdict is "slower"; the standard errors of the pooled
    steps, which hold the drift, call it within the spread."""
    drift = [1.0, 1.2, 0.9, 1.1, 0.8]
    job = _job("b2-job", len(drift))

    def variant(name, optimizer_ms):
        return _measured(job, name, [{"forward": [3.0 * k], "backward": [6.0 * k], "optimizer": [optimizer_ms * k]}
                                     for k in drift])

    eager, compiled = variant("eager", 1.0), variant("compiled", 1.02)
    record = _record_of("small", "train-step", eager, compiled)
    out = tmp_path / "B2"
    assert b2.main(["--whole-model", *_whole_files(tmp_path, [record]), "--out-dir", str(out)]) == 0
    w = json.loads((out / "summary.json").read_text())["whole_model"]
    assert w["optimizer"]["compiled_slower"] == ["small"]
    assert w["rounds"] == [5]
    # the pooled steps, which hold the drift, would call it within their standard errors
    assert _differ(eager["optimizer"]["samples"], compiled["optimizer"]["samples"]) == "within"
    text = " ".join(_render(out).split())
    assert "take turns after their warm-up steps, in 5 rounds" in text
    assert "beyond the spread of the per-round differences the compiled run's optimizer is slower at small" in text


@pytest.mark.parametrize("jobs", [("j-eager", "j-compiled"), (None, None)])
def test_part_b_refuses_variants_not_measured_in_one_job(tmp_path, capsys, seed, jobs):
    """compile_bench times both variants of a point in one job's turns, so a record whose two variants
    ran but name two jobs, or none, is no record it writes: the report stops with one line naming
    the point and the jobs, rather than judge it another way."""
    rng = random.Random(seed)
    record = _whole_record(rng, "medium", "train-step", 30.0, 20.0)
    for name, job in zip(("eager", "compiled"), jobs):
        variant = record["metrics"]["variants"][name]
        if job:
            variant["turns"]["job"] = job
        else:
            del variant["turns"], variant["rounds"]
    other = _whole_record(rng, "small", "train-step", 30.0, 20.0)
    with pytest.raises(SystemExit) as exc:
        b2.main(["--whole-model", *_whole_files(tmp_path, [other, record]), "--out-dir", str(tmp_path / "B2")])
    assert exc.value.code == 2
    (error,) = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert error.endswith(f"B2 whole-model record of medium train-step: eager and compiled not measured in one job: "
                          f"eager in job {jobs[0]}, compiled in job {jobs[1]}")
    assert not (tmp_path / "B2" / "summary.json").exists()


def test_part_a_figure_draws_each_head_dims_speed_ups_and_peak_ratio(monkeypatch, seed):
    """B2(a)'s figure in place of reading two 28-row tables: per head dimension, forward and backward
    speed-up lines (left) and compiled's backward peak over eager's (right), point for point."""
    rng = random.Random(seed)
    table = pd.DataFrame([{"d": d, "seq": s, "forward_speedup": rng.uniform(0.3, 1.5), "backward_speedup": rng.uniform(0.8, 1.7),
                           "eager_backward_peak_MiB": rng.uniform(100, 900), "compiled_backward_peak_MiB": rng.uniform(50, 400)}
                          for d in (16, 64) for s in (256, 1024, 4096)])
    drawn = []
    monkeypatch.setattr(b2, "save_figure", lambda fig, path: drawn.append(fig))
    b2.plot_attention(table, Path("unused.png"))
    speed, memory = drawn[0].axes
    curves = [line for line in speed.lines if len(line.get_xdata()) == 3]
    assert len(curves) == 4 and len([line for line in memory.lines if len(line.get_xdata()) == 3]) == 2
    for d, line in zip((16, 64), [line for line in memory.lines if len(line.get_xdata()) == 3]):
        part = table[table["d"] == d].sort_values("seq")
        np.testing.assert_allclose(line.get_ydata(), part["compiled_backward_peak_MiB"] / part["eager_backward_peak_MiB"])
