"""AdamW as one Triton kernel over every parameter: E1's ``triton-adamw`` rung.

The same update as ``torch.optim.AdamW`` (decoupled weight decay, bias-corrected moments, ``eps``
added after the square root), read and written once: per element the kernel loads the weight, its
gradient and both moments (16 bytes in fp32) and stores the weight and both moments (12 bytes).
Those 28 bytes are the whole cost of the step, so its floor is ``28 x parameters / bandwidth``
(19.9 ms for the 2.7B model's 3.41 B parameters at an H200's 4.8 TB/s); PyTorch's fused
multi-tensor kernel took 27.8 ms there (E1's committed profile), a streaming kernel 25.3 ms
(``lab/e1-rungs``).

**One launch for many tensors.** The parameters are cut into chunks of ``CHUNK`` elements (a
tensor's last chunk shorter); program ``c`` updates chunk ``c``, finding its tensor in a table and
that tensor's addresses in a second one. The chunk table depends only on the parameters' sizes, so
it is built once; the address table is rebuilt each step (a new backward makes new gradients) and
copied to the device without waiting. One launch instead of one a parameter matters where the host
is the limit: xl's 435 parameters cost as many Python launches a step.

The step count is a Python int on the host, so the bias corrections are scalars computed once a
step and no device value is read back.

**bf16 copies** (the ``bf16-weights`` rung): where a weight has a bf16 copy that the model computes
with, the kernel reads that copy's bf16 gradient and writes the updated weight to it as well (rounded
to nearest, as ``tensor.to(torch.bfloat16)`` rounds). The copy's bits are those autocast would cast
the fp32 weight to, and its gradient the bf16 one autocast's backward would cast up: the step computes
what the fp32-weight rung computes, without a cast kernel per weight each forward and per gradient
each backward. The bytes per element stay 28 (a bf16 gradient read, a bf16 copy written). Weights
with copies and weights without go in two launches (their gradients' dtypes differ).
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
import triton
import triton.language as tl

BLOCK = 4096         # elements a program loads at once: 16 KB of each fp32 stream
BLOCKS = 8           # blocks a program walks: a chunk of 32 Ki elements
CHUNK = BLOCK * BLOCKS
NUM_WARPS = 8
STREAMS = ("weight", "grad", "exp_avg", "exp_avg_sq", "copy")      # the address table's rows


@triton.jit
def _to_bf16_nearest_even(x):
    """fp32 -> bf16 rounded to nearest, ties to even, as PyTorch rounds. Done on the bits because
    Triton's interpreter truncates in ``.to(tl.bfloat16)`` whatever rounding is asked for (finite
    values only: weights are)."""
    bits = x.to(tl.uint32, bitcast=True)
    bits = bits + 0x7FFF + ((bits >> 16) & 1)
    return (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)


@triton.jit
def _adamw_kernel(owner_ptr, start_ptr, numel_ptr, address_ptr, n_tensors,
                  decay, beta1, beta2, step_size, bias2_sqrt, eps,
                  BLOCK: tl.constexpr, BLOCKS: tl.constexpr, WITH_COPY: tl.constexpr):
    chunk = tl.program_id(0)
    tensor = tl.load(owner_ptr + chunk)
    start = tl.load(start_ptr + chunk)
    n_elements = tl.load(numel_ptr + tensor)
    weight_ptr = tl.load(address_ptr + tensor).to(tl.pointer_type(tl.float32))
    exp_avg_ptr = tl.load(address_ptr + 2 * n_tensors + tensor).to(tl.pointer_type(tl.float32))
    exp_avg_sq_ptr = tl.load(address_ptr + 3 * n_tensors + tensor).to(tl.pointer_type(tl.float32))
    if WITH_COPY:
        grad_ptr = tl.load(address_ptr + n_tensors + tensor).to(tl.pointer_type(tl.bfloat16))
        copy_ptr = tl.load(address_ptr + 4 * n_tensors + tensor).to(tl.pointer_type(tl.bfloat16))
    else:
        grad_ptr = tl.load(address_ptr + n_tensors + tensor).to(tl.pointer_type(tl.float32))
    for b in range(BLOCKS):
        offsets = start + b * BLOCK + tl.arange(0, BLOCK)
        inside = offsets < n_elements
        weight = tl.load(weight_ptr + offsets, mask=inside)
        grad = tl.load(grad_ptr + offsets, mask=inside).to(tl.float32)
        exp_avg = tl.load(exp_avg_ptr + offsets, mask=inside)
        exp_avg_sq = tl.load(exp_avg_sq_ptr + offsets, mask=inside)
        exp_avg = beta1 * exp_avg + (1.0 - beta1) * grad
        exp_avg_sq = beta2 * exp_avg_sq + (1.0 - beta2) * grad * grad
        denominator = tl.sqrt(exp_avg_sq) / bias2_sqrt + eps
        weight = weight * decay - step_size * exp_avg / denominator
        tl.store(weight_ptr + offsets, weight, mask=inside)
        tl.store(exp_avg_ptr + offsets, exp_avg, mask=inside)
        tl.store(exp_avg_sq_ptr + offsets, exp_avg_sq, mask=inside)
        if WITH_COPY:
            tl.store(copy_ptr + offsets, _to_bf16_nearest_even(weight), mask=inside)


class Chunks:
    """Which tensor each chunk of ``CHUNK`` elements belongs to and where in it the chunk starts, for
    tensors of ``numels`` elements, on ``device``: built once per set of sizes."""

    def __init__(self, numels: Sequence[int], device: torch.device):
        owners, starts = [], []
        for i, n in enumerate(numels):
            count = triton.cdiv(n, CHUNK)
            owners += [i] * count
            starts += range(0, count * CHUNK, CHUNK)
        self.count = len(owners)
        self.owners = torch.tensor(owners, dtype=torch.int32, device=device)
        self.starts = torch.tensor(starts, dtype=torch.int64, device=device)
        self.numels = torch.tensor(list(numels), dtype=torch.int64, device=device)


def addresses(streams: Sequence[Sequence[torch.Tensor]], device: torch.device) -> torch.Tensor:
    """The address table (``STREAMS`` x tensors, int64) on ``device``, copied without making the host
    wait for the work queued before it (pinned memory, which PyTorch's host allocator reuses)."""
    table = torch.tensor([[t.data_ptr() for t in stream] for stream in streams], dtype=torch.int64)
    if device.type != "cuda":
        return table
    return table.pin_memory().to(device, non_blocking=True)


def adamw_update(weights: Sequence[torch.Tensor], grads: Sequence[torch.Tensor], exp_avgs: Sequence[torch.Tensor],
                 exp_avg_sqs: Sequence[torch.Tensor], *, step: int, lr: float, betas: tuple[float, float], eps: float,
                 weight_decay: float, copies: Sequence[torch.Tensor] | None = None, chunks: Chunks | None = None) -> None:
    """One AdamW update of ``weights`` and their moments in place, in one launch; ``step`` counts this
    update (from 1). ``copies``: bf16 copies of the weights that receive the update too, whose
    gradients ``grads`` are. ``chunks``: the weights' chunk table, where the caller keeps one."""
    if not weights:
        return
    device = weights[0].device
    chunks = chunks or Chunks([w.numel() for w in weights], device)
    streams = [weights, grads, exp_avgs, exp_avg_sqs, copies if copies is not None else weights]
    beta1, beta2 = betas
    _adamw_kernel[(chunks.count,)](
        chunks.owners, chunks.starts, chunks.numels, addresses(streams, device), len(weights),
        1.0 - lr * weight_decay, beta1, beta2, lr / (1.0 - beta1 ** step), math.sqrt(1.0 - beta2 ** step), eps,
        BLOCK=BLOCK, BLOCKS=BLOCKS, WITH_COPY=copies is not None, num_warps=NUM_WARPS)


class TritonAdamW(torch.optim.Optimizer):
    """``torch.optim.AdamW``'s update through ``adamw_update``: contiguous fp32 weights, one launch for
    those with bf16 copies and one for the rest.

    State per parameter as PyTorch's AdamW keeps it (``step``, ``exp_avg``, ``exp_avg_sq``), with the
    step a Python int, so E1's shared point can hand the same moments to every optimizer.

    ``copies`` (``id(weight)`` -> its bf16 copy, kept by the caller while the model computes with the
    copies): such a weight's gradient is read from its copy, and the update written to both."""

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2):
        if lr < 0 or eps < 0 or weight_decay < 0 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"TritonAdamW: invalid hyperparameters lr={lr}, betas={betas}, eps={eps}, "
                             f"weight_decay={weight_decay}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.copies: dict[int, torch.Tensor] = {}
        self._chunks: dict[tuple, Chunks] = {}       # (device, sizes) -> the chunk table of those weights

    def _chunks_of(self, weights: list[torch.Tensor]) -> Chunks:
        key = (weights[0].device, tuple(w.numel() for w in weights))
        if key not in self._chunks:
            self._chunks[key] = Chunks(key[1], weights[0].device)
        return self._chunks[key]

    @torch.no_grad()
    def step(self, closure=None):
        loss = None if closure is None else closure()
        for group in self.param_groups:
            # (with a copy?) -> weights, gradients, moments, copies, step counts
            launches: dict[bool, tuple[list, list, list, list, list, set]] = {}
            for p in group["params"]:
                copy = self.copies.get(id(p))
                grad = p.grad if copy is None else copy.grad
                if grad is None:
                    continue
                if p.dtype != torch.float32 or not p.is_contiguous() or not grad.is_contiguous() or (copy is not None and (
                        copy.dtype != torch.bfloat16 or not copy.is_contiguous() or copy.shape != p.shape)) or (
                        copy is None and grad.dtype != torch.float32):
                    raise ValueError("TritonAdamW updates contiguous fp32 weights (and bf16 copies of their shape) "
                                     f"with contiguous gradients; got a {p.dtype} weight of shape {tuple(p.shape)}")
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] = int(state["step"]) + 1
                weights, grads, exp_avgs, exp_avg_sqs, copies, steps = launches.setdefault(
                    copy is not None, ([], [], [], [], [], set()))
                weights.append(p)
                grads.append(grad)
                exp_avgs.append(state["exp_avg"])
                exp_avg_sqs.append(state["exp_avg_sq"])
                copies.append(copy)
                steps.add(state["step"])
            for with_copy, (weights, grads, exp_avgs, exp_avg_sqs, copies, steps) in launches.items():
                for step in sorted(steps):      # one launch a step count (one, unless weights joined late)
                    chosen = [i for i, w in enumerate(weights) if self.state[w]["step"] == step]
                    pick = lambda xs: [xs[i] for i in chosen]   # noqa: E731
                    adamw_update(pick(weights), pick(grads), pick(exp_avgs), pick(exp_avg_sqs), step=step,
                                 lr=group["lr"], betas=group["betas"], eps=group["eps"],
                                 weight_decay=group["weight_decay"], copies=pick(copies) if with_copy else None,
                                 chunks=self._chunks_of(pick(weights)))
        return loss
