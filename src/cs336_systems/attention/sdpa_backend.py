"""PyTorch's fused scaled_dot_product_attention as a model attention back end."""
import torch


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = True) -> torch.Tensor:
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
