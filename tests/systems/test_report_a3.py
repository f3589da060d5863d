"""A3's prose checks: the closed-form stall point of a low-precision running sum against torch's
own arithmetic, and the checks flipping when the rows say otherwise."""
from __future__ import annotations

import pytest
import torch

from cs336_systems.report.a3 import Sum, checks, rounded, stall_sum

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def _stall_by_torch(dtype: torch.dtype, term: float) -> float:
    """Add ``term`` in ``dtype`` until the sum stops changing: the independent reference."""
    total, step = torch.zeros((), dtype=dtype), torch.tensor(term, dtype=dtype)
    while (nxt := total + step) != total:
        total = nxt
    return float(total)


@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
def test_stall_point_matches_torch(fmt, seed):
    rng = torch.Generator().manual_seed(seed)
    for term in [0.01] + (torch.rand(5, generator=rng) * 0.2 + 1e-3).tolist():
        assert stall_sum(fmt, term) == _stall_by_torch(DTYPES[fmt], term), term
        assert rounded(term, fmt) == float(torch.tensor(term, dtype=DTYPES[fmt]))


def _at(mixed: float, explicit: float, fp16_sum: float = 32.0, bf16_sum: float = 4.0) -> dict:
    sums = {"fp16 += fp16": fp16_sum, "bf16 += bf16": bf16_sum, "fp32 += fp16": mixed, "fp32 += fp16.to(fp32)": explicit}
    return {1000: {variant: Sum(value, abs(value - 10)) for variant, value in sums.items()}}


def test_checks_hold_on_the_true_arithmetic_and_flip_when_the_rows_disagree():
    exact = 1000 * rounded(0.01, "fp16")
    good = checks(_at(exact, exact), 1000, 1000)
    assert good.upcasts_agree and good.mixed_is_term_rounding
    assert all(s.matches for s in good.stall.values())
    bad = checks(_at(exact + 0.01, exact, fp16_sum=64.0), 1000, 1000)
    assert not bad.upcasts_agree and not bad.mixed_is_term_rounding
    assert not bad.stall["fp16"].matches and bad.stall["bf16"].matches
