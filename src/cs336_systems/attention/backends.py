"""The attention back ends a model can run, by name, as ``module:function`` strings.

Kept free of torch and of the back ends' own imports on purpose: the Snakefile reads it to make a
rule depend on the source of the one back end the rule uses (``module_of``), so editing the flash
kernels reruns the experiments that run them and nothing else.

Every back end follows ``cs336_basics.model``'s protocol: ``fn(q, k, v, is_causal)`` on tensors
of shape ``(..., heads, seq, d_k)``.
"""
from __future__ import annotations

import importlib
from typing import Callable

BACKENDS: dict[str, str] = {
    "naive": "cs336_basics.model:causal_attention",                       # scores, masked softmax, matmul
    "nvtx": "cs336_systems.profiling.annotated_attention:annotated_attention",  # the same, NVTX ranges
    "sdpa": "cs336_systems.attention.sdpa_backend:sdpa_attention",        # PyTorch's fused SDPA
    "flash": "cs336_systems.attention.flash_backend:flash_attention",     # our FlashAttention-2 (Triton)
}


# B5's implementations, timed on (batch, seq, d) inputs by ``attention.bench``, which compiles
# "plain-compiled" and pins SDPA to one of PyTorch's kernels. A B5 row's rule depends on its own
# implementation's source: editing our kernels does not rerun the rows of plain attention or SDPA.
BENCH_IMPLS: dict[str, str] = {
    "ours": "cs336_systems.attention.flash_backend:flash_attention",
    "plain": "cs336_systems.attention.reference:plain_attention",
    "plain-compiled": "cs336_systems.attention.reference:plain_attention",
    "sdpa-flash": "cs336_systems.attention.sdpa_backend:sdpa_attention",
    "sdpa-cudnn": "cs336_systems.attention.sdpa_backend:sdpa_attention",
}


def module_of(name: str, table: dict[str, str] = BACKENDS) -> str:
    return _entry(name, table).partition(":")[0]


def load(name: str, table: dict[str, str] = BACKENDS) -> Callable:
    module, _, function = _entry(name, table).partition(":")
    return getattr(importlib.import_module(module), function)


def _entry(name: str, table: dict[str, str]) -> str:
    try:
        return table[name]
    except KeyError:
        raise ValueError(f"unknown attention back end {name!r}; known: {', '.join(table)}") from None
