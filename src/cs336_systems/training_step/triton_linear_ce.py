"""The LM head and the mean cross-entropy as one op, its gradients made in the forward: E1's
``triton-linear-ce`` rung.

The model's step computes the logits (``tokens x vocabulary``, bf16 under autocast), then
cs336_basics' cross-entropy in fp32, then autograd's softmax-minus-one-hot gradient of the logits and
two matmuls for the head's and the hidden states' gradients. Here, chunk of tokens by chunk:

1. ``logits = h @ W^T`` (one matmul, in the matmul dtype autocast would use);
2. one Triton kernel a row: the row's log-sum-exp and loss in fp32 (two passes over the row: an
   online max and sum, then the gradient), the gradient ``(softmax - one_hot(target)) / tokens``
   written over the logits in place;
3. ``dh = grad @ W`` and ``dW += grad^T @ h``.

So the logits are written once and read back twice, the whole vocabulary's logits of every token
are never held at once where they would not fit in ``CHUNK_BYTES``, and the backward only scales the
two gradients by the loss's gradient. The loss and gradients are those of the model's head and
cross-entropy to rounding: the logits and their gradient are rounded to the matmul dtype where
autograd rounds them, the softmax is fp32 arithmetic.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from cs336_systems.attention.flash_tiles import interpreting
from cs336_systems.training_step.triton_rounding import matmul_dtype, rounded

BLOCK_V = 16384 if interpreting() else 2048      # vocabulary entries a loop step reads
# The logits of a chunk of tokens at most this large: the 2.7B model's point (4096 tokens x 10,000)
# is one chunk of 82 MB in bf16; longer batches or vocabularies go in several.
CHUNK_BYTES = 256 * 2**20


@triton.jit
def _cross_entropy_kernel(logits_ptr, targets_ptr, losses_ptr, vocab, stride_row, scale, BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = logits_ptr + row * stride_row
    cols = tl.arange(0, BLOCK_V)
    running_max = tl.full((BLOCK_V,), float("-inf"), dtype=tl.float32)
    running_sum = tl.zeros((BLOCK_V,), dtype=tl.float32)
    for start in range(0, vocab, BLOCK_V):
        z = tl.load(base + start + cols, mask=start + cols < vocab, other=float("-inf")).to(tl.float32)
        new_max = tl.maximum(running_max, z)
        # lanes still at -inf (no entry yet) add nothing: exp(-inf) is 0, and -inf - -inf would be NaN
        shift = tl.where(new_max == float("-inf"), 0.0, new_max)
        running_sum = running_sum * tl.exp(running_max - shift) + tl.exp(z - shift)
        running_max = new_max
    row_max = tl.max(running_max, axis=0)
    total = tl.sum(running_sum * tl.exp(running_max - row_max), axis=0)
    lse = row_max + tl.log(total)
    target = tl.load(targets_ptr + row)
    target_logit = tl.load(base + target).to(tl.float32)
    tl.store(losses_ptr + row, lse - target_logit)
    for start in range(0, vocab, BLOCK_V):
        inside = start + cols < vocab
        z = tl.load(base + start + cols, mask=inside, other=0.0).to(tl.float32)
        grad = tl.exp(z - lse) - tl.where(start + cols == target, 1.0, 0.0)
        tl.store(base + start + cols, rounded(grad * scale, logits_ptr.dtype.element_ty), mask=inside)


def chunk_rows(tokens: int, vocab: int, element_bytes: int) -> int:
    """Tokens a chunk holds: as many as keep its logits within ``CHUNK_BYTES`` (at least one)."""
    return max(1, min(tokens, CHUNK_BYTES // max(1, vocab * element_bytes)))


@torch.library.custom_op("cs336::linear_cross_entropy", mutates_args=())
def linear_cross_entropy_with_gradients(hidden: torch.Tensor, weight: torch.Tensor,
                                        targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The mean cross-entropy of ``hidden @ weight^T`` (tokens x d, vocab x d) at ``targets`` (tokens,),
    and its gradients with respect to ``hidden`` and ``weight``."""
    tokens, vocab = hidden.shape[0], weight.shape[0]
    hidden, weight, targets = hidden.contiguous(), weight.contiguous(), targets.contiguous()
    losses = torch.empty(tokens, dtype=torch.float32, device=hidden.device)
    grad_hidden = torch.empty_like(hidden)
    rows = chunk_rows(tokens, vocab, hidden.element_size())
    grad_weight = None if rows >= tokens else torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
    for start in range(0, tokens, rows):
        h = hidden[start:start + rows]
        logits = h @ weight.T
        _cross_entropy_kernel[(h.shape[0],)](logits, targets[start:start + rows], losses[start:start + rows],
                                             vocab, logits.stride(0), 1.0 / tokens, BLOCK_V=BLOCK_V)
        torch.mm(logits, weight, out=grad_hidden[start:start + rows])
        if grad_weight is None:
            grad_weight = logits.T @ h          # one chunk: the head's gradient in one matmul
        else:
            grad_weight += (logits.T @ h).float()
    return losses.mean(), grad_hidden, grad_weight.to(weight.dtype)


@linear_cross_entropy_with_gradients.register_fake
def _fake(hidden, weight, targets):
    return hidden.new_empty((), dtype=torch.float32), torch.empty_like(hidden), torch.empty_like(weight)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(output[1], output[2])


def _backward(ctx, grad_loss, _grad_hidden, _grad_weight):
    grad_hidden, grad_weight = ctx.saved_tensors
    return grad_loss.to(grad_hidden.dtype) * grad_hidden, grad_loss.to(grad_weight.dtype) * grad_weight, None


linear_cross_entropy_with_gradients.register_autograd(_backward, setup_context=_setup_context)


def _check(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> None:
    if hidden.shape[-1] != weight.shape[-1] or hidden.shape[:-1] != targets.shape:
        raise ValueError(f"hidden states {tuple(hidden.shape)}, head {tuple(weight.shape)} and targets "
                         f"{tuple(targets.shape)} do not fit: (..., d), (vocab, d), (...)")


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """cs336_basics' ``cross_entropy(hidden @ weight.T, targets)`` without the logits of every token at
    once, computed in the dtype autocast gives the head's matmul (module doc)."""
    _check(hidden, weight, targets)
    dtype = matmul_dtype(hidden)
    flat = hidden.reshape(-1, hidden.shape[-1]).to(dtype)
    return linear_cross_entropy_with_gradients(flat, weight.to(dtype), targets.reshape(-1))[0]


def fused_loss(head: torch.nn.Module):
    """The step's loss from the hidden states (the head's place holds ``swap.HiddenStates``)."""
    def loss(hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return linear_cross_entropy(hidden, head.weight, targets)
    return loss
