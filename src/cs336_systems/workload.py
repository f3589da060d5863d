"""One training workload: a model, its random batch, its optimizer, and one step in named phases.

The A1 benchmark, the A2 profiles, the A5 memory snapshots, the A6 checkpointing runs and the B2
compiled-vs-eager comparison all run this same step, so their numbers describe the same work:

    workload = build_workload(get_size("small"), context=256, batch=4, mode="train-step", device="cuda")
    workload.step(phase=timer.phase)        # forward, backward and optimizer, each inside phase(name)

``phase`` is any ``name -> context manager``: a timer, an NVTX range, both, or nothing. Modes:
``forward`` (inference, under ``torch.no_grad``), ``forward-backward`` (loss and gradients) and
``train-step`` (forward, backward and an AdamW step). ``precision="bf16"`` runs the forward pass
and the loss under ``torch.autocast(dtype=torch.bfloat16)``; parameters, gradients and optimizer
state stay fp32.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from functools import partial
from typing import Callable, ContextManager, Iterable

import torch
from torch import nn

from cs336_systems.models import MODES, VOCAB_SIZE, ModelSize, build_model, random_batch
from cs336_systems.records import log
from cs336_systems.timing import PhaseTimer, peak_memory_bytes, reset_peak_memory, summarize

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16}
PHASES = {"forward": ("forward",), "forward-backward": ("forward", "backward"),
          "train-step": ("forward", "backward", "optimizer")}

# The train step's learning rate, whichever AdamW takes it.
LEARNING_RATE = 1e-4

COMPILE_MODES = ("none", "model", "blocks")
# torch.compile back ends: Inductor (what B1/B2 measure), or AOTAutograd's graphs run eagerly, which
# traces the same graphs without generating and building code (the smoke preset on the CPU, where
# Inductor's C++ compile was most of the run; its numbers mean nothing there anyway).
COMPILE_BACKENDS = ("inductor", "aot_eager")

Phase = Callable[[str], ContextManager]


def no_phase(name: str) -> ContextManager:
    return contextlib.nullcontext()


def optimizers_without_compiler() -> None:
    """Let optimizers be built and used without importing the compiler, in a process that compiles nothing.

    ``torch.optim.Optimizer`` wraps ``add_param_group``, ``zero_grad``, ``state_dict`` and
    ``load_state_dict`` in ``torch._disable_dynamo``, which imports ``torch._dynamo`` (sympy, Triton)
    at their first call only to mark them as never to be traced. That import is about 1 s of
    start-up, and 0.4 s more at exit, in every eager process that builds an optimizer: A1, A2, A5, A6
    and each DDP rank, where the tiny smoke models step in milliseconds. When Dynamo is not loaded
    yet, each wrapper is told that the marked function is the function itself (the cache that
    ``torch._disable_dynamo`` fills at its first call), so nothing is imported and the eager calls
    are the same. Where Dynamo is already loaded (B2, a ``torch.compile``d A1) nothing changes. If a
    later PyTorch marks these methods another way, the attribute is ignored and the import happens.
    """
    import sys

    if "torch._dynamo" in sys.modules:
        return
    for attr in vars(torch.optim.Optimizer).values():
        original = getattr(attr, "__wrapped__", None)
        code = getattr(attr, "__code__", None)
        if callable(original) and code is not None and code.co_filename.endswith("_compile.py"):
            setattr(original, "__dynamo_disable", original)


def adamw(params, **kwargs):
    """``cs336_basics``' AdamW, built without importing the compiler (``optimizers_without_compiler``)."""
    from cs336_basics.optimizer import AdamW

    optimizers_without_compiler()
    return AdamW(params, **kwargs)


@dataclass
class Workload:
    model: torch.nn.Module          # the model itself (parameters, gradients)
    runnable: Callable              # what the step calls: the model, or its compiled form
    optimizer: torch.optim.Optimizer | None
    inputs: torch.Tensor
    targets: torch.Tensor
    mode: str
    precision: str
    device: torch.device
    # the loss of what ``runnable`` returns: cs336_basics' cross-entropy of the logits unless a step
    # fuses the LM head into its loss (E1's anchor-liger: the runnable returns the hidden states)
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    # called at the end of the backward phase, inside it (E1's adamw-in-backward: backward's stream
    # waits there for the updates its hooks launched on another stream)
    after_backward: Callable[[], None] | None = None

    def forward(self) -> torch.Tensor:
        """The forward phase: the loss of the batch, under ``precision``'s autocast."""
        from cs336_basics.nn_utils import cross_entropy

        dtype = PRECISIONS[self.precision]
        autocast = torch.autocast(self.device.type, dtype=dtype) if dtype else contextlib.nullcontext()
        grad_mode = torch.no_grad() if self.mode == "forward" else contextlib.nullcontext()
        with grad_mode, autocast:
            return (self.loss or cross_entropy)(self.runnable(self.inputs), self.targets)

    def step(self, phase: Phase = no_phase) -> torch.Tensor:
        """One step of ``mode``; gradients are cleared at the end so every step starts alike.
        Returns the step's loss (detached; computed before the optimizer's update)."""
        with phase("forward"):
            loss = self.forward()
        if self.mode == "forward":
            return loss
        with phase("backward"):
            loss.backward()
            if self.after_backward is not None:
                self.after_backward()
        if self.optimizer is not None:
            with phase("optimizer"):
                self.optimizer.step()
        self.model.zero_grad(set_to_none=True)
        return loss.detach()


def build_workload(size: ModelSize, *, context: int, batch: int, mode: str, precision: str = "fp32",
                   compile: bool | str = False, attention: str = "naive", device: str | torch.device = "cpu",
                   vocab_size: int = VOCAB_SIZE, wrap_model: Callable[[nn.Module], object] | None = None,
                   backend: str = "inductor",
                   make_optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer] | None = None) -> Workload:
    """A randomly initialised model on ``device`` with a random batch, ready to step.

    ``wrap_model(model)`` changes the built model in place before anything else sees it: A6 passes
    its activation checkpointing, so this module (which A1, A2, A5 and B2 run too) does not import
    A6's code, and editing A6 re-measures A6 alone.
    ``compile``: ``False``/``"none"`` runs eager; ``True``/``"model"`` wraps the whole model in
    ``torch.compile``; ``"blocks"`` compiles each Transformer block in place (regional
    compilation: the blocks share one compiled graph, so compiling costs one block's time
    instead of the whole unrolled model's, measured at 161 s for xl forward+backward on an H100).
    ``backend``: the ``torch.compile`` back end (``COMPILE_BACKENDS``).
    ``make_optimizer(parameters)``: the train step's optimizer; by default ``cs336_basics``' AdamW
    with learning rate ``LEARNING_RATE`` (E1 passes PyTorch's fused AdamW).
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; one of {', '.join(MODES)}")
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; one of {', '.join(PRECISIONS)}")
    device = torch.device(device)
    model = build_model(size, context, vocab_size=vocab_size, device=device, attention=attention)
    if wrap_model is not None:
        wrap_model(model)
    compile = {False: "none", True: "model"}.get(compile, compile)
    if compile not in COMPILE_MODES:
        raise ValueError(f"unknown compile mode {compile!r}; one of {', '.join(COMPILE_MODES)}")
    if backend not in COMPILE_BACKENDS:
        raise ValueError(f"unknown compile back end {backend!r}; one of {', '.join(COMPILE_BACKENDS)}")
    runnable = torch.compile(model, backend=backend) if compile == "model" else model
    if compile == "blocks":
        for block in model.layers:
            block.compile(backend=backend)
    optimizer = None
    if mode == "train-step":
        optimizer = (make_optimizer or partial(adamw, lr=LEARNING_RATE))(model.parameters())
    inputs, targets = random_batch(batch, context, vocab_size=vocab_size, device=device)
    return Workload(model, runnable, optimizer, inputs, targets, mode, precision, device)


def time_steps(workload: Workload, *, warmup: int, steps: int,
               before_timing: Callable[[], dict] | None = None) -> dict:
    """``warmup`` steps, then ``steps`` timed ones, each phase timed between two synchronisations.
    ``workload``: a ``Workload``, or anything with its ``step(phase)`` and ``device`` (E1's ``RungStep``).

    Returns per-phase summaries with their samples (ms), ``step`` (the phases' sum per step), the
    warm-up steps' times and the peak memory of the timed steps. ``before_timing`` runs between
    the two (to read the memory a step starts from, say); the metrics it returns join the rest.
    """
    warm = PhaseTimer(workload.device)
    for _ in range(warmup):
        workload.step(warm.phase)
    before = before_timing() if before_timing is not None else {}
    reset_peak_memory(workload.device)
    timed = PhaseTimer(workload.device)
    for i in range(steps):
        workload.step(timed.phase)
        log(f"  step {i + 1}/{steps}: " + ", ".join(f"{k} {v[-1]:.2f} ms" for k, v in timed.samples.items()))
    step_samples = [sum(per_phase) for per_phase in zip(*timed.samples.values())]
    metrics = {phase: summarize(samples) | {"samples": samples} for phase, samples in timed.samples.items()}
    metrics["step"] = summarize(step_samples) | {"samples": step_samples}
    metrics["warmup_step_samples"] = [sum(per_phase) for per_phase in zip(*warm.samples.values())]
    metrics["peak_memory_bytes"] = peak_memory_bytes(workload.device)
    return metrics | before
