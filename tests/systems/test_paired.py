"""The paired verdict (report.spread.paired) against the unpaired one, on synthetic rounds where they disagree."""
import math
import random
import statistics

import pytest

from cs336_systems.report.spread import WITHIN, Estimate, compare, paired, paired_records


def _rounds(rng, centres, noise, steps=4):
    return [[c + rng.gauss(0, noise) for _ in range(steps)] for c in centres]


def test_a_drift_shared_by_both_sides_hides_a_difference_from_the_unpaired_test_but_not_from_the_paired_one():
    rng = random.Random(11)
    drift = [100.0, 130.0, 85.0, 120.0, 95.0]           # the host's mood per round, moves both sides
    a = _rounds(rng, [d + 3.0 for d in drift], 0.2)      # a is 3 ms slower in every round
    b = _rounds(rng, drift, 0.2)
    flat = lambda rounds: [t for r in rounds for t in r]
    unpaired = compare(Estimate.from_samples(statistics.fmean(flat(a)), statistics.stdev(flat(a)), 20),
                       Estimate.from_samples(statistics.fmean(flat(b)), statistics.stdev(flat(b)), 20))
    assert unpaired == WITHIN
    result = paired(a, b)
    assert result.verdict == "higher" and result.difference == pytest.approx(3.0, abs=0.5)
    assert result.rounds == 5 and result.spread < 1.0


def test_a_tight_process_whose_rounds_disagree_gets_no_verdict_although_the_unpaired_test_gives_one():
    rng = random.Random(12)
    # inside a round both are tight, but which is faster changes from round to round
    a = _rounds(rng, [100.0, 102.0, 100.0, 102.0], 0.01, steps=10)
    b = _rounds(rng, [101.5, 100.5, 101.5, 100.5], 0.01, steps=10)
    # pooled, a's 40 samples average 101.0 and b's 101.0 ± tiny: shift b a little so the means differ
    b = [[t + 0.6 for t in r] for r in b]
    flat = lambda rounds: [t for r in rounds for t in r]
    se = lambda xs: Estimate.from_samples(statistics.fmean(xs), statistics.stdev(xs), len(xs))
    assert compare(se(flat(a)), se(flat(b))) == "lower"
    assert paired(a, b).verdict == WITHIN


def test_a_ratio_is_judged_against_one():
    a = [[2.0, 2.1], [2.2, 2.0], [1.9, 2.0]]
    b = [[1.0, 1.0], [1.1, 1.0], [1.0, 1.0]]
    r = paired(a, b, ratio=True)
    assert r.ratio and r.verdict == "higher" and r.difference == pytest.approx(2.0, abs=0.1)
    assert paired(b, a, ratio=True).verdict == "lower"


def test_fewer_than_three_rounds_decide_nothing():
    a, b = [[10.0], [10.0]], [[1.0], [1.0]]
    r = paired(a, b)
    assert r.verdict == WITHIN and r.rounds == 2
    assert math.isnan(paired([], []).difference)


def test_the_verdict_needs_every_round_beyond_the_scatter():
    # differences 5, 5, 5, -1: the median 5 is not beyond the largest distance 6
    a = [[15.0], [15.0], [15.0], [9.0]]
    b = [[10.0]] * 4
    assert paired(a, b).verdict == WITHIN
    assert paired(a[:3], b[:3]).verdict == "higher"


def _record(job, rounds):
    return {"metrics": {"turns": {"job": job}, "rounds": [{"step": r} for r in rounds]}}


def test_records_pair_only_within_one_job():
    a, b = _record("j1", [[2.0], [2.0], [2.0]]), _record("j1", [[1.0], [1.0], [1.0]])
    assert paired_records(a, b).verdict == "higher"
    assert paired_records(a, _record("j2", [[1.0]] * 3)) is None
    assert paired_records({"metrics": {}}, {"metrics": {}}) is None
