"""Closed forms of data-parallel training on one node: what the wrappers' passes over the gradients
cost at a memory bandwidth, the bucket overhead model and its optimum, and the training state each
rank holds with and without FSDP. Pure arithmetic on the model config and a card's datasheet; the
data-parallel reports (``report.ddp`` and its sections) set the measurements against them.
"""
from __future__ import annotations

import math

from cs336_systems.accounting.parallelism import fsdp_transformer_state_bytes
from cs336_systems.accounting.transformer import training_state_bytes, transformer_parameter_tensors

# Passes over every gradient (each reads and writes all of them) that a variant's
# ``finish_gradient_synchronization`` makes on the compute stream after backward, besides the
# all-reduces, by variant family (``distributed.variants`` names): naive and overlap divide each
# gradient in place; flat flattens them into one buffer, divides it and copies the means back;
# bucketed-<MB> flattens each bucket during backward, so after it divides and copies back; with the
# buckets as the gradients' storage (view, ready) only the division is left, and averaging inside the
# all-reduce (avg) leaves none. The bf16 buckets and FSDP are left out: their passes are not whole
# fp32 read-and-write passes.
AFTER_BACKWARD_PASSES = {"naive": 1, "flat": 3, "overlap": 1, "overlap-sharded": 1, "bucketed-<MB>": 2,
                         "bucketed-view-<MB>": 1, "bucketed-ready-<MB>": 1, "bucketed-avg-<MB>": 0}


def after_backward_pass_ms(family: str, grad_bytes: float, memory_Bps: float | None) -> float | None:
    """The least time the passes over the gradients after backward of variant ``family`` take
    (``AFTER_BACKWARD_PASSES``; each reads and writes every gradient) at a memory bandwidth
    (bytes/s); None where the family's passes or the bandwidth are not known."""
    passes = AFTER_BACKWARD_PASSES.get(family)
    if passes is None or not memory_Bps:
        return None
    return passes * one_pass_ms(grad_bytes, memory_Bps)


def one_pass_ms(grad_bytes: float, memory_Bps: float) -> float:
    """The least time one pass over the gradients takes: it reads and writes every byte of them."""
    return 2 * grad_bytes / memory_Bps * 1e3


def naive_calls(size) -> int:
    """The all-reduces naive DDP issues per step on a model of ``size`` (``models.ModelSize``): one
    per trainable parameter tensor, and one to agree on which gradients exist."""
    return sum(transformer_parameter_tensors(size).values()) + 1


def overhead_model(n_buckets: float, grad_bytes: float, o_s: float, w_Bps: float) -> float:
    """Seconds of communication left after backward with n_b equal buckets, when a bucket's gradients
    take as long to compute as its bytes take to send: each call falls o behind, and the last
    bucket is sent after backward: n_b·o + s / (n_b·w)."""
    return n_buckets * o_s + grad_bytes / (n_buckets * w_Bps)


def optimal_buckets(grad_bytes: float, o_s: float, w_Bps: float) -> dict:
    """d/dn_b (n_b·o + s/(n_b·w)) = 0  →  n_b* = √(s/(w·o)), bucket size s/n_b* = √(s·w·o),
    overhead 2·√(s·o/w)."""
    n = math.sqrt(grad_bytes / (w_Bps * o_s))
    return {"n_buckets": n, "bucket_MB": grad_bytes / n / 1e6, "overhead_ms": 2 * math.sqrt(grad_bytes * o_s / w_Bps) * 1e3}


def bus_bandwidth(algorithm_Bps: float, n: int) -> float:
    """An all-reduce's bus bandwidth from its algorithm bandwidth (payload / time) on ``n`` ranks:
    a ring all-reduce moves 2(n − 1)/n of the payload through each rank's link."""
    return algorithm_Bps * 2 * (n - 1) / n


def training_state_per_rank(size, world_size: int) -> dict[str, float]:
    """Bytes of training state (fp32 weights, gradients, Adam moments) each rank holds for a model of
    ``size``: replicated (DDP) and sharded over ``world_size`` ranks (FSDP)."""
    return {"replicated": sum(training_state_bytes(size.parameter_count()).values()),
            "fsdp": fsdp_transformer_state_bytes(size, world_size)}
