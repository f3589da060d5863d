"""report.spread.Estimate: a mean and its standard error, for error bars (the judge is tests/systems/test_judge.py)."""
import math
import random
import statistics

import pytest

from cs336_systems.report.spread import Estimate


def test_from_samples_matches_statistics():
    rng = random.Random(random.getrandbits(32))
    samples = [rng.gauss(5, 1) for _ in range(rng.randint(2, 30))]
    e = Estimate.of({"mean": statistics.fmean(samples), "std": statistics.stdev(samples), "samples": samples})
    assert e.se == pytest.approx(statistics.stdev(samples) / math.sqrt(len(samples)))


def test_ratio_standard_error_against_a_monte_carlo():
    rng = random.Random(random.getrandbits(32))
    a, b = Estimate(rng.uniform(50, 100), rng.uniform(0.5, 2)), Estimate(rng.uniform(20, 40), rng.uniform(0.2, 0.8))
    draws = [rng.gauss(a.mean, a.se) / rng.gauss(b.mean, b.se) for _ in range(20000)]
    r = a / b
    assert r.mean == pytest.approx(a.mean / b.mean)
    assert r.se == pytest.approx(statistics.stdev(draws), rel=0.05)
