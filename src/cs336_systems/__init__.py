"""cs336_systems: the experiments of the lab notebook and the systems pieces they measure.

Public API (imported lazily, so ``import cs336_systems.benchmark`` does not load the Triton
kernels, and editing them does not make unrelated pipeline rules stale):

- ``FlashAttentionPytorch``, ``FlashAttentionTriton``: autograd Functions,
  ``.apply(q, k, v, is_causal=False)`` on q (batch, Nq, d) and k, v (batch, Nk, d).

Reserved for the distributed deliverables, not implemented yet: ``DDPIndividualParameters``,
``DDPBucketed``, ``ShardedOptimizer``, ``FSDP``.
"""
from __future__ import annotations

import importlib

_PUBLIC = {
    "FlashAttentionPytorch": "cs336_systems.attention.flash_pytorch",
    "FlashAttentionTriton": "cs336_systems.attention.flash_triton",
}
_RESERVED = ("DDPIndividualParameters", "DDPBucketed", "ShardedOptimizer", "FSDP")

__all__ = list(_PUBLIC)


def __getattr__(name: str):
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    if name in _RESERVED:
        raise AttributeError(f"cs336_systems.{name} is part of the planned public API but not implemented yet")
    raise AttributeError(f"module 'cs336_systems' has no attribute {name!r}")
