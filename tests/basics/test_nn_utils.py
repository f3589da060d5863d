"""cross_entropy and clip_gradient against their torch counterparts."""

import torch
import torch.nn.functional as F

from cs336_basics.nn_utils import clip_gradient, cross_entropy


def test_cross_entropy_2d():
    logits, targets = torch.randn(8, 30), torch.randint(0, 30, (8,))
    torch.testing.assert_close(cross_entropy(logits, targets), F.cross_entropy(logits, targets))


def test_cross_entropy_large_logits_stay_finite():
    logits, targets = torch.randn(8, 30) * 1e4, torch.randint(0, 30, (8,))
    out = cross_entropy(logits, targets)
    assert torch.isfinite(out)
    torch.testing.assert_close(out, F.cross_entropy(logits, targets))


def test_cross_entropy_3d():
    logits, targets = torch.randn(3, 5, 30), torch.randint(0, 30, (3, 5))
    torch.testing.assert_close(cross_entropy(logits, targets), F.cross_entropy(logits.flatten(0, 1), targets.flatten()))


def _params_with_grads(scale):
    params = [torch.nn.Parameter(torch.randn(4, 5)), torch.nn.Parameter(torch.randn(7)), torch.nn.Parameter(torch.randn(3))]
    params[0].grad = torch.randn(4, 5) * scale
    params[1].grad = torch.randn(7) * scale
    # params[2] has grad None and must simply be skipped.
    return params


def _clone(params):
    cloned = [torch.nn.Parameter(p.detach().clone()) for p in params]
    for c, p in zip(cloned, params):
        c.grad = None if p.grad is None else p.grad.clone()
    return cloned


def test_clip_gradient_matches_torch_above_and_below_max():
    for scale, max_norm in ((10.0, 1.0), (0.01, 1.0)):
        ours = _params_with_grads(scale)
        theirs = _clone(ours)
        before = [p.grad.clone() for p in ours if p.grad is not None]
        clip_gradient(ours, max_norm)
        torch.nn.utils.clip_grad_norm_(theirs, max_norm)
        for a, b in zip(ours, theirs):
            assert (a.grad is None) == (b.grad is None)
            if a.grad is not None:
                torch.testing.assert_close(a.grad, b.grad)
        after = [p.grad for p in ours if p.grad is not None]
        norm_after = torch.sqrt(sum(g.pow(2).sum() for g in after))
        if scale > 1:
            assert norm_after.item() <= max_norm + 1e-5
        else:
            assert all(torch.equal(a, b) for a, b in zip(after, before))
