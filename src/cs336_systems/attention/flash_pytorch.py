"""FlashAttention-2 forward in pure PyTorch (B3a), with the compiled PyTorch backward (B4).

The forward walks query tiles and, inside each, key tiles, keeping for every query row a running
maximum ``m``, a running denominator ``l`` and an unnormalised output ``O``:

    m_new = max(m, rowmax S_ij)            P = exp(S_ij − m_new)
    l     = exp(m − m_new) · l + rowsum P  O = exp(m − m_new) · O + P V_j

and at the end O / l and L = m + log l. Only L — shape (batch, Nq) — is saved besides Q, K, V, O.
This version exists to make the algorithm readable and testable; the Triton one is the fast path.
"""
from __future__ import annotations

import math

import torch

from cs336_systems.attention.backward import compiled_flash_backward
from cs336_systems.attention.inputs import causal_flag, check_inputs

TILE_Q = 32
TILE_K = 32


def flash_forward_pytorch(q, k, v, is_causal: bool, tile_q: int = TILE_Q, tile_k: int = TILE_K):
    """Tiled forward with the online softmax; returns (O in q's dtype, L in fp32)."""
    batch, n_q, d = q.shape
    n_k = k.shape[1]
    scale = 1.0 / math.sqrt(d)
    out = torch.empty_like(q)
    lse = torch.empty(batch, n_q, dtype=torch.float32, device=q.device)
    for qs in range(0, n_q, tile_q):
        qi = q[:, qs:qs + tile_q].float()
        rows = torch.arange(qs, qs + qi.shape[1], device=q.device)
        m = torch.full((batch, qi.shape[1]), float("-inf"), device=q.device)
        l = torch.zeros(batch, qi.shape[1], device=q.device)
        acc = torch.zeros(batch, qi.shape[1], d, device=q.device)
        key_end = min(n_k, qs + tile_q) if is_causal else n_k       # causal: no tile wholly in the future
        for ks in range(0, key_end, tile_k):
            kj, vj = k[:, ks:ks + tile_k].float(), v[:, ks:ks + tile_k].float()
            s = qi @ kj.transpose(-2, -1) * scale
            if is_causal:
                cols = torch.arange(ks, ks + kj.shape[1], device=q.device)
                s = s + torch.where(rows[:, None] >= cols[None, :], 0.0, -1e6)
            m_new = torch.maximum(m, s.amax(-1))
            p = torch.exp(s - m_new.unsqueeze(-1))
            alpha = torch.exp(m - m_new)
            l = alpha * l + p.sum(-1)
            acc = alpha.unsqueeze(-1) * acc + p.to(v.dtype).float() @ vj
            m = m_new
        out[:, qs:qs + tile_q] = (acc / l.unsqueeze(-1)).to(q.dtype)
        lse[:, qs:qs + tile_q] = m + torch.log(l)
    return out, lse


class FlashAttentionPytorch(torch.autograd.Function):
    """``FlashAttentionPytorch.apply(q, k, v, is_causal=False) -> o`` for q (batch, Nq, d), k, v (batch, Nk, d)."""

    @staticmethod
    def forward(ctx, q, k, v, is_causal=False):
        is_causal = causal_flag(is_causal)
        check_inputs(q, k, v, is_causal)
        out, lse = flash_forward_pytorch(q, k, v, is_causal)
        ctx.save_for_backward(lse, q, k, v, out)
        ctx.is_causal = is_causal
        return out

    @staticmethod
    def backward(ctx, grad_out):
        lse, q, k, v, out = ctx.saved_tensors
        grad_q, grad_k, grad_v = compiled_flash_backward()(q, k, v, out, grad_out, lse, ctx.is_causal)
        return grad_q, grad_k, grad_v, None
