"""Activation checkpointing of a TransformerLM in groups of consecutive blocks (A6).

``checkpoint_blocks(model, k)`` (or ``model.layers = group_layers(blocks, k)``) replaces
``model.layers`` with groups of ``k`` blocks, each run under ``torch.utils.checkpoint``: the forward pass keeps only each group's input, and backward
recomputes one group at a time. The model's own code is unchanged: ``TransformerLM.forward``
calls ``layer(x, positions)`` for each entry of ``model.layers``, and a group answers that call.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


class CheckpointedGroup(nn.Module):
    """Consecutive blocks whose activations are recomputed in backward instead of stored."""

    def __init__(self, blocks: list[nn.Module]):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)

    def _run(self, x: torch.Tensor, positions: torch.Tensor | None) -> torch.Tensor:
        for block in self.blocks:
            x = block(x, positions)
        return x

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        if not torch.is_grad_enabled():        # inference saves nothing for backward anyway
            return self._run(x, positions)
        # Non-reentrant: works with autocast, with inputs that need no grad, and under torch.compile.
        return checkpoint(self._run, x, positions, use_reentrant=False)


def group_layers(blocks: list[nn.Module], group_size: int) -> nn.ModuleList:
    """``blocks`` in checkpointed groups of ``group_size`` (the last group may be shorter), as a new
    list holding the same blocks; ``group_size=0`` lists them as they are. The blocks are not
    changed, so one model can switch between lists (A6's group sizes and E1's rungs take turns on
    one set of weights): assign the list to ``model.layers``."""
    if group_size < 0:
        raise ValueError(f"group_size must be 0 (no checkpointing) or positive, got {group_size}")
    blocks = list(blocks)
    if group_size == 0:
        return nn.ModuleList(blocks)
    return nn.ModuleList(CheckpointedGroup(blocks[i:i + group_size]) for i in range(0, len(blocks), group_size))


def checkpoint_blocks(model: nn.Module, group_size: int) -> nn.Module:
    """Regroup ``model.layers`` into checkpointed groups of ``group_size`` blocks (``group_layers``);
    ``group_size=0`` leaves the model as it is. Returns ``model``."""
    if group_size < 0:
        raise ValueError(f"group_size must be 0 (no checkpointing) or positive, got {group_size}")
    if group_size:
        model.layers = group_layers(model.layers, group_size)
    return model
