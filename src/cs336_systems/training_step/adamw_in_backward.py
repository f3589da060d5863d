"""E1's ``adamw-in-backward`` rung: each weight's AdamW update launched as soon as backward has its gradient.

Our AdamW moves 28 bytes a parameter (``triton_adamw``): at the 2.7B model's point ~95 GB, ~24 ms a
step on an H200, after the ~100 ms backward, whose matrix products leave the memory bus partly idle.
Each weight is read once in the forward and nowhere else (no tied weights), so once backward has
accumulated its gradient nothing later in backward reads the weight: its update may run then, on a
second stream, beside the rest of backward.

- A hook on the tensor that receives the gradient (the weight, or its bf16 copy where the rung holds
  one: ``step.SharedPoint``) fires when backward has accumulated it
  (``register_post_accumulate_grad_hook``); it makes the side stream wait for the work issued so far
  on backward's stream and launches the weight's update there. The first hook of a backward counts
  every weight's step up first, as ``TritonAdamW.step`` does at its start (every weight of the model
  gets a gradient in each step).
- ``join`` (the workload's ``after_backward``) makes backward's stream wait for the side stream, so
  the backward phase ends when every update has; the optimizer phase has nothing left to do.
- Captured in a CUDA graph (``cuda_graphs``), the hooks run once, at capture: the side stream's
  work becomes branches of the backward graph, which the replay runs beside backward's kernels.

On a CPU (the tests) there are no streams: each update runs in its hook, in order. The same kernels
compute the same values either way; only when they run changes.
"""
from __future__ import annotations

from typing import Sequence

import torch

from cs336_systems.training_step.triton_adamw import TritonAdamW


class UpdateInBackward:
    """``optimizer``'s updates of ``weights`` launched from backward (module doc). ``holders[i]`` is
    the tensor whose ``.grad`` is ``weights[i]``'s gradient (its bf16 copy, or itself).
    ``release()`` removes the hooks, so other steps over the same weights update nothing."""

    def __init__(self, optimizer: TritonAdamW, weights: Sequence[torch.Tensor], holders: Sequence[torch.Tensor]):
        if len(weights) != len(holders):
            raise ValueError(f"{len(weights)} weights for {len(holders)} gradient holders")
        if len(optimizer.param_groups) != 1:
            raise ValueError("the update in backward takes an optimizer of one parameter group")
        self.optimizer, self.weights, self.holders = optimizer, list(weights), list(holders)
        self.group = optimizer.param_groups[0]
        on_cuda = self.weights and self.weights[0].device.type == "cuda"
        self.side = torch.cuda.Stream(self.weights[0].device) if on_cuda else None
        self.counted = False
        self.handles = [h.register_post_accumulate_grad_hook(self._hook(w)) for w, h in zip(self.weights, self.holders)]

    def _hook(self, weight: torch.Tensor):
        def launch(_holder: torch.Tensor) -> None:
            with torch.no_grad():
                if self.side is None:
                    self._update(weight)
                    return
                self.side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(self.side):
                    self._update(weight)
        return launch

    def _update(self, weight: torch.Tensor) -> None:
        if not self.counted:
            torch._foreach_add_([self.optimizer.state_of(w)["step"] for w in self.weights], 1.0)
            self.counted = True
        grad, state, copy = self.optimizer.checked(weight)
        self.optimizer.update(weight, grad, state, copy, self.group)

    def join(self) -> None:
        """The end of backward: its stream waits for every update; the next backward counts anew."""
        if self.side is not None:
            torch.cuda.current_stream().wait_stream(self.side)
        self.counted = False

    def release(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []


class NothingLeft:
    """The optimizer phase of a step whose updates ran in backward: nothing to run (a graphed step
    captures no graph for it)."""
    runs_nothing = True

    def step(self, closure=None):
        return None if closure is None else closure()


NOTHING_LEFT = NothingLeft()
