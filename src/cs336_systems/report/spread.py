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
