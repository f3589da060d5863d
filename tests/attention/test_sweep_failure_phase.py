"""B1/B2(a): a failed point says in which pass it failed (PyTorch's out-of-memory message does not),
so the writeup can say whether forward or backward ran out."""
from __future__ import annotations

import pytest
import torch

from cs336_systems.attention import sweep


class _FailsIn(torch.autograd.Function):
    """Identity whose forward or backward raises, as running out of memory there would."""

    @staticmethod
    def forward(ctx, x, where):
        ctx.where = where
        if where == "forward":
            raise RuntimeError("synthetic failure in forward")
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("synthetic failure in backward")


@pytest.mark.parametrize("where", ["forward", "backward"])
def test_a_failure_records_its_pass(monkeypatch, where):
    from cs336_systems.attention.reference import plain_attention

    monkeypatch.setattr(sweep, "plain_attention", lambda q, k, v: _FailsIn.apply(plain_attention(q, k, v), where))
    (record,) = sweep.sweep(8, [16], batch=1, iters=1, compiled=False, device="cpu", extend_to=None)
    assert record["status"] == "error" and "synthetic failure" in record["message"]
    assert record["metrics"]["failed_during"] == where


def test_a_point_that_runs_has_no_failure_phase(seed):
    (record,) = sweep.sweep(8, [16], batch=1, iters=1, compiled=False, device="cpu", extend_to=None)
    assert record["status"] == "ok" and "failed_during" not in record["metrics"]
    assert record["metrics"]["backward_peak_bytes"] is None        # a CUDA reading; the CPU has none
