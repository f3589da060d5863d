"""What a rung computes, against the reference rung's (fp32 eager) from the same seeded state.

A first loss alone cannot tell a wrong backward or a wrong optimizer from a right one: it is computed
before any gradient exists. So each rung's job also keeps

- its **gradients of the first step** (the seeded weights, the one batch), compared per parameter
  group with the reference rung's: ``||g - g_ref|| / ||g_ref||`` over the group's tensors, a group
  being one kind of parameter across every block (``layers.attn.q_proj.weight``, ``lm_head.weight``);
- its **losses over its first steps** (``SharedPoint.restore`` resets the weights and the AdamW moments
  before them), each computed after one more optimizer update than the one before.

The reference's gradients wait on the host (the 2.7B model's are 13.6 GB in fp32, too much to keep
beside a rung on an 80 GB card), in page-locked memory (``host_copy``); each group's error is summed
on the device, one tensor at a time.
"""
from __future__ import annotations

import re
from typing import Sequence

import torch

_BLOCK_INDEX = re.compile(r"\.\d+\.")


def group_of(name: str) -> str:
    """The parameter group of ``name``: its name without the block index (``layers.3.ffn.w1.weight``
    -> ``layers.ffn.w1.weight``)."""
    return _BLOCK_INDEX.sub(".", name)


def host_copy(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` in host memory, page-locked where ``t`` is on a GPU: a job copies the model's
    weights and the reference's gradients back to the device once per rung, and from pageable memory
    the copy engine cannot read directly (the driver stages every page through a buffer of its own),
    which makes each copy several times slower."""
    if t.device.type != "cuda":
        return t.detach().to("cpu", copy=True)
    return torch.empty(t.shape, dtype=t.dtype, pin_memory=True).copy_(t.detach())


class GradientReference:
    """The reference rung's gradients, taken while they are in place (between backward and the
    optimizer's update), against which another rung's are measured the same way."""

    def __init__(self, names: Sequence[str], parameters: Sequence[torch.Tensor]):
        if len(names) != len(parameters):
            raise ValueError(f"{len(names)} names for {len(parameters)} parameters")
        missing = [n for n, p in zip(names, parameters) if p.grad is None]
        if missing:
            raise ValueError(f"no gradient to keep for {', '.join(missing[:3])}")
        self.groups = [group_of(n) for n in names]
        self.gradients = [host_copy(p.grad) for p in parameters]

    def relative_errors(self, parameters: Sequence[torch.Tensor]) -> dict[str, float]:
        """Per parameter group, the norm of the difference between ``parameters``' gradients and the
        reference's over the norm of the reference's (float64 sums, kept on the device until the end:
        one synchronisation, not two a tensor). A missing gradient counts as zero."""
        sums: dict[str, torch.Tensor] = {}         # group -> (squared difference, squared reference)
        for group, saved, p in zip(self.groups, self.gradients, parameters):
            reference = saved.to(p.device, non_blocking=True)   # ordered on the stream before its use
            grad = torch.zeros_like(reference) if p.grad is None else p.grad.detach().to(reference.dtype)
            squares = torch.stack([torch.linalg.vector_norm(t, dtype=torch.float64) ** 2 for t in (grad - reference, reference)])
            sums[group] = sums[group] + squares if group in sums else squares
        out = {}
        for group, (diff, ref) in zip(sums, torch.stack(list(sums.values())).tolist()):
            out[group] = (diff / ref) ** 0.5 if ref > 0 else (0.0 if diff == 0 else float("inf"))
        return out
