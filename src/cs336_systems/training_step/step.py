"""The E1 rungs of one point as runnable steps over one shared model, batch and AdamW state.

The 2.7B model with AdamW holds ~55 GB (3.4e9 parameters; fp32 weights, gradients, two moments)
before any activation, so two of them do not fit an 80 GB card, and a point's rungs must share one:

- one model, built from ``seed`` (then the batch drawn, from the same generator state), its initial
  weights copied to the host (page-locked: ``check.host_copy``). Each rung sets what it changes
  before each of its steps: the attention function of every attention module, and which list of
  blocks ``model.layers`` holds (the blocks themselves, checkpointed groups of them, or the blocks
  compiled one by one);
- one pair of AdamW moments per parameter, which every optimizer (cs336_basics' AdamW, PyTorch's
  fused one, ours in Triton) updates in place, each with its own step count: the memory a rung holds
  is what it would hold alone, and an AdamW step's work does not depend on the moments' values;
- for the rung that computes with bf16 weights, a bf16 copy of every matrix (each ``Linear``'s
  weight), made from the fp32 weights when the rung's turn begins and dropped when another rung's
  does, so no other rung holds it; the shared fp32 weights are its master copies, which our AdamW
  updates, writing the bf16 copies too;
- for the rung that replays CUDA graphs, its captured step (``training_step.cuda_graphs``), captured
  at the first step of each of its turns but its very first (which compiles and initialises what the
  capture needs, and takes the gradient check) and dropped, with the gradients it holds, when another
  rung's turn begins: the graphs hold the bf16 copies' addresses, which the next turn makes anew. The
  capture falls in a turn's untimed settling step (``rounds.take_turns``);
- for the rung that updates each weight from backward, its hooks (``training_step.adamw_in_backward``),
  made when its turn begins on the tensors that receive the gradients then, and removed when another
  rung's does: no other rung's backward updates anything;
- the model's norms, gates, rotary embeddings and head in their places, or Liger's or ours
  (``training_step.swap``), set before each step;
- one compiled graph per distinct computation: the compiled, fused-adamw and triton-adamw rungs
  differ only in the optimizer, so they run the same compiled model (or blocks) and compile once
  (bf16-weights' matrices are another dtype, so Dynamo guards compile it apart); the anchors
  pin their SDPA kernel inside their own attention function, so Dynamo guards tell them apart.

The checks of what a rung computes (``training_step.check``) stay meaningful because ``restore``
puts the initial weights back and zeroes the moments and step counts before a rung's first step:
every rung's first loss and gradients come from the same seeded weights and batch, and its first
steps from the same optimizer state, as when each rung had a process of its own.
"""
from __future__ import annotations

import contextlib
import importlib
from dataclasses import dataclass
from typing import Callable, ContextManager

import torch
from torch import nn

from cs336_systems.models import VOCAB_SIZE, ModelSize, build_model, get_attention_backend, random_batch
from cs336_systems.training_step.rungs import (CHECKPOINTING, CUDA_GRAPHS_MODULE, IN_BACKWARD_MODULE, LIGER_MODULE,
                                               OUR_KERNELS, TRITON_ADAMW_MODULE, Setup)
from cs336_systems.training_step.check import host_copy
from cs336_systems.training_step.swap import Kit, Swap
from cs336_systems.workload import LEARNING_RATE, Workload, adamw, no_phase

SDPA_BACKENDS = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION"}
RECOMPILE_LIMIT = 64        # graphs of one code object a point may compile (SharedPoint)


# cs336_basics' AdamW hyperparameters, for the optimizers that stand in for it
ADAMW_HYPERPARAMETERS = dict(lr=LEARNING_RATE, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)


def fused_adamw(parameters) -> torch.optim.Optimizer:
    """PyTorch's AdamW with cs336_basics' hyperparameters, one fused kernel per parameter group."""
    return torch.optim.AdamW(parameters, **ADAMW_HYPERPARAMETERS, fused=True)


def triton_adamw(parameters) -> torch.optim.Optimizer:
    """Our Triton AdamW with cs336_basics' hyperparameters, loaded by name so that Triton (and, on a
    CPU, its interpreter, which must be asked for before the kernel is defined) loads only where a
    rung steps with it."""
    return importlib.import_module(TRITON_ADAMW_MODULE).TritonAdamW(parameters, **ADAMW_HYPERPARAMETERS)


def build_adamw(kind: str, parameters) -> torch.optim.Optimizer:
    """The AdamW ``kind`` names (rungs.ADAMWS) over ``parameters``."""
    if kind == "torch-fused":
        return fused_adamw(parameters)
    if kind == "triton":
        return triton_adamw(parameters)
    return adamw(parameters, lr=LEARNING_RATE)


def group_layers(blocks: list[nn.Module], group: int) -> nn.ModuleList:
    """A6's checkpointed groups of ``group`` blocks over ``blocks``, loaded by name (rungs.CHECKPOINTING)."""
    module, _, function = CHECKPOINTING.partition(":")
    return getattr(importlib.import_module(module), function)(blocks, group)


def kernel_context(setup: Setup) -> ContextManager:
    """Where the step must run: inside ``sdpa_kernel`` for a pinned SDPA kernel, else anywhere. The
    anchors' attention functions pin it themselves (``pinned_sdpa``); this pins it around the whole
    step too, so a graph Dynamo traces outside their function sees the same pin."""
    if setup.sdpa_kernel is None:
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(getattr(SDPBackend, SDPA_BACKENDS[setup.sdpa_kernel]))


_PINNED: dict[str, Callable] = {}


def pinned_sdpa(kernel: str) -> Callable:
    """PyTorch's SDPA back end pinned to ``kernel`` inside the attention function. Dynamo does not
    guard on the global SDPA kernel choice, so two anchors that differ only in an outer
    ``sdpa_kernel`` would share one compiled graph; one function object per kernel makes them two."""
    if kernel not in _PINNED:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        sdpa = get_attention_backend("sdpa")
        backend = getattr(SDPBackend, SDPA_BACKENDS[kernel])

        def attention(q, k, v, is_causal=True):
            with sdpa_kernel(backend):
                return sdpa(q, k, v, is_causal=is_causal)

        attention.__name__ = attention.__qualname__ = f"sdpa_{kernel}_attention"
        _PINNED[kernel] = attention
    return _PINNED[kernel]


class SharedPoint:
    """One point's model, batch and AdamW moments, and each rung's step over them (module doc)."""

    def __init__(self, size: ModelSize, *, context: int, batch: int, device: torch.device | str, seed: int,
                 compile_mode: str = "model", backend: str = "inductor", checkpoint_group: int = 1,
                 vocab_size: int | None = None):
        self.device = torch.device(device)
        self.compile_mode, self.backend, self.checkpoint_group = compile_mode, backend, checkpoint_group
        # Each compiled rung or anchor is one more graph of the same blocks' code (another dtype,
        # attention function or module in a place): more than Dynamo's default 8 a code object. Past
        # its limit Dynamo would run the blocks eagerly, saying so only in a warning, and a rung would
        # time another step than it names; so the limit is raised, and reaching it is an error.
        # (The accumulated limit counts every frame's graphs together: the blocks, compiled one by
        # one, would add up if Dynamo ever told them apart.)
        config = torch._dynamo.config
        config.recompile_limit = max(config.recompile_limit, RECOMPILE_LIMIT)
        config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, 64 * RECOMPILE_LIMIT)
        config.fail_on_recompile_limit_hit = True
        vocab_size = VOCAB_SIZE if vocab_size is None else vocab_size
        torch.manual_seed(seed)
        self.model = build_model(size, context, vocab_size=vocab_size, device=self.device)
        self.inputs, self.targets = random_batch(batch, context, vocab_size=vocab_size, device=self.device)
        self.blocks = self.model.layers
        named = list(self.model.named_parameters())
        # the names as built: a compiled or checkpointed list of blocks renames what it wraps
        self.names = [n for n, _ in named]
        self.parameters = [p for _, p in named]
        self.initial = [host_copy(p) for p in self.parameters]     # each rung's first steps start from these
        self._layers: dict[tuple[bool, bool], nn.ModuleList] = {(False, False): self.blocks}
        self._compiled_model = None
        self._optimizers: dict[tuple[str, bool], torch.optim.Optimizer] = {}
        from cs336_basics.model import Linear

        # every matrix a matmul reads, with its fp32 weight: what the bf16-weights rung holds in bf16
        self._matrices = [(m, m.weight) for m in self.model.modules() if isinstance(m, Linear)]
        self._bf16_copies: dict[int, nn.Parameter] = {}      # id(fp32 weight) -> its bf16 copy, while held
        self._swap = None           # training_step.swap.Swap, built for the first step that fuses a place
        self._kits: dict[Setup, dict[str, Kit]] = {}
        self._graphed = None        # (setup, training_step.cuda_graphs.GraphedStep) while a rung's graphs stand
        self.capture_peaks: dict[Setup, int] = {}    # setup -> the most a capture of its step allocated
        self._in_backward = None    # training_step.adamw_in_backward.UpdateInBackward while its hooks stand

    def restore(self) -> None:
        """The initial weights back in place (the same tensors, so compiled graphs stay valid), no
        gradients, no graphs, no bf16 copies, and every optimizer as built: zero moments, no step taken."""
        self.drop_graphs()
        self.hold_bf16_copies(False)
        self.model.zero_grad(set_to_none=True)
        with torch.no_grad():
            for p, saved in zip(self.parameters, self.initial):
                p.copy_(saved, non_blocking=True)      # page-locked: the copies queue on the stream
            for opt in self._optimizers.values():
                for p in self.parameters:
                    state = opt.state[p]
                    state["exp_avg"].zero_()        # shared by both optimizers: zeroed twice, harmlessly
                    state["exp_avg_sq"].zero_()
                    if isinstance(state["step"], torch.Tensor):
                        state["step"].zero_()
                    else:
                        state["step"] = 0

    def clear(self) -> None:
        """What a failed step leaves on the shared model: its gradients (and graphs, if it had some)."""
        self.drop_graphs()
        self.model.zero_grad(set_to_none=True)

    def optimizer(self, setup: Setup) -> torch.optim.Optimizer:
        """``setup``'s AdamW, over the same two moments per parameter as every other one here."""
        key = (setup.adamw, setup.bf16_weights)
        if key not in self._optimizers:
            moments = next(iter(self._optimizers.values()), None)
            opt = build_adamw(setup.adamw, self.parameters)
            for p in self.parameters:
                if moments is not None:
                    exp_avg, exp_avg_sq = moments.state[p]["exp_avg"], moments.state[p]["exp_avg_sq"]
                else:
                    exp_avg, exp_avg_sq = torch.zeros_like(p), torch.zeros_like(p)
                # torch's fused kernel and ours take the step count as a float32 scalar on the device
                on_device = setup.adamw in ("torch-fused", "triton")
                step = torch.zeros((), dtype=torch.float32, device=p.device) if on_device else 0
                opt.state[p] = {"step": step, "exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}
            if setup.bf16_weights:
                opt.copies = self._bf16_copies      # the same dict, filled while the copies are held
            self._optimizers[key] = opt
        return self._optimizers[key]

    def hold_bf16_copies(self, held: bool) -> None:
        """Make every matrix's weight a bf16 copy of its fp32 weight (``held``), or the fp32 weight
        again, dropping the copies. Assigning the module's weight keeps the blocks, compiled or not,
        and the optimizers' parameter lists as they are: only what the matmuls read changes."""
        if held == bool(self._bf16_copies):
            return
        for module, weight in self._matrices:
            if held:
                copy = nn.Parameter(weight.detach().to(torch.bfloat16))
                self._bf16_copies[id(weight)] = copy
                module.weight = copy
            else:
                module.weight = weight
        if not held:
            self._bf16_copies.clear()

    def drop_graphs(self) -> None:
        """Let the captured graphs go, with the gradients they write (allocated in their pool)."""
        if self._graphed is not None:
            self._graphed = None
            self.model.zero_grad(set_to_none=True)
            importlib.import_module(CUDA_GRAPHS_MODULE).let_go()

    def graphed(self, setup: Setup):
        """``setup``'s step captured as CUDA graphs over the shared state, captured now if none stands."""
        if self._graphed is None:
            graphed = importlib.import_module(CUDA_GRAPHS_MODULE).GraphedStep(self.workload(setup))
            self.capture_peaks[setup] = max(graphed.capture_peak_bytes, self.capture_peaks.get(setup, 0))
            self._graphed = (setup, graphed)
        return self._graphed[1]

    def kits(self, setup: Setup) -> dict[str, Kit]:
        """Per kind of place ``setup`` fuses (``swap.KINDS``), the kit whose module takes it: Liger's
        (``training_step.liger``) or ours, each loaded by name, so only a step that uses Liger imports it."""
        if setup not in self._kits:
            kits: dict[str, Kit] = {}
            if setup.liger:
                liger = importlib.import_module(LIGER_MODULE).KIT
                kits = {kind: liger for kind in liger}
            for kind in setup.ours:
                kits[kind] = _our_kit(kind)
            self._kits[setup] = kits
        return self._kits[setup]

    def swap(self) -> Swap:
        if self._swap is None:
            self._swap = Swap(self.model, self.blocks)
        return self._swap

    def gradient_holders(self) -> list[torch.Tensor]:
        """Per parameter (``self.parameters``' order), the tensor whose ``.grad`` is its gradient now:
        its bf16 copy where one is held, else the parameter."""
        return [self._bf16_copies.get(id(p), p) for p in self.parameters]

    def layers(self, setup: Setup) -> nn.ModuleList:
        """The list of blocks ``setup`` runs: plain, checkpointed groups, and/or each compiled."""
        key = (setup.checkpointed, setup.compiled and self.compile_mode == "blocks")
        if key not in self._layers:
            checkpointed, compiled = key
            base = group_layers(list(self.blocks), self.checkpoint_group) if checkpointed else self.blocks
            self._layers[key] = (nn.ModuleList(torch.compile(m, backend=self.backend) for m in base)
                                 if compiled else base)
        return self._layers[key]

    def attention(self, setup: Setup) -> Callable:
        return pinned_sdpa(setup.sdpa_kernel) if setup.sdpa_kernel else get_attention_backend(setup.attention)

    def configure(self, setup: Setup) -> None:
        """Make the shared model the one ``setup`` runs: its attention, its list of blocks, the
        precision its matrices are held in and whose norms, gates, rotary embeddings and loss it
        calls (Liger's, ours or the model's). Called before every step; each part changes only what differs."""
        from cs336_basics.model import set_attention

        if self._graphed is not None and self._graphed[0] != setup:
            self.drop_graphs()          # before the copies its graphs read go
        self.hold_bf16_copies(setup.bf16_weights)
        kits = self.kits(setup)
        if kits or self._swap is not None:
            self.swap().hold(kits)
        self.model.layers = self.layers(setup)
        set_attention(self.model, self.attention(setup))
        self.hold_updates_in_backward(setup)

    def hold_updates_in_backward(self, setup: Setup) -> None:
        """Hooks that update each weight from backward where ``setup`` asks for them, on the tensors
        that receive the gradients now (the bf16 copies are made anew each turn); none elsewhere, so
        another rung's backward updates nothing."""
        holders = self.gradient_holders() if setup.adamw_in_backward else None
        standing = self._in_backward
        if standing is not None and (holders is None or standing.optimizer is not self.optimizer(setup)
                                     or [id(h) for h in standing.holders] != [id(h) for h in holders]):
            standing.release()
            self._in_backward = standing = None
        if holders is not None and standing is None:
            module = importlib.import_module(IN_BACKWARD_MODULE)
            self._in_backward = module.UpdateInBackward(self.optimizer(setup), self.parameters, holders)

    def workload(self, setup: Setup) -> Workload:
        """``setup``'s train step over the shared state (call ``configure(setup)`` before stepping it)."""
        runnable = self.model
        if setup.compiled and self.compile_mode == "model":
            if self._compiled_model is None:
                self._compiled_model = torch.compile(self.model, backend=self.backend)
            runnable = self._compiled_model
        loss_kit = self.kits(setup).get("loss")
        optimizer, after_backward = self.optimizer(setup), None
        if setup.adamw_in_backward:         # the hooks (made by configure) update; backward's end joins them
            optimizer, after_backward = importlib.import_module(IN_BACKWARD_MODULE).NOTHING_LEFT, self._join_updates
        return Workload(self.model, runnable, optimizer, self.inputs, self.targets, "train-step", setup.precision,
                        self.device, loss=None if loss_kit is None else self.swap().loss(loss_kit),
                        after_backward=after_backward)

    def _join_updates(self) -> None:
        self._in_backward.join()

    def step(self, setup: Setup, *, watched: int = 1, on_loss: Callable[[float], None] | None = None,
             on_gradients: Callable[[], None] | None = None):
        """``setup``'s step function ``step(phase)``: configures the model, then one train step in its
        kernel context. ``on_loss`` receives the loss of each of the first ``watched`` steps
        (synchronising on each); ``on_gradients()`` is called once, in the first step, between its
        backward and its optimizer update, while the gradients are in place. A rung that replays CUDA
        graphs takes its first step without them (module doc)."""
        workload = self.workload(setup)
        taken = 0

        def step(phase=no_phase):
            nonlocal taken
            self.configure(setup)
            if taken == 0 and on_gradients is not None:
                phase = _calling_before("optimizer", on_gradients, phase)
            with kernel_context(setup):
                loss = self.graphed(setup).step(phase) if setup.cuda_graphs and taken > 0 else workload.step(phase)
            if taken < watched and on_loss is not None:
                on_loss(float(loss))
            taken += 1
            return loss

        return step


_OUR_KITS: dict[str, Kit] = {}


def _our_kit(kind: str) -> Kit:
    """A kit holding our fused module for ``kind`` alone (``rungs.OUR_KERNELS``), one object per kind so
    that a swap keeps the module it made for it."""
    if kind not in _OUR_KITS:
        module, _, name = OUR_KERNELS[kind].partition(":")
        _OUR_KITS[kind] = {kind: getattr(importlib.import_module(module), name)}
    return _OUR_KITS[kind]


def _calling_before(name: str, call: Callable[[], None], phase):
    """``phase`` that first calls ``call()`` when the phase ``name`` begins."""
    def observed(which: str):
        if which == name:
            call()
        return phase(which)
    return observed


@dataclass(frozen=True)
class RungStep:
    """One rung's step function on a point of its own, and its device: what ``workload.time_steps``
    and the profiler step."""
    step: Callable
    device: torch.device


def build_step(setup: Setup, size: ModelSize, *, context: int, batch: int, device: torch.device, seed: int,
               compile_mode: str = "model", backend: str = "inductor", checkpoint_group: int = 1,
               vocab_size: int | None = None) -> RungStep:
    """One rung alone (the profile's): its step over a point of its own, stepped as the ladder steps it
    (a rung that replays CUDA graphs captures them at its second step)."""
    point = SharedPoint(size, context=context, batch=batch, device=device, seed=seed, compile_mode=compile_mode,
                        backend=backend, checkpoint_group=checkpoint_group, vocab_size=vocab_size)
    return RungStep(point.step(setup), point.device)
