"""Our FlashAttention-2 as two ``torch.library`` custom ops, so that ``torch.compile`` keeps it in
its graph instead of breaking the graph around a Triton launch and the plan cache.

- ``cs336::flash_attention_forward(q, k, v, is_causal) -> (o, lse)``
- ``cs336::flash_attention_backward(q, k, v, o, lse, grad_o, is_causal) -> (dq, dk, dv)``

on (batch, seq, d) tensors, or (batch, heads, seq, d) ones with any strides (the model's view of
its projections, read in place); o is laid out as ``flash_plan.new_output`` lays it; lse is fp32 of
q's shape but d, the log-sum-exp the backward recomputes the probabilities from. Autograd links the
two (``register_autograd``).

Each op runs what ``FlashAttentionTriton`` runs: the plan cached per input layout, else the plain
launches (``flash_plan``). The compiler sees each op as one opaque node, shaped by its fake
implementation, and the op's body runs only at run time, outside tracing: a compiled model
therefore launches the same kernels with the same tiles (the plan's, fitted to the grid, with
its splits) as an eager one, and on the same inputs gives the same bits.
"""

import torch

from cs336_systems.attention.flash_plan import (_check_device, _plan, flash_backward_triton, flash_forward_triton,
                                                new_output, new_row_stats)
from cs336_systems.attention.inputs import check_inputs


@torch.library.custom_op("cs336::flash_attention_forward", mutates_args=())
def flash_attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            is_causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    plan = _plan(q, k, v, is_causal)
    if plan is None:
        check_inputs(q, k, v, is_causal)
        _check_device(q)
        return flash_forward_triton(q, k, v, is_causal)
    out, lse = plan.new_out(), plan.new_lse()
    plan.forward(Q=q, K=k, V=v, O=out, L=lse)
    return out, lse


@flash_attention_forward.register_fake
def _forward_fake(q, k, v, is_causal):
    # Both launch paths allocate the outputs fresh, laid out by q's shape alone, whatever the strides.
    return new_output(q.shape, q.dtype, q.device), new_row_stats(q.shape, q.device)


@torch.library.custom_op("cs336::flash_attention_backward", mutates_args=())
def flash_attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                             lse: torch.Tensor, grad_out: torch.Tensor,
                             is_causal: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # The plan's launches are made per layout of dO and O; L must be contiguous, dO and O need a unit
    # last stride, and all of them 16-byte alignment. Copies of anything else keep an odd caller
    # (opcheck, a compiler's relayout) correct at no cost to the usual one.
    if not lse.is_contiguous():
        lse = lse.contiguous()
    out, grad_out = (t if t.stride(-1) == 1 else t.contiguous() for t in (out, grad_out))
    plan = _plan(q, k, v, is_causal)
    if plan is not None and (grad_out.data_ptr() | out.data_ptr() | lse.data_ptr()) % 16 == 0:
        return plan.backward(q, k, v, out, grad_out, lse)
    return flash_backward_triton(q, k, v, out, grad_out, lse, is_causal)


@flash_attention_backward.register_fake
def _backward_fake(q, k, v, out, lse, grad_out, is_causal):
    # Each gradient is ``empty_like`` of its input, which both launch paths first copy to a
    # contiguous one where its last stride is not 1.
    return tuple(torch.empty_like(t, memory_format=torch.preserve_format if t.stride(-1) == 1
                                  else torch.contiguous_format) for t in (q, k, v))


def _setup_context(ctx, inputs, output):
    q, k, v, is_causal = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.is_causal = is_causal
    ctx.mark_non_differentiable(lse)


def _backward(ctx, grad_out, _grad_lse):
    q, k, v, out, lse = ctx.saved_tensors
    return (*flash_attention_backward(q, k, v, out, lse, grad_out, ctx.is_causal), None)


flash_attention_forward.register_autograd(_backward, setup_context=_setup_context)
