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

import torch
import triton
import triton.language as tl

from cs336_systems.attention.flash_tiles import interpreting
from cs336_systems.training_step.triton_rounding import rounded

BLOCK_N = 256 if interpreting() else 32         # sequence positions a program rotates (whole rows of d)


@triton.jit
def _rope_kernel(x_ptr, y_ptr, pos_ptr, cos_ptr, sin_ptr, heads, n, d, half, sx_b, sx_h, sx_n, sy_b, sy_h, sy_n,
                 SIGN: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    # Whole rows are loaded and stored, their pairs split and joined in registers: loading the even
    # and the odd columns apart (stride 2) let the compiler lay threads along the rows, and every
    # access went to another row: 177.6 us a rotation at E1's shape on an H200 against 21.2 for this
    # one (lab/e1-rungs/probe_rope.py).
    entry = tl.program_id(0)
    batch, head = (entry // heads).to(tl.int64), (entry % heads).to(tl.int64)
    rows = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    inside = (rows < n)[:, None] & (cols < d)[None, :]
    offsets = rows.to(tl.int64)[:, None]
    x = tl.load(x_ptr + batch * sx_b + head * sx_h + offsets * sx_n + cols[None, :], mask=inside, other=0.0)
    even, odd = tl.split(tl.reshape(x.to(tl.float32), (BLOCK_N, BLOCK_D // 2, 2)))
    pairs = tl.arange(0, BLOCK_D // 2)
    position = tl.load(pos_ptr + rows, mask=rows < n, other=0).to(tl.int64)
    table = position[:, None] * half + pairs[None, :]
    in_table = (rows < n)[:, None] & (pairs < half)[None, :]
    cos = tl.load(cos_ptr + table, mask=in_table, other=1.0)
    sin = tl.load(sin_ptr + table, mask=in_table, other=0.0) * SIGN
    y = tl.reshape(tl.join(even * cos - odd * sin, even * sin + odd * cos), (BLOCK_N, BLOCK_D))
    tl.store(y_ptr + batch * sy_b + head * sy_h + offsets * sy_n + cols[None, :], rounded(y, y_ptr.dtype.element_ty),
             mask=inside)


def _new_like(x: torch.Tensor) -> torch.Tensor:
    """The rotation's output: laid out as ``x`` where its rows are unit-stride (the model's view of
    its projection kept), else contiguous (``x`` is copied so first)."""
    return torch.empty_like(x) if x.stride(-1) == 1 else torch.empty(x.shape, dtype=x.dtype, device=x.device)


def _rotate(x: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, sign: float) -> torch.Tensor:
    if x.dim() not in (3, 4):
        raise ValueError(f"RoPE rotates (heads, seq, d) or (batch, heads, seq, d); got shape {tuple(x.shape)}")
    if x.stride(-1) != 1:
        x = x.contiguous()
    y = _new_like(x)
    view_x, view_y = (x, y) if x.dim() == 4 else (x.unsqueeze(0), y.unsqueeze(0))
    batch, heads, n, d = view_x.shape
    grid = (batch * heads, triton.cdiv(n, BLOCK_N))
    _rope_kernel[grid](view_x, view_y, positions, cos, sin, heads, n, d, d // 2, *view_x.stride()[:3],
                         *view_y.stride()[:3], SIGN=sign, BLOCK_N=BLOCK_N, BLOCK_D=triton.next_power_of_2(d))
    return y


@torch.library.custom_op("cs336::rope_forward", mutates_args=())
def rope_forward(x: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return _rotate(x, positions, cos, sin, 1.0)


@rope_forward.register_fake
def _forward_fake(x, positions, cos, sin):
    return _new_like(x)


@torch.library.custom_op("cs336::rope_backward", mutates_args=())
def rope_backward(grad_y: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return _rotate(grad_y, positions, cos, sin, -1.0)


@rope_backward.register_fake
def _backward_fake(grad_y, positions, cos, sin):
    return _new_like(grad_y)


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
