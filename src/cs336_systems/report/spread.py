"""When two measured numbers differ: the one judge every report sentence about a difference uses.

``judge(a, b)`` takes two records — or two sets of per-process means — and returns a ``Verdict``:
the difference, its 95 % interval and ``"higher"``, ``"lower"``, ``WITHIN`` or ``NOT_SETTLED``.

- **Paired** (both records from one job's rounds, ``cs336_systems.rounds``): one difference a round,
  the rounds farthest from their median set aside, and the interval a calibrated multiple of the
  kept rounds' spread (``judge_rounds``). An A/A pair — the same configuration entered twice — is
  called different in at most 5 % of jobs, under normal, light- or heavy-tailed noise and with a
  disturbed turn (``MULTIPLIER``; tests/systems/test_judge.py).
- **Across processes** (two jobs): the difference is judged against the processes' own scatter, one
  mean per process (``judge_processes``); with one process a side nothing measures that scatter and
  the verdict is ``NOT_SETTLED``. A standard error inside one process says nothing about how two
  processes differ (up to 60 % at host-bound points), so it never decides a verdict.
- **The host's speed**: where a side's step waited on the host (``rounds`` records the host's share
  of each phase), that process's host speed sets it, and it differs between processes by more than
  any job's rounds show (``HOST_SWING``): a verdict a host that much faster or slower could turn
  around is not settled (``host_moves``).

``Estimate`` (a mean and its standard error) stays for error bars and tables: it describes one
process's timing, it does not compare two.

    judge(bf16_record, fp32_record)                       # Verdict(difference=-3.1, low=-3.6, ...)
    judge(bf16_record, fp32_record, ratio=True).verdict   # "lower"
    judge([40.1, 39.8, 41.0], [44.2, 45.0, 43.1])          # per-process means: Welch's interval
"""
from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass, replace
from typing import Sequence

WITHIN = "within the spread"
# A verdict on a time, as a reader says it: a lower time is faster (the other verdicts read as they are).
AS_TIME = {"lower": "faster", "higher": "slower"}


def as_time(verdict: str) -> str:
    """``verdict`` on a time (a step, a phase) in a reader's words: "faster", "slower", or as it is."""
    return AS_TIME.get(verdict, verdict)


@dataclass(frozen=True)
class Estimate:
    """A mean and its standard error inside one process: for error bars and tables, never a verdict."""
    mean: float
    se: float           # standard error of the mean; 0 for an exact number, nan when unknown

    @classmethod
    def from_samples(cls, mean: float, std: float, n: int) -> Estimate:
        """A mean of ``n`` samples with sample standard deviation ``std``."""
        if n < 1:
            raise ValueError(f"an estimate needs at least one sample, got n={n}")
        return cls(float(mean), float(std) / math.sqrt(n) if n > 1 else math.nan)

    @classmethod
    def of(cls, summary: dict) -> Estimate:
        """From a record's phase summary (``timing.summarize``: mean, std and samples or n)."""
        n = summary.get("n") or len(summary.get("samples") or ())
        return cls.from_samples(summary["mean"], summary.get("std", math.nan), n)

    def __truediv__(self, other: Estimate) -> Estimate:
        """The ratio of two independent estimates, its standard error to first order."""
        ratio = self.mean / other.mean
        return Estimate(ratio, abs(ratio) * math.hypot(self.se / self.mean, other.se / other.mean))


# --- The judge: every verdict a report calls ---------------------------------------------------

NOT_SETTLED = "not settled"     # no spread to judge by, or one the host decides (``Verdict.reason``)
# Why a verdict is not settled (``Verdict.reason``), for the sections that say why.
APART = "apart"                 # the two sides were not measured in one job, and one process a side shows no scatter
FEW_ROUNDS = "few rounds"       # one job, fewer than MIN_ROUNDS rounds
HOST = "host-bound"             # a host HOST_SWING times faster or slower could turn it around
MIN_ROUNDS = 5                  # fewer rounds decide nothing (below 5 no multiplier keeps A/A at 5 %)
AA_RATE = 0.05                  # the most often an A/A pair may be called different (MULTIPLIER is chosen for it)
MAX_TABLED_ROUNDS = 16

# The interval's half-width over the kept rounds' spread, by rounds, chosen so that an A/A pair is
# called different in at most 5 % of jobs under normal, uniform, Student-t (3 df) and log-normal turn
# noise, one disturbed turn in a job, or one in each entrant (lab/paired/calibrate.py makes this table
# from 200,000 simulated jobs a family; tests/systems/test_judge.py checks it through ``judge_rounds``).
# Past the table the last entry holds: it calls fewer differences than the exact one would, none more.
MULTIPLIER = {5: 1.93, 6: 1.29, 7: 1.02, 8: 1.28, 9: 1.04, 10: 0.90, 11: 0.79, 12: 0.90, 13: 0.81, 14: 0.74,
              15: 0.67, 16: 0.73}

# Welch's two-sided 95 % quantiles of Student's t by degrees of freedom (judging per-process means).
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
        10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042, 60: 2.000}


def set_aside(rounds: int) -> int:
    """Rounds of a paired comparison the judge sets aside, farthest first: one in every four (at least
    one), so that one disturbed turn — or one per side, from 8 rounds — cannot decide a verdict."""
    return max(1, rounds // 4)


@dataclass(frozen=True)
class Verdict:
    """What the judge says of ``a`` against ``b``.

    ``difference``: ``a - b`` (or ``a / b``); ``low``..``high``: its 95 % interval; ``verdict``:
    ``"higher"`` or ``"lower"`` where the interval excludes 0 (or 1), ``WITHIN`` where it holds it,
    ``NOT_SETTLED`` where no spread could be measured. ``paired``: judged round by round in one job
    (``rounds`` of them, ``set_aside`` discounted), else across processes (``rounds`` = the fewer
    processes of the two sides)."""
    difference: float
    low: float
    high: float
    verdict: str
    rounds: int
    set_aside: int = 0
    paired: bool = True
    ratio: bool = False
    reason: str = ""            # where not settled: APART, FEW_ROUNDS or HOST

    @property
    def decided(self) -> bool:
        return self.verdict in ("higher", "lower")

    @property
    def spread(self) -> float:
        """The interval's half-width (nan where none was measured)."""
        return (self.high - self.low) / 2


def _decide(centre: float, half: float, null: float) -> str:
    if math.isnan(half) or math.isnan(centre):
        return NOT_SETTLED
    return "higher" if centre - half > null else "lower" if centre + half < null else WITHIN


def round_differences(a_rounds: Sequence[Sequence[float]], b_rounds: Sequence[Sequence[float]], *,
                      ratio: bool = False) -> list[float]:
    """One difference (or ratio) a round of one job: of the two turns' medians, over the rounds both have."""
    n = min(len(a_rounds), len(b_rounds))
    return [statistics.median(a) / statistics.median(b) if ratio else statistics.median(a) - statistics.median(b)
            for a, b in zip(a_rounds[:n], b_rounds[:n])]


def judge_rounds(a_rounds: Sequence[Sequence[float]], b_rounds: Sequence[Sequence[float]], *,
                 ratio: bool = False) -> Verdict:
    """``a`` against ``b`` from their samples per round of one job (``a_rounds[i]``, ``b_rounds[i]``:
    round ``i``'s turns). Each round gives one difference of the two turns' medians (or their ratio):
    what moves a whole round (the host busy, clocks lower) moves both sides and cancels.

    The statistic: set aside the ``set_aside(n)`` rounds whose difference lies farthest from the
    median of all, and of the kept ones take the median (``difference``) and the largest distance
    from it (the spread); the interval is ``difference ± MULTIPLIER[n] × spread``. The rounds set
    aside are the job's disturbed turns, if it had any: a turn far off its entrant's others lands its
    round's difference farthest from the median, where it is discounted instead of widening the
    spread (or, towards the difference, deciding it). Fewer than ``MIN_ROUNDS`` rounds: not settled."""
    diffs = round_differences(a_rounds, b_rounds, ratio=ratio)
    n, null = len(diffs), 1.0 if ratio else 0.0
    if n < MIN_ROUNDS:
        centre = statistics.median(diffs) if diffs else math.nan
        return Verdict(centre, math.nan, math.nan, NOT_SETTLED, n, 0, True, ratio, FEW_ROUNDS)
    middle = statistics.median(diffs)
    aside = set_aside(n)
    kept = sorted(diffs, key=lambda d: abs(d - middle))[: n - aside]
    centre = statistics.median(kept)
    half = MULTIPLIER[min(n, MAX_TABLED_ROUNDS)] * max(abs(d - centre) for d in kept)
    return Verdict(centre, centre - half, centre + half, _decide(centre, half, null), n, aside, True, ratio)


def _t975(df: float) -> float:
    """Student's t two-sided 95 % quantile for ``df`` degrees of freedom (rounded down to the table)."""
    known = [k for k in T975 if k <= df]
    return T975[max(known)] if known else math.inf


def judge_processes(a_means: Sequence[float], b_means: Sequence[float], *, ratio: bool = False) -> Verdict:
    """``a`` against ``b`` from one mean per process a side, where the two were not measured in one
    job: the spread is the processes' own scatter (processes differ by more than any one's standard
    error shows). Welch's interval on the means (on their logarithms for a ratio); where one side
    has a single process, the interval a new process of the other would fall in. One process a
    side: not settled."""
    a, b = ([math.log(x) for x in xs] if ratio else list(xs) for xs in (a_means, b_means))
    if not a or not b:
        raise ValueError("judge_processes needs at least one process a side")
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    va = statistics.variance(a) if len(a) > 1 else None
    vb = statistics.variance(b) if len(b) > 1 else None
    if va is None and vb is None:
        half = math.nan
    elif va is None or vb is None:
        k, v = (len(b), vb) if va is None else (len(a), va)
        half = _t975(k - 1) * math.sqrt(v * (1 + 1 / k))
    else:
        sa, sb = va / len(a), vb / len(b)
        # Welch-Satterthwaite's degrees of freedom; none where neither side scatters
        scatter = sa ** 2 / (len(a) - 1) + sb ** 2 / (len(b) - 1)
        half = _t975((sa + sb) ** 2 / scatter if scatter else 0.0) * math.sqrt(sa + sb)
    centre = ma - mb
    bounds = (centre, centre - half, centre + half)
    verdict = _decide(centre, half, 0.0)
    return Verdict(*(map(math.exp, bounds) if ratio else bounds), verdict,
                   min(len(a), len(b)), 0, False, ratio, APART if verdict == NOT_SETTLED else "")


def judge(a: dict | Sequence[float], b: dict | Sequence[float], phase: str = "step", *,
          ratio: bool = False) -> Verdict:
    """The one judge. ``a`` and ``b`` are two records (``judge_rounds`` of their ``phase`` per round
    where one job measured both, else not settled: a comparison across processes needs a spread
    measured across processes) or two sets of per-process means (``judge_processes``)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if same_job(a, b):
            return _host_check(judge_rounds(round_samples(a, phase), round_samples(b, phase), ratio=ratio),
                               a, b, phase)
        ca, cb = _centre(a, phase), _centre(b, phase)
        centre = ca / cb if ratio else ca - cb
        return Verdict(centre, math.nan, math.nan, NOT_SETTLED, 1, 0, False, ratio, APART)
    return judge_processes(list(a), list(b), ratio=ratio)


# A phase the host queued for at least this share of its time is taken as bound by the host
# (PhaseTimer.host): the GPU waited on Python's launches, and its own time is unknown below the step's.
# The host's time holds its waits for room in the launch queue too, so a GPU-bound phase of many
# kernels can pass the line: the cautious reading, which leaves a verdict unsettled rather than wrong.
HOST_BOUND = 0.9
# How far a host-bound step's time moved between two processes of one command on one H200, with the
# same code and configuration: A1 small's host-bound points by 0.58x to 1.60x from one run to the
# other (lab/paired/runs/h200-979d1a8). Inside one job the rounds agree to a few per cent, so the
# paired interval cannot see it.
HOST_SWING = 1.75


def across_processes(a: float, b: float, swing: float = HOST_SWING) -> str:
    """``a`` against ``b`` where each is one process's (or one job's) number and nothing pairs them:
    "higher" or "lower" only where ``a`` is more than ``swing`` times ``b`` or less than its
    ``1 / swing``, since two processes of one command differ by up to that; ``NOT_SETTLED`` between.
    For a time, or a rate made of one."""
    if a > b * swing:
        return "higher"
    if a * swing < b:
        return "lower"
    return NOT_SETTLED


def ranges_apart(a: Sequence[float], b: Sequence[float]) -> str:
    """``a`` against ``b``, each a (low, high) range of one job whose two sides never took turns (an
    interval, or the lowest and highest of a side's samples): "higher" or "lower" only where the
    ranges do not overlap, ``NOT_SETTLED`` where they do."""
    return "higher" if a[0] > b[1] else "lower" if a[1] < b[0] else NOT_SETTLED


def host_share(record: dict, phase: str = "step") -> float | None:
    """The median share of ``record``'s ``phase`` the host spent queueing it (``rounds``); None
    where the record has no host times (self-timed turns, older records)."""
    return (record.get("metrics", {}).get("host_share") or {}).get(phase)


def least_drain_ms(record: dict, phase: str = "step") -> float | None:
    """The least time, over ``record``'s timed ``phase``s, between the host's return from queueing one
    and its end (``rounds``' samples against ``host_ms_per_round``): the work the GPU still had queued
    when the host was done. A phase the host bounds leaves little more than its last kernel (the GPU
    keeps up with each launch); one the GPU bounds leaves what is queued. None where the record has no
    host times."""
    host = record.get("metrics", {}).get("host_ms_per_round")
    if not host:
        return None
    return min(t - h for timed, queued in zip(round_samples(record, phase), (r.get(phase, []) for r in host))
               for t, h in zip(timed, queued))


def host_bound(record: dict, phase: str = "step") -> bool | None:
    """Whether ``record``'s ``phase`` was bound by the host (its host share at least ``HOST_BOUND``)."""
    share = host_share(record, phase)
    return None if share is None else share >= HOST_BOUND


def host_moves(share_a: float, share_b: float, swing: float = HOST_SWING) -> tuple[float, float]:
    """How far the ratio a / b could move, as the fewest and most times itself, were the host
    ``swing`` times faster or slower than in the job. A step takes the longer of its GPU time and its
    host time: a host-bound side (share at least ``HOST_BOUND``) moves with the host, its GPU time
    unknown below it; another keeps its time until the slower host's time passes it."""
    def moved(share: float, f: float) -> float:
        return f if share >= HOST_BOUND else max(1.0, share * f)

    candidates = {1 / swing, 1.0, swing} | {1 / x for x in (share_a, share_b) if x > 0 and 1 / swing < 1 / x < swing}
    ratios = [moved(share_a, f) / moved(share_b, f) for f in candidates]
    return min(ratios), max(ratios)


def _host_check(verdict: Verdict, a: dict, b: dict, phase: str) -> Verdict:
    """A paired verdict that another process's host could turn around is not settled (``HOST``).
    Inside one job the host runs at one speed for both sides; between processes its speed moves by
    up to ``HOST_SWING``, which moves a host-bound side and not one the GPU bounds (``host_moves``).
    The verdict stands where the ratio's interval, moved as far as the host could move it, still
    excludes 1: two host-bound sides move alike and keep their verdict, a host-bound side against
    a GPU-bound one keeps it only beyond the swing."""
    shares = host_share(a, phase), host_share(b, phase)
    if not verdict.decided or None in shares:
        return verdict
    lo, hi = host_moves(*shares)
    ratios = verdict if verdict.ratio else judge_rounds(round_samples(a, phase), round_samples(b, phase), ratio=True)
    if ratios.low * lo > 1 or ratios.high * hi < 1:
        return verdict
    return replace(verdict, verdict=NOT_SETTLED, reason=HOST)


def _centre(record: dict, phase: str) -> float:
    """A record's median of ``phase`` over every timed sample (its summary's where it has no rounds)."""
    samples = [t for r in round_samples(record, phase) for t in r]
    if samples:
        return statistics.median(samples)
    summary = record.get("metrics", {}).get(phase) or {}
    return float(summary.get("median", summary.get("mean", math.nan)))


def trend_of(steps: Sequence[Verdict]) -> str:
    """How a series moves (in order: sizes, say) from the judge's verdict on each step, later against
    earlier: ``"grows"`` (every step higher), ``"falls"`` (every step lower), ``"mixed"`` (steps both
    ways) or ``"not settled"`` (a step undecided, none against the others)."""
    kinds = [s.verdict for s in steps]
    if kinds and all(k == "higher" for k in kinds):
        return "grows"
    if kinds and all(k == "lower" for k in kinds):
        return "falls"
    return "mixed" if {"higher", "lower"} <= set(kinds) else NOT_SETTLED


# --- Reading a record's rounds ---

def same_job(a: dict, b: dict) -> bool:
    """Whether two records were measured in one job's interleaved rounds (``metrics.turns.job``)."""
    ta, tb = (r.get("metrics", {}).get("turns") or {} for r in (a, b))
    return bool(ta.get("job")) and ta.get("job") == tb.get("job")


def require_one_job(named: dict[str, dict], what: str) -> None:
    """A ``ValueError`` naming ``what`` and each side's job, where the records ``named`` (side -> record)
    were not measured in one job's rounds (``same_job``). For the comparisons a benchmark always makes
    in one job: two jobs there is no shape it writes, so a report refuses them rather than word them."""
    records = list(named.values())
    if not all(same_job(a, b) for a, b in itertools.pairwise(records)):
        raise ValueError(f"{what} not measured in one job: " + ", ".join(
            f"{name} in job {(r.get('metrics', {}).get('turns') or {}).get('job')}" for name, r in named.items()))


def round_samples(record: dict, phase: str = "step") -> list[list[float]]:
    """A record's samples of ``phase``, one list per round (``rounds.Outcome.metrics``)."""
    return [r[phase] for r in record["metrics"].get("rounds", []) if phase in r]
