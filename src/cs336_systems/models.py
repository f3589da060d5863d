"""Model sizes, the model and batch factory, and the attention back ends.

``MODEL_SIZES`` is the one size table: the pipeline's config schema, the benchmark CLI and the
tests all read it from here.

Attention back ends follow the protocol of ``cs336_basics.model``: a function
``fn(q, k, v, is_causal) -> out`` on tensors of shape ``(..., heads, seq, d_k)``. A back end is
chosen by name (``ATTENTION_BACKENDS``, registered in ``cs336_systems.attention.backends``) and
given to the model at construction or later with ``cs336_basics.model.set_attention``, so the
model's code never changes between experiments.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Callable

from cs336_systems.attention import backends as attention_backends

if TYPE_CHECKING:
    import torch

# torch is imported where a model or a batch is built, not at the top: the reports (A1, A2, A4, A5,
# A6, B2, C9) read only the size table, and importing torch (~1 s, ~0.4 s more at exit) was most
# of each report's run time.

VOCAB_SIZE = 10_000
ROPE_THETA = 10_000.0

# What one measured step does: the forward pass; forward and backward; or forward, backward and an
# AdamW step. The one list of modes (``workload`` runs them; the config check reads it here, torch-free).
MODES = ("forward", "forward-backward", "train-step")


@dataclass(frozen=True)
class ModelSize:
    d_model: int
    d_ff: int
    num_layers: int
    num_heads: int

    def parameter_count(self, vocab_size: int = VOCAB_SIZE) -> int:
        """Closed form: embeddings + LM head, per block 4 attention + 3 FFN matrices + 2 norms, final norm."""
        d, f = self.d_model, self.d_ff
        return 2 * vocab_size * d + self.num_layers * (4 * d * d + 3 * d * f + 2 * d) + d


MODEL_SIZES: dict[str, ModelSize] = {
    "tiny": ModelSize(d_model=64, d_ff=128, num_layers=2, num_heads=4),   # tests and smoke runs
    "small": ModelSize(d_model=768, d_ff=3072, num_layers=12, num_heads=12),
    "medium": ModelSize(d_model=1024, d_ff=4096, num_layers=24, num_heads=16),
    "large": ModelSize(d_model=1280, d_ff=5120, num_layers=36, num_heads=20),
    "xl": ModelSize(d_model=1600, d_ff=6400, num_layers=48, num_heads=25),
    "2.7B": ModelSize(d_model=2560, d_ff=10240, num_layers=32, num_heads=32),
}


def get_size(name: str) -> ModelSize:
    try:
        return MODEL_SIZES[name]
    except KeyError:
        raise ValueError(f"unknown model size {name!r}; known sizes: {', '.join(MODEL_SIZES)}") from None


def build_model(size: ModelSize, context_length: int, *, vocab_size: int = VOCAB_SIZE,
                device: str | torch.device = "cpu", dtype: torch.dtype | None = None,
                attention: str = "naive"):
    """A randomly initialised ``TransformerLM`` built directly on ``device`` (``dtype``: float32 unless given)."""
    import torch
    from cs336_basics.model import TransformerLM

    dtype = torch.float32 if dtype is None else dtype
    return TransformerLM(vocab_size=vocab_size, context_length=context_length, rope_theta=ROPE_THETA,
                         attention_fn=get_attention_backend(attention), device=device, dtype=dtype,
                         **asdict(size))


def random_batch(batch_size: int, context_length: int, *, vocab_size: int = VOCAB_SIZE,
                 device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Random token inputs and next-token targets, shape ``(batch, context)`` each."""
    import torch

    tokens = torch.randint(0, vocab_size, (batch_size, context_length + 1), device=device)
    return tokens[:, :-1], tokens[:, 1:]


# --- attention back ends -------------------------------------------------------------------

ATTENTION_BACKENDS = tuple(attention_backends.BACKENDS)   # naive, nvtx, sdpa, flash


def get_attention_backend(name: str) -> Callable:
    """The attention function registered as ``name`` (see ``cs336_systems.attention.backends``)."""
    return attention_backends.load(name)
