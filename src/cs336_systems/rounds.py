"""Interleaved rounds: the things one job compares take turns, so every verdict is a paired difference.

Two processes of one command on one machine differ by up to ~30 % at host-bound points (another
allocator layout, other cores, clocks that drift), far more than the standard error inside either.
A comparison measured across processes therefore says little. Here the compared things live in one
process and take turns — warm-up for each, then rounds ``A B C | B C A | C A B ...`` (the order
rotates so no entrant always follows the same one) — and each round keeps its own samples. A
drift that moves every entrant of a round moves both sides of a pair alike, and the per-round
difference cancels it; ``report.spread.judge`` judges that difference against its scatter across
rounds.

    outcomes = take_turns([Entrant("fp32", make_fp32), Entrant("bf16", make_bf16)],
                          device="cuda", warmup=3, rounds=5, steps=3)
    outcomes["bf16"].metrics(job)     # per-phase summaries, every round's samples, who it was paired with

An entrant is built lazily (``make()`` returns its step function ``step(phase)``, where ``phase`` is
``name -> context manager``), at the start of its warm-up. One that runs out of memory, building or
stepping, is an outcome (``oom``), its memory released before the next entrant's turn; the others go
on. Entrants may share state (one model, its optimizer): the caller decides what is shared.

An entrant whose turn must produce its own samples — calls timed one by one as ``triton.testing.do_bench``
times them, CUDA-graph replays — has ``make()`` build and warm it up itself and return ``SelfTimed``:
its ``take()`` is one whole turn and returns the turn's samples per phase. It takes its turns in the
same rotation, fails, runs out of memory and is recorded the same way; only the timing is its own.
"""
from __future__ import annotations

import contextlib
import gc
import math
import statistics
import timeit
import uuid
from dataclasses import dataclass, field
from typing import Callable, ContextManager, Sequence

import torch

from cs336_systems.records import log
from cs336_systems.timing import (PhaseTimer, allocator_calls, failure_status, free_device_memory,
                                  peak_memory_bytes, reset_peak_memory, summarize, synchronize)

Phase = Callable[[str], ContextManager]
StepFn = Callable[[Phase], object]

MIN_ROUNDS = 3          # fewer rounds give no spread across rounds worth the name
# A turn of a cheap step is lengthened to ``min_turn_ms`` (and its warm-up too) but never past this
# many steps: a host-bound step of a few milliseconds jitters by more than itself from step to step.
MAX_STEPS_PER_TURN = 100
# Settling is tried before it is paid for: every entrant settles in the first ``SETTLE_TRIAL_ROUNDS``
# rounds, and one whose settling step cost at most ``SETTLE_MATTERS`` times its timed steps' median in
# each of those turns stops (``keeps_settling``). On one H200 (lab/paired, c8c1ec6) an eager model's
# first step after another entrant's turn cost 0.9-1.1x its next ones, 1.00 +- 0.04 where the GPU bounds
# it, so its settling step was half of a one-step turn bought for nothing; a rung that replays CUDA
# graphs paid 2.0-4.9x and SDPA's flash back end 1.15-1.9x in every turn. Stopping wrongly biases every
# later turn and keeping wrongly costs one step a turn, so the bar sits just above the GPU-bound scatter.
SETTLE_TRIAL_ROUNDS = 2
SETTLE_MATTERS = 1.10


class Skipped(Exception):
    """Raised by an entrant's ``make()`` when its point is not measured in this job (a CUDA-only
    kernel on a CPU; a rung needed only where another ran out of memory): its outcome is
    ``skipped``, the message says why."""


class Failed(Exception):
    """Raised by an entrant (its ``make()``, step or ``take()``) to stop with a status and message
    decided elsewhere: the ranks of a process group agreeing that one of them ran out of memory, so
    that every rank leaves the entrant in the same turn. Recorded as given; the process that failed
    logged its own traceback."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status, self.message = status, message


@dataclass
class Entrant:
    name: str                               # the point it measures, unique in the job
    make: Callable[[], StepFn]              # builds what it needs; returns one step of it
    # After it fails: clear what it left in state shared with the others (a half-done backward's
    # gradients on a shared model), so the next entrant starts from the memory it would have had.
    cleanup: Callable[[], None] | None = None


@dataclass(frozen=True)
class SelfTimed:
    """What ``make()`` returns for an entrant that times its own turns (built and warmed up already):
    ``take()`` takes one whole turn and returns its samples per phase (ms), which become the round's
    samples as they are; ``steps`` is what one turn times (its calls), the record's steps_per_turn. No
    untimed settling step precedes its turns and none of its turns is shared with another entrant."""
    take: Callable[[], dict[str, list[float]]]
    steps: int


@dataclass
class Outcome:
    name: str
    status: str = "ok"                      # ok, oom or error (timing.failure_status), or skipped
    message: str | None = None
    warmup_steps: list[float] = field(default_factory=list)      # ms, whole step
    rounds: list[dict[str, list[float]]] = field(default_factory=list)   # per round: phase -> samples (ms)
    # per round, the same shape: how long of each sample the host took to queue its work (PhaseTimer.host);
    # empty for a SelfTimed entrant, whose own timing has no such split
    host_rounds: list[dict[str, list[float]]] = field(default_factory=list)
    # per round: the wall time (ms) of each untimed settling step before the turn's timed ones. Kept to
    # show what settling buys: where these match the timed steps, the entrant needs none.
    settle_rounds: list[list[float]] = field(default_factory=list)
    settling: bool = True                   # whether its turns still settle (``keeps_settling``)
    # per round: the allocator's calls to the driver during the timed steps (timing.allocator_calls;
    # None on the CPU). A round that made some was slowed by the memory left by another entrant.
    allocator_calls: list[int | None] = field(default_factory=list)
    peak_memory_bytes: int | None = None    # the most any of its steps held (None on the CPU)
    timed_peak_memory_bytes: int | None = None    # the same over its timed steps only (not warm-up, not settling)
    steps_per_turn: int = 0                 # its timed steps in each round (``take_turns``' min_turn_ms)
    interleaved: bool = False               # whether its turns were shared, step by step, with the other cheap entrants
    step: StepFn | SelfTimed | None = field(default=None, repr=False)

    @property
    def self_timed(self) -> bool:
        return isinstance(self.step, SelfTimed)

    def turns(self, job: "Job") -> dict:
        """The record's ``turns``: the job, its entrants and its rounds (which makes pairs findable),
        and this entrant's timed steps a turn."""
        return job.as_dict() | {"steps_per_turn": self.steps_per_turn, "interleaved": self.interleaved}

    def metrics(self, job: "Job") -> dict:
        """What a record keeps: per-phase summaries over every timed sample (``timing.summarize`` and
        the samples), ``step`` (the phases' sum), every round's samples, the warm-up steps, the peak
        memory and ``turns``: the job, its entrants and its rounds, which makes pairs findable."""
        phases = list(self.rounds[0]) if self.rounds else []
        metrics = {}
        for name in phases:
            samples = [t for r in self.rounds for t in r[name]]
            metrics[name] = summarize(samples) | {"samples": samples}
        steps = [t for r in self.rounds for t in r["step"]]
        metrics["step"] = summarize(steps) | {"samples": steps}
        metrics["rounds"] = self.rounds
        if self.host_rounds and len(self.host_rounds) == len(self.rounds):
            metrics["host_share"] = host_shares(self.rounds, self.host_rounds)
            metrics["host_ms_per_round"] = self.host_rounds
        if self.settle_rounds:
            metrics["settle_ms_per_round"] = self.settle_rounds
            metrics["settles_every_turn"] = self.settling
        metrics["allocator_calls_per_round"] = self.allocator_calls
        metrics["warmup_step_samples"] = self.warmup_steps
        metrics["peak_memory_bytes"] = self.peak_memory_bytes
        metrics["turns"] = self.turns(job)
        return metrics


@dataclass(frozen=True)
class Job:
    """One job's identity: the compared points share it, and a report pairs only records that do."""
    id: str
    entrants: tuple[str, ...]
    rounds: int
    steps: int
    warmup: int
    min_turn_ms: float = 0.0
    settle: int = 0

    def as_dict(self) -> dict:
        return {"job": self.id, "with": list(self.entrants), "rounds": self.rounds, "steps": self.steps,
                "warmup": self.warmup, "min_turn_ms": self.min_turn_ms, "settle": self.settle}


AGAIN = "#2"        # the second entry of a configuration a job measures twice: an A/A pair


def entries(names: Sequence[str]) -> list[str]:
    """Entrant names for ``names`` in order, a name given twice entered again as ``<name>#2``: the
    same configuration as its own entrant, the control that shows how often the judge calls one
    configuration different from itself (``report.spread``; lab/paired/aa.py)."""
    if any(list(names).count(n) > 2 for n in names):
        raise ValueError(f"a name given more than twice: {list(names)} (twice is an A/A pair)")
    seen: set[str] = set()
    out = []
    for name in names:
        out.append(name + AGAIN if name in seen else name)
        seen.add(name)
    return out


def configuration(entry: str) -> str:
    """What an entrant named by ``entries`` measures: its name without the A/A mark."""
    return entry.removesuffix(AGAIN)


def rotation(names: Sequence[str], round_index: int) -> list[str]:
    """Round ``round_index``'s order: the list rotated by one more place each round."""
    k = round_index % len(names) if names else 0
    return list(names[k:]) + list(names[:k])


def _timed_step(outcome: Outcome, device, timer: PhaseTimer) -> tuple[float, float]:
    """One step of ``outcome``'s entrant, its phases into ``timer``; returns the whole step and the
    host's part of it (ms, ``PhaseTimer.host``)."""
    before = {name: len(samples) for name, samples in timer.samples.items()}
    outcome.step(timer.phase)
    new = [name for name, samples in timer.samples.items() if len(samples) > before.get(name, 0)]
    return sum(timer.samples[n][-1] for n in new), sum(timer.host[n][-1] for n in new)


def host_shares(rounds: list[dict[str, list[float]]], host_rounds: list[dict[str, list[float]]]) -> dict[str, float]:
    """Per phase, the median over the timed samples of the host's share of each (host ms / wall ms):
    near 1 where the host bound the phase, well below where the GPU did."""
    shares: dict[str, list[float]] = {}
    for walls, hosts in zip(rounds, host_rounds):
        for phase, samples in walls.items():
            shares.setdefault(phase, []).extend(h / w for w, h in zip(samples, hosts.get(phase, [])) if w > 0)
    return {phase: statistics.median(xs) for phase, xs in shares.items() if xs}


def _attempt(outcome: Outcome, entrant: Entrant, device, action: Callable[[Outcome], None]) -> None:
    """``action(outcome)``; where it raises, the outcome says why and what the entrant held is let go
    (outside the ``except``, where the traceback and the tensors it holds are gone)."""
    failure = None
    try:
        action(outcome)
    except Exception as exc:  # noqa: BLE001 - an OOM or error is this entrant's outcome
        failure = exc
    if failure is not None:
        _fail(outcome, entrant, failure)
        del failure             # its traceback holds the entrant's tensors
        _release(device)


def _fail(outcome: Outcome, entrant: Entrant, exc: BaseException) -> None:
    """Record why ``outcome`` stopped and let go of everything its entrant held."""
    outcome.status, outcome.message = (("skipped", str(exc)) if isinstance(exc, Skipped)
                                       else (exc.status, exc.message) if isinstance(exc, Failed)
                                       else failure_status(exc))
    outcome.step = None
    if entrant.cleanup is not None:
        entrant.cleanup()
    log(f"  {outcome.name}: {outcome.status} ({outcome.message})")


def untimed(name: str) -> ContextManager:
    """The phase a turn's settling steps run under: nothing times them."""
    return contextlib.nullcontext()


def _release(device) -> None:
    gc.collect()
    free_device_memory(device)


def steps_for(min_turn_ms: float, step_ms: float, steps: int) -> int:
    """Timed steps of a turn: ``steps``, or as many steps of ``step_ms`` as fill ``min_turn_ms``, at
    most ``MAX_STEPS_PER_TURN``."""
    if min_turn_ms <= 0 or not step_ms > 0:
        return steps
    return max(steps, min(MAX_STEPS_PER_TURN, math.ceil(min_turn_ms / step_ms)))


def turns_of(order: Sequence[str], interleaved: set[str]) -> list[list[str]]:
    """A round's turns in ``order``: one entrant each, except that the ``interleaved`` entrants share
    one turn, placed where the first of them comes in ``order``."""
    turns: list[list[str]] = []
    shared: list[str] = []
    for name in order:
        if name not in interleaved:
            turns.append([name])
        elif not shared:
            turns.append(shared)
            shared.append(name)
        else:
            shared.append(name)
    return turns


def interleaving(counts: dict[str, int]) -> list[str]:
    """The order of a shared turn's steps: each next step is the entrant's that has done the smallest
    share of its ``counts`` (ties in ``counts``' order), so every entrant's steps spread evenly over the
    turn: ``{"a": 4, "b": 2}`` -> a b a a b a."""
    done = dict.fromkeys(counts, 0)
    order = []
    for _ in range(sum(counts.values())):
        name = min((n for n in counts if done[n] < counts[n]), key=lambda n: done[n] / counts[n])
        done[name] += 1
        order.append(name)
    return order


def _note_peak(outcome: Outcome, device) -> None:
    """Fold the device's peak since the last reset into ``outcome``'s peaks (a timed step's or turn's)."""
    peak = peak_memory_bytes(device)
    if peak is not None:
        outcome.peak_memory_bytes = max(peak, outcome.peak_memory_bytes or 0)
        outcome.timed_peak_memory_bytes = max(peak, outcome.timed_peak_memory_bytes or 0)


def _take_own_turn(outcome: Outcome, entrant: Entrant, device) -> None:
    """One turn of a ``SelfTimed`` entrant: its ``take()``, whose samples become the round's."""
    taken: dict = {}

    def take(o: Outcome) -> None:
        reset_peak_memory(device)
        before = allocator_calls(device)
        taken["samples"] = {phase: list(samples) for phase, samples in o.step.take().items()}
        taken["calls"] = None if before is None else allocator_calls(device) - before
        _note_peak(o, device)

    _attempt(outcome, entrant, device, take)
    if outcome.step is not None:
        outcome.rounds.append(taken["samples"])
        outcome.allocator_calls.append(taken["calls"])


def keeps_settling(settles: Sequence[Sequence[float]], rounds: Sequence[dict[str, list[float]]]) -> bool:
    """Whether an entrant's turns go on settling after the trial rounds: yes unless, in each of the
    first ``SETTLE_TRIAL_ROUNDS`` rounds, its settling steps' median cost at most ``SETTLE_MATTERS`` times
    the median of the timed steps that followed them. Fewer trial rounds than that: it keeps settling."""
    trial = [(s, r["step"]) for s, r in zip(settles, rounds) if s and r.get("step")][:SETTLE_TRIAL_ROUNDS]
    return len(trial) < SETTLE_TRIAL_ROUNDS or any(
        statistics.median(s) > SETTLE_MATTERS * statistics.median(step) for s, step in trial)


def _take_turn(turn: list[Outcome], by_name: dict[str, Entrant], device, settle: int) -> None:
    """One turn of a round: ``turn``'s entrants (one, or the interleaved ones together) settle, then
    take their timed steps in ``interleaving`` order; each that finishes adds a round to its outcome.
    An entrant that fails stops there, its memory released, and the others go on."""
    if len(turn) == 1 and turn[0].self_timed:
        return _take_own_turn(turn[0], by_name[turn[0].name], device)
    timers = {o.name: PhaseTimer(device) for o in turn}
    totals: dict[str, list[float]] = {o.name: [] for o in turn}
    host_totals: dict[str, list[float]] = {o.name: [] for o in turn}
    calls: dict[str, int | None] = dict.fromkeys(totals)
    outcomes = {o.name: o for o in turn}

    settles: dict[str, list[float]] = {o.name: [] for o in turn}

    def settle_all(outcome: Outcome) -> None:
        for _ in range(settle if outcome.settling else 0):
            synchronize(device)
            start = timeit.default_timer()
            outcome.step(untimed)
            synchronize(device)
            settles[outcome.name].append((timeit.default_timer() - start) * 1e3)

    def timed(outcome: Outcome) -> None:
        # the peak is taken per step: an interleaved turn's steps belong to different entrants
        reset_peak_memory(device)
        before = allocator_calls(device)
        wall, host = _timed_step(outcome, device, timers[outcome.name])
        totals[outcome.name].append(wall)
        host_totals[outcome.name].append(host)
        if before is not None:
            calls[outcome.name] = (calls[outcome.name] or 0) + allocator_calls(device) - before
        _note_peak(outcome, device)

    schedule = [(settle_all, o.name) for o in turn]
    schedule += [(timed, name) for name in interleaving({o.name: o.steps_per_turn for o in turn})]
    for action, name in schedule:
        if outcomes[name].step is not None:        # else it failed earlier in this turn
            _attempt(outcomes[name], by_name[name], device, action)
    for name, outcome in outcomes.items():
        if outcome.step is not None:
            outcome.rounds.append({**timers[name].samples, "step": totals[name]})
            outcome.host_rounds.append({**timers[name].host, "step": host_totals[name]})
            if settle and outcome.settling:
                outcome.settle_rounds.append(settles[name])
            outcome.allocator_calls.append(calls[name])


def take_turns(entrants: Sequence[Entrant], *, device: torch.device | str, warmup: int, rounds: int,
               steps: int, min_turn_ms: float = 0.0, settle: int | None = None,
               job_id: str | None = None, progress: bool = True) -> tuple[Job, dict[str, Outcome]]:
    """Build and warm up each entrant (``warmup`` untimed steps, in order), then ``rounds`` rounds in
    which each entrant still running takes ``steps`` timed steps, the order rotating each round.

    ``min_turn_ms``: a cheap entrant's warm-up goes on until it has also lasted this long, and its
    turns take as many steps as its last warm-up step says fill this long (``steps_for``), the same
    count every round: what moves the host for a few milliseconds then scatters inside a turn, where
    the turn's median absorbs it, instead of between rounds, where it would hide a difference. Two or
    more such cheap entrants share one turn a round, step by step (``interleaving``): a host-bound
    step's speed moves by 1.5x within a second, so the compared steps must be as close in time as
    steps can be, and each side's median then samples the same stretch of the host's moods. Dear
    entrants keep turns of their own: interleaving them would put another entrant's leftovers (the
    allocator's blocks, cold caches) before every step, where a turn pays for them once, in ``settle``.

    ``progress``: log each entrant's warm-up and each round's median (False on all but one rank of a
    process group, whose ranks share one log).

    ``settle``: untimed steps at the start of a turn. The first step after another entrant's turn can
    pay for what that one left behind (the caching allocator's blocks cut for other shapes, cold
    caches, a CUDA graph's first replay after other work): E1's graphed rungs' first step of a turn
    takes 2-5x their second on one H200. Every entrant settles in the first ``SETTLE_TRIAL_ROUNDS``
    rounds, and from then on only those whose settling was seen to cost more than a timed step
    (``keeps_settling``; the record's ``settles_every_turn``). By default one step on a GPU and none on
    the CPU, which has no such allocator and where the smoke preset's numbers mean nothing (its
    Triton-interpreted steps take about a second each).

    A ``SelfTimed`` entrant (module docstring) warms up in its own ``make()``: ``warmup``,
    ``min_turn_ms`` and ``settle`` do not apply to it, and it keeps a turn of its own.

    Returns the job and one ``Outcome`` per entrant, in the entrants' order. ``rounds`` must be at
    least ``MIN_ROUNDS``: a verdict needs a spread across rounds.
    """
    names = [e.name for e in entrants]
    if len(set(names)) != len(names):
        raise ValueError(f"entrant names must be unique, got {names}")
    if rounds < MIN_ROUNDS:
        raise ValueError(f"at least {MIN_ROUNDS} rounds are needed for a spread across rounds, got {rounds}")
    if steps < 1 or warmup < 0 or (settle is not None and settle < 0):
        raise ValueError(f"steps must be at least 1, warmup and settle at least 0, got {steps}, {warmup} and {settle}")
    device = torch.device(device)
    settle = (1 if device.type == "cuda" else 0) if settle is None else settle
    job = Job(job_id or uuid.uuid4().hex[:12], tuple(names), rounds, steps, warmup, float(min_turn_ms), settle)
    outcomes = {e.name: Outcome(e.name) for e in entrants}
    by_name = {e.name: e for e in entrants}

    def warm_up(outcome: Outcome) -> None:
        reset_peak_memory(device)
        outcome.step = by_name[outcome.name].make()
        if outcome.self_timed:
            outcome.steps_per_turn = outcome.step.steps
            outcome.peak_memory_bytes = peak_memory_bytes(device)
            return
        warm = PhaseTimer(device)
        while len(outcome.warmup_steps) < warmup or (
                0 < sum(outcome.warmup_steps) < min_turn_ms and len(outcome.warmup_steps) < MAX_STEPS_PER_TURN):
            outcome.warmup_steps.append(_timed_step(outcome, device, warm)[0])
        outcome.steps_per_turn = steps_for(min_turn_ms, outcome.warmup_steps[-1] if outcome.warmup_steps else 0, steps)
        outcome.peak_memory_bytes = peak_memory_bytes(device)

    for name in names:
        outcome = outcomes[name]
        _attempt(outcome, by_name[name], device, warm_up)
        if outcome.warmup_steps:
            if progress:
                log(f"  {name}: warm-up {', '.join(f'{t:.2f}' for t in outcome.warmup_steps)} ms")

    cheap = [name for name in names if not outcomes[name].self_timed and outcomes[name].steps_per_turn > steps]
    interleaved = set(cheap) if len(cheap) > 1 else set()
    for name in interleaved:
        outcomes[name].interleaved = True
    for r in range(rounds):
        if settle and r == SETTLE_TRIAL_ROUNDS:
            for outcome in outcomes.values():
                outcome.settling = keeps_settling(outcome.settle_rounds, outcome.rounds)
        for turn in turns_of(rotation(names, r), interleaved):
            _take_turn([outcomes[name] for name in turn if outcomes[name].step is not None], by_name, device, settle)
            for name in turn:
                if outcomes[name].step is not None and len(outcomes[name].rounds) == r + 1:
                    last = outcomes[name].rounds[-1]
                    phase = "step" if "step" in last else next(iter(last), None)
                    if progress and phase is not None and last[phase]:
                        totals = sorted(last[phase])
                        log(f"  round {r + 1}/{rounds} {name}: {phase} median {totals[len(totals) // 2]:.3f} ms")

    for outcome in outcomes.values():
        outcome.step = None             # the caller's state may go; outcomes keep numbers only
    _release(device)
    return job, outcomes
