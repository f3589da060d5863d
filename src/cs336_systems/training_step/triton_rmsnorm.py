"""RMSNorm as one Triton kernel forward and one backward: E1's ``triton-rmsnorm`` rung.

The model's norm (``cs336_basics.model.RMSNorm``) computes, per row of ``d`` features, in fp32:
``y = x / sqrt(mean(x^2) + eps) * w``. Its input in E1's step is the residual stream (fp32: the
embedding is not one of the matrices the bf16 rungs hold in bf16), and what reads its output is a
matmul that autocast feeds in bf16; so the kernel writes its output in the dtype the matmul will read
(``out_dtype``), which is the cast autocast would make after the model's norm, not a second kernel.

Per row the forward reads ``x`` once and writes ``y`` and the row's reciprocal root (4 bytes), kept
for the backward. The backward, with ``x_hat = x * rstd``:

    dx = rstd * (w * dy - x_hat * mean(x_hat * w * dy))        dw = sum over rows of dy * x_hat

reads ``x`` and ``dy`` once and writes ``dx``; each program sums ``dw`` over its rows and writes one
partial row, which one ``sum`` over the programs finishes (a few hundred rows of ``d``, not the
activations). A (tokens x 2560) norm of the 2.7B model is ~65 MB forward and ~100 MB backward.

The op is a ``torch.library`` custom op with its own autograd, so ``torch.compile`` keeps it in its
graph as one opaque node (it cannot fuse the residual add before it, as it fuses the model's norm)
and a CUDA graph captures its launches.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from cs336_systems.attention.flash_tiles import interpreting
from cs336_systems.training_step.triton_rounding import matmul_dtype, rounded

# Rows a backward program sums dw over; Triton's interpreter (a CPU) pays a fixed cost per program,
# so there every program takes many rows.
BACKWARD_PROGRAMS = 4 if interpreting() else 264


@triton.jit
def _rms_norm_forward_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, d, eps, BLOCK_D: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_D)
    inside = cols < d
    x = tl.load(x_ptr + row * d + cols, mask=inside, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / d + eps)
    w = tl.load(w_ptr + cols, mask=inside, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * d + cols, rounded(x * rstd * w, y_ptr.dtype.element_ty), mask=inside)
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def _rms_norm_backward_kernel(x_ptr, w_ptr, dy_ptr, rstd_ptr, dx_ptr, dw_partial_ptr, rows, d, rows_per_program,
                              BLOCK_D: tl.constexpr):
    program = tl.program_id(0)
    cols = tl.arange(0, BLOCK_D)
    inside = cols < d
    w = tl.load(w_ptr + cols, mask=inside, other=0.0).to(tl.float32)
    dw = tl.zeros((BLOCK_D,), dtype=tl.float32)
    first = program * rows_per_program
    for i in range(rows_per_program):
        row = (first + i).to(tl.int64)
        if row < rows:
            x = tl.load(x_ptr + row * d + cols, mask=inside, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + row * d + cols, mask=inside, other=0.0).to(tl.float32)
            rstd = tl.load(rstd_ptr + row)
            x_hat = x * rstd
            wdy = w * dy
            dx = rstd * (wdy - x_hat * (tl.sum(x_hat * wdy, axis=0) / d))
            tl.store(dx_ptr + row * d + cols, rounded(dx, dx_ptr.dtype.element_ty), mask=inside)
            dw += dy * x_hat
    tl.store(dw_partial_ptr + program * d + cols, dw, mask=inside)


def _rows(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, x.shape[-1]).contiguous()


@torch.library.custom_op("cs336::rms_norm_forward", mutates_args=())
def rms_norm_forward(x: torch.Tensor, weight: torch.Tensor, eps: float,
                     out_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    rows = _rows(x)
    y = torch.empty(rows.shape, dtype=out_dtype, device=x.device)
    rstd = torch.empty(rows.shape[0], dtype=torch.float32, device=x.device)
    d = rows.shape[1]
    _rms_norm_forward_kernel[(rows.shape[0],)](rows, weight, y, rstd, d, eps, BLOCK_D=triton.next_power_of_2(d))
    return y.view(x.shape), rstd


@rms_norm_forward.register_fake
def _forward_fake(x, weight, eps, out_dtype):
    return x.new_empty(x.shape, dtype=out_dtype), x.new_empty(x.numel() // x.shape[-1], dtype=torch.float32)


@torch.library.custom_op("cs336::rms_norm_backward", mutates_args=())
def rms_norm_backward(x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor,
                      grad_y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    rows, dy = _rows(x), _rows(grad_y)
    n, d = rows.shape
    programs = max(1, min(BACKWARD_PROGRAMS, n))
    dx = torch.empty_like(rows)
    partial = torch.empty((programs, d), dtype=torch.float32, device=x.device)
    _rms_norm_backward_kernel[(programs,)](rows, weight, dy, rstd, dx, partial, n, d, triton.cdiv(n, programs),
                                           BLOCK_D=triton.next_power_of_2(d))
    return dx.view(x.shape), partial.sum(0).to(weight.dtype)


@rms_norm_backward.register_fake
def _backward_fake(x, weight, rstd, grad_y):
    return torch.empty_like(x), torch.empty_like(weight)


def _setup_context(ctx, inputs, output):
    x, weight, _, _ = inputs
    ctx.save_for_backward(x, weight, output[1])


def _backward(ctx, grad_y, _grad_rstd):
    x, weight, rstd = ctx.saved_tensors
    dx, dw = rms_norm_backward(x, weight, rstd, grad_y)
    return dx, dw, None, None


rms_norm_forward.register_autograd(_backward, setup_context=_setup_context)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """The model's RMSNorm of ``x`` over its last dimension, in ``out_dtype`` (default ``x``'s)."""
    return rms_norm_forward(x, weight, eps, x.dtype if out_dtype is None else out_dtype)[0]


class TritonRMSNorm(torch.nn.Module):
    """The model's RMSNorm (its weight and eps, shared) through ``rms_norm``, writing what the next
    matmul reads."""

    def __init__(self, norm: torch.nn.Module):
        super().__init__()
        self.weight, self.eps = norm.weight, norm.eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps, matmul_dtype(x))
