"""Loss and gradient utilities for training the Transformer LM."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor


def cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean negative log-likelihood of ``targets`` (...) under ``logits`` (..., vocab)."""
    # Low-precision logits lose too much in log-sum-exp; compute in at least fp32.
    compute_dtype = torch.promote_types(logits.dtype, torch.float32)
    logits = logits.to(compute_dtype)
    # log-sum-exp with the max factored out stays finite for logits around +-1e4.
    max_logit = logits.amax(dim=-1, keepdim=True)
    log_normalizer = max_logit.squeeze(-1) + torch.log(torch.exp(logits - max_logit).sum(dim=-1))
    target_logit = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return (log_normalizer - target_logit).mean()


def clip_gradient(parameters: Iterable[torch.nn.Parameter], max_l2_norm: float) -> None:
    """Scale all gradients in place so their global L2 norm is at most ``max_l2_norm``."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return
    total_norm = torch.sqrt(sum(g.detach().float().pow(2).sum() for g in grads))
    if total_norm > max_l2_norm:
        scale = max_l2_norm / (total_norm + 1e-6)
        for g in grads:
            g.mul_(scale.to(g.dtype))
