"""cs336_systems: the experiments of the lab notebook and the systems pieces they measure.

Public API (imported lazily, so ``import cs336_systems.benchmark`` does not load the Triton
kernels, and editing them does not make unrelated pipeline rules stale):

- ``FlashAttentionPytorch``, ``FlashAttentionTriton``: autograd Functions,
  ``.apply(q, k, v, is_causal=False)`` on q (batch, Nq, d) and k, v (batch, Nk, d); the Triton
  one also on (batch, heads, seq, d) views with any strides.
- ``DDPIndividualParameters(module)``, ``DDPBucketed(module, bucket_size_mb)``: data-parallel
  wrappers (``forward``, ``finish_gradient_synchronization()``, ``on_train_batch_start()``, ``.module``);
  the naive and flat variants live beside them in ``cs336_systems.distributed.ddp``.
- ``ShardedOptimizer(params, optimizer_cls, **kwargs)``: optimizer-state sharding.
- ``FSDP(module, compute_dtype=None)``: fully sharded data parallelism (``forward``,
  ``finish_gradient_synchronization()``, ``gather_full_params()``, ``.module``).
"""
from __future__ import annotations

import importlib

_PUBLIC = {
    "FlashAttentionPytorch": "cs336_systems.attention.flash_pytorch",
    "FlashAttentionTriton": "cs336_systems.attention.flash_triton",
    "DDPIndividualParameters": "cs336_systems.distributed.ddp",
    "DDPBucketed": "cs336_systems.distributed.ddp",
    "ShardedOptimizer": "cs336_systems.distributed.sharded_optimizer",
    "FSDP": "cs336_systems.distributed.fsdp",
}

__all__ = list(_PUBLIC)


def __getattr__(name: str):
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'cs336_systems' has no attribute {name!r}")
