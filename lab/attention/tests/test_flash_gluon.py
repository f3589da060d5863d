"""The Hopper Gluon dK/dV and dQ kernels (``lab/attention/flash_gluon.py``) against float64 attention's gradients,
on ragged shapes: lengths that are not multiples of the tiles, so a tile reads the next batch
entry's rows through the 2-D TMA view and must mask them, with and without causal masking. Runs
only on an sm_90 GPU with a Triton that has Gluon (marked ``gpu``)."""
from __future__ import annotations

import flash_gluon as fg
import pytest
import torch

from cs336_systems.attention import flash_triton as ft
from cs336_systems.attention.reference import attention_with_logsumexp

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not (torch.cuda.is_available() and fg.available(torch.device("cuda"))),
                                 reason="needs an sm_90 GPU and Triton's Gluon")]

GRAD_TOLERANCE = {torch.float16: 1e-2, torch.bfloat16: 8e-2}

# (batch, Nq, Nk, d); causal cases use Nk = Nq.
SHAPES = [(2, 45, 45, 64), (3, 200, 333, 64), (2, 1000, 1000, 64), (2, 130, 77, 128), (1, 64, 64, 64),
          (2, 257, 257, 128)]
SETTINGS = [(64, 128, 3, 8), (64, 64, 3, 4), (128, 128, 2, 8)]        # dK/dV: block_m, block_n, stages, warps
DQ_SETTINGS = [(128, 64, 3, 8), (64, 64, 3, 4), (128, 128, 2, 8)]     # dQ: block_m, block_n, stages, warps


def problem(shape, is_causal, dtype):
    """Inputs, the saved L and D from the ``tl`` forward, and float64 gradients."""
    batch, n_q, n_k, d = shape
    if is_causal:
        n_k = n_q
    gen = torch.Generator(device="cuda").manual_seed(23)
    q = torch.randn(batch, n_q, d, dtype=dtype, device="cuda", generator=gen)
    k, v = (torch.randn(batch, n_k, d, dtype=dtype, device="cuda", generator=gen) for _ in range(2))
    grad_out = torch.randn(batch, n_q, d, dtype=dtype, device="cuda", generator=gen)
    out, lse = ft.flash_forward_triton(q, k, v, is_causal)
    delta = ft.backward_delta(out, grad_out)
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    ref, _ = attention_with_logsumexp(q64, k64, v64, is_causal)
    ref.backward(grad_out.double())
    return (q, k, v, grad_out, lse, delta), (q64.grad, k64.grad, v64.grad)


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: "m{}n{}s{}w{}".format(*s))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gluon_dkdv_against_float64(shape, is_causal, dtype, setting):
    (q, k, v, grad_out, lse, delta), (_, want_k, want_v) = problem(shape, is_causal, dtype)
    grad_k, grad_v = torch.full_like(k, float("nan")), torch.full_like(v, float("nan"))
    fg.launch_dkdv(q, k, v, grad_out, lse, delta, grad_k, grad_v, is_causal, *setting)
    tol = GRAD_TOLERANCE[dtype]
    torch.testing.assert_close(grad_k.double(), want_k, atol=tol, rtol=tol, msg=lambda m: f"dk: {m}")
    torch.testing.assert_close(grad_v.double(), want_v, atol=tol, rtol=tol, msg=lambda m: f"dv: {m}")


@pytest.mark.parametrize("setting", DQ_SETTINGS, ids=lambda s: "m{}n{}s{}w{}".format(*s))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gluon_dq_against_float64(shape, is_causal, dtype, setting):
    (q, k, v, grad_out, lse, delta), (want_q, _, _) = problem(shape, is_causal, dtype)
    grad_q = torch.full_like(q, float("nan"))
    fg.launch_dq(q, k, v, grad_out, lse, delta, grad_q, is_causal, *setting)
    tol = GRAD_TOLERANCE[dtype]
    torch.testing.assert_close(grad_q.double(), want_q, atol=tol, rtol=tol, msg=lambda m: f"dq: {m}")


@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("consumers", [1, 2], ids=["one-consumer", "two-consumers"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gluon_warp_specialised_dkdv_against_float64(shape, is_causal, dtype, consumers, stages):
    (q, k, v, grad_out, lse, delta), (_, want_k, want_v) = problem(shape, is_causal, dtype)
    grad_k, grad_v = torch.full_like(k, float("nan")), torch.full_like(v, float("nan"))
    fg.launch_dkdv_ws(q, k, v, grad_out, lse, delta, grad_k, grad_v, is_causal, stages,
                      maxnreg=128 if consumers == 1 else 160, consumers=consumers)
    tol = GRAD_TOLERANCE[dtype]
    torch.testing.assert_close(grad_k.double(), want_k, atol=tol, rtol=tol, msg=lambda m: f"dk: {m}")
    torch.testing.assert_close(grad_v.double(), want_v, atol=tol, rtol=tol, msg=lambda m: f"dv: {m}")


@pytest.mark.parametrize("stages", [2, 4])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gluon_warp_specialised_dq_against_float64(shape, is_causal, dtype, stages):
    (q, k, v, grad_out, lse, delta), (want_q, _, _) = problem(shape, is_causal, dtype)
    grad_q = torch.full_like(q, float("nan"))
    fg.launch_dq_ws(q, k, v, grad_out, lse, delta, grad_q, is_causal, stages)
    tol = GRAD_TOLERANCE[dtype]
    torch.testing.assert_close(grad_q.double(), want_q, atol=tol, rtol=tol, msg=lambda m: f"dq: {m}")
