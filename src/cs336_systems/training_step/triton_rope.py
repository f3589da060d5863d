"""RoPE as one Triton kernel a direction: E1's ``triton-rope`` rung.

The model's rotary embedding (``cs336_basics.model.RotaryPositionalEmbedding``) rotates the adjacent
pairs ``(x0, x1), (x2, x3), ...`` of each head's query or key by ``position * theta^(-2k/d)``:

    y_even = x_even * cos - x_odd * sin            y_odd = x_even * sin + x_odd * cos

and its backward rotates the gradient back by the same angle (the transpose of a rotation is its
inverse). Eager, the model gathers its cos and sin tables at the positions, casts them to the input's
dtype, and builds the result from strided halves and a stack (several passes, bf16 arithmetic); the
kernel reads each element once and writes it once, in fp32 arithmetic with the fp32 tables, and
reads the model's (batch, heads, seq, d) view of its projections in place, whatever its strides.
Liger-Kernel's RoPE rotates the two halves of a head instead, another function (``training_step.liger``).

A custom op with its own autograd; positions must be one per sequence element (the model's
``arange``, unsqueezed over heads); anything else runs the model's own rotation.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from cs336_systems.training_step.triton_rounding import rounded

_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
BLOCK_N = 256 if _INTERPRET else 32         # sequence positions a program rotates


@triton.jit
def _rotate_kernel(x_ptr, y_ptr, pos_ptr, cos_ptr, sin_ptr, heads, n, half,
                   sx_b, sx_h, sx_n, sx_d, sy_b, sy_h, sy_n, sy_d,
                   SIGN: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_HALF: tl.constexpr):
    entry = tl.program_id(0)
    batch, head = (entry // heads).to(tl.int64), (entry % heads).to(tl.int64)
    rows = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    pairs = tl.arange(0, BLOCK_HALF)
    inside = (rows < n)[:, None] & (pairs < half)[None, :]
    position = tl.load(pos_ptr + rows, mask=rows < n, other=0).to(tl.int64)
    table = position[:, None] * half + pairs[None, :]
    cos = tl.load(cos_ptr + table, mask=inside, other=1.0)
    sin = tl.load(sin_ptr + table, mask=inside, other=0.0) * SIGN
    x = x_ptr + batch * sx_b + head * sx_h + rows.to(tl.int64)[:, None] * sx_n + (2 * pairs)[None, :] * sx_d
    even = tl.load(x, mask=inside, other=0.0).to(tl.float32)
    odd = tl.load(x + sx_d, mask=inside, other=0.0).to(tl.float32)
    y = y_ptr + batch * sy_b + head * sy_h + rows.to(tl.int64)[:, None] * sy_n + (2 * pairs)[None, :] * sy_d
    tl.store(y, rounded(even * cos - odd * sin, y_ptr.dtype.element_ty), mask=inside)
    tl.store(y + sy_d, rounded(even * sin + odd * cos, y_ptr.dtype.element_ty), mask=inside)


def _rotate(x: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, sign: float) -> torch.Tensor:
    if x.dim() not in (3, 4):
        raise ValueError(f"RoPE rotates (heads, seq, d) or (batch, heads, seq, d); got shape {tuple(x.shape)}")
    y = torch.empty_like(x)                 # x's strides where x is dense: the model's layout kept
    view_x, view_y = (x, y) if x.dim() == 4 else (x.unsqueeze(0), y.unsqueeze(0))
    batch, heads, n, d = view_x.shape
    half = d // 2
    grid = (batch * heads, triton.cdiv(n, BLOCK_N))
    _rotate_kernel[grid](view_x, view_y, positions, cos, sin, heads, n, half, *view_x.stride(), *view_y.stride(),
                         SIGN=sign, BLOCK_N=BLOCK_N, BLOCK_HALF=triton.next_power_of_2(half))
    return y


@torch.library.custom_op("cs336::rope_forward", mutates_args=())
def rope_forward(x: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return _rotate(x, positions, cos, sin, 1.0)


@rope_forward.register_fake
def _forward_fake(x, positions, cos, sin):
    return torch.empty_like(x)


@torch.library.custom_op("cs336::rope_backward", mutates_args=())
def rope_backward(grad_y: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return _rotate(grad_y, positions, cos, sin, -1.0)


@rope_backward.register_fake
def _backward_fake(grad_y, positions, cos, sin):
    return torch.empty_like(grad_y)


def _setup_context(ctx, inputs, output):
    _, positions, cos, sin = inputs
    ctx.save_for_backward(positions, cos, sin)


def _backward(ctx, grad_y):
    positions, cos, sin = ctx.saved_tensors
    return rope_backward(grad_y, positions, cos, sin), None, None, None


rope_forward.register_autograd(_backward, setup_context=_setup_context)


def rope(x: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x`` (..., heads, seq, d) rotated at ``positions`` (seq,) by the fp32 tables ``cos``, ``sin``
    (max_seq, d / 2), as the model rotates it (module doc)."""
    return rope_forward(x, positions, cos, sin)


class TritonRoPE(torch.nn.Module):
    """The model's rotary embedding (its cos and sin tables, shared) through ``rope``."""

    def __init__(self, rotary: torch.nn.Module):
        super().__init__()
        self.rotary = rotary

    def forward(self, x: torch.Tensor, token_positions: torch.Tensor) -> torch.Tensor:
        if x.dim() not in (3, 4) or token_positions.numel() != x.shape[-2]:
            return self.rotary(x, token_positions)      # positions per batch entry: the model's own
        return rope(x, token_positions.reshape(-1), self.rotary.cos, self.rotary.sin)
