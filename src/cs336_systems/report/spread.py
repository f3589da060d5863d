"""When two measured numbers differ: the one test every report sentence about a difference uses.

A timed mean is an estimate: ``mean`` with a standard error ``se = std / sqrt(n)`` over its timed
steps. Two estimates *differ* when their gap exceeds two standard errors of the difference,
``2 * sqrt(se_a² + se_b²)`` (about a 95 % two-sided test for independent, roughly normal means);
otherwise the data does not settle which is larger, and the prose must say so instead of
naming a direction. Ratios (a speedup ``fp32 / bf16``) carry a first-order standard error from
their two means, so a speedup is compared with another speedup the same way.

    compare(Estimate.of(fp32_summary), Estimate.of(bf16_summary))   # "higher", "lower" or WITHIN
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

WITHIN = "within the spread"
STANDARD_ERRORS = 2.0      # how many standard errors of the difference make a difference


@dataclass(frozen=True)
class Estimate:
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


def gap_needed(a: Estimate, b: Estimate) -> float:
    """The smallest ``|a - b|`` this module calls a difference (nan when a spread is unknown)."""
    return STANDARD_ERRORS * math.hypot(a.se, b.se)


def compare(a: Estimate, b: Estimate) -> str:
    """``"higher"`` if ``a`` exceeds ``b`` beyond the spread, ``"lower"`` if below it, else ``WITHIN``
    (also when either spread is unknown: one sample says nothing about its own noise)."""
    needed = gap_needed(a, b)
    if math.isnan(needed) or math.isnan(a.mean) or math.isnan(b.mean):
        return WITHIN
    gap = a.mean - b.mean
    return "higher" if gap > needed else "lower" if gap < -needed else WITHIN


def trend(estimates: list[Estimate]) -> str:
    """How a series (in order: sizes, say) moves, step by step, by ``compare``:

    ``"grows"`` (every step higher), ``"falls"`` (every step lower), ``"mixed"`` (steps both ways),
    or ``"not settled"`` (at least one step within the spread, none against the others)."""
    steps = [compare(b, a) for a, b in zip(estimates, estimates[1:])]
    if not steps:
        return "not settled"
    if all(s == "higher" for s in steps):
        return "grows"
    if all(s == "lower" for s in steps):
        return "falls"
    return "mixed" if {"higher", "lower"} <= set(steps) else "not settled"


def across_processes(estimates: list[Estimate]) -> Estimate:
    """What one more process of the same kind would measure, from the means of ``estimates`` (one
    per process).

    A mean's standard error says how well one process pins down its own speed; separate processes
    (another allocator layout, another core, other clocks) differ by more than that, so a gap
    between two processes is a difference only beyond what processes of the same kind differ by.
    Their scatter measures it: the mean of the means, with as spread the sample standard deviation
    of the means × √(1 + 1/k), a new process's deviation from the mean of ``k`` others (nan with
    fewer than two: one process says nothing about how processes differ).

        compare(Estimate(cold_mean, cold_se), across_processes(warm))   # beyond the processes' scatter?
    """
    means = [e.mean for e in estimates]
    if not means:
        raise ValueError("across_processes needs at least one process")
    centre = sum(means) / len(means)
    if len(means) < 2:
        return Estimate(centre, math.nan)
    scatter = math.sqrt(sum((m - centre) ** 2 for m in means) / (len(means) - 1))
    return Estimate(centre, scatter * math.sqrt(1 + 1 / len(means)))


# --- Paired verdicts: two points measured in one job, in interleaved rounds (cs336_systems.rounds) ---

@dataclass(frozen=True)
class Paired:
    """``a`` against ``b`` round by round: ``difference`` is the median over rounds of ``a``'s round
    median minus ``b``'s (or their ratio), ``spread`` the largest distance of a round's difference from
    that median. ``verdict`` is ``"higher"``/``"lower"`` only where ``|difference - null|`` exceeds
    ``spread`` — which also means every round points the same way — else ``WITHIN``."""
    difference: float
    spread: float
    rounds: int
    verdict: str
    ratio: bool = False

    @property
    def relative_spread(self) -> float:
        """The spread as a share of the difference's scale (a ratio's spread is already one)."""
        return self.spread


def paired(a_rounds: list[list[float]], b_rounds: list[list[float]], *, ratio: bool = False) -> Paired:
    """Judge ``a`` against ``b`` from their samples per round (``a_rounds[i]`` and ``b_rounds[i]`` taken
    in round ``i`` of one job). ``ratio``: compare ``a / b`` against 1 instead of ``a - b`` against 0.

    Why per round: what moves a whole round (the host busy, clocks lower) moves both sides, and the
    per-round difference cancels it; what is left scatters across rounds, and a difference is called
    only beyond that scatter. Fewer than ``rounds.MIN_ROUNDS`` common rounds decide nothing."""
    from cs336_systems.rounds import MIN_ROUNDS

    n = min(len(a_rounds), len(b_rounds))
    diffs = [(statistics.median(a) / statistics.median(b)) if ratio else (statistics.median(a) - statistics.median(b))
             for a, b in zip(a_rounds[:n], b_rounds[:n])]
    null = 1.0 if ratio else 0.0
    if not diffs:
        return Paired(math.nan, math.nan, 0, WITHIN, ratio)
    centre = statistics.median(diffs)
    spread = max(abs(d - centre) for d in diffs)
    if n < MIN_ROUNDS:
        return Paired(centre, spread, n, WITHIN, ratio)
    gap = centre - null
    verdict = "higher" if gap > spread else "lower" if -gap > spread else WITHIN
    return Paired(centre, spread, n, verdict, ratio)


def same_job(a: dict, b: dict) -> bool:
    """Whether two records were measured in one job's interleaved rounds (``metrics.turns.job``)."""
    ta, tb = (r.get("metrics", {}).get("turns") or {} for r in (a, b))
    return bool(ta.get("job")) and ta.get("job") == tb.get("job")


def round_samples(record: dict, phase: str = "step") -> list[list[float]]:
    """A record's samples of ``phase``, one list per round (``rounds.Outcome.metrics``)."""
    return [r[phase] for r in record["metrics"].get("rounds", []) if phase in r]


def paired_records(a: dict, b: dict, phase: str = "step", *, ratio: bool = False) -> Paired | None:
    """``paired`` of two records' rounds, or None where they were not measured in one job: such a
    comparison spans processes and needs a spread measured across processes (``across_processes``)."""
    if not same_job(a, b):
        return None
    return paired(round_samples(a, phase), round_samples(b, phase), ratio=ratio)
