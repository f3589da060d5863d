"""report.spread: a difference only beyond two standard errors, and trends built from it."""
import math
import random
import statistics

import pytest

from cs336_systems.report.spread import WITHIN, Estimate, across_processes, compare, trend


def test_two_standard_errors_of_the_difference():
    a, b = Estimate(10.0, 1.0), Estimate(12.0, 1.0)     # gap needed: 2 * sqrt(2) = 2.83
    assert compare(a, b) == compare(b, a) == WITHIN
    assert compare(Estimate(13.0, 1.0), a) == "higher" and compare(a, Estimate(13.0, 1.0)) == "lower"


def test_from_samples_matches_statistics():
    rng = random.Random(random.getrandbits(32))
    samples = [rng.gauss(5, 1) for _ in range(rng.randint(2, 30))]
    e = Estimate.of({"mean": statistics.fmean(samples), "std": statistics.stdev(samples), "samples": samples})
    assert e.se == pytest.approx(statistics.stdev(samples) / math.sqrt(len(samples)))


def test_one_sample_settles_nothing():
    assert compare(Estimate.from_samples(1.0, 0.0, 1), Estimate.from_samples(100.0, 0.0, 1)) == WITHIN


def test_ratio_standard_error_against_a_monte_carlo():
    rng = random.Random(random.getrandbits(32))
    a, b = Estimate(rng.uniform(50, 100), rng.uniform(0.5, 2)), Estimate(rng.uniform(20, 40), rng.uniform(0.2, 0.8))
    draws = [rng.gauss(a.mean, a.se) / rng.gauss(b.mean, b.se) for _ in range(20000)]
    r = a / b
    assert r.mean == pytest.approx(a.mean / b.mean)
    assert r.se == pytest.approx(statistics.stdev(draws), rel=0.05)


@pytest.mark.parametrize("means, expected", [
    ([1, 2, 3, 4], "grows"),
    ([4, 3, 2, 1], "falls"),
    ([1, 2, 2.05, 4], "not settled"),      # one step within the spread: no "grows with size"
    ([1, 3, 2, 4], "mixed"),
    ([1], "not settled"),
])
def test_trend(means, expected):
    assert trend([Estimate(m, 0.1) for m in means]) == expected


def test_across_processes_is_the_scatter_a_new_process_would_show(seed):
    rng = random.Random(seed)
    k = rng.randint(2, 8)
    processes = [Estimate(rng.gauss(100, 3), rng.uniform(0.01, 0.1)) for _ in range(k)]
    pooled = across_processes(processes)
    means = [e.mean for e in processes]
    assert pooled.mean == pytest.approx(statistics.fmean(means))
    # a new process's deviation from the mean of k others: sd·√(1 + 1/k), whatever each one's own se
    assert pooled.se == pytest.approx(statistics.stdev(means) * math.sqrt(1 + 1 / k))
    assert math.isnan(across_processes(processes[:1]).se)
    # within the processes' scatter: no difference, however small the new process's own error
    assert compare(Estimate(pooled.mean + 0.5 * pooled.se, 0.01), pooled) == WITHIN
    assert compare(Estimate(pooled.mean + 3 * pooled.se, 0.01), pooled) == "higher"
