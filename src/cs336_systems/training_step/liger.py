"""E1's ``anchor-liger``: the course's model with Liger-Kernel's fused ops where they compute what it does.

What a practitioner adds to plain PyTorch to make this model's step faster without writing kernels:
Liger-Kernel (``pip install -e '.[liger]'``; pinned there). It has no patch for this model, so the
anchor swaps, in every block and at the end, modules that call Liger's autograd functions over the
model's own parameters:

- ``RMSNorm`` -> Liger's RMSNorm (``casting_mode="llama"``: the mean square and its reciprocal root in
  fp32, as the model's norm computes them), called outside the compiled graph: traced by
  ``torch.compile`` (PyTorch 2.11, Liger-Kernel 0.8.5; Dynamo fails to compile its kernel and falls
  back) its updates go wrong after the first (on one H200, a small model's loss after two updates
  8.76 where the eager step and every other rung give 8.21: ``lab/e1-rungs``), which E1's loss check
  would flag; the SwiGLU gate and the fused loss compile and compute what eager does;
- ``SwiGLU``'s gate, ``silu(w1 x) * w3 x`` -> Liger's SiLU-and-multiply (the three projections stay the
  model's matmuls);
- the LM head and the loss -> Liger's fused linear + cross-entropy, which computes the loss and its
  gradients chunk by chunk and never holds the whole ``tokens x vocabulary`` logits.

Liger's RoPE rotates the two halves of a head (``rotate_half``); the model rotates adjacent pairs
``(x0, x1), (x2, x3), ...``, so Liger's would compute another function and the model keeps its own.

Liger's kernels are Triton kernels that need a CUDA device: Triton's interpreter fails inside its
RMSNorm on a CPU, so on a CPU the anchor is skipped.
"""
from __future__ import annotations

import importlib.util

import torch
from torch import nn

PACKAGE = "liger_kernel"
INSTALL = "pip install -e '.[liger]'"


def missing() -> str | None:
    """Why Liger-Kernel cannot be used here, or None where it is installed."""
    if importlib.util.find_spec(PACKAGE) is None:
        return f"Liger-Kernel is not installed ({INSTALL})"
    return None


class LigerRMSNorm(nn.Module):
    """The model's RMSNorm (its weight and eps, shared) through Liger's kernel."""

    def __init__(self, norm: nn.Module):
        super().__init__()
        self.weight, self.eps = norm.weight, norm.eps

    @torch.compiler.disable
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from liger_kernel.transformers.functional import liger_rms_norm

        # not in place: autograd may still need the gradient Liger would overwrite
        return liger_rms_norm(x, self.weight, self.eps, casting_mode="llama", in_place=False)


class LigerSwiGLU(nn.Module):
    """The model's SwiGLU (its three projections, shared), its gate through Liger's SiLU-and-multiply."""

    def __init__(self, ffn: nn.Module):
        super().__init__()
        self.w1, self.w2, self.w3 = ffn.w1, ffn.w2, ffn.w3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from liger_kernel.transformers.functional import liger_swiglu

        return self.w2(liger_swiglu(self.w1(x), self.w3(x)))


def fused_linear_cross_entropy(head: nn.Module):
    """The step's loss from the hidden states: Liger's fused LM head + mean cross-entropy."""
    def loss(hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

        return liger_fused_linear_cross_entropy(hidden.reshape(-1, hidden.shape[-1]), head.weight, targets.reshape(-1))
    return loss


# What this anchor puts in the model's places (``training_step.swap``)
KIT = {"norm": LigerRMSNorm, "gate": LigerSwiGLU, "loss": fused_linear_cross_entropy}
