"""Parameter counts, memory by kind and dtype, and FLOPs, in closed form.

Two kinds of model:

- ``MLPStack``: C9's "XXL", blocks of two linears (d_model -> d_ff -> d_model) and nothing else;
- the project's Transformer LM (``cs336_systems.models.ModelSize``), whose per-kind breakdown here
  must add up to the real ``cs336_basics`` model's parameter count (tests check it on ``meta``).

Training in mixed precision keeps, per parameter, an fp32 master weight, an fp32 accumulated
gradient and Adam's two fp32 moments: 16 bytes. Matmuls cost 2 FLOPs per parameter per token
forward and 4 backward (gradients with respect to inputs and to weights), 6 for a training step.
"""
from __future__ import annotations

from dataclasses import dataclass

from cs336_systems.models import VOCAB_SIZE, ModelSize

BYTES_PER_VALUE = {"fp32": 4, "bf16": 2, "fp8": 1}
FORWARD_FLOPS_PER_PARAM = 2
TRAIN_FLOPS_PER_PARAM = 6    # forward 2 + backward 4
ADAM_MOMENTS = 2             # first and second moment, one value each per parameter


@dataclass(frozen=True)
class MLPStack:
    """``num_blocks`` blocks, each Linear(d_model, d_ff) then Linear(d_ff, d_model), no bias, nothing else."""

    d_model: int
    d_ff: int
    num_blocks: int

    def parameter_count(self) -> int:
        return self.num_blocks * 2 * self.d_model * self.d_ff

    def matmul_parameter_count(self) -> int:
        return self.parameter_count()

    def saved_activation_values_per_token(self) -> int:
        """Values saved for backward per token: the input of each linear (d_model, then d_ff) per block.

        A linear ``y = x W`` needs ``x`` to form ``dW = xᵀ dy``; with no nonlinearity, norm or
        residual there is nothing else to keep, and without checkpointing nothing is recomputed.
        """
        return self.num_blocks * (self.d_model + self.d_ff)


XXL = MLPStack(d_model=16384, d_ff=53248, num_blocks=126)   # DELIVERABLES C9


def transformer_parameter_breakdown(size: ModelSize, vocab_size: int = VOCAB_SIZE) -> dict[str, int]:
    """Parameters of ``cs336_basics.model.TransformerLM`` by kind (untied embedding and LM head, no biases).

    Per block: Q, K, V and output projections (4 d²), SwiGLU's three matrices (3 d d_ff), two RMSNorm
    gains; then a final RMSNorm.
    """
    d, f, layers = size.d_model, size.d_ff, size.num_layers
    return {
        "embedding": vocab_size * d,
        "attention": layers * 4 * d * d,
        "ffn": layers * 3 * d * f,
        "norms": layers * 2 * d + d,
        "lm_head": vocab_size * d,
    }


def transformer_parameter_tensors(size: ModelSize) -> dict[str, int]:
    """How many parameter tensors ``TransformerLM`` holds, by kind: ``matrices``, the Linear and
    Embedding weights (embedding, LM head, per block Q, K, V, output and SwiGLU's three), each one
    all-gather for FSDP; ``gains``, the RMSNorm gains (two per block and the final one). Together
    they are the gradients naive DDP all-reduces one by one."""
    return {"matrices": 2 + 7 * size.num_layers, "gains": 2 * size.num_layers + 1}


def transformer_matmul_parameters(size: ModelSize, vocab_size: int = VOCAB_SIZE) -> int:
    """Parameters a token meets in a matmul: all but the embedding (a lookup) and the norm gains.

    Attention's own score/value matmuls (which have no parameters) are left out, as in 6·N·D counts.
    """
    parts = transformer_parameter_breakdown(size, vocab_size)
    return parts["attention"] + parts["ffn"] + parts["lm_head"]


def training_state_bytes(parameters: int) -> dict[str, int]:
    """Memory of the fp32 training state by kind: master weights, accumulated gradients, Adam moments."""
    fp32 = BYTES_PER_VALUE["fp32"]
    return {
        "master_weights": parameters * fp32,
        "gradients": parameters * fp32,
        "adam_state": parameters * ADAM_MOMENTS * fp32,
    }


def saved_activation_bytes(model: MLPStack, tokens: int, dtype: str = "bf16") -> int:
    return model.saved_activation_values_per_token() * tokens * BYTES_PER_VALUE[dtype]


def forward_flops(matmul_parameters: int, tokens: int) -> int:
    return FORWARD_FLOPS_PER_PARAM * matmul_parameters * tokens


def train_step_flops(matmul_parameters: int, tokens: int) -> int:
    return TRAIN_FLOPS_PER_PARAM * matmul_parameters * tokens
