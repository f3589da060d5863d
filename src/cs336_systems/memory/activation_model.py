"""Closed forms for A6: what a Transformer block saves for backward, and checkpointing's memory model.

Counted for ``cs336_basics.model`` in fp32 with the naive attention back end (explicit mask and
softmax), per block, for B sequences of T tokens, width d, d_ff f, H heads of d_k = d / H. Every
term is a tensor autograd keeps (a test counts them with ``saved_tensors_hooks`` on a real block):

- 10 · B·T·d: the block input; RMSNorm 1's x / rms and output; the rotated q and k and v (the
  score and value matmuls keep them; the raw q, k are not kept, since RoPE multiplies them by
  constants); the attention output fed to the output projection; the residual h; RMSNorm 2's
  h / rms and output;
- 5 · B·T·f: SwiGLU's w1 output, its sigmoid, silu, the w3 output and the gated product;
- 3 · B·H·T²: the masked scores (kept by the max), their exponent and the probabilities;
- small: 2 · B·H·T (softmax max and sum), 2 · B·T (the two rms), 2 · T·d_k (RoPE cos / sin rows)
  and the T² boolean mask (one byte each).

At T = 2048 the T² terms dominate: for xl they are three quarters of a block's saved bytes.
"""
from __future__ import annotations

import math

from cs336_systems.models import VOCAB_SIZE, ModelSize

FP32 = 4


def block_saved_terms(size: ModelSize, context: int, batch: int) -> dict[str, int]:
    """Bytes one block saves for backward, by term (fp32 activations, naive attention)."""
    B, T, d, f, H = batch, context, size.d_model, size.d_ff, size.num_heads
    d_k = d // H
    return {
        "10·B·T·d (residual stream, norms, q/k/v, attention output)": 10 * B * T * d * FP32,
        "5·B·T·d_ff (SwiGLU)": 5 * B * T * f * FP32,
        "3·B·H·T² (masked scores, exp, probabilities)": 3 * B * H * T * T * FP32,
        "2·B·H·T (softmax max and sum)": 2 * B * H * T * FP32,
        "2·B·T (RMSNorm rms)": 2 * B * T * FP32,
        "2·T·d_k (RoPE cos/sin rows)": 2 * T * d_k * FP32,
        "T² (causal mask, bool)": T * T,
    }


def block_saved_bytes(size: ModelSize, context: int, batch: int) -> int:
    """A: everything one block keeps for its backward."""
    return sum(block_saved_terms(size, context, batch).values())


def block_input_bytes(size: ModelSize, context: int, batch: int) -> int:
    """a: one block's input, the only thing a checkpoint boundary keeps (B·T·d fp32)."""
    return batch * context * size.d_model * FP32


def head_saved_bytes(size: ModelSize, context: int, batch: int, vocab_size: int = VOCAB_SIZE) -> int:
    """Saved outside the blocks: the token ids (int64; the embedding lookup and the loss's gather keep
    two views of one (B, T + 1) batch, as ``models.random_batch`` makes it), the
    final RMSNorm (its input, x / rms, its output = the LM head's input, rms), and the loss's
    log-sum-exp (the logits kept by the max, their exponent, the max, the sum) — all fp32."""
    B, T, d, V = batch, context, size.d_model, vocab_size
    tokens = B * T
    return (B * (T + 1) * 8 + 3 * tokens * d * FP32 + tokens * FP32
            + 2 * tokens * V * FP32 + 2 * tokens * FP32)


def checkpoint_memory(num_blocks: int, a: float, A: float, k: int) -> float:
    """The one-level model: ⌈N/k⌉ stored group inputs plus one group of k blocks recomputed in
    backward; k = 0 is no checkpointing (all N blocks' internals stored)."""
    if k == 0:
        return num_blocks * A
    return math.ceil(num_blocks / k) * a + k * A


def continuous_optimum(num_blocks: int, a: float, A: float) -> float:
    """Minimiser of N·a/k + k·A over real k > 0: k* = √(N·a / A)."""
    return math.sqrt(num_blocks * a / A)


def optimal_group_size(num_blocks: int, a: float, A: float) -> int:
    """Best whole group size for N·a/k + k·A: that function is convex in k, so the best whole k is
    ⌊k*⌋ or ⌈k*⌉ (clamped to 1 … N); ties go to the smaller group (less recomputation held at once)."""
    k_star = continuous_optimum(num_blocks, a, A)
    candidates = {min(max(k, 1), num_blocks) for k in (math.floor(k_star), math.ceil(k_star))}
    return min(sorted(candidates), key=lambda k: num_blocks * a / k + k * A)


def predicted_peak(size: ModelSize, context: int, batch: int, k: int, baseline: float,
                   vocab_size: int = VOCAB_SIZE) -> dict[str, float]:
    """Peak bytes of one forward+backward step by walking its schedule, from the memory before it.

    Two moments can be the peak. (1) The end of forward: the stored activations (all blocks' if
    k = 0, else the ⌈N/k⌉ group inputs) plus the head's. (2) The backward of group j (counted from
    the first): the inputs of groups 1 … j are still stored, group j's k blocks are recomputed, and
    the fp32 gradients of every parameter after group j, and of group j itself, exist (they are
    created as backward reaches them and kept to the end). Transient gradient buffers inside a
    block's backward (a few B·H·T² at most) are not modelled, so the measurement may exceed this.
    """
    N = size.num_layers
    a, A = block_input_bytes(size, context, batch), block_saved_bytes(size, context, batch)
    head = head_saved_bytes(size, context, batch, vocab_size)
    d, f = size.d_model, size.d_ff
    block_grads = (4 * d * d + 3 * d * f + 2 * d) * FP32
    head_grads = (vocab_size * d + d) * FP32          # LM head and final norm, made first in backward
    embedding_grads = vocab_size * d * FP32           # made last
    # Forward under a checkpoint saves nothing inside the group: only group inputs stay.
    end_of_forward = (N * A if k == 0 else math.ceil(N / k) * a) + head
    groups = [N] if k == 0 else [min(k, N - start) for start in range(0, N, k)]
    during_backward = 0.0
    done = 0                                           # blocks whose backward has finished
    for j in range(len(groups), 0, -1):                # backward visits the last group first
        stored_inputs = 0 if k == 0 else j * a         # groups 1 … j still hold their inputs
        internals = groups[j - 1] * A if k else 0.0    # k = 0: freed block by block, bounded by (1)
        grads = head_grads + (done + groups[j - 1]) * block_grads
        during_backward = max(during_backward, stored_inputs + internals + grads)
        done += groups[j - 1]
    during_backward = max(during_backward, head_grads + N * block_grads + embedding_grads)
    return {"end_of_forward": baseline + end_of_forward, "during_backward": baseline + during_backward,
            "peak": baseline + max(end_of_forward, during_backward)}
