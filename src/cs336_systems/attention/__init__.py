"""Attention: the plain PyTorch reference and FlashAttention-2 in PyTorch and in Triton (B1–B5)."""
