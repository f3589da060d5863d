"""Whether a step's timed samples fall in two clusters: a step that alternates between two times,
whose median lies between them, typical of neither, or hides the smaller cluster (E1).

The rule: sort the samples and split them at the widest gap between neighbours that leaves at
least ``MIN_SIDE`` samples, and ``MIN_SHARE`` of them, on each side; the sample has two modes where
that gap is at least ``GAP_OVER_SPREAD`` times the wider side's range (its largest minus its
smallest). The sides' minimum keeps one or two slow rounds, a disturbed turn, from passing for a
mode. The threshold was set by drawing 20 000 samples of 10 (E1's rounds) from one normal,
lognormal or Student-t (3 degrees of freedom) distribution: the rule calls at most 0.2 % of them
two-moded (1.7 % of samples of 6); ten steps alternating between two times 24 units apart, each
with a spread of 2 units, are called two-moded in 95 % of draws (``tests/training_step``).
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

MIN_SIDE = 3
MIN_SHARE = 0.25
GAP_OVER_SPREAD = 2.0
# Where the sample's median falls: in the gap, or among the faster or the slower steps (a larger
# cluster holds it), so the words say what the median hides.
BETWEEN, LOW, HIGH = "between", "low", "high"


@dataclass(frozen=True)
class TwoModes:
    """A sample's two clusters: each one's median and size, the gap between them (the lower's
    largest sample to the higher's smallest), the wider one's range, and where the sample's median
    falls (``BETWEEN``, ``LOW``, ``HIGH``)."""
    low_ms: float
    high_ms: float
    low_steps: int
    high_steps: int
    gap_ms: float
    spread_ms: float
    median_at: str


@dataclass(frozen=True)
class Rule:
    """The rule's thresholds, as the section states them."""
    min_side: int
    min_share: float
    gap_over_spread: float


RULE = Rule(MIN_SIDE, MIN_SHARE, GAP_OVER_SPREAD)


def two_modes(samples: Sequence[float], median: float | None = None) -> TwoModes | None:
    """The sample's ``TwoModes`` where the rule finds two clusters, else None; ``median``: the one the
    record quotes (by default the samples')."""
    s = sorted(samples)
    need = max(MIN_SIDE, math.ceil(MIN_SHARE * len(s)))
    splits = range(need, len(s) - need + 1)
    if not splits:
        return None
    at = max(splits, key=lambda i: s[i] - s[i - 1])
    low, high = s[:at], s[at:]
    gap, spread = high[0] - low[-1], max(low[-1] - low[0], high[-1] - high[0])
    if gap <= 0 or gap < GAP_OVER_SPREAD * spread:
        return None
    median = statistics.median(s) if median is None else median
    at = LOW if median <= low[-1] else HIGH if median >= high[0] else BETWEEN
    return TwoModes(statistics.median(low), statistics.median(high), len(low), len(high), gap, spread, at)
