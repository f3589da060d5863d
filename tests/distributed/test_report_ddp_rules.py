"""The rules report.ddp applies before its sections state a cause or a comparison, on seeded synthetic
records with known answers: PyTorch DDP's wait is inside its backward, never nothing; the per-call cost
is fitted where data-parallel calls pay it; bucketing's longer wait is set against overlap's with the
passes over the gradients each makes; and C12's traced idle time, forward and memory saving are held
to the timed steps and the memory breakdown."""
from __future__ import annotations

import random
import statistics
from pathlib import Path

import pandas as pd
import pytest

from cs336_systems.distributed import variants
from cs336_systems.records import make_record
from cs336_systems.report import c12, c8, contract, ddp, ddp_rows, ddp_traces, spread
from cs336_systems.report.writeup import Renderer

TEMPLATES = Path(__file__).resolve().parents[2] / "writeup" / "templates"
H200_Bps = 4.8e12           # the datasheet memory bandwidth accounting.hardware gives the H200
H200_LINK_Bps = 450e9       # its NVLink's datasheet rate each way (900 GB/s both ways)
GIB = 2**30


ROUND_PHASES = {"forward": "forward_ms", "backward": "backward_ms", "comm_wait": "comm_wait_ms",
                "optimizer": "optimizer_ms", "step": "step_ms"}


def _record(variant: str, steps: list[dict], *, precision: str = "fp32", gpu: str = "NVIDIA H200",
            parameter_count: int = 2_000_000_000, buckets: int | None = None, rounds: int = 6,
            job: str | None = "job") -> dict:
    """A train_bench record whose steps are ``steps`` (forward, backward, wait, optimizer in ms), taken
    in ``rounds`` rounds of one job (``job``; None: a process of its own), as many steps each."""
    steps = [s | {"step_ms": sum(s.values())} for s in steps]
    per = len(steps) // rounds
    metrics = {k: sorted(s[k] for s in steps)[len(steps) // 2] for k in steps[0]} | {
        "steps": steps, "parameter_count": parameter_count, "buckets": buckets,
        "rounds": [{short: [s[long] for s in steps[k * per:(k + 1) * per]] for short, long in ROUND_PHASES.items()}
                   for k in range(rounds)]}
    if job is not None:
        metrics["turns"] = {"job": job, "rounds": rounds, "steps": per}
    metrics["comm_share"] = metrics["comm_wait_ms"] / metrics["step_ms"]
    params = {"variant": variant, "precision": precision, "size": "xl", "context": 512, "global_batch": 8,
              "warmup": 2, "rounds": rounds, "steps": per, "world_size": 2, "backend": "nccl"}
    record = make_record(variants.lookup(variant).deliverable, params, "ok", metrics)
    record["provenance"]["gpu"] = gpu
    return record


def _steps(rng: random.Random, forward: float, backward: float, wait: float, optimizer: float,
           n: int = 12, jitter: float = 0.2) -> list[dict]:
    return [{"forward_ms": forward + rng.uniform(-jitter, jitter), "backward_ms": backward + rng.uniform(-jitter, jitter),
             "comm_wait_ms": max(0.0, wait + rng.uniform(-jitter, jitter)),
             "optimizer_ms": optimizer + rng.uniform(-jitter, jitter)} for _ in range(n)]


def _section(ident: str, summary: contract.Summary, tmp_path: Path) -> str:
    contract.write(tmp_path / "summary.json", summary)
    return Renderer("md", tmp_path / "w" / "w.md", TEMPLATES).section(ident, tmp_path / "summary.json")


def _judged(a: dict, b: dict, phase: str = "step_ms") -> spread.Verdict:
    """The judge's verdict on ``a``'s phase against ``b``'s, which the reports must quote."""
    return spread.judge(a, b, ddp_rows.ROUND_PHASE[phase])


# --- PyTorch DDP waits inside backward -------------------------------------------------------------

@pytest.mark.parametrize("with_baseline", [False, True])
def test_pytorch_ddp_waits_inside_backward_and_is_never_shown_waiting_nothing(seed, tmp_path, with_baseline):
    rng = random.Random(seed)
    quiet = rng.uniform(470, 490)
    records = [_record("naive", _steps(rng, 243, quiet, rng.uniform(30, 45), 45)),
               _record("flat", _steps(rng, 243, quiet + rng.uniform(-3, 3), rng.uniform(30, 45), 45)),
               _record("overlap", _steps(rng, 243, quiet + rng.uniform(10, 25), rng.uniform(3, 8), 45)),
               _record("torch-ddp", _steps(rng, 245, quiet + rng.uniform(28, 40), 0.0, 45))]
    if with_baseline:
        records.append(_record("no-comm", _steps(rng, 243, quiet - rng.uniform(1, 5), 0.0, 45)))
    found = ddp_rows.backward_waits(records)["fp32"]["torch-ddp"]
    by = {r["params"]["variant"]: r for r in records}
    # the reference: the baseline where the run has it, else the longer backward of naive and flat
    expected = "no-comm" if with_baseline else max(("naive", "flat"), key=lambda v: by[v]["metrics"]["backward_ms"])
    assert found["reference"] == expected
    excess = _judged(by["torch-ddp"], by[expected], "backward_ms")
    assert excess.verdict == "higher" and found["excess"]["verdict"] == "higher"     # 28–40 ms longer, ±0.2 a step
    assert found["excess"]["ms"] == pytest.approx(excess.difference)
    assert (found["excess"]["low_ms"], found["excess"]["high_ms"]) == pytest.approx((excess.low, excess.high))
    assert excess.low <= by["torch-ddp"]["metrics"]["backward_ms"] - by[expected]["metrics"]["backward_ms"] + 0.8
    # longer than every other backward by construction (overlap's, the next longest, by 3 ms or more)
    assert found["longest"] is True
    assert "no-comm" not in found["steps"] and set(found["steps"]) == set(by) - {"torch-ddp", "no-comm"}
    # its step against the others', by name, as the judge has each
    verdicts = {v: _judged(by["torch-ddp"], by[v]).verdict for v in found["steps"]}
    assert found["shorter_than"] == sorted(v for v, x in verdicts.items() if x == "lower")
    assert found["longer_than"] == sorted(v for v, x in verdicts.items() if x == "higher")
    assert found["within_some"] is (spread.WITHIN in verdicts.values()) and found["unsettled_some"] is False
    assert found["step_verdict"] == ("beyond" if found["shorter_than"] or found["longer_than"] else spread.WITHIN)

    # its row carries no wait and says where the wait is
    table = ddp_rows.step_table(records).set_index("variant")
    assert pd.isna(table.loc["torch-ddp", "comm_wait_ms"]) and pd.isna(table.loc["torch-ddp", "comm_share"])
    assert "inside backward" in table.loc["torch-ddp", "note"]
    for ident in ("C3", "C6", "C8"):
        mine = [r for r in records if r["params"]["variant"] in ddp.reads(ident, list(by))]
        text = _section(ident, ddp.build(ident, mine, {}, [], {"fits": {}}, tmp_path), tmp_path)
        assert "PyTorch's DDP is built to wait for its all-reduces inside backward" in text, ident
        # its wait after backward is set against the baseline's by the judge, where the run has one
        assert ("its wait after\nbackward" in text) is with_baseline, ident
        assert "0.0 % of the step waiting" not in text and "waiting for communication 0.00" not in text, ident
        # each section sets it against the quiet backward among its own records (C3 reads no flat)
        found = ddp_rows.backward_waits(mine)["fp32"]["torch-ddp"]
        x = found["excess"]
        assert f"{x['ms']:.1f} ms longer than {found['reference']}'s ({x['low_ms']:.1f} to {x['high_ms']:.1f})" in text, ident
        assert "its communication costs inside backward" in text and "do not say which of them" in text and "not settled against" not in text, ident
    # three rounds: the same records' backward is not settled against the quiet one, and the text says so
    short = [_record(r["params"]["variant"], r["metrics"]["steps"][:6], rounds=3) for r in records]
    found = ddp_rows.backward_waits(short)["fp32"]["torch-ddp"]
    assert found["excess"]["verdict"] == spread.NOT_SETTLED and found["excess"]["low_ms"] is None
    assert found["longest"] is False and found["unsettled_some"] and not (found["shorter_than"] or found["longer_than"])
    assert found["step_verdict"] == spread.NOT_SETTLED
    text = _section("C6", ddp.build("C6", short, {}, [], {"fits": {}}, tmp_path), tmp_path)
    assert f"not settled against {found['reference']}'s" in text and "fewer rounds than the judge needs" in text
    assert "its communication costs inside backward" not in text and "against the others' is not settled" in text


@pytest.mark.parametrize("left_ms", [0.0, 5.0])
def test_pytorch_ddp_s_wait_after_backward_is_the_judge_s_not_a_design_s(seed, tmp_path, left_ms):
    """"PyTorch's DDP shows no wait after backward because its reducer waits inside it" was said of
    any records: a DDP that still waited 5 ms after backward read the same. Its wait is set against the
    baseline's (which communicates nothing) by the judge, and the design is worded as the design."""
    rng = random.Random(seed)
    records = [_record("no-comm", _steps(rng, 243, 480, 0.0, 45, jitter=0.1)),
               _record("overlap", _steps(rng, 243, 500, 5.0, 45, jitter=0.1)),
               _record("torch-ddp", _steps(rng, 245, 512, left_ms, 45, jitter=0.1))]
    found = ddp_rows.backward_waits(records)["fp32"]["torch-ddp"]
    by = {r["params"]["variant"]: r for r in records}
    judged = _judged(by["torch-ddp"], by["no-comm"], "comm_wait_ms")
    (quiet,) = found["wait_vs_quiet"]
    assert quiet["quiet"] == "no-comm" and quiet["versus"]["verdict"] == judged.verdict
    assert quiet["wait_ms"] == by["torch-ddp"]["metrics"]["comm_wait_ms"]
    if left_ms:                         # 5 ms against ±0.1 a step: called, whatever the seed
        assert judged.verdict == "higher"
    text = _section("C8", ddp.build("C8", records, {}, [], {"fits": {}}, tmp_path), tmp_path)
    assert "shows no wait after backward" not in text
    assert "PyTorch's DDP is built to wait for its all-reduces inside backward" in text
    if left_ms:
        assert f"{judged.difference:.1f} ms longer than no-comm's ({judged.low:.1f} to {judged.high:.1f}), which communicates nothing" in text
    # without the baseline nothing is set against its wait
    found = ddp_rows.backward_waits(records[1:])["fp32"]["torch-ddp"]
    assert found["wait_vs_quiet"] == []


def test_pytorch_ddp_without_a_quiet_backward_says_there_is_nothing_to_set_it_against(seed, tmp_path):
    rng = random.Random(seed)
    records = [_record("overlap", _steps(rng, 243, 500, 5, 45)), _record("torch-ddp", _steps(rng, 245, 512, 0.0, 45))]
    found = ddp_rows.backward_waits(records)["fp32"]["torch-ddp"]
    assert found["reference"] is None and found["excess"] is None
    text = _section("C6", ddp.build("C6", records, {}, [], None, tmp_path), tmp_path)
    assert "has a backward that communicates nothing to set it against" in text


# --- the per-call cost, where it is paid --------------------------------------------------------

def _naive_and_flat(rng, o_ms: float, w_GBps: float, parameter_count: int, jitter: float = 0.0, gpu: str = "NVIDIA H200"):
    """Naive and flat waits built from the model the report inverts: naive pays (tensors + 1) calls,
    its bytes and one pass over the gradients; flat one call, the same bytes and three passes."""
    s = parameter_count * 4
    calls = ddp_rows.naive_calls("xl")
    bytes_ms = s / (w_GBps * 1e9) * 1e3
    pass_ms = 2 * s / H200_Bps * 1e3 if gpu == "NVIDIA H200" else 0.0
    naive_wait = calls * o_ms + bytes_ms + pass_ms
    flat_wait = o_ms + bytes_ms + 3 * pass_ms
    naive = _record("naive", _steps(rng, 243, 482, naive_wait, 45, jitter=jitter), gpu=gpu, parameter_count=parameter_count)
    flat = _record("flat", _steps(rng, 243, 482, flat_wait, 45, jitter=jitter), gpu=gpu, parameter_count=parameter_count)
    return naive, flat, calls


def test_the_per_call_cost_is_recovered_from_naive_against_flat(seed):
    rng = random.Random(seed)
    o_ms, w = rng.uniform(0.005, 0.05), rng.uniform(100, 400)
    count = rng.randint(500_000_000, 3_000_000_000)
    naive, flat, calls = _naive_and_flat(rng, o_ms, w, count)
    found = ddp_rows.paid_per_call([naive, flat])["fp32"]
    assert found["calls"] == {"naive": calls, "flat": 1} and calls == 48 * 9 + 3 + 1
    assert found["extra_passes_ms"] == pytest.approx(4 * count * 4 / H200_Bps * 1e3)
    assert found["o_ms"] == pytest.approx(o_ms, rel=1e-9)
    # no spread: the low bound closes on o; the high one counts against the calls what the bytes took
    # beyond their least at the link's datasheet rate (2 ranks: a ring moves the payload once each way)
    assert found["o_low_ms"] == pytest.approx(o_ms, rel=1e-9)
    beyond = (count * 4 / (w * 1e9) - count * 4 / H200_LINK_Bps) * 1e3
    assert found["o_high_ms"] == pytest.approx(o_ms + beyond / calls, rel=1e-9) and found["o_high_ms"] >= o_ms


def test_the_per_call_bounds_hold_the_true_cost_under_spread(seed):
    rng = random.Random(seed)
    o_ms, w = rng.uniform(0.005, 0.05), rng.uniform(100, 400)
    naive, flat, _ = _naive_and_flat(rng, o_ms, w, 2_000_000_000, jitter=0.3)
    found = ddp_rows.paid_per_call([naive, flat])["fp32"]
    # each wait within ±0.3 of its model, so a round's difference within ±0.6 of the true one: the
    # interval's low end is at most that above it; the high bound is naive's slowest wait's
    assert found["o_low_ms"] <= o_ms + 0.6 / 435 and found["o_high_ms"] >= o_ms - 0.3 / 436
    assert found["o_low_ms"] <= found["o_ms"]
    # three rounds: no interval, so no lower bound; the estimate stands
    short = [_record(r["params"]["variant"], r["metrics"]["steps"][:6], rounds=3) for r in (naive, flat)]
    found = ddp_rows.paid_per_call(short)["fp32"]
    assert found["o_low_ms"] is None and found["waits"]["verdict"] == spread.NOT_SETTLED and found["o_ms"] > 0


def test_the_per_call_bound_holds_whatever_another_process_s_bandwidth_says(seed):
    """Naive's bytes moved at a rate below the link's datasheet one; C1's fit (another process) read a
    slower link still. A bound that took the bytes at C1's rate would count too much of the wait as
    bytes and fall below the true per-call cost; at the datasheet's rate it cannot."""
    rng = random.Random(seed)
    o_ms, true_GBps = rng.uniform(0.005, 0.05), rng.uniform(250, 440)
    count = rng.randint(500_000_000, 3_000_000_000)
    naive, flat, calls = _naive_and_flat(rng, o_ms, true_GBps, count, jitter=0.05)
    found = ddp_rows.paid_per_call([naive, flat])["fp32"]
    assert found["link_GBps"] == pytest.approx(H200_LINK_Bps / 1e9)
    assert found["send_ms"] == pytest.approx(count * 4 / H200_LINK_Bps * 1e3)
    slowest = max(s["comm_wait_ms"] for s in naive["metrics"]["steps"])
    expected = (slowest - count * 4 / H200_LINK_Bps * 1e3 - 2 * count * 4 / H200_Bps * 1e3) / calls
    assert found["o_high_ms"] == pytest.approx(expected, rel=1e-9)
    assert found["o_high_ms"] >= o_ms


def test_without_the_card_s_bandwidth_the_copies_are_not_counted(seed):
    rng = random.Random(seed)
    naive, flat, calls = _naive_and_flat(rng, 0.02, 300, 2_000_000_000, gpu="Some GPU")
    found = ddp_rows.paid_per_call([naive, flat])["fp32"]
    assert found["memory_GBps"] is None and found["extra_passes_ms"] == 0.0 and found["o_high_ms"] is None
    waits = naive["metrics"]["comm_wait_ms"] - flat["metrics"]["comm_wait_ms"]
    assert found["o_ms"] == pytest.approx(waits / (calls - 1))


@pytest.mark.parametrize("with_flat", [True, False])
def test_the_overhead_model_says_which_per_call_cost_it_uses(seed, tmp_path, with_flat):
    rng = random.Random(seed)
    c1 = {"fits": {"nccl_x2": {"o_ms": 0.09, "w_GBps": 330.0}}}
    naive, flat, _ = _naive_and_flat(rng, 0.018, 330.0, 2_000_000_000)
    sizes = [_record(f"bucketed-{mb}", _steps(rng, 243, 500, 9.5 + rng.uniform(0, 0.6), 45), buckets=n)
             for mb, n in ((1, 434), (10, 339), (100, 98), (1000, 8))]
    records = [naive, *([flat] if with_flat else []), *sizes, _record("overlap", _steps(rng, 243, 502, 5.3, 45))]
    summary = ddp.build("C8", records, {}, [], c1, tmp_path)
    model, table = summary.model, pd.read_csv(tmp_path / "table.csv")
    s, w = 2_000_000_000 * 4, 330e9
    o = ddp_rows.paid_per_call(records)["fp32"]["o_ms"] if with_flat else 0.09
    assert model.o_source == ("records" if with_flat else "C1") and model.o_ms == pytest.approx(o)
    assert list(table["predicted_ms"]) == pytest.approx([n * o + s / (n * w) * 1e3 for n in table["buckets"]], rel=1e-3)
    assert list(table["predicted_c1_ms"]) == pytest.approx([n * 0.09 + s / (n * w) * 1e3 for n in table["buckets"]], rel=1e-3)
    assert list(table["after_backward_pass_ms"]) == pytest.approx([4 * s / H200_Bps * 1e3] * 4, rel=1e-3)
    text = _section("C8", summary, tmp_path)
    assert ("fitted from naive against flat" in text) is with_flat
    assert ("this run has no naive and flat pair" in text) is (not with_flat)


# --- bucketing against overlap ------------------------------------------------------------------

@pytest.mark.parametrize("extra_ms, longer", [(4.4, True), (0.0, False)])
def test_bucketing_s_longer_wait_is_set_against_its_extra_pass(seed, tmp_path, extra_ms, longer):
    rng = random.Random(seed)
    overlap = _record("overlap", _steps(rng, 243, 502, 5.3, 45, jitter=0.1))
    sizes = [_record(f"bucketed-{mb}", _steps(rng, 243, 500, 5.3 + extra_ms, 45, jitter=0.1), buckets=n)
             for mb, n in ((1, 434), (1000, 8))]
    found = c8.bucketed_against_overlap([overlap, *sizes])["fp32"]
    assert found["longer"] == ("every" if longer else "not every")
    for r in sizes:
        judged = _judged(r, overlap, "comm_wait_ms")
        x = found["waits"][r["params"]["variant"]]
        assert (x["low_ms"], x["high_ms"]) == pytest.approx((judged.low, judged.high))
        if longer:                      # 4.4 ms more against ±0.2 a step: called, whatever the seed
            assert x["verdict"] == "higher"
    assert found["extra_low_ms"] == min(x["low_ms"] for x in found["waits"].values())
    # one more read-and-write pass over every fp32 gradient, at the H200's datasheet bandwidth
    assert found["extra_pass_ms"] == pytest.approx(2 * 2_000_000_000 * 4 / H200_Bps * 1e3)
    assert (found["extra_pass"] == "fits") is (found["extra_pass_ms"] <= found["extra_low_ms"])
    text = _section("C8", ddp.build("C8", [overlap, *sizes], {}, [], {"fits": {}}, tmp_path), tmp_path)
    assert ("Every bucket size waits longer after backward than overlap" in text) is longer
    assert ("Not every bucket size waits longer" in text) is (not longer)
    # three rounds: nothing is settled, and neither sentence is said
    short = [_record(r["params"]["variant"], r["metrics"]["steps"][:6], rounds=3, buckets=r["metrics"]["buckets"])
             for r in (overlap, *sizes)]
    found = c8.bucketed_against_overlap(short)["fp32"]
    assert found["longer"] == "not settled" and found["extra_low_ms"] is None
    assert found["extra_pass"] == "not settled"
    text = _section("C8", ddp.build("C8", short, {}, [], {"fits": {}}, tmp_path), tmp_path)
    assert "Whether every bucket size waits longer after backward than overlap is not settled" in text
    assert "Every bucket size waits longer" not in text and "Not every bucket size" not in text
    assert "whether that is all of the extra wait the rounds do not settle" in text


# --- C12: the trace's idle time, the forward, the memory saving ----------------------------------

def _timed(median: float, fastest: float, slowest: float) -> dict:
    """A record whose timed steps have this median and range."""
    return {"metrics": {"step_ms": median, "steps": [{"step_ms": t} for t in (fastest, median, median, slowest)]}}


@pytest.mark.parametrize("busy_share, scatter, profiler", [(0.99, 0.01, True), (0.4, 0.01, False), (0.9, 0.4, None)])
def test_a_traced_step_s_idle_time_is_held_to_the_timed_steps_across_their_scatter(seed, busy_share, scatter, profiler):
    """The profiler's share of a trace's idle time is settled only where every timed step agrees: the
    slowest holds less than half of it (the profiler's), or the fastest half or more (real); a
    slowest step that would hold more than half leaves it open."""
    rng = random.Random(seed)
    step = rng.uniform(400, 900)
    busy = busy_share * step
    traced_idle = rng.uniform(0.1, 0.3) * step + (step - busy)
    gaps = {"span_ms": busy + traced_idle, "idle_ms": traced_idle, "longest_gap_ms": 1.0, "gaps_over_half_ms": 3}
    found = ddp_traces.untraced_idle(gaps, _timed(step, (1 - scatter) * step, (1 + scatter) * step))
    assert found["busy_ms"] == pytest.approx(busy) and found["idle_ms"] == pytest.approx(step - busy)
    assert found["idle_slowest_ms"] == pytest.approx((1 + scatter) * step - busy)
    assert found["profiler_ms"] == pytest.approx(traced_idle - (step - busy))
    assert found["mostly_profiler"] is profiler
    assert ddp_traces.untraced_idle(None, _timed(step, step, step)) is None


def _memory(variant, before, peak, rise, gradients):
    return {"variant": variant, "precision": "fp32", "before_step_GiB": before, "peak_GiB": peak,
            "activations_peak_GiB": rise, "gradients_GiB": gradients}


@pytest.mark.parametrize("gradients_at_peak, reconciled", [(False, True), (True, False)])
def test_the_fsdp_saving_at_the_peak_is_reconciled_only_where_the_gradients_do_not_count(seed, gradients_at_peak, reconciled):
    rng = random.Random(seed)
    params, grads, adam = rng.uniform(6, 8), rng.uniform(6, 8), rng.uniform(12, 16)
    rise = rng.uniform(25, 35)
    ddp_start, fsdp_start = params + adam, (params + adam) / 2
    # a peak where gradients are live shows FSDP's sharded gradients as a smaller rise
    fsdp_rise = rise - (grads / 2 if gradients_at_peak else 0.0)
    memory = [_memory("overlap", ddp_start + grads, ddp_start + rise, rise, grads),
              _memory("fsdp", fsdp_start + grads / 2, fsdp_start + fsdp_rise, fsdp_rise, grads / 2)]
    found = c12.fsdp_saving(memory, {"replicated": 16.0, "fsdp": 8.0})
    assert found["predicted_GiB"] == 8.0
    assert found["before_step_GiB"] == pytest.approx((params + adam + grads) / 2)
    assert found["without_gradients_GiB"] == pytest.approx((params + adam) / 2)
    assert found["reconciled"] is reconciled


def test_the_fsdp_saving_is_reconciled_only_where_each_part_of_the_reading_holds(seed):
    """The peak saves the saving without the gradients "because the step starts with no gradients and
    forward and backward then rise by the same amount in both": a start that saves more and a rise
    that takes it back can land the peak on that saving with neither part true, which the old rule
    (the peak alone) called reconciled. And the saving before the step is the prediction's only
    where it is."""
    rng = random.Random(seed)
    params, grads, adam = rng.uniform(6, 8), rng.uniform(6, 8), rng.uniform(12, 16)
    rise = rng.uniform(25, 35)
    ddp_start, fsdp_start = params + adam, (params + adam) / 2
    # FSDP holds `off` GiB less at the start (say, buffers it frees) and its rise takes it back
    off = rng.uniform(0.3, 0.8) * grads / 2
    memory = [_memory("overlap", ddp_start + grads, ddp_start + rise, rise, grads),
              _memory("fsdp", fsdp_start + grads / 2, fsdp_start - off + rise + off, rise + off, grads / 2)]
    saved = (params + adam + grads) / 2
    found = c12.fsdp_saving(memory, {"replicated": 2 * saved, "fsdp": saved})
    assert found["peak_GiB"] == pytest.approx(found["without_gradients_GiB"])
    assert found["reconciled"] is False
    assert found["before_matches_prediction"] is True
    wrong = saved * (1 + rng.uniform(0.2, 0.5))
    assert c12.fsdp_saving(memory, {"replicated": 2 * wrong, "fsdp": wrong})["before_matches_prediction"] is False


def test_an_fsdp_forward_without_a_baseline_is_set_against_ddp_s_forward(seed):
    rng = random.Random(seed)
    fsdp = _record("fsdp", _steps(rng, 263, 503, 3.3, 28))
    overlap = _record("overlap", _steps(rng, 243, 502, 5.3, 45))
    rows = {"fp32": {"fsdp": {"forward_ms": fsdp["metrics"]["forward_ms"]},
                     "overlap": {"forward_ms": overlap["metrics"]["forward_ms"]}}}
    records = {("fsdp", "fp32"): fsdp, ("overlap", "fp32"): overlap}
    setup = {"size": "xl", "world_size": 2, "backend": "nccl"}
    (found,) = c12.fsdp_forward(rows, setup, {"o_ms": 0.09, "w_GBps": 330.0}, records)   # C1's fit
    assert found["baseline_variant"] == "overlap"
    judged = _judged(fsdp, overlap, "forward_ms")
    assert found["excess"]["verdict"] == "higher" and found["excess"]["ms"] == pytest.approx(20.0, abs=0.4)
    assert (found["excess"]["low_ms"], found["excess"]["high_ms"]) == pytest.approx((judged.low, judged.high))
    # one excess for the table and the words: the judge's, not the difference of the two medians
    assert found["excess_ms"] == found["excess"]["ms"] == pytest.approx(judged.difference)
    # C1's rates are other processes': a side is decided only where the judge's whole interval lies
    # beyond the swing between processes
    low, high, swing = judged.low, judged.high, spread.HOST_SWING
    beyond_bytes, beyond_transfers = low > found["transfer_ms"] * swing, low > found["bound_ms"] * swing
    assert found["excess_reading"] == (
        "beyond transfers" if beyond_transfers else
        ("beyond bytes, within transfers" if high * swing < found["bound_ms"] else "beyond bytes") if beyond_bytes
        else "within bytes" if high * swing < found["transfer_ms"] else spread.NOT_SETTLED)


def test_an_fsdp_forward_whose_excess_the_judge_leaves_open_is_set_against_nothing(seed):
    """h200's C12 said each FSDP forward's excess (20–41 ms) was more than its bytes take beyond the
    swing, from the medians, while its own table had the judge leave every excess open (too few
    rounds) and printed another number (15.0 against 20.2 ms). With no interval for the excess there
    is nothing to set against C1's rates, and the table and the words give the judge's one number."""
    rng = random.Random(seed)
    few = spread.MIN_ROUNDS - 1             # fewer rounds than the judge needs
    fsdp = _record("fsdp", _steps(rng, 263, 503, 3.3, 28, n=3 * few), rounds=few)
    overlap = _record("overlap", _steps(rng, 203, 502, 5.3, 45, n=3 * few), rounds=few)
    rows = {"fp32": {"fsdp": {"forward_ms": fsdp["metrics"]["forward_ms"]},
                     "overlap": {"forward_ms": overlap["metrics"]["forward_ms"]}}}
    records = {("fsdp", "fp32"): fsdp, ("overlap", "fp32"): overlap}
    setup = {"size": "xl", "world_size": 2, "backend": "nccl"}
    (found,) = c12.fsdp_forward(rows, setup, {"o_ms": 0.09, "w_GBps": 330.0}, records)
    assert found["excess"]["verdict"] == spread.NOT_SETTLED and found["excess"]["low_ms"] is None
    assert found["excess_ms"] == found["excess"]["ms"]
    # the medians' 60 ms would have been "beyond bytes" against ~12 ms of bytes
    assert found["excess_reading"] == c12.EXCESS_OPEN


@pytest.mark.parametrize("where, reading", [("past the bytes, within the swing", spread.NOT_SETTLED),
                                            ("past the bound, within the swing", "beyond bytes"),
                                            ("past the bound and the swing", "beyond transfers"),
                                            ("under the bytes and the swing", "within bytes")])
def test_an_fsdp_forward_is_set_against_c1_s_rates_only_beyond_the_host_swing(seed, where, reading):
    """C1's bandwidth and per-call cost come from C1's processes, not the FSDP job's, and two processes
    of one command differ by up to ``spread.HOST_SWING``: the forward's excess is more than its bytes
    take, or than its transfers can take, only beyond that (h200's fsdp in bf16, 40.8 ms against a
    33.5 ms bound, was said to be more than the transfers can take)."""
    rng = random.Random(seed)
    swing = spread.HOST_SWING
    setup = {"size": "xl", "world_size": 2, "backend": "nccl"}
    fit = {"o_ms": rng.uniform(0.05, 0.1), "w_GBps": rng.uniform(250.0, 350.0)}
    quiet = rng.uniform(200.0, 260.0)

    def found_at(forward_ms):
        rows = {"fp32": {"fsdp": {"forward_ms": forward_ms}, "no-comm": {"forward_ms": quiet}}}
        (found,) = c12.fsdp_forward(rows, setup, fit)
        return found

    bounds = found_at(quiet)
    transfer, bound = bounds["transfer_ms"], bounds["bound_ms"]
    assert bound > transfer * swing        # the per-call costs put the bound beyond the swing of the bytes
    excess = {"past the bytes, within the swing": transfer * rng.uniform(1.05, 0.95 * swing),
              "past the bound, within the swing": bound * rng.uniform(1.05, 0.95 * swing),
              "past the bound and the swing": bound * rng.uniform(1.05 * swing, 3.0),
              "under the bytes and the swing": transfer / rng.uniform(1.05 * swing, 3.0)}[where]
    found = found_at(quiet + excess)
    assert found["excess_ms"] == pytest.approx(excess)
    assert found["excess_reading"] == reading


@pytest.mark.parametrize("measured, said", [
    ([9.3, 9.5, 9.6, 9.8], "flat"),              # h200's: flat where the model falls fourfold
    ([9.0, 6.0, 3.5, 2.6], "follows"),           # each within 2x of the model
    ([30.0, 6.0, 3.5, 2.6], "off"),              # one size far off, and not flat
])
def test_the_overhead_model_is_said_to_follow_the_waits_only_where_each_size_does(measured, said):
    predicted = [9.9, 5.1, 3.0, 2.5]             # the model from 434 down to 8 buckets
    assert c8.model_against_waits(predicted, measured)["against_waits"] == said
    # independently: the ratio test and the spread test
    follows = all(0.5 <= m / p <= 2 for p, m in zip(predicted, measured))
    middle = (sorted(measured)[1] + sorted(measured)[2]) / 2          # the median of four
    flat = max(measured) - min(measured) < 0.1 * middle
    assert said == ("follows" if follows else "flat" if flat else "off")


def _wobbled(steps: list[dict], phase: str, by: float, per: int = 2) -> list[dict]:
    """``steps`` with ``phase`` moved by +``by`` in even rounds and -``by`` in odd ones (``per`` steps a
    round): a copy whose per-round differences from the original scatter symmetrically around 0."""
    return [s | {phase: s[phase] + (by if (i // per) % 2 == 0 else -by)} for i, s in enumerate(steps)]


def test_the_fastest_bucket_size_names_what_it_beats_beyond_the_spread_and_by_how_much(seed, tmp_path):
    rng = random.Random(seed)
    best_steps = _steps(rng, 243, 482, 2.5, 45)
    records = [_record("naive", _steps(rng, 243, 480, 40, 45)), _record("flat", _steps(rng, 243, 480, 30, 45)),
               _record("overlap", _steps(rng, 243, 495, 5, 45)),
               # the best's own steps, a round ±1 ms off them: the same within the spread
               _record("torch-ddp", _wobbled(best_steps, "backward_ms", 1.0)),
               _record("bucketed-100", _steps(rng, 243, 484, 3, 45), buckets=60),
               _record("bucketed-1000", best_steps, buckets=8)]
    best = c8.best_bucket_size(records, "fp32")
    assert best["variant"] == "bucketed-1000" and best["buckets"] == 8
    # by construction: 15 ms or more shorter than naive, flat and overlap (±0.8 a step), the same as PyTorch DDP
    beaten = ["naive", "flat", "overlap"]
    assert best["shorter_than"] == beaten and best["versus"]["torch-ddp"]["verdict"] == spread.WITHIN
    saved = [best["versus"][v]["ms"] * -1 for v in beaten]
    assert best["shorter_by_ms"] == pytest.approx([min(saved), max(saved)])
    assert list(best["not_shorter_than"]) == ["torch-ddp"]
    # the shortest median is a choice: its step against the next shortest size's is the judge's
    (runner_up,) = best["runner_up"]
    assert runner_up["variant"] == "bucketed-100"
    assert runner_up["versus"] == ddp_rows.record_difference(records[-1], records[-2])
    # the headline names each verdict some variant got, once, in its order, and no other
    assert best["by_verdict"] == [{"verdict": "shorter", "variants": beaten}, {"verdict": "same", "variants": ["torch-ddp"]}]
    text = " ".join(_section("C8", ddp.build("C8", records, {}, [], {"fits": {}}, tmp_path), tmp_path).split())
    assert (f"{best['step_ms']:.2f} ms, shorter than naive's, flat's and overlap's beyond the spread across rounds, "
            "the same as PyTorch DDP's within it; against bucketed-100") in text


@pytest.mark.parametrize("optimizer_saves, offsets", [(30.0, True), (0.0, False)])
def test_fsdp_s_longer_forward_is_said_to_be_paid_back_only_where_each_phase_and_the_step_say_so(
        seed, optimizer_saves, offsets):
    """C12's reading "the shorter optimizer phase offsets the longer forward, and the steps match"
    needs the forward longer and the optimizer shorter beyond their spreads and the steps within."""
    rng = random.Random(seed)
    ddp_steps = _steps(rng, 240, 500, 5, 45, jitter=0.2)
    # FSDP's steps are DDP's with a forward 30 ms longer (a round ±1 ms off that) and an optimizer
    # phase shorter by ``optimizer_saves``: the steps then differ by ±1 a round, or by 30
    fsdp_steps = [s | {"optimizer_ms": s["optimizer_ms"] - optimizer_saves}
                  for s in _wobbled([s | {"forward_ms": s["forward_ms"] + 30} for s in ddp_steps], "forward_ms", 1.0)]
    ddp_rec, fsdp_rec = _record("overlap", ddp_steps), _record("fsdp", fsdp_steps)
    found = c12.phases_against(fsdp_rec, ddp_rec)
    forward, step = found["phases_vs_ddp"]["forward_ms"], ddp_rows.record_difference(fsdp_rec, ddp_rec)
    assert forward["sign"] == 1 and forward["ms"] == pytest.approx(30.0, abs=1.0)
    assert step["verdict"] == (spread.WITHIN if optimizer_saves else "higher")
    assert found["optimizer_offsets_forward"] is offsets
    assert c12.phases_against(None, ddp_rec) == {"phases_vs_ddp": None, "optimizer_offsets_forward": False}


@pytest.mark.parametrize("rounds, verdict", [(3, spread.NOT_SETTLED), (6, "lower")])
def test_fsdp_s_sharded_update_is_said_to_shorten_the_optimizer_only_where_the_judge_does(seed, rounds, verdict):
    """"(each rank updates only its shard of the weights)" stood after every optimizer difference, h200's
    -21.2 ms not settled (3 rounds) among them, as its cause: the words now follow the judge's verdict."""
    rng = random.Random(seed)
    ddp_steps = _steps(rng, 240, 500, 5, 45, n=2 * rounds, jitter=0.2)
    saves = rng.uniform(15, 25)
    fsdp_steps = [s | {"optimizer_ms": s["optimizer_ms"] - saves * rng.uniform(0.9, 1.1)} for s in ddp_steps]
    found = c12.phases_against(_record("fsdp", fsdp_steps, rounds=rounds), _record("overlap", ddp_steps, rounds=rounds))
    assert c12.optimizer_vs_ddp(found["phases_vs_ddp"]) == verdict
    assert c12.optimizer_vs_ddp(None) is None


@pytest.mark.parametrize("times, verdict", [((1.1, 1.6), spread.NOT_SETTLED), ((2.0, 4.0), "higher"),
                                             ((0.1, 0.5), "lower")])
def test_fsdp_s_idle_time_is_set_against_c1_s_transfers_only_beyond_the_host_swing(seed, times, verdict):
    """The timed step's idle time is this job's, the transfers' bound C1's processes' rates: "more than
    the step's transfers can take, so the waits are not only for bytes in flight" used to follow from
    a bare idle > bound; two processes differ by up to HOST_SWING, so it now needs more than that."""
    rng = random.Random(seed)
    bound_ms = rng.uniform(20, 200)
    rows = [{"variant": "fsdp", "precision": "fp32", "bound_ms": bound_ms},
            {"variant": "fsdp", "precision": "bf16", "bound_ms": 1e-3}]
    idle_ms = 3 * bound_ms * rng.uniform(*times)
    transfers, against = c12.idle_against_transfers(idle_ms, "fsdp", rows)
    assert transfers == pytest.approx(3 * bound_ms) and against == verdict
    assert c12.idle_against_transfers(idle_ms, "fsdp-bf16", rows) == (None, None)


# --- a fitted optimum is claimed only where the data carry it ------------------------------------

BUCKET_COUNTS = ((1, 434), (10, 339), (100, 98), (1000, 8))


def _bucket_job(rng, overheads: list[float], rounds: int) -> list[dict]:
    """The baseline and four bucket sizes of one job, each size's step the baseline's plus its overhead
    (ms; 9.5 of it the wait after backward), a step ±0.05 ms a phase."""
    steps = lambda extra, wait: _steps(rng, 243, 480 + extra - wait, wait, 45, n=2 * rounds, jitter=0.05)
    return [_record("no-comm", steps(0.0, 0.0), rounds=rounds)] + [
        _record(f"bucketed-{mb}", steps(over, 9.5), buckets=n, rounds=rounds) for (mb, n), over in zip(BUCKET_COUNTS, overheads)]


S, W = 2_000_000_000 * 4, 300e9         # the records' fp32 gradients; C1's bandwidth below
C1 = {"fits": {"nccl_x2": {"o_ms": 0.06, "w_GBps": W / 1e9}}}


def _model(c: float, o_ms: float) -> list[float]:
    return [c + n * o_ms + S / (n * W) * 1e3 for _, n in BUCKET_COUNTS]


@pytest.mark.parametrize("overheads, rounds, not_located", [
    (_model(20.0, 0.05), 6, []),                     # the model's curve: its optimum (23 buckets) beats 8's
    (_model(20.0, 0.05), 3, ["unsettled"]),          # the same, three rounds: nothing settled
    ([35.97, 34.65, 27.32, 22.62], 6, ["lower"]),    # h200's overheads: 8 buckets measured below the optimum
])
def test_a_fitted_optimum_is_claimed_only_where_the_points_are_settled_and_it_beats_the_best_measured(
        seed, tmp_path, overheads, rounds, not_located):
    rng = random.Random(seed)
    records = _bucket_job(rng, overheads, rounds)
    found = c8.overheads(records)["fp32"]
    points = c8.overhead_points(records, found, "fp32")
    fit = c8.fit_overheads(points, S, W)
    assert fit["points"] == 4 and fit["degrees_of_freedom"] == 2 and fit["buckets"] == [434, 339, 98, 8]
    assert fit["not_located"] == not_located
    assert fit["best"]["variant"] == "bucketed-1000" and fit["best"]["ms"] == pytest.approx(overheads[3], abs=0.2)
    # each point's fitted overhead against the range of its per-round differences (±0.2 ms of its overhead)
    for p, r in zip(points, fit["residuals_ms"]):
        assert len(p["rounds_ms"]) == rounds and all(abs(x - p["ms"]) < 0.4 for x in p["rounds_ms"])
    inside = sum(min(p["rounds_ms"]) <= p["ms"] - r <= max(p["rounds_ms"]) for p, r in zip(points, fit["residuals_ms"]))
    assert fit["within_rounds"] == inside
    located, settled, lower = not not_located, "unsettled" not in not_located, "lower" in not_located
    if lower:                           # h200's shape misses the model by over 1 ms somewhere: not every point
        assert max(map(abs, fit["residuals_ms"])) > 1.0 and inside < 4
    text = _section("C8", ddp.build("C8", records, {}, [], C1, tmp_path), tmp_path)
    assert "Two parameters fitted to 4 points leave 2 degrees of freedom" in text
    assert ("The fit does not locate a better bucket count than the measured ones" in text) is (not located)
    assert ("That is below bucketed-1000's measured" in text) is located
    assert ("not every overhead it rests on is settled" in text) is (not settled)
    assert ("at or below the optimum's" in text) is lower
    # the fixed part's share of the optimum is said only of an optimum the data locate
    assert "is most of what bucketing costs here" not in text or located


# --- a per-call cost resting on an assumed pass says so, and what the measured passes make of it ----

def test_the_per_call_cost_says_how_much_of_it_is_the_datasheet_s_pass_and_what_the_rungs_measure(seed, tmp_path):
    """Naive and flat waits made with a pass 1.2 times the datasheet's least time, and rungs whose
    waits drop by that pass: o at the datasheet's pass comes out low, o at the rungs' pass is the true
    one, and a rung that saves less than the least a pass can take is left out."""
    rng = random.Random(seed)
    o_ms, floor = 0.03, 2 * S / H200_Bps * 1e3
    true_pass, calls, send = 1.2 * floor, ddp_rows.naive_calls("xl"), S / W * 1e3
    wait = lambda w: _steps(rng, 243, 482, w, 45, jitter=0.02)
    records = [_record("naive", wait(calls * o_ms + send + true_pass)), _record("flat", wait(o_ms + send + 3 * true_pass)),
               _record("bucketed-1000", wait(4 + 2 * true_pass), buckets=8),
               _record("bucketed-view-1000", wait(4 + true_pass), buckets=8),
               _record("bucketed-ready-1000", wait(4 + true_pass), buckets=9),
               _record("bucketed-avg-1000", wait(4 + true_pass - 0.5 * floor), buckets=9)]   # saves half a least pass
    paid = ddp_rows.paid_per_call(records)["fp32"]
    waits = paid["waits"]["ms"]
    assert paid["extra_passes_ms"] == pytest.approx(2 * floor)
    assert paid["assumed_share"] == pytest.approx(2 * floor / (waits + 2 * floor))
    assert paid["mostly_assumed"] is (paid["assumed_share"] > 0.5) and paid["mostly_assumed"]
    assert paid["o_ms"] == pytest.approx(o_ms - 2 * (true_pass - floor) / (calls - 1), abs=2e-4)
    measured = c8.measured_pass(c8.ladder(records), "fp32", paid)
    assert measured["rungs"] == 1 and measured["below_floor"] == 1 and measured["settled"]
    assert measured["pass_ms"] == pytest.approx([true_pass, true_pass], abs=0.05)
    assert measured["o_ms"] == pytest.approx([o_ms, o_ms], abs=2e-4)
    assert measured["datasheet_pass_ms"] == pytest.approx(floor)
    # the bound with the same pass: naive's slowest wait less its bytes at the link's datasheet rate and
    # its pass, per call: o and what the bytes took beyond their least
    bound = o_ms + (S / W - S / H200_LINK_Bps) * 1e3 / calls
    assert measured["o_high_ms"][0] == pytest.approx(bound, abs=5e-4) and measured["fits_bound"] == "both"
    assert measured["bucket_passes_ms"] == pytest.approx([2 * true_pass] * 2, abs=0.1)
    summary = ddp.build("C8", records, {}, [], C1, tmp_path)
    # the bucket size waits its two passes and 4 ms more: the passes do not fill its wait
    assert summary.model.measured_pass.passes_fill_waits is False
    text = _section("C8", summary, tmp_path)
    assert "at the pass the rungs measure (above), the two passes take" in text and "up to the whole" not in text
    assert "most of it rests on an assumed pass time" in text and "That o rests mostly on an assumption" in text
    assert "1 more left out for saving less than the datasheet's" in text and "with which o would be" in text
    text = _section("C4", ddp.build("C4", records[:2], {}, [], C1, tmp_path), tmp_path)
    assert f"mostly on the copies' price, {100 * paid['assumed_share']:.0f} % of the time it divides among the calls" in " ".join(text.split())


# --- an overhead only against a baseline that runs the same computation ----------------------------

def test_an_overhead_is_taken_only_against_a_baseline_of_the_same_computation(seed, tmp_path):
    """fsdp-bf16 computes in bf16 whatever its record's precision: in fp32 its step less the fp32
    baseline's is bf16 compute, so it has no overhead there (an empty cell with a note, no bar); in
    bf16 the baseline computes in bf16 too, and its overhead stands. Each precision's global batch is
    said where they differ."""
    rng = random.Random(seed)
    records = []
    for precision, scale, batch in (("fp32", 1.0, 8), ("bf16", 0.9, 32)):
        job = f"job-{precision}"
        steps = lambda extra, f=1.0: _steps(rng, 243 * scale * f, 480 * scale * f + extra, 0.0, 45, jitter=0.1)
        records += [_record("no-comm", steps(0.0), precision=precision, job=job),
                    _record("overlap", steps(25.0), precision=precision, job=job),
                    _record("torch-ddp", steps(30.0), precision=precision, job=job),
                    # bf16 compute: in fp32 its step is 0.6 times the others', in bf16 the same plus 11 ms
                    _record("fsdp-bf16", steps(11.0, 0.6 if precision == "fp32" else 1.0), precision=precision, job=job)]
        for r in records[-4:]:
            r["params"]["global_batch"] = batch
    table = ddp_rows.step_table(records).set_index(["variant", "precision"])
    assert pd.isna(table.loc[("fsdp-bf16", "fp32"), "overhead_ms"]) and pd.isna(table.loc[("fsdp-bf16", "fp32"), "overhead_pct"])
    assert "computes in bf16: no baseline of its computation" in table.loc[("fsdp-bf16", "fp32"), "note"]
    assert table.loc[("fsdp-bf16", "bf16"), "overhead_ms"] == pytest.approx(11.0, abs=1.0)
    assert table.loc[("overlap", "fp32"), "overhead_ms"] == pytest.approx(25.0, abs=1.0)
    found = c8.overheads(records)
    assert "fsdp-bf16" not in found["fp32"]["rows"] and found["fp32"]["no_baseline"] == {"fsdp-bf16": "bf16"}
    assert "fsdp-bf16" in found["bf16"]["rows"] and found["bf16"]["no_baseline"] == {}
    # PyTorch DDP's step is set against the others' of its computation only
    waits = ddp_rows.backward_waits(records)
    assert "fsdp-bf16" not in waits["fp32"]["torch-ddp"]["steps"] and "fsdp-bf16" in waits["bf16"]["torch-ddp"]["steps"]
    summary = ddp.build("C8", records, {}, [], {"fits": {}}, tmp_path)
    assert summary.global_batches == {"fp32": 8, "bf16": 32}
    over = pd.read_csv(tmp_path / "overhead.csv").set_index("variant")
    assert pd.isna(over.loc["fsdp-bf16", "fp32_overhead_ms"]) and pd.isna(over.loc["fsdp-bf16", "fp32_baseline_ms"])
    assert over.loc["fsdp-bf16", "bf16_overhead_ms"] == pytest.approx(11.0, abs=1.0)
    assert over.loc["fsdp-bf16", "note"].startswith("fp32: computes in bf16")
    text = _section("C8", summary, tmp_path)
    assert "fsdp-bf16 in fp32 computes in bf16, and no baseline computing in bf16 ran beside it" in text
    assert "fsdp-bf16 in bf16 computes" not in text
    assert "The precisions ran different global batches (fp32 8 sequences, bf16 32 sequences" in text
    # one batch for both: nothing to say
    for r in records:
        r["params"]["global_batch"] = 8
    summary = ddp.build("C8", records, {}, [], {"fits": {}}, tmp_path)
    assert summary.global_batches is None and "different global batches" not in _section("C8", summary, tmp_path)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_traces_show_naive_waiting_only_beyond_the_host_swing(seed):
    """One traced step a side, no spread: C6 says naive's stream waits where overlap's does not only
    where its idle time and its longest gap exceed overlap's by more than separate processes differ."""
    rng = random.Random(seed)
    swing = spread.HOST_SWING
    overlap = {"idle_ms": rng.uniform(5, 20), "longest_gap_ms": rng.uniform(0.6, 2.0)}
    beyond = {"idle_ms": overlap["idle_ms"] * swing * rng.uniform(1.05, 3),
              "longest_gap_ms": overlap["longest_gap_ms"] * swing * rng.uniform(1.05, 3)}
    assert ddp.traces_show_naive_waiting(beyond, overlap)
    for key in beyond:      # either within the swing leaves it unshown
        within = beyond | {key: overlap[key] * rng.uniform(1.05, 0.95 * swing)}
        assert not ddp.traces_show_naive_waiting(within, overlap)


@pytest.mark.parametrize("extra_ms, rounds, longer", [((4.4, 4.4), 3, "not settled"), ((4.4, -2.0), 6, "not every"),
                                                    ((4.4, 4.4), 6, "every")])
def test_bucketing_is_headed_as_waiting_longer_than_overlap_only_where_the_judge_says_every_size_does(
        seed, tmp_path, extra_ms, rounds, longer):
    """The paragraph's heading asked "why bucketing waits longer than overlap" whatever the judge had
    found, above a sentence saying it was not settled (h200: 3 rounds, bucket sizes 9.3–9.8 ms against
    overlap's 5.25 ms) or that not every size waits longer: the heading says it only where every size
    is judged longer."""
    rng = random.Random(seed)
    overlap = _record("overlap", _steps(rng, 243, 502, 5.3, 45, n=2 * rounds, jitter=0.1), rounds=rounds)
    sizes = [_record(f"bucketed-{mb}", _steps(rng, 243, 500, 5.3 + extra + rng.uniform(0, 0.5), 45, n=2 * rounds,
                                              jitter=0.1), buckets=n, rounds=rounds)
             for (mb, n), extra in zip(((1, 434), (1000, 8)), extra_ms)]
    assert c8.bucketed_against_overlap([overlap, *sizes])["fp32"]["longer"] == longer
    text = _section("C8", ddp.build("C8", [overlap, *sizes], {}, [], {"fits": {}}, tmp_path), tmp_path)
    assert ("**Why bucketing waits longer than overlap.**" in text) is (longer == "every")
    assert ("**Bucketing's wait after backward against overlap's.**" in text) is (longer != "every")


def test_backward_is_said_to_outlast_the_communication_only_counting_every_bucket_s_call(seed):
    """"Backward far outlasts sending every gradient once, so the per-call costs do not pile up" is a
    cause about the calls: it holds only where backward outlasts the bytes and the most buckets' calls
    at the larger per-call cost together (h200: 502 ms against 25.4 ms of bytes and 434 calls at
    C1's 61.6 µs, 26.7 ms). The old rule weighed the bytes alone and said it where the calls alone
    took most of backward."""
    rng = random.Random(seed)
    send, buckets = rng.uniform(10, 40), rng.randint(200, 600)
    backward = rng.uniform(2.5, 4.0) * send                 # over twice the bytes alone
    model = {"measured_wait_range_ms": [9.3, 9.8], "predicted_range_ms": [2.5, 9.9], "pass_ms": None,
             "send_all_ms": send, "backward_ms": backward, "bucket_counts": [8, buckets],
             "o_ms": rng.uniform(0.01, 0.03)}
    # a per-call cost whose calls take as long as backward less the bytes: they would pile up
    model["c1_o_ms"] = (backward - send) / buckets * rng.uniform(0.8, 1.5)
    found = c8.spans_of(model)
    assert found["backward_dwarfs_send"] is False
    assert found["calls_ms"] == pytest.approx(buckets * model["c1_o_ms"])
    # calls cheap enough that backward outlasts bytes and calls together by over twice: said
    model["c1_o_ms"] = (backward / c8.OUTLASTS - send) / buckets * rng.uniform(0.1, 0.9)
    assert c8.spans_of(model)["backward_dwarfs_send"] is True


@pytest.mark.parametrize("rounds", [3, 6])
def test_c4_s_per_call_cost_reads_as_one_sentence_whether_or_not_the_waits_are_settled(seed, tmp_path, rounds):
    """The per-call cost rests on the waits' difference and on the copies' price: both clauses are
    said, joined, settled or not (h200 read 'that unsettled differenceand mostly on the copies'
    price': the tag ate the line break, and with the waits settled the clause had no verb)."""
    rng = random.Random(seed)
    o_ms, send, floor = rng.uniform(0.02, 0.04), S / W * 1e3, 2 * S / H200_Bps * 1e3
    calls = ddp_rows.naive_calls("xl")
    records = [_record("naive", _steps(rng, 243, 482, calls * o_ms + send + floor, 45, n=2 * rounds, jitter=0.02),
                       rounds=rounds),
               _record("flat", _steps(rng, 243, 482, o_ms + send + 3 * floor, 45, n=2 * rounds, jitter=0.02),
                       rounds=rounds)]
    text = " ".join(_section("C4", ddp.build("C4", records, {}, [], C1, tmp_path), tmp_path).split())
    settled = "that difference" if rounds >= spread.MIN_ROUNDS else "that unsettled difference"
    assert any(f"an estimate resting on {settled} and {share} on the copies' price" in text
               for share in ("mostly", "in part"))


@pytest.mark.parametrize("gap_ms, rounds, said", [(6.0, 6, "shorter than"), (6.0, 3, "not settled against"),
                                                  (0.0, 6, None)])
def test_the_smallest_overhead_of_ours_is_set_against_the_next_smallest_as_the_judge_has_it(
        seed, tmp_path, gap_ms, rounds, said):
    """"The smallest overhead of ours" ordered the contenders by their medians alone (h200, fp32:
    bucketed-bf16-1000's 11.4 ms against bucketed-avg-1000's 16.6 ms, 3 rounds, nothing settled): it
    is now the smallest median, and the best's step is set against the next smallest's by the judge
    (the two share the baseline, so their overheads differ by their steps)."""
    rng = random.Random(seed)
    quiet = rng.uniform(470, 490)
    step = lambda wait: _steps(rng, 243, quiet, wait, 45, n=2 * rounds, jitter=0.1)
    best_wait = rng.uniform(8, 12)
    records = [_record("no-comm", step(0.0), rounds=rounds), _record("torch-ddp", step(35.0), rounds=rounds),
               _record("overlap", step(best_wait), rounds=rounds),
               _record("flat", step(best_wait + gap_ms + rng.uniform(0, 1) * bool(gap_ms)), rounds=rounds),
               _record("naive", step(best_wait + 30), rounds=rounds)]
    found = c8.overheads(records)["fp32"]
    assert found["best"] == "overlap" or not gap_ms
    (runner,) = found["runner_up"]
    by = {r["params"]["variant"]: r for r in records}
    judged = _judged(by[found["best"]], by[runner["variant"]])
    assert runner["versus"]["verdict"] == judged.verdict
    text = " ".join(_section("C8", ddp.build("C8", records, {}, [], {"fits": {}}, tmp_path), tmp_path).split())
    assert f"the smallest median overhead of ours is {found['best']}'s" in text
    assert "the smallest overhead of ours" not in text
    if said:
        assert judged.verdict == ("lower" if rounds >= spread.MIN_ROUNDS else spread.NOT_SETTLED)
        assert f"its step is {runner['versus']['less']['ms']:.1f} ms {said} that of {runner['variant']}, the next smallest" in text \
            if said == "shorter than" else f"its step is not settled against that of {runner['variant']}, the next smallest" in text
    else:
        assert f"that of {runner['variant']}, the next smallest" in text


def test_the_overhead_model_follows_or_misses_the_waits_only_where_every_round_of_a_size_does(seed):
    """"The model does not follow the waits" took each size's median wait alone: a size whose median
    lies beyond twice its prediction while some of its rounds lie within it (or the reverse) does not
    settle it; only a size whose every round lies beyond does, and the model follows only where every
    round of every size lies within."""
    rng = random.Random(seed)
    predicted = [9.9, 5.1, 3.0, 2.5]
    factor = c8.FOLLOWS_WITHIN
    # medians all within the factor, but one size's rounds reach past it
    measured = [p * rng.uniform(0.8, 1.2) for p in predicted]
    rounds = [[m * rng.uniform(0.95, 1.0), m, m * rng.uniform(1.0, 1.05)] for m in measured]
    k = rng.randrange(len(predicted))
    rounds[k] = [measured[k], predicted[k] * factor * rng.uniform(1.1, 1.5), measured[k]]
    assert c8.model_against_waits(predicted, measured)["against_waits"] == "follows"        # the medians' rule
    found = c8.model_against_waits(predicted, measured, rounds)
    assert found["against_waits"] == spread.NOT_SETTLED and found["misses"] is False
    # a median beyond the factor whose rounds dip back within it: not settled either
    measured[k] = predicted[k] * factor * rng.uniform(1.2, 1.6)
    rounds[k] = [measured[k], measured[k] * rng.uniform(1.0, 1.1), predicted[k] * rng.uniform(1.0, 1.5)]
    assert c8.model_against_waits(predicted, measured)["against_waits"] in ("flat", "off")
    assert c8.model_against_waits(predicted, measured, rounds)["against_waits"] == spread.NOT_SETTLED
    # every round of that size beyond: it misses
    rounds[k] = [measured[k] * rng.uniform(0.9, 1.0), measured[k], measured[k] * rng.uniform(1.0, 1.1)]
    found = c8.model_against_waits(predicted, measured, rounds)
    assert found["against_waits"] in ("flat", "off") and found["misses"] is True


def test_the_waits_are_flat_only_where_every_round_of_every_size_is(seed):
    """"The measured waits stay within 10 % of each other" took the sizes' medians alone: medians
    within 10 % while one size's round lies past it do not make the waits flat; every round of every
    size within 10 % of the sizes' median wait does."""
    rng = random.Random(seed)
    predicted = [9.9, 5.1, 3.0, 2.5]             # the smallest sizes' rounds lie beyond 2x of it: a miss
    measured = [9.5 * rng.uniform(0.97, 1.03) for _ in predicted]
    rounds = [[m * rng.uniform(0.99, 1.0), m, m * rng.uniform(1.0, 1.01)] for m in measured]
    found = c8.model_against_waits(predicted, measured, rounds)
    low, high = min(min(r) for r in rounds), max(max(r) for r in rounds)
    assert found["wait_rounds_range_ms"] == pytest.approx([low, high])
    assert found["against_waits"] == ("flat" if high - low < 0.1 * statistics.median(measured) else "off")
    k = rng.randrange(len(predicted))
    rounds[k] = [measured[k], measured[k], measured[k] * rng.uniform(1.15, 1.4)]
    found = c8.model_against_waits(predicted, measured, rounds)
    assert found["against_waits"] == "off" and found["misses"] is True
    assert found["wait_rounds_range_ms"][1] == pytest.approx(max(rounds[k]))


def test_the_best_measured_overhead_is_set_against_the_optimum_by_its_range_not_its_median(seed):
    """"bucketed-1000 measured 22.6 ms, at or below the optimum's" took its median alone: with its
    rounds reaching above the optimum's overhead the records do not put it below; only a range wholly
    at or below it does."""
    rng = random.Random(seed)
    medians = [35.97 + rng.uniform(-1, 1), 34.65 + rng.uniform(-1, 1), 27.32 + rng.uniform(-1, 1), 0.0]
    points = [{"variant": f"bucketed-{mb}", "buckets": n, "ms": m, "verdict": spread.NOT_SETTLED,
               "low_ms": None, "high_ms": None, "rounds_ms": [m - 1.0, m, m + 1.0]}
              for (mb, n), m in zip(BUCKET_COUNTS, medians)]
    # the best's median sits just below the optimum the others fix; where it sits moves the optimum
    # little, so place it, refit, and place it again
    for _ in range(5):
        total = c8.fit_overheads(points, S, W)["optimum"]["overhead_ms"]
        points[3] |= {"ms": total - rng.uniform(0.2, 0.6)}
    fit = c8.fit_overheads(points, S, W)
    total, best = fit["optimum"]["overhead_ms"], points[3]["ms"]
    assert best < total
    points[3]["rounds_ms"] = [best - rng.uniform(0.5, 2.0), best, total + rng.uniform(0.5, 2.0)]
    fit = c8.fit_overheads(points, S, W)
    assert fit["optimum"]["overhead_ms"] == pytest.approx(total)
    assert fit["best"]["range_ms"] == [min(points[3]["rounds_ms"]), max(points[3]["rounds_ms"])]
    assert fit["best"]["range_kind"] == "rounds' range"
    assert fit["not_located"] == ["unsettled", "within"]
    # every round at or below the optimum's: now it is lower
    points[3]["rounds_ms"] = [best - rng.uniform(0.5, 2.0), best, total - rng.uniform(0.0, 0.1)]
    assert c8.fit_overheads(points, S, W)["not_located"] == ["unsettled", "lower"]
