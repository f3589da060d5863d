"""Communication volume per device and per training step, for DP, FSDP, TP and FSDP+TP.

Collectives are ring collectives (what NCCL uses for large messages). With ``n`` devices and a
payload of ``V`` bytes, every device sends (and receives, at the same time):

- all-gather of a ``V``-byte result:     (n-1)/n · V   (it lacks every shard but its own)
- reduce-scatter of a ``V``-byte input:  (n-1)/n · V
- all-reduce of ``V`` bytes:           2(n-1)/n · V   (a reduce-scatter, then an all-gather)

so a collective's time is the bytes a device sends divided by its link bandwidth. Gradients, weights
and activations travel in bf16 (as C9 prescribes); every step processes ``tokens`` tokens in all.
"""
from __future__ import annotations

from dataclasses import dataclass

from cs336_systems.accounting.hardware import Cluster
from cs336_systems.accounting.transformer import (BYTES_PER_VALUE, MLPStack, train_step_flops,
                                                  training_state_bytes, transformer_matmul_parameters,
                                                  transformer_parameter_breakdown)
from cs336_systems.models import VOCAB_SIZE, ModelSize

COMM_DTYPE = "bf16"
STRATEGIES = ("DP", "FSDP", "TP", "FSDP+TP")


def all_reduce_bytes(payload: float, n: int) -> float:
    return 2 * (n - 1) / n * payload


def all_gather_bytes(gathered: float, n: int) -> float:
    return (n - 1) / n * gathered


def reduce_scatter_bytes(reduced: float, n: int) -> float:
    return (n - 1) / n * reduced


@dataclass(frozen=True)
class DenseModel:
    """What the strategies need to know of a model."""

    name: str
    parameters: int             # each has a gradient to synchronise and 16 bytes of training state
    matmul_parameters: int      # 6 FLOPs per token each in a training step
    d_model: int                # width of the activations that tensor parallelism all-reduces
    num_layers: int
    tp_allreduces_per_layer_forward: int   # one per row-parallel linear; backward has as many again

    @classmethod
    def from_mlp_stack(cls, name: str, model: MLPStack) -> "DenseModel":
        # Megatron split of each block: first linear by columns, second by rows -> one all-reduce.
        return cls(name, model.parameter_count(), model.matmul_parameter_count(), model.d_model,
                   model.num_blocks, tp_allreduces_per_layer_forward=1)

    @classmethod
    def from_transformer(cls, name: str, size: ModelSize, vocab_size: int = VOCAB_SIZE) -> "DenseModel":
        # Attention (QKV by columns, output projection by rows) and the FFN: two all-reduces.
        return cls(name, size.parameter_count(vocab_size), transformer_matmul_parameters(size, vocab_size),
                   size.d_model, size.num_layers, tp_allreduces_per_layer_forward=2)


@dataclass(frozen=True)
class Collective:
    kind: str
    group_size: int
    group_stride: int           # 1: neighbouring devices (one node first); y: one device per TP group
    bytes_per_device: float


def _tp_activation_traffic(model: DenseModel, group_tokens: float, y: int) -> Collective:
    """Each row-parallel linear's output [tokens, d_model] is all-reduced forward, its input gradient backward."""
    count = 2 * model.tp_allreduces_per_layer_forward * model.num_layers
    payload = group_tokens * model.d_model * BYTES_PER_VALUE[COMM_DTYPE]
    return Collective("TP all-reduce of activations", y, 1, count * all_reduce_bytes(payload, y))


def _fsdp_weight_traffic(parameters: float, x: int, stride: int) -> Collective:
    """Weights gathered for forward, again for backward (freed in between), gradients reduce-scattered."""
    weights = parameters * BYTES_PER_VALUE[COMM_DTYPE]
    sent = 2 * all_gather_bytes(weights, x) + reduce_scatter_bytes(weights, x)
    return Collective("FSDP all-gather x2 + reduce-scatter", x, stride, sent)


def step_collectives(strategy: str, model: DenseModel, devices: int, tokens: float,
                     tp_degree: int | None = None) -> list[Collective]:
    """The collectives one device takes part in during one training step of ``tokens`` tokens."""
    n = devices
    grads = model.parameters * BYTES_PER_VALUE[COMM_DTYPE]
    if strategy == "DP":
        return [Collective("DP all-reduce of gradients", n, 1, all_reduce_bytes(grads, n))]
    if strategy == "FSDP":
        return [_fsdp_weight_traffic(model.parameters, n, 1)]
    if strategy == "TP":
        # One TP group of all n devices processes every token of the step.
        return [_tp_activation_traffic(model, tokens, n)]
    if strategy == "FSDP+TP":
        if tp_degree is None or n % tp_degree:
            raise ValueError(f"FSDP+TP needs a TP degree that divides {n} devices, got {tp_degree}")
        y, x = tp_degree, n // tp_degree
        # TP groups are y neighbouring devices; an FSDP group takes one device from each TP group
        # (stride y) and shards that TP group's 1/y of the weights; each TP group sees tokens/x.
        return [_fsdp_weight_traffic(model.parameters / y, x, y), _tp_activation_traffic(model, tokens / x, y)]
    raise ValueError(f"unknown strategy {strategy!r}; known: {', '.join(STRATEGIES)}")


def comm_time(collectives: list[Collective], cluster: Cluster) -> float:
    """Seconds of communication per step; collectives one after another (no two share time)."""
    return sum(c.bytes_per_device / cluster.bandwidth((c.group_size - 1) * c.group_stride + 1) for c in collectives
               if c.group_size > 1)


def compute_time(model: DenseModel, devices: int, tokens: float, cluster: Cluster) -> float:
    """Seconds of matmul FLOPs per device per step at the device's peak (every strategy splits them evenly)."""
    return train_step_flops(model.matmul_parameters, tokens) / devices / cluster.device.bf16_flops


def state_bytes_per_device(strategy: str, model: DenseModel, devices: int) -> float:
    """fp32 weights, gradients and Adam state per device: replicated by DP, split n ways by the others."""
    total = sum(training_state_bytes(model.parameters).values())
    return total if strategy == "DP" else total / devices


def fsdp_transformer_state_bytes(size: ModelSize, devices: int, vocab_size: int = VOCAB_SIZE) -> float:
    """Per-device fp32 training state when every Linear and Embedding is sharded and norms are replicated (C12)."""
    parts = transformer_parameter_breakdown(size, vocab_size)
    sharded = sum(v for k, v in parts.items() if k != "norms")
    per_param = sum(training_state_bytes(1).values())
    return per_param * (sharded / devices + parts["norms"])
