"""Plain attention in PyTorch: the B1 / B5 baseline, and the reference the flash kernels are tested against."""
from __future__ import annotations

import math

import torch


def attention_scores(q: torch.Tensor, k: torch.Tensor, is_causal: bool) -> torch.Tensor:
    """Scaled scores ``q kᵀ / √d`` with masked (future) positions at −inf."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if is_causal:
        n, m = scores.shape[-2:]
        future = torch.ones(n, m, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    return scores


def plain_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False) -> torch.Tensor:
    """softmax(q kᵀ / √d) v, materialising the full score matrix (what FlashAttention avoids)."""
    return torch.softmax(attention_scores(q, k, is_causal), dim=-1) @ v


def attention_with_logsumexp(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             is_causal: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Output and the row-wise log-sum-exp L of the scores, the quantity FlashAttention saves."""
    scores = attention_scores(q, k, is_causal)
    return torch.softmax(scores, dim=-1) @ v, torch.logsumexp(scores, dim=-1)
