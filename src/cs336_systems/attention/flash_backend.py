"""Our Triton FlashAttention-2 as a model attention back end."""
import torch

from cs336_systems.attention.flash_triton import FlashAttentionTriton, describe_launch


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = True) -> torch.Tensor:
    # The kernels take (batch, seq, d): fold the heads into the batch, and unfold them after.
    lead = q.shape[:-2]
    out = FlashAttentionTriton.apply(*(t.reshape(-1, *t.shape[-2:]) for t in (q, k, v)), is_causal)
    return out.reshape(*lead, *out.shape[-2:])


def describe(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = True) -> dict:
    """What the kernels launch for these (batch, seq, d) inputs: tiles, programs, SMs (for records)."""
    return describe_launch(q, k, v, is_causal)
