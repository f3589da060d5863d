"""The judge's multipliers (``report.spread.MULTIPLIER``): for each count of rounds, the factor the
paired interval's half-width puts on the kept rounds' spread so that an A/A pair is called different
in at most 5 % of jobs, whatever the noise.

    python lab/paired/calibrate.py            # prints the table spread.py holds, and each family's rate
    python lab/paired/calibrate.py --draws 400000 --seed 0

An A/A job is simulated as two entrants with the same distribution of turn medians, one turn each a
round; each family of noise below gives the statistic ``|centre| / spread`` (``report.spread``: the
median of the per-round differences after setting aside the rounds farthest from it, over the largest
distance of a kept round from that median) its own 95th percentile. The multiplier is the largest of
them, rounded up: the light-tailed families set it (uniform noise leaves the spread narrowest against
the centre's scatter), heavy tails and disturbed turns lower the rate below 5 %.

The statistic is scale-free, so the families' scales do not matter, only their shapes. numpy is only
here, for speed; the test (tests/systems/test_judge.py) draws fewer jobs through the judge itself.
"""
from __future__ import annotations

import argparse
import math

import numpy as np

from cs336_systems.report.spread import MAX_TABLED_ROUNDS, MIN_ROUNDS, set_aside

DISTURBANCE = 10.0          # a disturbed turn: ten times the turn-to-turn scatter, in one direction


def families(rng: np.random.Generator, draws: int, n: int) -> dict[str, np.ndarray]:
    """Turn medians of an A/A job, ``(draws, 2, n)``: the two entrants' turns in each of n rounds."""
    shape = (draws, 2, n)

    def disturbed(turns: int) -> np.ndarray:
        x = rng.standard_normal(shape)
        rows = np.arange(draws)
        if turns == 1:                       # one turn of the job, either entrant
            flat = x.reshape(draws, 2 * n)
            flat[rows, rng.integers(0, 2 * n, draws)] += DISTURBANCE
        else:                                # one turn of each entrant, rounds drawn apart
            for side in range(2):
                x[rows, side, rng.integers(0, n, draws)] += DISTURBANCE
        return x

    return {
        "normal": rng.standard_normal(shape),
        "uniform": rng.uniform(-1.0, 1.0, shape),
        "student-t, 3 df": rng.standard_t(3, shape),
        "log-normal": np.exp(rng.standard_normal(shape)),
        "one disturbed turn": disturbed(1),
        "a disturbed turn each": disturbed(2),
    }


def statistic(turns: np.ndarray) -> np.ndarray:
    """``|centre| / spread`` of each simulated job, as ``report.spread.judge_rounds`` computes them."""
    d = turns[:, 0] - turns[:, 1]
    n = d.shape[1]
    by_distance = np.argsort(np.abs(d - np.median(d, axis=1, keepdims=True)), axis=1, kind="stable")
    kept = np.take_along_axis(d, by_distance[:, : n - set_aside(n)], axis=1)
    centre = np.median(kept, axis=1)
    spread = np.abs(kept - centre[:, None]).max(axis=1)
    return np.abs(centre) / spread


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--draws", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    table = {}
    for n in range(MIN_ROUNDS, MAX_TABLED_ROUNDS + 1):
        quantiles = {name: float(np.quantile(statistic(x), 0.95)) for name, x in families(rng, args.draws, n).items()}
        table[n] = math.ceil(max(quantiles.values()) * 100) / 100
        print(f"# {n} rounds, {set_aside(n)} set aside: " + ", ".join(f"{k} {v:.3f}" for k, v in quantiles.items()))
    print("MULTIPLIER = {" + ", ".join(f"{n}: {k:.2f}" for n, k in table.items()) + "}")


if __name__ == "__main__":
    main()
