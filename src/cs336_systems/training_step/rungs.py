"""The E1 ladder as data: each rung adds one technique to the rung before it; anchors stand beside.

    fp32              fp32 eager, naive attention (cs336_basics), cs336_basics' AdamW: the workload's step
    bf16              + bf16 autocast around forward and loss (weights, gradients, optimizer state fp32)
    flash             + our FlashAttention-2 (attention back end "flash")
    compiled          + torch.compile of the model
    fused-adamw       + torch.optim.AdamW(fused=True) in place of cs336_basics' AdamW
    triton-adamw      + our AdamW, one Triton kernel per parameter (training_step.triton_adamw), in place
                      of PyTorch's fused one
    bf16-weights      + the matrices held in bf16 for the forward and backward; our AdamW keeps their fp32
                      master copies and moments and writes the bf16 copy: autocast no longer casts
                      the weights each forward, nor their gradients back each backward
    cuda-graphs       + the step's forward, backward and update each captured once as a CUDA graph and
                      replayed (training_step.cuda_graphs): the host issues a phase in one call
    triton-rmsnorm    + our RMSNorm, one Triton kernel forward and one backward, writing the bf16
                      the next matmul reads (training_step.triton_rmsnorm)
    triton-swiglu     + our SwiGLU gate, silu(a) * b, one Triton kernel each way (training_step.triton_swiglu)
    triton-rope       + our RoPE, one Triton kernel each way over the model's view of q and k
                      (training_step.triton_rope)
    triton-linear-ce  + our LM head and cross-entropy in one op, the gradients made in the forward
                      chunk by chunk, no fp32 logits (training_step.triton_linear_ce)
    adamw-in-backward + each weight's AdamW update launched on a second stream as soon as backward
                      has its gradient, beside the rest of backward (training_step.adamw_in_backward)
    checkpointed      bf16-weights + activation checkpointing of groups of blocks, measured only where
                      bf16-weights runs out of memory (elsewhere it would only add recomputation)

Each rung builds on the one listed before it, except ``checkpointed``, which builds on
``bf16-weights`` (``Rung.builds_on``): it is for points where that rung does not fit, and the
memory a capture holds would only stand in its way.

The anchors are what a practitioner writes in plain PyTorch: bf16 autocast, PyTorch's
``scaled_dot_product_attention`` pinned to its flash or its cuDNN kernel, the model compiled,
``torch.optim.AdamW(fused=True)``; and the cuDNN one with Liger-Kernel's fused RMSNorm, SwiGLU gate
and linear + cross-entropy (``training_step.liger``: an optional extra, CUDA only). Both Liger's
modules and our fused ones take the model's places through ``training_step.swap``.

Kept free of torch: the rule file reads the names and the code each rung runs (``code_of``), so a
rung's rule depends on its own attention back end and nothing else's.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from cs336_systems.attention.backends import module_of as attention_module

# Loaded by name, like the attention back ends, so that only the rung that checkpoints depends on
# A6's code (pipeline.sources follows every import, even one inside a function).
CHECKPOINTING = "cs336_systems.memory.checkpointing:group_layers"
OUR_ADAMW = "cs336_basics.optimizer.AdamW (the workload's)"
FUSED_ADAMW = "torch.optim.AdamW(fused=True)"
TRITON_ADAMW = "training_step.triton_adamw.TritonAdamW"
# Setup.adamw -> what the record says the optimizer is
ADAMWS = {"basics": OUR_ADAMW, "torch-fused": FUSED_ADAMW, "triton": TRITON_ADAMW}
TRITON_ADAMW_MODULE = "cs336_systems.training_step.triton_adamw"
LIGER_MODULE = "cs336_systems.training_step.liger"
CUDA_GRAPHS_MODULE = "cs336_systems.training_step.cuda_graphs"
IN_BACKWARD_MODULE = "cs336_systems.training_step.adamw_in_backward"
# Our fused Triton modules by the kind of place they take (training_step.swap.KINDS), loaded by name
# like the attention back ends: a rung depends on the kernels it runs.
OUR_KERNELS = {"norm": "cs336_systems.training_step.triton_rmsnorm:TritonRMSNorm",
               "gate": "cs336_systems.training_step.triton_swiglu:TritonSwiGLU",
               "rope": "cs336_systems.training_step.triton_rope:TritonRoPE",
               "loss": "cs336_systems.training_step.triton_linear_ce:fused_loss"}
SDPA_KERNELS = ("flash", "cudnn")        # torch.nn.attention.SDPBackend FLASH_ATTENTION, CUDNN_ATTENTION


@dataclass(frozen=True)
class Setup:
    """What one step runs."""
    precision: str = "fp32"              # "fp32", or "bf16" autocast around forward and loss
    attention: str = "naive"             # an attention back end (attention.backends.BACKENDS)
    sdpa_kernel: str | None = None       # with attention "sdpa": the one kernel SDPA may use
    compiled: bool = False               # torch.compile of the model
    adamw: str = "basics"                # which AdamW (ADAMWS): cs336_basics', PyTorch's fused, ours in Triton
    bf16_weights: bool = False           # the matrices held in bf16, fp32 masters in the optimizer (triton only)
    checkpointed: bool = False           # blocks regrouped under torch.utils.checkpoint (A6's code)
    liger: bool = False                  # Liger-Kernel's norm, SwiGLU gate and linear + cross-entropy (training_step.liger)
    cuda_graphs: bool = False            # each phase of the step replayed from a CUDA graph (training_step.cuda_graphs)
    ours: tuple[str, ...] = ()           # the places our fused Triton modules take (OUR_KERNELS' kinds)
    adamw_in_backward: bool = False      # each update launched from backward (training_step.adamw_in_backward)

    def __post_init__(self):
        if self.adamw not in ADAMWS:
            raise ValueError(f"unknown AdamW {self.adamw!r}; known: {', '.join(ADAMWS)}")
        if self.bf16_weights and (self.adamw != "triton" or self.precision != "bf16"):
            raise ValueError("bf16 weights need bf16 autocast and our Triton AdamW, which keeps their fp32 masters")
        if self.cuda_graphs and self.adamw != "triton":
            raise ValueError("CUDA graphs need our Triton AdamW, whose step counts stay on the device")
        unknown = [kind for kind in self.ours if kind not in OUR_KERNELS]
        if unknown:
            raise ValueError(f"no fused module of ours for {', '.join(unknown)}; we have: {', '.join(OUR_KERNELS)}")
        if self.ours and self.liger:
            raise ValueError("a step holds Liger-Kernel's modules or ours, not both")
        if self.adamw_in_backward and self.adamw != "triton":
            raise ValueError("the update in backward is our Triton AdamW's")

    @property
    def optimizer(self) -> str:
        return (ADAMWS[self.adamw] + (" with fp32 master weights, writing the bf16 copies" if self.bf16_weights else "")
                + (", each update launched from backward" if self.adamw_in_backward else ""))


@dataclass(frozen=True)
class Rung:
    name: str
    adds: str                            # what it adds to the rung before (an anchor: what it is)
    setup: Setup
    anchor: bool = False
    builds_on: str | None = None         # the rung whose setup it changes (None: the first rung, anchors)


def _ladder() -> tuple[Rung, ...]:
    steps = (
        ("fp32", "fp32 eager: naive attention, cs336_basics' AdamW", {}),
        ("bf16", "bf16 autocast around forward and loss", {"precision": "bf16"}),
        ("flash", "our FlashAttention-2 for attention", {"attention": "flash"}),
        ("compiled", "torch.compile of the model", {"compiled": True}),
        ("fused-adamw", f"{FUSED_ADAMW} instead of cs336_basics' AdamW", {"adamw": "torch-fused"}),
        ("triton-adamw", "our AdamW, one Triton kernel per parameter, instead of PyTorch's fused one",
         {"adamw": "triton"}),
        ("bf16-weights", "the matrices held in bf16, their fp32 master copies in our AdamW, which writes the bf16 "
         "copy: no cast of a weight or of its gradient", {"bf16_weights": True}),
        ("cuda-graphs", "the forward, backward and update each captured once as a CUDA graph and replayed: the host "
         "issues each phase in one call", {"cuda_graphs": True}),
        ("triton-rmsnorm", "our RMSNorm, one Triton kernel forward and one backward, writing the bf16 the next "
         "matmul reads", {"ours": ("norm",)}),
        ("triton-swiglu", "our SwiGLU gate, silu(a) * b, one Triton kernel each way", {"ours": ("norm", "gate")}),
        ("triton-rope", "our RoPE, one Triton kernel each way over the model's view of q and k",
         {"ours": ("norm", "gate", "rope")}),
        ("triton-linear-ce", "our LM head and cross-entropy in one op, the gradients made in the forward chunk by "
         "chunk, no fp32 logits", {"ours": ("norm", "gate", "rope", "loss")}),
        ("adamw-in-backward", "each weight's AdamW update launched on a second stream as soon as backward has its "
         "gradient, beside the rest of backward", {"adamw_in_backward": True}),
        ("checkpointed", "activation checkpointing of groups of blocks, where the rung it builds on runs out of memory",
         {"checkpointed": True}, "bf16-weights"),
    )
    built: dict[str, Rung] = {}
    for name, adds, change, *on in steps:
        base = built[on[0]] if on else next(reversed(built.values()), None)
        built[name] = Rung(name, adds, replace(base.setup if base else Setup(), **change),
                           builds_on=base.name if base else None)
    return tuple(built.values())


LADDER: tuple[Rung, ...] = _ladder()
ANCHORS: tuple[Rung, ...] = tuple(
    Rung(f"anchor-sdpa-{kernel}", f"plain PyTorch: bf16 autocast, SDPA pinned to its {kernel} kernel, compiled, "
         f"{FUSED_ADAMW}",
         Setup(precision="bf16", attention="sdpa", sdpa_kernel=kernel, compiled=True, adamw="torch-fused"), anchor=True)
    for kernel in SDPA_KERNELS) + (
    Rung("anchor-liger", "plain PyTorch with Liger-Kernel's fused RMSNorm, SwiGLU gate and linear + cross-entropy "
         "(no full logits): bf16 autocast, SDPA pinned to its cudnn kernel, compiled, "
         f"{FUSED_ADAMW}; Liger's RMSNorm runs outside the compiled graph (compiled, its updates go wrong after the "
         "first); RoPE stays the model's (Liger's rotates halves, the model adjacent pairs)",
         Setup(precision="bf16", attention="sdpa", sdpa_kernel="cudnn", compiled=True, adamw="torch-fused", liger=True),
         anchor=True),)
RUNG_NAMES = tuple(r.name for r in LADDER)
ANCHOR_NAMES = tuple(r.name for r in ANCHORS)
# The rung every other one's losses and gradients are checked against (training_step.check)
REFERENCE = RUNG_NAMES[0]
BY_NAME: dict[str, Rung] = {r.name: r for r in LADDER + ANCHORS}
# The rung that is measured only where the rung it builds on does not fit.
ONLY_WHEN_PREVIOUS_OOMS = "checkpointed"


def get(name: str) -> Rung:
    try:
        return BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown E1 rung {name!r}; known: {', '.join(BY_NAME)}") from None


def previous(name: str) -> str | None:
    """The rung ``name`` adds its technique to (None for the first rung and for anchors)."""
    return get(name).builds_on


def code_of(name: str) -> tuple[str, ...]:
    """The modules a rung runs beyond the ladder's own: its attention back end, our Triton AdamW if
    it steps with it, Liger's adapters if it uses them, the graph capture if it replays graphs, our
    fused modules it holds, and, if it checkpoints, A6's checkpointing."""
    setup = get(name).setup
    return ((attention_module(setup.attention),) + ((TRITON_ADAMW_MODULE,) if setup.adamw == "triton" else ())
            + ((LIGER_MODULE,) if setup.liger else ()) + ((CUDA_GRAPHS_MODULE,) if setup.cuda_graphs else ())
            + tuple(OUR_KERNELS[kind].partition(":")[0] for kind in setup.ours)
            + ((IN_BACKWARD_MODULE,) if setup.adamw_in_backward else ())
            + ((CHECKPOINTING.partition(":")[0],) if setup.checkpointed else ()))


def runs_triton(name: str) -> bool:
    """Whether the rung launches a Triton kernel of ours (on a CPU: in Triton's interpreter)."""
    setup = get(name).setup
    return setup.attention == "flash" or setup.adamw == "triton" or bool(setup.ours)


def needs_cuda(name: str) -> str | None:
    """Why the rung cannot run on a CPU, or None where it can. PyTorch's SDPA has a CPU flash
    kernel (the smoke preset runs it) but no cuDNN one; Liger's kernels fail in Triton's interpreter."""
    setup = get(name).setup
    if setup.liger:
        return "Liger-Kernel's kernels need a CUDA GPU (they fail in Triton's interpreter)"
    if setup.cuda_graphs:
        return "CUDA graphs need a CUDA GPU"
    if setup.sdpa_kernel == "cudnn":
        return "PyTorch's cuDNN attention kernel needs a CUDA GPU"
    return None
