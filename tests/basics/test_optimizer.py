"""AdamW against torch.optim.AdamW and cosine_lr against the closed form."""

import copy
import math

import pytest
import torch

from cs336_basics.optimizer import AdamW, cosine_lr


def _small_model():
    return torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.Tanh(), torch.nn.Linear(12, 3)).double()


def test_adamw_matches_torch_over_many_steps():
    ours = _small_model()
    theirs = copy.deepcopy(ours)
    hyper = dict(lr=3e-3, betas=(0.85, 0.97), eps=1e-7, weight_decay=0.1)
    opt_ours = AdamW(ours.parameters(), **hyper)
    opt_theirs = torch.optim.AdamW(theirs.parameters(), **hyper)
    for _ in range(150):
        x, y = torch.randn(16, 6, dtype=torch.float64), torch.randn(16, 3, dtype=torch.float64)
        for model, opt in ((ours, opt_ours), (theirs, opt_theirs)):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    for a, b in zip(ours.parameters(), theirs.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    state = opt_ours.state[next(ours.parameters())]
    assert state["step"] == 150 and {"exp_avg", "exp_avg_sq"} <= state.keys()


def test_adamw_step_with_closure_returns_loss():
    model = _small_model()
    opt = AdamW(model.parameters())
    x, y = torch.randn(4, 6, dtype=torch.float64), torch.randn(4, 3, dtype=torch.float64)

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    before = [p.detach().clone() for p in model.parameters()]
    loss = opt.step(closure)
    assert torch.isfinite(loss)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def _cosine_closed_form(t, max_lr, min_lr, warmup, cycle):
    if t < warmup:
        return max_lr * t / warmup
    if t > cycle:
        return min_lr
    angle = math.pi * (t - warmup) / (cycle - warmup)
    return min_lr + (max_lr - min_lr) * (1 + math.cos(angle)) / 2


@pytest.mark.parametrize("max_lr,min_lr,warmup,cycle", [(1.0, 0.1, 7, 21), (3e-4, 3e-5, 100, 1000)])
def test_cosine_lr(max_lr, min_lr, warmup, cycle):
    for t in list(range(0, cycle + 30)) + [cycle * 5]:
        assert cosine_lr(t, max_lr, min_lr, warmup, cycle) == pytest.approx(
            _cosine_closed_form(t, max_lr, min_lr, warmup, cycle), rel=1e-12, abs=1e-15
        )
    assert cosine_lr(0, max_lr, min_lr, warmup, cycle) == 0
    assert cosine_lr(warmup, max_lr, min_lr, warmup, cycle) == pytest.approx(max_lr)
    assert cosine_lr(cycle, max_lr, min_lr, warmup, cycle) == pytest.approx(min_lr)
