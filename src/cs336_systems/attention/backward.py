"""FlashAttention-2 backward by recomputation, in PyTorch (B4), compiled with ``torch.compile``.

From Q, K, V, O, dO and the saved log-sum-exp L (no attention matrix was kept):

    D  = rowsum(dO ∘ O)            S  = Q Kᵀ / √d  (future positions masked when causal)
    P  = exp(S − L)                dV = Pᵀ dO
    dP = dO Vᵀ                     dS = P ∘ (dP − D)
    dQ = dS K / √d                 dK = dSᵀ Q / √d

It materialises S for the whole sequence, so it is the simple path, not the fast one; the Triton
kernels in ``flash_backward`` compute the same thing tile by tile.
"""
from __future__ import annotations

import math
from functools import lru_cache

import torch


def flash_backward(q, k, v, o, grad_o, lse, is_causal: bool):
    """Gradients (dQ, dK, dV) in the inputs' dtype; the arithmetic runs in fp32."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    qf, kf, vf, of, gf = (t.float() for t in (q, k, v, o, grad_o))
    delta = (gf * of).sum(-1, keepdim=True)
    scores = qf @ kf.transpose(-2, -1) * scale
    if is_causal:
        n, m = scores.shape[-2:]
        future = torch.ones(n, m, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    p = torch.exp(scores - lse.unsqueeze(-1))
    grad_v = p.transpose(-2, -1) @ gf
    grad_p = gf @ vf.transpose(-2, -1)
    grad_s = p * (grad_p - delta)
    grad_q = grad_s @ kf * scale
    grad_k = grad_s.transpose(-2, -1) @ qf * scale
    return grad_q.to(q.dtype), grad_k.to(k.dtype), grad_v.to(v.dtype)


# The torch.compile back end of the compiled backward: Inductor, what B4 times. A process may choose
# AOTAutograd's graphs run eagerly instead (``use_backend("aot_eager")``, B3's check on the smoke preset),
# which traces the same graph without building C++ on a CPU where the numbers mean nothing.
_BACKEND = ["inductor"]


def use_backend(name: str) -> None:
    """Compile the backward with back end ``name`` from now on in this process."""
    _BACKEND[0] = name
    compiled_flash_backward.cache_clear()


@lru_cache(maxsize=1)
def compiled_flash_backward():
    """``flash_backward`` under ``torch.compile`` (built on first use: compiling takes seconds)."""
    return torch.compile(flash_backward, dynamic=True, backend=_BACKEND[0])
