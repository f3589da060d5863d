"""Decoder-only pre-norm Transformer language model (no biases anywhere).

Layout: token embedding -> N x TransformerBlock -> final RMSNorm -> untied LM head.
Each block computes ``h = x + attn(ln1(x))`` and then ``h + ffn(ln2(h))``.

Attention back-end switch
-------------------------
The attention kernel is a pluggable *attention function* with the protocol::

    fn(q, k, v, is_causal: bool) -> Tensor

where ``q``, ``k``, ``v`` have shape ``(..., heads, seq, d_k)`` (RoPE already
applied to q and k) and the result has shape ``(..., heads, seq, d_v)``.
Every :class:`MultiHeadSelfAttention` stores its function in the per-instance
attribute ``attention_fn`` (default :func:`causal_attention`, the naive
mask-and-softmax implementation) and always calls it with ``is_causal=True``.

To swap the back end of an already-built model (naive, NVTX-annotated,
``torch.nn.functional.scaled_dot_product_attention``, a FlashAttention kernel)
call :func:`set_attention(model, fn) <set_attention>`; it rewrites
``attention_fn`` on every attention module inside ``model``. Nothing is global,
so two models in one process can use different back ends. An ``attention_fn``
can also be given at construction time to :class:`MultiHeadSelfAttention`,
:class:`TransformerBlock` and :class:`TransformerLM`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

AttentionFn = Callable[..., Tensor]  # fn(q, k, v, is_causal: bool) -> Tensor


class Linear(nn.Module):
    """Bias-free linear layer; weight stored (d_out, d_in) like nn.Linear."""

    def __init__(self, in_features: int, out_features: int, device=None, dtype=None):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features, device=device, dtype=dtype))
        std = math.sqrt(2.0 / (in_features + out_features))
        nn.init.trunc_normal_(self.weight, mean=0.0, std=std, a=-3 * std, b=3 * std)

    def forward(self, x: Tensor) -> Tensor:
        return torch.matmul(x, self.weight.T)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


class Embedding(nn.Module):
    """Lookup table of shape (num_embeddings, embedding_dim)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, device=None, dtype=None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_embeddings, embedding_dim, device=device, dtype=dtype))
        nn.init.trunc_normal_(self.weight, mean=0.0, std=1.0, a=-3.0, b=3.0)

    def forward(self, token_ids: Tensor) -> Tensor:
        return self.weight[token_ids]


class RMSNorm(nn.Module):
    def __init__(self, d_model: int, eps: float = 1e-5, device=None, dtype=None):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model, device=device, dtype=dtype))

    def forward(self, x: Tensor) -> Tensor:
        in_dtype = x.dtype
        # Squaring in bf16/fp16 overflows or loses precision, so normalize in fp32.
        x32 = x.to(torch.float32) if in_dtype in (torch.float16, torch.bfloat16) else x
        rms = torch.sqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (x32 / rms * self.weight.to(x32.dtype)).to(in_dtype)


def silu(x: Tensor) -> Tensor:
    return x * torch.sigmoid(x)


def softmax(x: Tensor, dim: int) -> Tensor:
    # Subtracting the max leaves the result unchanged but keeps exp() from overflowing.
    shifted = x - x.amax(dim=dim, keepdim=True)
    exp = torch.exp(shifted)
    return exp / exp.sum(dim=dim, keepdim=True)


class SwiGLU(nn.Module):
    def __init__(self, d_model: int, d_ff: int, device=None, dtype=None):
        super().__init__()
        self.w1 = Linear(d_model, d_ff, device=device, dtype=dtype)
        self.w2 = Linear(d_ff, d_model, device=device, dtype=dtype)
        self.w3 = Linear(d_model, d_ff, device=device, dtype=dtype)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(silu(self.w1(x)) * self.w3(x))


class RotaryPositionalEmbedding(nn.Module):
    """Rotates adjacent pairs (x0,x1),(x2,x3),... by position * theta^(-2k/d_k)."""

    def __init__(self, theta: float, d_k: int, max_seq_len: int, device=None):
        super().__init__()
        if d_k % 2 != 0:
            raise ValueError(f"RoPE needs an even d_k, got {d_k}")
        # Angles reach max_seq_len radians; fp32 would round them by ~1e-4, so build in fp64.
        inv_freq = theta ** (-torch.arange(0, d_k, 2, device=device, dtype=torch.float64) / d_k)
        angles = torch.outer(torch.arange(max_seq_len, device=device, dtype=torch.float64), inv_freq)
        # Non-persistent: derived from hyperparameters, so kept out of state_dict.
        self.register_buffer("cos", torch.cos(angles).float(), persistent=False)
        self.register_buffer("sin", torch.sin(angles).float(), persistent=False)

    def forward(self, x: Tensor, token_positions: Tensor) -> Tensor:
        cos = self.cos[token_positions].to(x.dtype)  # (..., seq, d_k/2)
        sin = self.sin[token_positions].to(x.dtype)
        x_even, x_odd = x[..., 0::2], x[..., 1::2]
        rotated = torch.stack((x_even * cos - x_odd * sin, x_even * sin + x_odd * cos), dim=-1)
        return rotated.flatten(-2)


def scaled_dot_product_attention(Q: Tensor, K: Tensor, V: Tensor, mask: Tensor | None = None) -> Tensor:
    """softmax(Q K^T / sqrt(d_k)) V; boolean mask with True = may attend."""
    d_k = Q.shape[-1]
    scores = torch.matmul(Q, K.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(softmax(scores, dim=-1), V)


def causal_attention(q: Tensor, k: Tensor, v: Tensor, is_causal: bool = True) -> Tensor:
    """Default (naive) attention back end: explicit lower-triangular mask."""
    mask = None
    if is_causal:
        n, m = q.shape[-2], k.shape[-2]
        mask = torch.ones(n, m, dtype=torch.bool, device=q.device).tril()
    return scaled_dot_product_attention(q, k, v, mask)


class MultiHeadSelfAttention(nn.Module):
    def __init__(
        self,
        d_model: int,
        num_heads: int,
        max_seq_len: int | None = None,
        theta: float | None = None,
        *,
        attention_fn: AttentionFn | None = None,
        device=None,
        dtype=None,
    ):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_k = d_model // num_heads
        self.q_proj = Linear(d_model, d_model, device=device, dtype=dtype)
        self.k_proj = Linear(d_model, d_model, device=device, dtype=dtype)
        self.v_proj = Linear(d_model, d_model, device=device, dtype=dtype)
        self.output_proj = Linear(d_model, d_model, device=device, dtype=dtype)
        self.rope = None
        if theta is not None:
            if max_seq_len is None:
                raise ValueError("MultiHeadSelfAttention: max_seq_len is required when theta (RoPE) is given")
            self.rope = RotaryPositionalEmbedding(theta, self.d_k, max_seq_len, device=device)
        self.attention_fn = attention_fn if attention_fn is not None else causal_attention

    def _split_heads(self, x: Tensor) -> Tensor:
        # (..., seq, d_model) -> (..., heads, seq, d_k)
        return x.unflatten(-1, (self.num_heads, self.d_k)).transpose(-3, -2)

    def forward(self, x: Tensor, token_positions: Tensor | None = None) -> Tensor:
        q = self._split_heads(self.q_proj(x))
        k = self._split_heads(self.k_proj(x))
        v = self._split_heads(self.v_proj(x))
        if self.rope is not None:
            if token_positions is None:
                token_positions = torch.arange(x.shape[-2], device=x.device)
            # Insert the head axis so (..., seq) positions broadcast over heads.
            positions = token_positions.unsqueeze(-2)
            q = self.rope(q, positions)
            k = self.rope(k, positions)
        out = self.attention_fn(q, k, v, is_causal=True)
        return self.output_proj(out.transpose(-3, -2).flatten(-2))


def set_attention(model: nn.Module, fn: AttentionFn) -> None:
    """Use ``fn`` as the attention back end of every MultiHeadSelfAttention in ``model``."""
    for module in model.modules():
        if isinstance(module, MultiHeadSelfAttention):
            module.attention_fn = fn


class TransformerBlock(nn.Module):
    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        max_seq_len: int,
        theta: float | None,
        *,
        attention_fn: AttentionFn | None = None,
        device=None,
        dtype=None,
    ):
        super().__init__()
        self.attn = MultiHeadSelfAttention(
            d_model, num_heads, max_seq_len, theta, attention_fn=attention_fn, device=device, dtype=dtype
        )
        self.ln1 = RMSNorm(d_model, device=device, dtype=dtype)
        self.ffn = SwiGLU(d_model, d_ff, device=device, dtype=dtype)
        self.ln2 = RMSNorm(d_model, device=device, dtype=dtype)

    def forward(self, x: Tensor, token_positions: Tensor | None = None) -> Tensor:
        h = x + self.attn(self.ln1(x), token_positions)
        return h + self.ffn(self.ln2(h))


class TransformerLM(nn.Module):
    def __init__(
        self,
        vocab_size: int,
        context_length: int,
        d_model: int,
        num_layers: int,
        num_heads: int,
        d_ff: int,
        rope_theta: float,
        *,
        attention_fn: AttentionFn | None = None,
        device=None,
        dtype=None,
    ):
        super().__init__()
        self.config = dict(
            vocab_size=vocab_size,
            context_length=context_length,
            d_model=d_model,
            num_layers=num_layers,
            num_heads=num_heads,
            d_ff=d_ff,
            rope_theta=rope_theta,
        )
        self.vocab_size = vocab_size
        self.context_length = context_length
        self.token_embeddings = Embedding(vocab_size, d_model, device=device, dtype=dtype)
        self.layers = nn.ModuleList(
            TransformerBlock(
                d_model, num_heads, d_ff, context_length, rope_theta,
                attention_fn=attention_fn, device=device, dtype=dtype,
            )
            for _ in range(num_layers)
        )
        self.ln_final = RMSNorm(d_model, device=device, dtype=dtype)
        self.lm_head = Linear(d_model, vocab_size, device=device, dtype=dtype)

    def forward(self, in_indices: Tensor) -> Tensor:
        seq_len = in_indices.shape[-1]
        if seq_len > self.context_length:
            raise ValueError(f"sequence length {seq_len} exceeds context_length {self.context_length}")
        positions = torch.arange(seq_len, device=in_indices.device)
        x = self.token_embeddings(in_indices)
        for layer in self.layers:
            x = layer(x, positions)
        return self.lm_head(self.ln_final(x))
