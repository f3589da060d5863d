"""The kernels on (batch, heads, seq, d) tensors with any strides, the model's view of its
projections: the heads transposed out of a (batch, seq, heads·d) projection, read in place.

Each case runs once on that view and once on contiguous (batch·heads, seq, d) copies of the same
values: the kernels walk the same tiles in the same order either way, so outputs, L and gradients
must agree bit for bit, and both against float64 attention. O comes back laid out as (batch, seq,
heads, d), which the model's output projection reads as (batch, seq, heads·d) without a copy.
Without CUDA the kernels run in Triton's interpreter.
"""
from __future__ import annotations

import pytest
import torch

from cs336_systems.attention import flash_plan as fp
from cs336_systems.attention import flash_triton as ft
from cs336_systems.attention.flash_triton import FlashAttentionTriton

from .test_flash import CUDA, GRAD_TOLERANCE, TOLERANCE, reference

DEVICE = "cuda" if CUDA else "cpu"

# (batch, heads, Nq, Nk, d, dtype, causal): ragged lengths; d = 80 takes two column chunks.
CASES = [(2, 3, 37, 37, 16, torch.float32, True), (1, 2, 29, 45, 80, torch.float32, False),
         (2, 2, 33, 33, 80, torch.bfloat16, True)]


def heads_view(batch, heads, n, d, dtype) -> torch.Tensor:
    """A (batch, heads, n, d) view of a (batch, n, heads·d) projection, as the model makes it."""
    projection = torch.randn(batch, n, heads * d, dtype=dtype, device=DEVICE)
    return projection.unflatten(-1, (heads, d)).transpose(1, 2).requires_grad_()


def run(fn, q, k, v, is_causal, grad_out):
    leaves = [t.detach().requires_grad_() if t.is_leaf else t for t in (q, k, v)]
    out = fn(*leaves, is_causal)
    lse = [t for t in out.grad_fn.saved_tensors if t.dtype == torch.float32 and t.dim() == out.dim() - 1]
    out.backward(grad_out)
    return out.detach(), lse, [t.grad for t in leaves]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:5])) + f"-{str(c[5])[6:]}"
                         + ("-causal" if c[6] else ""))
def test_heads_view_matches_folded_copies_and_float64(case):
    batch, heads, n_q, n_k, d, dtype, is_causal = case
    q, k, v = heads_view(batch, heads, n_q, d, dtype), heads_view(batch, heads, n_k, d, dtype), \
        heads_view(batch, heads, n_k, d, dtype)
    assert not q.is_contiguous()
    grad_out = torch.randn(batch, n_q, heads, d, dtype=dtype, device=DEVICE).transpose(1, 2)   # as the model's
    out, lse, grads = run(FlashAttentionTriton.apply, q, k, v, is_causal, grad_out)
    assert out.shape == q.shape and out.transpose(1, 2).is_contiguous(), "O laid out as (batch, seq, heads, d)"
    assert len(lse) == 1 and lse[0].shape == q.shape[:-1]

    def fold(t):
        return t.detach().reshape(batch * heads, t.shape[-2], d)       # a copy: contiguous
    folded_out, folded_lse, folded_grads = run(FlashAttentionTriton.apply, *(fold(t) for t in (q, k, v)), is_causal,
                                               fold(grad_out))
    assert torch.equal(out, folded_out.view(q.shape))
    assert torch.equal(lse[0], folded_lse[0].view(lse[0].shape))
    for got, folded in zip(grads, folded_grads):
        assert got.shape == q.shape[:2] + folded.shape[1:] and torch.equal(got, folded.view(got.shape))

    ref_out, _, ref_grads = reference(q, k, v, is_causal, grad_out)
    tol, grad_tol = TOLERANCE[dtype], GRAD_TOLERANCE[dtype]
    torch.testing.assert_close(out.double(), ref_out, atol=tol, rtol=tol)
    for name, got, want in zip("qkv", grads, ref_grads):
        torch.testing.assert_close(got.double(), want, atol=grad_tol, rtol=grad_tol, msg=lambda m: f"d{name}: {m}")  # noqa: B023


@pytest.mark.parametrize("is_causal", [False, True])
def test_heads_view_through_split_kernels_and_plain_launches(is_causal, monkeypatch):
    """The split-key forward, the split backward and their combines on the heads view (a plan that
    forces them), then the plain launches: against float64 attention."""
    batch, heads, n, d = 2, 2, 41, 32
    q, k, v = (heads_view(batch, heads, n, d, torch.float32) for _ in range(3))
    plan = fp._Plan(q, k, v, is_causal, splits=3, split_backward=(2, 3))
    monkeypatch.setattr(ft, "_plan", lambda *_: plan)
    grad_out = torch.randn(q.shape, device=DEVICE)
    out, _, grads = run(FlashAttentionTriton.apply, q, k, v, is_causal, grad_out)
    ref_out, ref_lse, ref_grads = reference(q, k, v, is_causal, grad_out)
    torch.testing.assert_close(out.double(), ref_out, atol=TOLERANCE[torch.float32], rtol=TOLERANCE[torch.float32])
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got.double(), want, atol=GRAD_TOLERANCE[torch.float32],
                                   rtol=GRAD_TOLERANCE[torch.float32])
    q, k, v = (t.detach() for t in (q, k, v))
    out, lse = ft.flash_forward_triton(q, k, v, is_causal, splits=2)
    grads = ft.flash_backward_triton(q, k, v, out, grad_out, lse, is_causal, splits=(3, 2))
    torch.testing.assert_close(out.double(), ref_out, atol=TOLERANCE[torch.float32], rtol=TOLERANCE[torch.float32])
    torch.testing.assert_close(lse.double(), ref_lse, atol=1e-4, rtol=1e-5)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got.double(), want, atol=GRAD_TOLERANCE[torch.float32],
                                   rtol=GRAD_TOLERANCE[torch.float32])
