"""Interleaved rounds (cs336_systems.rounds): turns, rotation, and an OOM that leaves the others alone."""
import gc
import weakref

import pytest
import torch

from cs336_systems import rounds
from cs336_systems.rounds import Entrant, take_turns


def _counting(name, calls, phases=("forward", "backward")):
    def make():
        def step(phase):
            calls.append(name)
            for p in phases:
                with phase(p):
                    torch.ones(8).sum()
        return step
    return make


def test_every_entrant_warms_up_then_takes_its_turn_in_each_round_in_rotated_order():
    calls = []
    job, out = take_turns([Entrant(n, _counting(n, calls)) for n in "abc"], device="cpu",
                          warmup=1, rounds=3, steps=2, settle=0)
    assert calls == ["a", "b", "c",                    # warm-up, in order
                     "a", "a", "b", "b", "c", "c",     # round 1
                     "b", "b", "c", "c", "a", "a",     # round 2 starts one later
                     "c", "c", "a", "a", "b", "b"]
    for name in "abc":
        o = out[name]
        assert o.status == "ok" and len(o.rounds) == 3
        assert all(len(r["forward"]) == len(r["step"]) == 2 for r in o.rounds)
        for r in o.rounds:      # a step is the sum of its phases
            assert r["step"] == pytest.approx([f + b for f, b in zip(r["forward"], r["backward"])])
        m = o.metrics(job)
        assert m["turns"]["job"] == job.id and m["turns"]["with"] == ["a", "b", "c"]
        assert m["step"]["n"] == 6 and m["forward"]["samples"] == [t for r in o.rounds for t in r["forward"]]


def test_rotation_visits_every_position():
    names = ["a", "b", "c", "d"]
    firsts = {rounds.rotation(names, r)[0] for r in range(4)}
    assert firsts == set(names)


@pytest.mark.parametrize("bad", [dict(rounds=2), dict(steps=0), dict(warmup=-1), dict(settle=-1)])
def test_too_few_rounds_or_steps_are_refused(bad):
    kwargs = dict(device="cpu", warmup=1, rounds=3, steps=1, settle=0) | bad
    with pytest.raises(ValueError):
        take_turns([Entrant("a", _counting("a", []))], **kwargs)


def test_duplicate_names_are_refused():
    with pytest.raises(ValueError, match="unique"):
        take_turns([Entrant("a", _counting("a", [])), Entrant("a", _counting("a", []))],
                   device="cpu", warmup=0, rounds=3, steps=1)


@pytest.mark.parametrize("when", ["building", "warm-up", "round 2"])
def test_an_oom_is_an_outcome_and_its_memory_is_let_go_before_the_others_go_on(when):
    held = []           # weak references to what the failing entrant allocated
    cleaned = []
    calls = []
    steps_taken = {"n": 0}

    def failing():
        big = torch.empty(1 << 20)
        held.append(weakref.ref(big))
        if when == "building":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 4.00 MiB")

        def step(phase):
            steps_taken["n"] += 1
            local = big + 1                      # the step's own tensors, alive in the traceback
            held.append(weakref.ref(local))
            # warm-up is 1 step; each round 1 step: round 2's step is the third
            if (when == "warm-up" and steps_taken["n"] == 1) or (when == "round 2" and steps_taken["n"] == 3):
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 4.00 MiB")
            with phase("forward"):
                pass
        return step

    seen_alive = []

    def survivor():
        def step(phase):
            gc.collect()
            # from round 2 on (and always when it failed earlier) nothing of the failed one lives
            seen_alive.append(sum(r() is not None for r in held))
            calls.append("s")
            with phase("forward"):
                pass
        return step

    job, out = take_turns([Entrant("big", failing, cleanup=lambda: cleaned.append(1)), Entrant("s", survivor)],
                          device="cpu", warmup=1, rounds=3, steps=1, settle=0)
    assert out["big"].status == "oom" and "out of memory" in out["big"].message
    assert cleaned == [1]
    assert out["s"].status == "ok" and len(out["s"].rounds) == 3 and calls.count("s") == 4
    # the survivor's steps after the failure see none of the failed entrant's tensors
    assert seen_alive[-1] == 0
    assert all(r() is None for r in held)


def test_an_error_is_an_outcome_too(capsys):
    def broken():
        raise ValueError("bad shape")
    _, out = take_turns([Entrant("x", broken), Entrant("y", _counting("y", []))], device="cpu",
                        warmup=0, rounds=3, steps=1, settle=0)
    assert out["x"].status == "error" and out["x"].message == "ValueError: bad shape"
    assert out["y"].status == "ok"


def test_an_entrant_that_skips_itself_is_skipped_with_why_and_the_others_go_on(capsys):
    calls = []

    def skip():
        raise rounds.Skipped("needs a CUDA GPU")

    job, out = take_turns([Entrant("s", skip, cleanup=lambda: calls.append("cleaned")), Entrant("a", _counting("a", calls))],
                          device="cpu", warmup=1, rounds=3, steps=1, settle=0)
    assert (out["s"].status, out["s"].message, out["s"].rounds) == ("skipped", "needs a CUDA GPU", [])
    assert out["a"].status == "ok" and len(out["a"].rounds) == 3 and calls.count("a") == 4
    assert "Traceback" not in capsys.readouterr().err        # a skip is no error


@pytest.mark.gpu
def test_on_a_gpu_an_oom_leaves_the_next_entrants_memory_and_time_as_without_it():
    device = torch.device("cuda")
    free = torch.cuda.mem_get_info()[0]

    def hog():
        keep = torch.empty(free // 2, dtype=torch.uint8, device=device)   # noqa: F841 - held until the OOM

        def step(phase):
            torch.empty(free, dtype=torch.uint8, device=device) + keep[:1]    # cannot fit
        return step

    def matmul():
        a = torch.randn(2048, 2048, device=device)

        def step(phase):
            with phase("forward"):
                a @ a
        return step

    _, alone = take_turns([Entrant("m", matmul)], device=device, warmup=2, rounds=3, steps=5)
    _, beside = take_turns([Entrant("hog", hog), Entrant("m", matmul)], device=device, warmup=2, rounds=3, steps=5)
    assert beside["hog"].status == "oom"
    assert beside["m"].peak_memory_bytes == alone["m"].peak_memory_bytes
    median = lambda outcome: sorted(t for r in outcome.rounds for t in r["step"])[7]
    assert median(beside["m"]) == pytest.approx(median(alone["m"]), rel=0.2)


def _timers_clock(monkeypatch) -> dict:
    """The clock the turns are timed by (``timeit.default_timer``: the phase timer's and the settling
    steps'), at ``clock["now"]`` seconds, moved only by the steps that say how long they last. A step
    that sleeps instead wakes late on a loaded host, by more than these tests' margins."""
    import timeit

    clock = {"now": 0.0}
    monkeypatch.setattr(timeit, "default_timer", lambda: clock["now"])
    return clock


def test_a_cheap_step_gets_longer_turns_and_warm_up_the_same_count_every_round(monkeypatch):
    clock = _timers_clock(monkeypatch)

    def make(ms):
        def step(phase):
            with phase("forward"):
                clock["now"] += ms / 1e3
        return lambda: step

    job, out = take_turns([Entrant("cheap", make(2)), Entrant("dear", make(50))], device="cpu", warmup=1,
                          rounds=3, steps=2, min_turn_ms=40)
    cheap, dear = out["cheap"], out["dear"]
    assert sum(cheap.warmup_steps) >= 40 and len(cheap.warmup_steps) > 1
    assert len(dear.warmup_steps) == 1                   # one step already lasts min_turn_ms
    assert 5 <= cheap.steps_per_turn <= 20 and dear.steps_per_turn == 2
    assert all(len(r["step"]) == cheap.steps_per_turn for r in cheap.rounds)
    assert cheap.metrics(job)["turns"]["steps_per_turn"] == cheap.steps_per_turn
    assert job.as_dict()["min_turn_ms"] == 40


@pytest.mark.parametrize("min_turn_ms, step_ms, steps, expected", [
    (0, 1.0, 3, 3), (250, 10.0, 3, 25), (250, 500.0, 3, 3), (250, 0.01, 3, rounds.MAX_STEPS_PER_TURN), (250, 0.0, 4, 4)])
def test_steps_for(min_turn_ms, step_ms, steps, expected):
    assert rounds.steps_for(min_turn_ms, step_ms, steps) == expected


def test_each_turn_starts_with_untimed_settling_steps(monkeypatch):
    monkeypatch.setattr(rounds, "keeps_settling", lambda settles, rounds_: True)
    seen = []           # (round's phase timer active?, entrant) per call

    def make(name):
        def step(phase):
            with phase("forward"):
                seen.append((name, phase.__qualname__))
        return lambda: step

    job, out = take_turns([Entrant("a", make("a")), Entrant("b", make("b"))], device="cpu", warmup=1,
                          rounds=3, steps=2, settle=1)
    assert len(seen) == 2 + 3 * 2 * (1 + 2)             # warm-up, then per round and entrant 1 settling + 2 timed
    assert all(len(r["step"]) == 2 for o in out.values() for r in o.rounds)
    turns = [seen[i:i + 3] for i in range(2, len(seen), 3)]
    assert all(t[0][1] == "untimed" and t[1][1] != "untimed" for t in turns)
    assert job.as_dict()["settle"] == 1


def test_each_settling_step_is_kept_with_its_wall_time_and_never_joins_the_rounds():
    import time

    def make(name, settle_s, timed_s):
        count = {"n": 0}

        def step(phase):
            count["n"] += 1
            with phase("forward"):
                time.sleep(settle_s if phase is rounds.untimed else timed_s)
        return lambda: step

    job, out = take_turns([Entrant("a", make("a", 0.02, 0.001))], device="cpu", warmup=0, rounds=3, steps=2,
                          settle=1)
    m = out["a"].metrics(job)
    assert len(m["settle_ms_per_round"]) == 3 and all(len(r) == 1 and r[0] >= 20 for r in m["settle_ms_per_round"])
    assert all(t < 20 for r in out["a"].rounds for t in r["step"])
    _, none = take_turns([Entrant("a", make("a", 0, 0))], device="cpu", warmup=0, rounds=3, steps=1, settle=0)
    assert "settle_ms_per_round" not in none["a"].metrics(job)


@pytest.mark.parametrize("settles, steps, keeps", [
    ([[10.0], [10.0]], [[10.0], [10.0]], False),              # the first step after a switch costs what the next do
    ([[11.0], [9.0]], [[10.0, 10.0], [10.0]], False),          # at most 1.10x in each trial turn
    ([[10.0], [11.5]], [[10.0], [10.0]], True),               # one trial turn dearer by more: it keeps settling
    ([[30.0, 30.0], [25.0, 26.0]], [[10.0], [10.0]], True),   # a CUDA graph's first replay after other work
    ([[10.0]], [[10.0]], True),                               # fewer turns than the trial: nothing seen yet
    ([], [], True),
])
def test_an_entrant_keeps_settling_where_a_trial_turn_s_settling_step_cost_more(settles, steps, keeps):
    assert rounds.keeps_settling(settles, [{"step": s} for s in steps]) is keeps


def test_after_the_trial_rounds_only_an_entrant_whose_settling_costs_more_goes_on_settling(monkeypatch):
    """Two entrants, one whose untimed first step of a turn is free and one for which it is dear: the
    first settles in the trial rounds only, the second in every round; neither's timed steps change."""
    clock = _timers_clock(monkeypatch)
    untimed_calls = {"free": 0, "dear": 0}

    def make(name, settle_s, timed_s):
        def step(phase):
            if phase is rounds.untimed:
                untimed_calls[name] += 1
            with phase("forward"):
                clock["now"] += settle_s if phase is rounds.untimed else timed_s
        return lambda: step

    job, out = take_turns([Entrant("free", make("free", 0.0, 0.01)), Entrant("dear", make("dear", 0.03, 0.001))],
                          device="cpu", warmup=0, rounds=5, steps=1, settle=1)
    free, dear = out["free"].metrics(job), out["dear"].metrics(job)
    assert untimed_calls == {"free": rounds.SETTLE_TRIAL_ROUNDS, "dear": 5}
    assert (len(free["settle_ms_per_round"]), free["settles_every_turn"]) == (rounds.SETTLE_TRIAL_ROUNDS, False)
    assert (len(dear["settle_ms_per_round"]), dear["settles_every_turn"]) == (5, True)
    assert all(len(r["step"]) == 1 for o in out.values() for r in o.rounds) and len(out["free"].rounds) == 5


def test_the_host_s_share_of_each_phase_is_recorded_per_round():
    import time

    def make():
        def step(phase):
            with phase("forward"):
                time.sleep(0.002)       # on the CPU the host does all of it
            with phase("backward"):
                pass
        return step

    job, out = take_turns([Entrant("a", make)], device="cpu", warmup=0, rounds=3, steps=2, settle=0)
    m = out["a"].metrics(job)
    assert [len(r["forward"]) for r in m["host_ms_per_round"]] == [2, 2, 2]
    for walls, hosts in zip(m["rounds"], m["host_ms_per_round"]):
        assert all(0 < h <= w for phase in walls for w, h in zip(walls[phase], hosts[phase]))
    assert m["host_share"]["forward"] == pytest.approx(1.0, abs=0.05) and m["host_share"]["step"] > 0.9
    assert rounds.host_shares([{"step": [10.0, 10.0, 10.0]}], [{"step": [2.0, 3.0, 9.0]}]) == {"step": 0.3}


def test_by_default_a_turn_settles_on_a_gpu_only():
    calls = []
    job, _ = take_turns([Entrant("a", _counting("a", calls))], device="cpu", warmup=0, rounds=3, steps=1)
    assert job.settle == 0 and len(calls) == 3


def test_the_timed_peak_leaves_out_the_warm_up_and_the_settling_steps(monkeypatch):
    held = {"now": 0, "peak": 0}
    monkeypatch.setattr(rounds, "reset_peak_memory", lambda device: held.update(peak=held["now"]))
    monkeypatch.setattr(rounds, "peak_memory_bytes", lambda device: held["peak"])
    taken = []

    def make():
        def step(phase):
            taken.append(phase)
            # the warm-up step and each turn's settling step hold 100 bytes at their peak, timed steps 10
            size = 100 if len(taken) == 1 or phase is rounds.untimed else 10
            held["peak"] = max(held["peak"], size)
        return step

    _, out = take_turns([Entrant("a", make)], device="cpu", warmup=1, rounds=3, steps=2, settle=1)
    assert out["a"].peak_memory_bytes == 100 and out["a"].timed_peak_memory_bytes == 10


def test_interleaving_spreads_each_entrant_s_steps_evenly_over_a_shared_turn():
    assert rounds.interleaving({"a": 4, "b": 2}) == ["a", "b", "a", "a", "b", "a"]
    assert rounds.interleaving({"a": 2, "b": 2, "c": 1}) == ["a", "b", "c", "a", "b"]
    assert rounds.interleaving({"a": 3}) == ["a", "a", "a"]


def test_the_interleaved_entrants_share_one_turn_where_the_first_of_them_comes():
    assert rounds.turns_of(["a", "x", "b"], {"a", "b"}) == [["a", "b"], ["x"]]
    assert rounds.turns_of(["x", "b", "a"], {"a", "b"}) == [["x"], ["b", "a"]]
    assert rounds.turns_of(["x", "a"], set()) == [["x"], ["a"]]


def _drifting(name, ms, calls, clock):
    """A step that lasts ``ms`` times the host's mood, which drifts with every step anyone takes, on
    the timers' clock (``_timers_clock``): slept instead, on a loaded host, the rounds' spread would be
    the load's, not the drift's."""
    import math

    def step(phase):
        calls.append(name)
        clock["n"] += 1
        with phase("forward"):
            clock["now"] += ms * (1 + 0.5 * math.sin(clock["n"] / 4)) / 1e3
    return lambda: step


def test_cheap_entrants_take_their_steps_in_turn_and_the_drift_they_share_cancels(monkeypatch):
    from cs336_systems.report.spread import judge_rounds

    calls, clock = [], _timers_clock(monkeypatch)
    clock["n"] = 0
    entrants = [Entrant("a", _drifting("a", 4, calls, clock)), Entrant("b", _drifting("b", 6, calls, clock)),
                Entrant("dear", _drifting("dear", 45, calls, clock))]
    job, out = take_turns(entrants, device="cpu", warmup=1, rounds=5, steps=2, min_turn_ms=40, settle=0)
    a, b, dear = out["a"], out["b"], out["dear"]
    assert a.interleaved and b.interleaved and not dear.interleaved
    assert a.metrics(job)["turns"]["interleaved"] is True and dear.metrics(job)["turns"]["interleaved"] is False
    timed = calls[len(calls) - 5 * (a.steps_per_turn + b.steps_per_turn + dear.steps_per_turn):]
    first_round = timed[:a.steps_per_turn + b.steps_per_turn]
    assert first_round == rounds.interleaving({"a": a.steps_per_turn, "b": b.steps_per_turn})
    assert timed[len(first_round):len(first_round) + dear.steps_per_turn] == ["dear"] * dear.steps_per_turn
    assert all(len(r["step"]) == a.steps_per_turn for r in a.rounds) and len(b.rounds) == 5
    # b's step is 1.5x a's in every mood: paired per round, it is higher beyond the spread
    verdict = judge_rounds([r["step"] for r in b.rounds], [r["step"] for r in a.rounds], ratio=True)
    assert verdict.verdict == "higher" and 1.2 < verdict.difference < 1.8


def test_in_a_shared_turn_each_entrant_s_peak_is_its_own_steps(monkeypatch):
    held = {"peak": 0}
    monkeypatch.setattr(rounds, "reset_peak_memory", lambda device: held.update(peak=0))
    monkeypatch.setattr(rounds, "peak_memory_bytes", lambda device: held["peak"])
    monkeypatch.setattr(rounds, "steps_for", lambda min_turn_ms, step_ms, steps: 4)   # both cheap

    def make(size):
        def step(phase):
            held["peak"] = max(held["peak"], size)
            with phase("forward"):
                pass
        return lambda: step

    _, out = take_turns([Entrant("big", make(100)), Entrant("small", make(10))], device="cpu", warmup=1,
                        rounds=3, steps=2, min_turn_ms=1, settle=0)
    assert out["big"].interleaved and out["small"].interleaved
    assert out["small"].timed_peak_memory_bytes == 10 and out["big"].timed_peak_memory_bytes == 100


def test_an_entrant_that_fails_inside_a_shared_turn_stops_there_and_the_other_goes_on(monkeypatch):
    monkeypatch.setattr(rounds, "steps_for", lambda min_turn_ms, step_ms, steps: 3)
    taken = {"n": 0}
    calls = []

    def failing():
        def step(phase):
            taken["n"] += 1
            if taken["n"] == 3:         # warm-up, then the second step of round 1
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 MiB")
            with phase("forward"):
                pass
        return step

    _, out = take_turns([Entrant("f", failing), Entrant("s", _counting("s", calls))], device="cpu", warmup=1,
                        rounds=3, steps=1, min_turn_ms=1, settle=0)
    assert out["f"].status == "oom" and out["f"].rounds == []
    assert out["s"].status == "ok" and len(out["s"].rounds) == 3 and all(len(r["step"]) == 3 for r in out["s"].rounds)


def test_each_round_counts_the_allocator_s_calls_during_its_timed_steps_only(monkeypatch):
    """A timed step that makes the caching allocator go to the driver is slower for a reason outside
    the step; the round says how many such calls its timed steps made (warm-up and settling apart)."""
    made = {"calls": 0}
    monkeypatch.setattr(rounds, "allocator_calls", lambda device: made["calls"])

    def make():
        def step(phase):
            # the settling step allocates twice; of the timed steps, the second of each turn once
            if phase is rounds.untimed:
                made["calls"] += 2
            else:
                step.timed += 1
                made["calls"] += step.timed % 2 == 0
        step.timed = 0
        return step

    job, out = take_turns([Entrant("a", make)], device="cpu", warmup=1, rounds=3, steps=2, settle=1)
    assert out["a"].allocator_calls == [1, 1, 1]
    assert out["a"].metrics(job)["allocator_calls_per_round"] == [1, 1, 1]


def test_on_the_cpu_the_allocator_s_calls_are_not_counted():
    job, out = take_turns([Entrant("a", lambda: (lambda phase: None))], device="cpu", warmup=0, rounds=3, steps=1)
    assert out["a"].metrics(job)["allocator_calls_per_round"] == [None, None, None]


@pytest.mark.gpu
def test_on_a_gpu_a_new_block_is_an_allocator_call_and_a_cached_one_is_not():
    from cs336_systems.timing import allocator_calls

    device = torch.device("cuda")
    torch.cuda.empty_cache()
    before = allocator_calls(device)
    x = torch.empty(64 << 20, dtype=torch.uint8, device=device)     # nothing cached: cudaMalloc
    after_new = allocator_calls(device)
    del x
    y = torch.empty(64 << 20, dtype=torch.uint8, device=device)     # the freed block, from the cache
    assert after_new == before + 1 and allocator_calls(device) == after_new
    del y


# --- entrants that time their own turns (rounds.SelfTimed) ---------------------------------------

def _self_timed(name, calls, samples_of, steps=7, built=None):
    """An entrant whose make() warms it up itself and whose turn returns ``samples_of(turn)``."""
    def make():
        calls.append(f"{name} warm-up")
        if built is not None:
            built.append(name)

        def take():
            calls.append(name)
            return samples_of(calls.count(name))
        return rounds.SelfTimed(take, steps)
    return Entrant(name, make)


def test_a_self_timed_entrant_takes_its_turns_in_the_rotation_and_its_samples_are_the_rounds(monkeypatch):
    """Its samples per phase are the round's as given; its turns are its own (never shared, never
    settled) however many calls it says a turn times; the entrants that step are timed as ever."""
    monkeypatch.setattr(rounds, "keeps_settling", lambda settles, rounds_: True)
    calls = []
    fixed = _self_timed("s", calls, lambda n: {"ms": [float(n)], "graph_ms": [n / 10, n / 5]})
    other = _self_timed("t", calls, lambda n: {"ms": [100.0 + n]}, steps=3)
    job, out = take_turns([fixed, Entrant("r", _counting("r", calls)), other], device="cpu", warmup=1, rounds=3,
                          steps=1, settle=2)
    assert calls == ["s warm-up", "r", "t warm-up",
                     "s", "r", "r", "r", "t",          # round 1: r settles twice, then its timed step
                     "r", "r", "r", "t", "s",
                     "t", "s", "r", "r", "r"]
    s, t, r = out["s"], out["t"], out["r"]
    assert s.rounds == [{"ms": [n], "graph_ms": [n / 10, n / 5]} for n in (1.0, 2.0, 3.0)]
    assert [one["ms"] for one in t.rounds] == [[101.0], [102.0], [103.0]]
    assert (s.steps_per_turn, t.steps_per_turn, s.warmup_steps) == (7, 3, [])
    assert not (s.interleaved or t.interleaved)           # two "cheap" self-timed entrants share nothing
    assert s.turns(job) == job.as_dict() | {"steps_per_turn": 7, "interleaved": False}
    assert all(len(one["step"]) == 1 for one in r.rounds) and len(r.warmup_steps) == 1


@pytest.mark.parametrize("when", ["warm-up", "round 2"])
def test_a_self_timed_entrant_that_fails_is_an_outcome_its_state_cleaned_and_the_others_go_on(when):
    calls, cleaned = [], []

    def make():
        if when == "warm-up":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")

        def take():
            calls.append("f")
            if calls.count("f") == 2:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")
            return {"ms": [1.0]}
        return rounds.SelfTimed(take, 1)

    survivor = _self_timed("s", calls, lambda n: {"ms": [2.0]})
    _, out = take_turns([Entrant("f", make, cleanup=lambda: cleaned.append(1)), survivor], device="cpu",
                        warmup=0, rounds=4, steps=1)
    assert out["f"].status == "oom" and "out of memory" in out["f"].message and cleaned == [1]
    assert len(out["f"].rounds) == (0 if when == "warm-up" else 1)
    assert out["s"].status == "ok" and len(out["s"].rounds) == 4
    assert calls.count("f") == (0 if when == "warm-up" else 2)        # no turn after the failure


def test_a_self_timed_turn_counts_its_allocator_calls_and_its_peak(monkeypatch):
    made = {"calls": 0, "peak": 0}
    monkeypatch.setattr(rounds, "allocator_calls", lambda device: made["calls"])
    monkeypatch.setattr(rounds, "reset_peak_memory", lambda device: made.update(peak=0))
    monkeypatch.setattr(rounds, "peak_memory_bytes", lambda device: made["peak"])

    def samples(n):
        made["calls"] += n          # the n-th turn goes to the driver n times
        made["peak"] = 10 * n
        return {"ms": [1.0]}
    _, out = take_turns([_self_timed("s", [], samples)], device="cpu", warmup=0, rounds=3, steps=1)
    assert out["s"].allocator_calls == [1, 2, 3] and out["s"].timed_peak_memory_bytes == 30


def test_a_name_given_twice_is_entered_again_as_an_a_a_pair():
    from cs336_systems.rounds import configuration, entries

    assert entries(["fp32", "bf16", "fp32"]) == ["fp32", "bf16", "fp32#2"]
    assert [configuration(e) for e in entries(["fp32", "bf16", "fp32"])] == ["fp32", "bf16", "fp32"]
    with pytest.raises(ValueError, match="more than twice"):
        entries(["a", "a", "a"])


def test_progress_can_be_left_to_one_rank(capsys):
    calls = []
    take_turns([Entrant("a", _counting("a", calls))], device="cpu", warmup=1, rounds=3, steps=1, progress=False)
    assert "round" not in capsys.readouterr().err
    take_turns([Entrant("a", _counting("a", calls))], device="cpu", warmup=1, rounds=3, steps=1)
    assert "round 3/3 a" in capsys.readouterr().err
