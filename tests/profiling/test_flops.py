"""Attention FLOP closed forms against independent counts."""
import math
import random

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from cs336_systems.profiling.flops import attention_flops, matmul_flops, softmax_flops


class Counted:
    """A float that counts every arithmetic operation and comparison done on it."""
    ops = 0

    def __init__(self, v):
        self.v = v

    def _op(self, other, fn):
        Counted.ops += 1
        return Counted(fn(self.v, other.v if isinstance(other, Counted) else other))

    __add__ = lambda s, o: s._op(o, lambda a, b: a + b)          # noqa: E731
    __sub__ = lambda s, o: s._op(o, lambda a, b: a - b)          # noqa: E731
    __truediv__ = lambda s, o: s._op(o, lambda a, b: a / b)      # noqa: E731

    def __gt__(self, other):
        Counted.ops += 1
        return self.v > other.v

    def exp(self):
        Counted.ops += 1
        return Counted(math.exp(self.v))


def counted_softmax(row):
    """The five steps of cs336_basics.model.softmax, one scalar operation at a time."""
    m = row[0]
    for x in row[1:]:
        m = x if x > m else m
    e = [(x - m).exp() for x in row]
    s = e[0]
    for x in e[1:]:
        s = s + x
    return [x / s for x in e]


@pytest.mark.parametrize("b, h, t", [(1, 1, 1), (2, 3, 5), (1, 2, 9)])
def test_softmax_count(b, h, t):
    Counted.ops = 0
    for _ in range(b * h * t):
        out = counted_softmax([Counted(random.gauss(0, 1)) for _ in range(t)])
    assert sum(x.v for x in out) == pytest.approx(1.0)
    assert Counted.ops == softmax_flops(b, h, t, t)


@pytest.mark.parametrize("b, h, t, d", [(2, 3, 7, 5), (1, 4, 16, 8)])
def test_matmul_counts_match_torch_flop_counter(b, h, t, d):
    q, k, v = (torch.randn(b, h, t, d) for _ in range(3))
    with FlopCounterMode(display=False) as counter:
        scores = q @ k.transpose(-2, -1)
        scores.softmax(-1) @ v
    expected = attention_flops(b, h, t, d)
    assert counter.get_total_flops() == expected["scores_matmul"] + expected["final_matmul"]
    assert matmul_flops(b, h, t, t, d) == expected["scores_matmul"] == 2 * b * h * t * t * d
