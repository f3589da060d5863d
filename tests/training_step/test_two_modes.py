"""report.two_modes on seeded samples: a step that alternates between two times is found, with both
times; one distribution's scatter, and a few slow rounds, are not two modes."""
import random

import pytest

from cs336_systems.report.two_modes import BETWEEN, GAP_OVER_SPREAD, HIGH, LOW, MIN_SIDE, two_modes


def alternating(low: float, high: float, spread: float, n: int = 10) -> list[float]:
    return [(low if i % 2 else high) + random.gauss(0, spread) for i in range(n)]


def test_a_step_alternating_between_two_times_is_found_with_both():
    found = two_modes(alternating(346.0, 370.0, 0.5))
    assert found is not None
    assert found.low_ms == pytest.approx(346.0, abs=1.5) and found.high_ms == pytest.approx(370.0, abs=1.5)
    assert (found.low_steps, found.high_steps, found.median_at) == (5, 5, BETWEEN)
    # where one time takes most steps, the median is that time's: it hides the others
    assert two_modes([346.0] * 6 + [370.0] * 4).median_at == LOW
    assert two_modes([346.0] * 4 + [370.0] * 6).median_at == HIGH
    assert two_modes([346.0] * 5 + [370.0] * 5, median=370.0).median_at == HIGH     # the record's own median
    assert found.gap_ms >= GAP_OVER_SPREAD * found.spread_ms
    # the module's doc: a spread of 2 around times 24 apart is called two-moded in about 95 % of draws
    assert sum(two_modes(alternating(346.0, 370.0, 2.0)) is not None for _ in range(400)) >= 0.85 * 400


@pytest.mark.parametrize("draw", [lambda: random.gauss(200.0, 2.0), lambda: random.lognormvariate(5.3, 0.05)],
                         ids=["normal", "lognormal"])
def test_one_distribution_s_scatter_is_not_two_modes(draw):
    """The module's doc: at most 0.2 % of samples of 10 from one distribution are called two-moded."""
    called = sum(two_modes([draw() for _ in range(10)]) is not None for _ in range(2000))
    assert called <= 10


def test_a_few_slow_rounds_are_not_a_mode_and_too_few_steps_decide_nothing():
    # two disturbed turns far above eight steady ones: a side needs a quarter of the steps
    assert two_modes([351.0 + 0.2 * i for i in range(8)] + [397.0, 416.0]) is None
    # two steps at one time are not a side (MIN_SIDE is three), three are
    assert MIN_SIDE == 3
    assert two_modes([346.0] * 2 + [370.0] * 4) is None and two_modes([346.0] * 3 + [370.0] * 3) is not None
    assert two_modes([300.0] * 10) is None and two_modes([]) is None
