"""One E1 rung as a runnable step: the shared workload (``cs336_systems.workload``) built with the
rung's precision, attention, compiling, optimizer and checkpointing, from a seeded init and batch.

The same ``seed`` gives every rung the same weights and the same batch on a device (the model is
built, then the batch drawn, from one generator state; nothing a rung adds draws random numbers),
so each rung's first loss can be set against fp32 eager's.
"""
from __future__ import annotations

import contextlib
import importlib
from functools import partial
from typing import ContextManager

import torch

from cs336_systems.models import ModelSize
from cs336_systems.training_step.rungs import CHECKPOINTING, Setup
from cs336_systems.workload import LEARNING_RATE, Workload, build_workload


def fused_adamw(parameters) -> torch.optim.Optimizer:
    """PyTorch's AdamW with cs336_basics' hyperparameters (betas, eps, weight decay), one fused
    kernel per parameter group."""
    return torch.optim.AdamW(parameters, lr=LEARNING_RATE, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
                             fused=True)


def checkpointing(group: int):
    """A6's ``checkpoint_blocks`` with ``group`` blocks a group, loaded by name (rungs.CHECKPOINTING)."""
    module, _, function = CHECKPOINTING.partition(":")
    return partial(getattr(importlib.import_module(module), function), group_size=group)


def kernel_context(setup: Setup) -> ContextManager:
    """Where the step must run: inside ``sdpa_kernel`` for a pinned SDPA kernel (compiling happens at
    the first step, so the traced graph sees the pin too), else anywhere."""
    if setup.sdpa_kernel is None:
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel({"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[setup.sdpa_kernel])


def build_step(setup: Setup, size: ModelSize, *, context: int, batch: int, device: torch.device, seed: int,
               compile_mode: str = "model", backend: str = "inductor", checkpoint_group: int = 1,
               vocab_size: int | None = None) -> Workload:
    """The train-step workload of ``setup`` (model, seeded batch, optimizer), ready to step."""
    torch.manual_seed(seed)
    extra = {} if vocab_size is None else {"vocab_size": vocab_size}
    return build_workload(
        size, context=context, batch=batch, mode="train-step", precision=setup.precision,
        compile=compile_mode if setup.compiled else "none", backend=backend, attention=setup.attention,
        device=device, wrap_model=checkpointing(checkpoint_group) if setup.checkpointed else None,
        make_optimizer=fused_adamw if setup.fused_adamw else None, **extra)
