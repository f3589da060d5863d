"""FlashAttention-2 in Triton (B3, B4): the autograd functions.

``FlashAttentionTriton.apply(q, k, v, is_causal)`` runs the Triton forward and the Triton backward;
``FlashAttentionTritonPytorchBackward`` the same forward with the compiled PyTorch backward of
``attention.backward``. Read in this order:

- ``flash_forward``: the forward kernels (one program per query tile; the split-key forward and
  its combine for short grids), and the helpers the backward shares;
- ``flash_backward``: D = rowsum(dO ∘ O), the dK/dV and dQ kernels, and their split versions;
- ``flash_tiles``: tiles, product precision and how many slices a short grid is split into;
- ``flash_plan``: the kernels' arguments, the plain launches, and the per-layout plans that eager
  calls go through.

It also re-exports the kernels' host-side names (``KernelTiles``, ``choose_tiles``,
``flash_forward_triton``, ``launch_dq``, ``describe_launch``, ...), so that callers such as the
tuner and the benchmarks need this one import.
"""
from __future__ import annotations

import torch

from cs336_systems.attention.backward import compiled_flash_backward
from cs336_systems.attention.flash_forward import LOG2_E, MASKED
from cs336_systems.attention.flash_plan import (_check_device, _plan, backward_delta, backward_kernels,
                                                describe_launch, flash_backward_triton, flash_forward_triton,
                                                launch_dkdv, launch_dkdv_split, launch_dq, launch_dq_split)
from cs336_systems.attention.flash_tiles import (MIN_FIT_BLOCK, MIN_SLICE_TILES, KernelTiles, Tiles,
                                                 backward_splits, choose_tiles, default_tiles, fit_to_grid,
                                                 forward_splits, interpreting)
from cs336_systems.attention.inputs import causal_flag, check_inputs

__all__ = ["FlashAttentionTriton", "FlashAttentionTritonPytorchBackward", "KernelTiles", "LOG2_E", "MASKED",
           "MIN_FIT_BLOCK", "MIN_SLICE_TILES", "Tiles", "backward_delta", "backward_kernels", "backward_splits",
           "choose_tiles", "default_tiles", "describe_launch", "fit_to_grid", "flash_backward_triton",
           "flash_forward_triton", "forward_splits", "interpreting", "launch_dkdv", "launch_dkdv_split",
           "launch_dq", "launch_dq_split"]


class FlashAttentionTriton(torch.autograd.Function):
    """``FlashAttentionTriton.apply(q, k, v, is_causal=False) -> o``: Triton forward and Triton backward."""

    @staticmethod
    def forward(ctx, q, k, v, is_causal=False):
        is_causal = causal_flag(is_causal)
        plan = _plan(q, k, v, is_causal)
        if plan is not None:
            out, lse = plan.new_out(), plan.new_lse()
            plan.forward(Q=q, K=k, V=v, O=out, L=lse)
        else:
            check_inputs(q, k, v, is_causal)
            _check_device(q)
            out, lse = flash_forward_triton(q, k, v, is_causal)
        ctx.save_for_backward(lse, q, k, v, out)
        ctx.is_causal, ctx.plan = is_causal, plan
        return out

    @staticmethod
    def backward(ctx, grad_out):
        lse, q, k, v, out = ctx.saved_tensors
        if ctx.plan is not None and not torch.compiler.is_compiling():
            if grad_out.stride(-1) != 1:
                grad_out = grad_out.contiguous()
            if grad_out.data_ptr() % 16 == 0:
                return (*ctx.plan.backward(q, k, v, out, grad_out, lse), None)
        return (*flash_backward_triton(q, k, v, out, grad_out, lse, ctx.is_causal), None)


class FlashAttentionTritonPytorchBackward(FlashAttentionTriton):
    """The Triton forward with the compiled PyTorch backward (the required B4 path)."""

    @staticmethod
    def backward(ctx, grad_out):
        lse, q, k, v, out = ctx.saved_tensors
        return (*compiled_flash_backward()(q, k, v, out, grad_out, lse, ctx.is_causal), None)
