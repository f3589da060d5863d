"""SwiGLU's gate, ``silu(a) * b``, as one Triton kernel forward and one backward: E1's ``triton-swiglu`` rung.

In the model's feed-forward ``w2(silu(w1 x) * w3 x)`` the three projections are matmuls; between them
the gate is elementwise over ``tokens x d_ff`` (4096 x 10240 at the 2.7B model's point). With
``s = sigmoid(a)``:

    h = a * s * b            da = dh * b * s * (1 + a * (1 - s))            db = dh * a * s

computed in fp32 from the bf16 projections and rounded once to their dtype. The forward reads ``a``
and ``b`` and writes ``h`` (6 bytes an element in bf16), the backward reads ``a``, ``b``, ``dh`` and
writes ``da``, ``db`` (10 bytes): 250 MB forward and 420 MB backward a layer of the 2.7B model.
A custom op with its own autograd (``torch.compile`` keeps it as one node; a CUDA graph captures it).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from cs336_systems.attention.flash_tiles import interpreting
from cs336_systems.training_step.triton_rounding import rounded

BLOCK = 65536 if interpreting() else 1024        # the interpreter pays a fixed cost per program


@triton.jit
def _swiglu_forward_kernel(a_ptr, b_ptr, h_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    a = tl.load(a_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
    h = a * tl.sigmoid(a) * b
    tl.store(h_ptr + offsets, rounded(h, h_ptr.dtype.element_ty), mask=inside)


@triton.jit
def _swiglu_backward_kernel(a_ptr, b_ptr, dh_ptr, da_ptr, db_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    a = tl.load(a_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
    dh = tl.load(dh_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
    s = tl.sigmoid(a)
    da = dh * b * s * (1.0 + a * (1.0 - s))
    db = dh * a * s
    tl.store(da_ptr + offsets, rounded(da, da_ptr.dtype.element_ty), mask=inside)
    tl.store(db_ptr + offsets, rounded(db, db_ptr.dtype.element_ty), mask=inside)


def _check(a: torch.Tensor, b: torch.Tensor) -> None:
    if a.shape != b.shape or a.dtype != b.dtype:
        raise ValueError(f"the gate's two inputs differ: {tuple(a.shape)} {a.dtype} against {tuple(b.shape)} {b.dtype}")


@torch.library.custom_op("cs336::swiglu_gate_forward", mutates_args=())
def swiglu_gate_forward(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    _check(a, b)
    a, b = a.contiguous(), b.contiguous()
    h = torch.empty_like(a)
    n = a.numel()
    _swiglu_forward_kernel[(triton.cdiv(n, BLOCK),)](a, b, h, n, BLOCK=BLOCK)
    return h


@swiglu_gate_forward.register_fake
def _forward_fake(a, b):
    return torch.empty_like(a, memory_format=torch.contiguous_format)


@torch.library.custom_op("cs336::swiglu_gate_backward", mutates_args=())
def swiglu_gate_backward(a: torch.Tensor, b: torch.Tensor, grad_h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    a, b, grad_h = a.contiguous(), b.contiguous(), grad_h.contiguous()
    da, db = torch.empty_like(a), torch.empty_like(b)
    n = a.numel()
    _swiglu_backward_kernel[(triton.cdiv(n, BLOCK),)](a, b, grad_h, da, db, n, BLOCK=BLOCK)
    return da, db


@swiglu_gate_backward.register_fake
def _backward_fake(a, b, grad_h):
    return (torch.empty_like(a, memory_format=torch.contiguous_format),
            torch.empty_like(b, memory_format=torch.contiguous_format))


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, grad_h):
    a, b = ctx.saved_tensors
    return swiglu_gate_backward(a, b, grad_h)


swiglu_gate_forward.register_autograd(_backward, setup_context=_setup_context)


def swiglu_gate(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``silu(a) * b`` in one pass (module doc)."""
    return swiglu_gate_forward(a, b)


class TritonSwiGLU(torch.nn.Module):
    """The model's SwiGLU (its three projections, shared), its gate through ``swiglu_gate``."""

    def __init__(self, ffn: torch.nn.Module):
        super().__init__()
        self.w1, self.w2, self.w3 = ffn.w1, ffn.w2, ffn.w3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(swiglu_gate(self.w1(x), self.w3(x)))
