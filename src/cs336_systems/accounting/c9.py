"""C9: the XXL model's memory, the FSDP degree it needs, and the batch at which FSDP+TP is compute-bound.

XXL (DELIVERABLES C9): d_model D = 16384, d_ff F = 53248, L = 126 blocks of two linears and nothing
else; activations and gradient communication in bf16; master weights, accumulated gradients and
Adam state in fp32; no activation checkpointing. Every answer is a function so tests can check it
and the report can print it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from cs336_systems.accounting.hardware import GB, H100_SXM, TPU_V5P, Accelerator
from cs336_systems.accounting.transformer import (BYTES_PER_VALUE, XXL, MLPStack, saved_activation_bytes,
                                                  training_state_bytes)

# The batch (a) and (b) evaluate activation memory at: one 2,048-token sequence on the device.
# Any other count works; the table also lists a few (and 0, the training state alone).
STATED_TOKENS = 2048


# --- (a) one device ------------------------------------------------------------------------

def devices_needed(total_bytes: float, device: Accelerator) -> int:
    """Whole devices whose memory adds up to ``total_bytes`` (memory only: nothing else fits beside)."""
    return math.ceil(total_bytes / device.hbm_bytes)


def single_device_memory(model: MLPStack = XXL, tokens: int = STATED_TOKENS) -> dict[str, float]:
    """(a) Bytes of the fp32 training state by kind, and of the bf16 activations saved for backward."""
    state = training_state_bytes(model.parameter_count())
    return {
        **state,
        "training_state": sum(state.values()),
        "activations_per_token": saved_activation_bytes(model, 1),
        "activations": saved_activation_bytes(model, tokens),
    }


# --- (b) FSDP ------------------------------------------------------------------------------

def fsdp_memory_per_device(n_fsdp: int, model: MLPStack = XXL, tokens: int = STATED_TOKENS) -> float:
    """(b) Bytes per device with the training state and half the activations sharded n_fsdp ways.

        M(N) = (16·P + A/2) / N + A/2,   P = 2·L·D·F parameters,  A = 2·L·(D + F)·T bytes of activations

    where T is the number of tokens whose activations the device holds. The unsharded half of
    the activations is a floor no FSDP degree removes.
    """
    state = sum(training_state_bytes(model.parameter_count()).values())
    activations = saved_activation_bytes(model, tokens)
    return (state + activations / 2) / n_fsdp + activations / 2


def fsdp_devices_to_fit(model: MLPStack = XXL, tokens: int = STATED_TOKENS,
                        device: Accelerator = TPU_V5P) -> int | None:
    """(b) Smallest N with M(N) <= device memory: N = ceil((16·P + A/2) / (HBM − A/2)); None if A/2 >= HBM."""
    state = sum(training_state_bytes(model.parameter_count()).values())
    half_activations = saved_activation_bytes(model, tokens) / 2
    if half_activations >= device.hbm_bytes:
        return None
    n = math.ceil((state + half_activations) / (device.hbm_bytes - half_activations))
    return n


def max_tokens_for_any_fsdp(model: MLPStack = XXL, device: Accelerator = TPU_V5P) -> int:
    """Largest T whose unsharded half of the activations, A/2, still leaves room on the device."""
    per_token_half = saved_activation_bytes(model, 1) / 2
    return math.ceil(device.hbm_bytes / per_token_half) - 1


# --- (c) FSDP + TP, forward, on a TPU v5p mesh --------------------------------------------

@dataclass(frozen=True)
class Mesh:
    """X-way FSDP over M_X ICI axes and Y-way TP over M_Y axes (DELIVERABLES C9(c))."""

    x: int = 16
    y: int = 4
    m_x: int = 2
    m_y: int = 1

    @property
    def devices(self) -> int:
        return self.x * self.y


C9_MESH = Mesh()


def arithmetic_intensity_ratio(device: Accelerator = TPU_V5P) -> float:
    """α = C / W_ici: FLOPs a device does in the time one byte crosses one mesh axis."""
    return device.bf16_flops / device.link_bandwidth


def forward_layer_times(tokens: float, model: MLPStack = XXL, mesh: Mesh = C9_MESH,
                        device: Accelerator = TPU_V5P) -> dict[str, float]:
    """Seconds per block of the forward pass over ``tokens`` tokens in all (B), FSDP+TP as in the scaling book.

    Layout: the batch is split X ways (the FSDP axis is also the data axis); W_in [D, F] is split by
    its F columns Y ways (TP) and each TP shard is split again X ways (FSDP); W_out [F, D] by its F
    rows likewise. A device holds activations x [B/X, D] (the same on the Y devices of a TP group).

    - Math: x·W_in -> [B/X, F/Y] then ·W_out -> [B/X, D] partial sums, 2·(2·B·D·F)/(X·Y) FLOPs:
      ``T_math = 4·B·D·F / (X·Y·C)``.
    - FSDP: all-gather W_in's and W_out's TP shard (2·D·F/Y bf16 bytes each) over X devices laid
      over M_X axes, bandwidth M_X·W: ``T_FSDP = 2·(2·D·F/Y) / (M_X·W) = 4·D·F / (Y·M_X·W)``.
    - TP: all-reduce the partial sums [B/X, D] (2·B·D/X bf16 bytes; an all-reduce moves twice its
      payload) over Y devices on M_Y axes: ``T_TP = 2·(2·B·D/X) / (M_Y·W) = 4·B·D / (X·M_Y·W)``.

    Ring factors (n−1)/n are dropped (as in the book); they shrink each comm term by at most 1/n.
    """
    d, f, c, w = model.d_model, model.d_ff, device.bf16_flops, device.link_bandwidth
    bf16 = BYTES_PER_VALUE["bf16"]
    return {
        "math": 2 * (2 * tokens * d * f) / (mesh.x * mesh.y * c),
        "fsdp": 2 * (bf16 * d * f / mesh.y) / (mesh.m_x * w),
        "tp": 2 * (bf16 * tokens * d / mesh.x) / (mesh.m_y * w),
    }


@dataclass(frozen=True)
class ComputeBoundBatch:
    alpha: float                      # C / W
    overall_tokens: float             # B* (both collectives overlapped with the math)
    per_device_tokens: float          # B*/(X·Y)
    per_fsdp_shard_tokens: float      # B*/X: what each device actually multiplies
    tp_limit: float                   # TP is compute-bound iff Y <= M_Y·F/α, whatever the batch
    tp_compute_bound: bool
    serial_overall_tokens: float      # B* if FSDP and TP comms cannot overlap each other
    serial_per_device_tokens: float
    exact_ring_per_device_tokens: float  # B*/(X·Y) keeping the all-gather's (X−1)/X
    best_split_per_device_tokens: float  # α²/(M_X·M_Y·F): the book's bound with Y at its TP limit


def compute_bound_batch(model: MLPStack = XXL, mesh: Mesh = C9_MESH,
                        device: Accelerator = TPU_V5P) -> ComputeBoundBatch:
    """(c) The batch at which the forward pass is compute-bound, from ``forward_layer_times``.

    With communication overlapped with the math, the step is compute-bound when T_math is at least
    each comm term (FSDP and TP use different mesh axes, so they run side by side):

    - ``T_math >= T_FSDP``:  4·B·D·F/(X·Y·C) >= 4·D·F/(Y·M_X·W)  <=>  B/X >= α/M_X
      <=>  per-device batch ``B/(X·Y) >= α/(M_X·Y)``;
    - ``T_math >= T_TP``:    4·B·D·F/(X·Y·C) >= 4·B·D/(X·M_Y·W)  <=>  ``Y <= M_Y·F/α``
      (no batch in it: both grow with B/X; it is a limit on the TP degree).

    If the two cannot overlap, T_math >= T_FSDP + T_TP gives
    ``B >= (F/(Y·M_X)) / (F/(X·Y·α) − 1/(X·M_Y))``. Letting the TP degree grow to its limit
    Y = M_Y·F/α gives the scaling book's ``B/N >= α²/(M_X·M_Y·F)``.
    """
    alpha = arithmetic_intensity_ratio(device)
    x, y, m_x, m_y, f = mesh.x, mesh.y, mesh.m_x, mesh.m_y, model.d_ff
    overall = x * alpha / m_x
    slack = f / (x * y * alpha) - 1 / (x * m_y)
    serial = (f / (y * m_x)) / slack if slack > 0 else math.inf
    return ComputeBoundBatch(
        alpha=alpha,
        overall_tokens=overall,
        per_device_tokens=overall / mesh.devices,
        per_fsdp_shard_tokens=overall / x,
        tp_limit=m_y * f / alpha,
        tp_compute_bound=y <= m_y * f / alpha,
        serial_overall_tokens=serial,
        serial_per_device_tokens=serial / mesh.devices,
        exact_ring_per_device_tokens=(x - 1) / x * alpha / (m_x * y),
        best_split_per_device_tokens=alpha ** 2 / (m_x * m_y * f),
    )


# --- (d) tricks ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Trick:
    name: str
    equation: str
    effect: str
    references: str


TRICKS: tuple[Trick, ...] = (
    Trick("Overlap communication with the math",
          "T_step = max(T_math, T_FSDP, T_TP) instead of T_math + T_FSDP + T_TP",
          "Prefetch the next layer's all-gather and run the TP all-reduce of one micro-chunk under the "
          "matmul of the next; without it the threshold rises to the serial one of (c)",
          "PyTorch FSDP (Zhao et al., arXiv:2304.11277); How to Scale Your Model, part 5"),
    Trick("More TP, on more or faster axes",
          "B/N >= α/(M_X·Y), valid while Y <= M_Y·F/α; at Y = M_Y·F/α: B/N >= α²/(M_X·M_Y·F)",
          "Each doubling of the TP degree halves the per-device batch FSDP needs, until TP itself "
          "becomes comm-bound; giving TP more axes (M_Y) raises that limit",
          "Megatron-LM (Shoeybi et al., arXiv:1909.08053); How to Scale Your Model, part 5"),
    Trick("Pipeline parallelism with microbatches",
          "Z stages: B/X >= α/M_X per layer still, but N = X·Y·Z, so B/N >= α/(M_X·Y·Z); "
          "bubble = (Z−1)/(m+Z−1) with m microbatches",
          "A stage gathers only its L/Z layers; the stage-to-stage traffic is only B·D bf16 bytes, "
          "paid for with the pipeline bubble (and weights kept gathered across the m microbatches)",
          "GPipe (Huang et al., arXiv:1811.06965); Megatron-LM on GPU clusters (Narayanan et al., arXiv:2104.04473)"),
    Trick("Fewer bytes per weight on the wire",
          "T_FSDP = 2·b_w·D·F/(Y·M_X·W) with b_w bytes per weight: fp8/int8 (b_w = 1) halves it, so B/N >= α/(2·M_X·Y)",
          "All-gather quantised weights (and reduce-scatter quantised gradients); master weights stay fp32",
          "ZeRO++ (Wang et al., arXiv:2306.10209)"),
    Trick("Gradient accumulation with gathered weights kept (ZeRO-2 style)",
          "weights all-gathered once per step of k microbatches: T_FSDP/k per microbatch, so B/N >= α/(k·M_X·Y) per microbatch",
          "Shard only optimizer state and gradients, keep the bf16 weights gathered between microbatches; "
          "costs 2·P/Y bytes of unsharded weights per device",
          "ZeRO (Rajbhandari et al., arXiv:1910.02054)"),
    Trick("Sequence / context parallelism",
          "activation memory per device ∝ T/S over S sequence shards; TP's all-reduce becomes "
          "reduce-scatter + all-gather of the same volume",
          "Does not lower the FSDP threshold (an MLP-only model has no attention to split), but frees "
          "the memory that sets how many tokens a device can hold",
          "Korthikanti et al., arXiv:2205.05198"),
    Trick("Expert parallelism (mixture of experts)",
          "E experts, each token routed to k: all-to-all of 2·k·B·D bytes per layer, no weight gather",
          "Experts' weights stay resident, so traffic scales with tokens, not weights, and there is no "
          "minimum batch for weight traffic; FLOPs per token drop to k/E of the dense FFN",
          "GShard (Lepikhin et al., arXiv:2006.16668); Switch Transformer (Fedus et al., arXiv:2101.03961)"),
)


def answers(model: MLPStack = XXL, tokens: int = STATED_TOKENS) -> dict:
    """Every C9 number the report and the writeup quote, in plain JSON types."""
    a = single_device_memory(model, tokens)
    c = compute_bound_batch(model)
    half_act = a["activations"] / 2
    return {
        "model": {"d_model": model.d_model, "d_ff": model.d_ff, "num_blocks": model.num_blocks,
                  "parameters": model.parameter_count()},
        "stated_tokens": tokens,
        "a": {
            **{f"{k}_GB": v / GB for k, v in a.items() if k != "activations_per_token"},
            "activations_per_token_MB": a["activations_per_token"] / 1e6,
            "h100s_for_state": devices_needed(a["training_state"], H100_SXM),
            "h100s_for_state_and_activations": devices_needed(a["training_state"] + a["activations"], H100_SXM),
            "h100_hbm_GB": H100_SXM.hbm_bytes / GB,
        },
        "b": {
            "state_GB": a["training_state"] / GB,
            "half_activations_GB": half_act / GB,
            "n_fsdp": fsdp_devices_to_fit(model, tokens),
            "n_fsdp_state_only": fsdp_devices_to_fit(model, 0),
            "memory_at_n_fsdp_GB": fsdp_memory_per_device(fsdp_devices_to_fit(model, tokens), model, tokens) / GB,
            "max_tokens_any_n": max_tokens_for_any_fsdp(model),
            "v5p_hbm_GB": TPU_V5P.hbm_bytes / GB,
        },
        "c": {
            "C": TPU_V5P.bf16_flops, "W_ici": TPU_V5P.link_bandwidth,
            "X": C9_MESH.x, "Y": C9_MESH.y, "M_X": C9_MESH.m_x, "M_Y": C9_MESH.m_y, "devices": C9_MESH.devices,
            **{k: v for k, v in vars(c).items()},
        },
    }
