"""AdamW as one Triton kernel per parameter: E1's ``triton-adamw`` rung.

The same update as ``torch.optim.AdamW`` (decoupled weight decay, bias-corrected moments, ``eps``
added after the square root), read and written once: per element the kernel loads the weight, its
gradient and both moments (16 bytes in fp32) and stores the weight and both moments (12 bytes).
Those 28 bytes are the whole cost of the step, so its floor is ``28 x parameters / bandwidth``
(15.7 ms for the 2.7B model on an H200's 4.8 TB/s); PyTorch's fused multi-tensor kernel took 27.8 ms
there (E1's committed profile), and a plain streaming kernel over each tensor comes closer.

The step count of each weight is a float32 scalar on the device (as in PyTorch's fused and capturable
AdamW), counted up by one ``_foreach_add_`` a step and read by the kernel, which computes the bias
corrections itself: no value depends on the host, so the whole update can be captured in a CUDA graph
and replayed (E1's ``cuda-graphs`` rung). The corrections are fp32 arithmetic, as PyTorch's fused
kernel computes them.

**bf16 copies** (the ``bf16-weights`` rung): where a weight has a bf16 copy that the model computes
with, the kernel reads that copy's bf16 gradient and writes the updated weight to it as well (rounded
to nearest, as ``tensor.to(torch.bfloat16)`` rounds). The copy's bits are those autocast would cast
the fp32 weight to, and its gradient the bf16 one autocast's backward would cast up: the step computes
what the fp32-weight rung computes, without a cast kernel per weight each forward and per gradient
each backward. The bytes per element stay 28 (a bf16 gradient read, a bf16 copy written).
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from cs336_systems.attention.flash_tiles import interpreting
from cs336_systems.training_step.triton_rounding import to_bf16_nearest_even

# Elements per program, and warps: 1024 with 4 warps (8 elements a thread) was the fastest of 14
# settings over the 2.7B model's parameters on an H200, 24.2 ms a step (3.9 TB/s) against 25.0 at
# 4096 with 8 (lab/e1-rungs/probe_adamw_tiles.py). Triton's interpreter (a CPU) runs the programs
# one after another, each with a fixed cost, so there a block is 64x larger.
BLOCK = 65536 if interpreting() else 1024
NUM_WARPS = 4


@triton.jit
def _adamw_kernel(weight_ptr, grad_ptr, exp_avg_ptr, exp_avg_sq_ptr, copy_ptr, step_ptr, n_elements,
                  lr, decay, beta1, beta2, log2_beta1, log2_beta2, eps,
                  BLOCK: tl.constexpr, WRITE_COPY: tl.constexpr):
    # this update's count (from 1): beta ** step as exp2(step * log2(beta))
    step = tl.load(step_ptr)
    step_size = lr / (1.0 - tl.exp2(step * log2_beta1))
    bias2_sqrt = tl.sqrt(1.0 - tl.exp2(step * log2_beta2))
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n_elements
    weight = tl.load(weight_ptr + offsets, mask=inside)
    grad = tl.load(grad_ptr + offsets, mask=inside).to(tl.float32)
    exp_avg = tl.load(exp_avg_ptr + offsets, mask=inside)
    exp_avg_sq = tl.load(exp_avg_sq_ptr + offsets, mask=inside)
    exp_avg = beta1 * exp_avg + (1.0 - beta1) * grad
    exp_avg_sq = beta2 * exp_avg_sq + (1.0 - beta2) * grad * grad
    denominator = tl.sqrt(exp_avg_sq) / bias2_sqrt + eps
    weight = weight * decay - step_size * exp_avg / denominator
    tl.store(weight_ptr + offsets, weight, mask=inside)
    tl.store(exp_avg_ptr + offsets, exp_avg, mask=inside)
    tl.store(exp_avg_sq_ptr + offsets, exp_avg_sq, mask=inside)
    if WRITE_COPY:
        tl.store(copy_ptr + offsets, to_bf16_nearest_even(weight), mask=inside)


def _log2(beta: float) -> float:
    return math.log2(beta) if beta > 0 else float("-inf")       # beta 0: beta ** step is 0


def adamw_update(weight: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor, *,
                 step: torch.Tensor, lr: float, betas: tuple[float, float], eps: float, weight_decay: float,
                 copy: torch.Tensor | None = None) -> None:
    """One AdamW update of ``weight`` and its moments in place; ``step`` (a float32 scalar on the
    weight's device) counts this update, from 1. ``copy``: a lower-precision copy of ``weight`` that
    receives the updated weight too."""
    beta1, beta2 = betas
    n = weight.numel()
    grid = (triton.cdiv(n, BLOCK),)
    _adamw_kernel[grid](weight, grad, exp_avg, exp_avg_sq, weight if copy is None else copy, step, n,
                        lr, 1.0 - lr * weight_decay, beta1, beta2, _log2(beta1), _log2(beta2), eps,
                        BLOCK=BLOCK, WRITE_COPY=copy is not None, num_warps=NUM_WARPS)


class TritonAdamW(torch.optim.Optimizer):
    """``torch.optim.AdamW``'s update through ``adamw_update``: contiguous fp32 weights, one launch each.

    State per parameter as PyTorch's fused AdamW keeps it (``step`` a float32 scalar on the device,
    ``exp_avg``, ``exp_avg_sq``), so E1's shared point can hand the same moments to every optimizer;
    nothing in a step reads a device value back or depends on the host's count (module doc).

    ``copies`` (``id(weight)`` -> its bf16 copy, kept by the caller while the model computes with the
    copies): such a weight's gradient is read from its copy, and the update written to both."""

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2):
        if lr < 0 or eps < 0 or weight_decay < 0 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"TritonAdamW: invalid hyperparameters lr={lr}, betas={betas}, eps={eps}, "
                             f"weight_decay={weight_decay}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.copies: dict[int, torch.Tensor] = {}

    def checked(self, p: torch.Tensor) -> tuple[torch.Tensor | None, dict, torch.Tensor | None]:
        """``p``'s gradient (from its bf16 copy where it has one; None where it has none), its state
        (made where new) and its copy, after checking they are what the kernel updates."""
        copy = self.copies.get(id(p))
        grad = p.grad if copy is None else copy.grad
        if grad is None:
            return None, {}, copy
        if p.dtype != torch.float32 or not p.is_contiguous() or not grad.is_contiguous() or (copy is not None and (
                copy.dtype != torch.bfloat16 or not copy.is_contiguous() or copy.shape != p.shape)):
            raise ValueError("TritonAdamW updates contiguous fp32 weights (and bf16 copies of their shape) "
                             f"with contiguous gradients; got a {p.dtype} weight of shape {tuple(p.shape)}")
        return grad, self.state_of(p), copy

    def state_of(self, p: torch.Tensor) -> dict:
        """``p``'s step count and moments, made (zero) where new."""
        state = self.state[p]
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
            state["exp_avg"] = torch.zeros_like(p)
            state["exp_avg_sq"] = torch.zeros_like(p)
        return state

    @staticmethod
    def update(p: torch.Tensor, grad: torch.Tensor, state: dict, copy: torch.Tensor | None, group: dict) -> None:
        """One weight's update (its step count already counted up for this step)."""
        adamw_update(p, grad, state["exp_avg"], state["exp_avg_sq"], step=state["step"], lr=group["lr"],
                     betas=group["betas"], eps=group["eps"], weight_decay=group["weight_decay"], copy=copy)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None if closure is None else closure()
        for group in self.param_groups:
            updates = [(p, *self.checked(p)) for p in group["params"]]
            updates = [u for u in updates if u[1] is not None]
            if updates:
                torch._foreach_add_([state["step"] for _, _, state, _ in updates], 1.0)
            for p, grad, state, copy in updates:
                self.update(p, grad, state, copy, group)
        return loss
