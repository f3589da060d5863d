"""Attention with a range around each step, for the A2 profiles.

The math is the naive back end's, written out so that the three ranges the profile tables
separate — "computing attention scores", "computing softmax", "final matmul" — each enclose
exactly one step. By default the ranges are NVTX ranges in NVTX's default domain (the registered
"nvtx" back end); ``domain=`` puts them in another NVTX domain and ``mark=`` replaces NVTX by any
``name -> context manager`` (the torch.profiler fallback passes ``record_function``). Give either
with ``functools.partial`` and install the result with ``cs336_basics.model.set_attention``.
Without a profiler attached an NVTX range costs a function call.
"""
from __future__ import annotations

import math

import torch

from cs336_basics.model import softmax
from cs336_systems.profiling.ranges import FINAL, SCORES, SOFTMAX, Mark, nvtx_mark


def annotated_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = True, *,
                        domain: str | None = None, mark: Mark | None = None) -> torch.Tensor:
    mark = mark or nvtx_mark(domain)
    with mark(SCORES):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if is_causal:
            n, m = scores.shape[-2:]
            keep = torch.ones(n, m, dtype=torch.bool, device=q.device).tril(m - n)
            scores = scores.masked_fill(~keep, float("-inf"))
    with mark(SOFTMAX):
        weights = softmax(scores, dim=-1)
    with mark(FINAL):
        return weights @ v
