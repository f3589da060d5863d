"""What the FlashAttention functions accept, checked up front so a bad call fails with a message
instead of a wrong answer or a kernel fault."""
from __future__ import annotations

import torch

# Multiples of 8 up to 256; the kernels lay each out as one or two power-of-two chunks (``flash_tiles.head_chunks``).
HEAD_DIMS = tuple(range(8, 257, 8))
HEAD_DIMS_TEXT = f"multiples of 8 from {HEAD_DIMS[0]} to {HEAD_DIMS[-1]}"
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def causal_flag(is_causal) -> bool:
    """``is_causal`` as a bool. Only a bool (or 0 / 1) is accepted: ``bool("False")`` is True, and a
    string or None slipping through would silently pick the other attention."""
    if isinstance(is_causal, bool) or (isinstance(is_causal, int) and is_causal in (0, 1)):
        return bool(is_causal)
    raise TypeError(f"is_causal must be True or False, got {is_causal!r}")


def check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool) -> None:
    """Raise ``ValueError`` / ``TypeError`` unless q (batch, Nq, d), k and v (batch, Nk, d) fit, or
    the same with a heads axis after the batch: q (batch, heads, Nq, d), k and v (batch, heads, Nk, d)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() not in (3, 4):
            raise ValueError(f"{name} must have shape (batch, seq, d) or (batch, heads, seq, d); got {tuple(t.shape)}")
        if t.dtype not in DTYPES:
            raise TypeError(f"{name} has dtype {t.dtype}; supported: float32, float16, bfloat16")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share a dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device; got {q.device}, {k.device}, {v.device}")
    if not (q.shape[:-2] == k.shape[:-2] == v.shape[:-2]):
        raise ValueError(f"batch sizes differ: q {tuple(q.shape[:-2])}, k {tuple(k.shape[:-2])}, v {tuple(v.shape[:-2])}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same sequence length; got {k.shape[-2]} and {v.shape[-2]}")
    if not (q.shape[-1] == k.shape[-1] == v.shape[-1]):
        raise ValueError(f"q, k, v must share the head dimension; got {q.shape[-1]}, {k.shape[-1]}, {v.shape[-1]}")
    if q.shape[-1] not in HEAD_DIMS:
        raise ValueError(f"head dimension {q.shape[-1]} is not supported; supported: {HEAD_DIMS_TEXT}")
    if min(q.shape[-2], k.shape[-2]) < 1:
        raise ValueError("sequence lengths must be at least 1")
    if is_causal and q.shape[-2] != k.shape[-2]:
        raise ValueError(f"causal attention needs as many queries as keys; got {q.shape[-2]} and {k.shape[-2]}")
