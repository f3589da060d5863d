"""E1's ``cuda-graphs`` rung: a step's three phases captured as CUDA graphs once, then replayed.

Where the GPU finishes a kernel faster than the host issues the next (xl's 48 blocks of 1600 wide:
issuing the compiled forward takes ~0.75 of its time on an H200, and a slow host stretches it,
``lab/paired``), a replayed graph issues every kernel of a phase in one call. The step computes what
it computed before: the same kernels on the same addresses.

Three graphs, not one, so each phase stays timed on its own and the first step's gradients can be
read between backward and update; they share one memory pool and one capturing stream, and replay
in the order they were captured (what a shared pool asks). What a capture needs of the step:

- nothing read back to the host and no host-side state that changes per step: our Triton AdamW keeps
  its step counts on the device (``triton_adamw``); cs336_basics' AdamW would not do;
- everything compiled and initialised before: the rung's first step runs without a graph
  (``step.SharedPoint``), which compiles the model and our kernels and takes the gradient check;
- gradients that stay where the backward graph wrote them: they are allocated inside the capture
  (none before it) and never cleared while the graphs stand, so each replay overwrites them.

Memory: cuBLAS keeps a workspace per stream, made at the first product on it and kept for good, so
each capture (on a stream of its own: CUDA cannot capture on the default one) would leave one behind
(~64 MiB on an H200); ``let_go`` frees them once the graphs are dropped, so the next rung holds what
it would hold alone. A replay allocates nothing, so the caching allocator's peak over a replayed step is only what
lives between steps; the activations sit in the pool's blocks, free to the allocator yet the graph's.
``capture_peak_bytes``, the most allocated while capturing (a capture allocates what one step does,
in the same order), is what the step holds; the E1 record takes the larger of the two.
"""
from __future__ import annotations

import torch

from cs336_systems.workload import Phase, Workload, no_phase

PHASES = ("forward", "backward", "optimizer")
HIGHEST_PRIORITY = -100      # lower is higher; CUDA clamps a priority past its range to the range's end


def let_go() -> None:
    """What the graphs of a dropped step leave cached outside them: cuBLAS's workspaces (one per
    stream it ran on, the capture stream's inside the graphs' pool). The default stream's is made
    again at its next product."""
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)     # CUDA builds only
    if clear is not None:
        clear()


class GraphedStep:
    """``workload``'s step captured on its device (forward, backward, optimizer: a graph each).
    Capturing resets the device's peak-memory counter (to read the capture's own peak), so a
    warm-up peak taken across a capture starts from it."""

    def __init__(self, workload: Workload):
        if workload.optimizer is None or workload.mode != "train-step":
            raise ValueError("a graphed step captures a whole train step: forward, backward and optimizer")
        device = workload.device
        self.graphs = {name: torch.cuda.CUDAGraph() for name in PHASES}
        # The step's own stream at the highest priority: where a phase forks work onto a stream of
        # lower priority (adamw_in_backward's updates), the step's kernels are scheduled first and
        # the forked ones fill what they leave idle; a step with no fork runs as on any stream.
        pool = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream(device, priority=HIGHEST_PRIORITY)
        torch.cuda.reset_peak_memory_stats(device)
        # torch.cuda.graph synchronises, collects garbage and empties the allocator's cache on entry,
        # so the pool can take the memory other rungs left cached
        with torch.cuda.graph(self.graphs["forward"], pool=pool, stream=stream):
            self.loss = workload.forward()
        with torch.cuda.graph(self.graphs["backward"], pool=pool, stream=stream):
            self.loss.backward()
            if workload.after_backward is not None:
                workload.after_backward()       # within the capture: a stream it forked joins here
        if getattr(workload.optimizer, "runs_nothing", False):
            del self.graphs["optimizer"]        # the updates ran in backward: nothing to capture
        else:
            with torch.cuda.graph(self.graphs["optimizer"], pool=pool, stream=stream):
                workload.optimizer.step()
        self.capture_peak_bytes = torch.cuda.max_memory_allocated(device)

    def step(self, phase: Phase = no_phase) -> torch.Tensor:
        """One step: each phase's graph replayed under ``phase``. Returns the loss (the graph's own
        tensor: read it before the next replay)."""
        for name in PHASES:
            with phase(name):
                if name in self.graphs:
                    self.graphs[name].replay()
        return self.loss.detach()
