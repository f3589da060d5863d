"""FlashAttention-2 (PyTorch and Triton) against float64 attention and its autograd gradients.

On a CPU the Triton kernels run under TRITON_INTERPRET=1 (see conftest.py); on a GPU the same
tests run on CUDA (marked ``gpu``). Inputs are fresh random tensors; lengths are chosen so that
tiles are ragged and, with causal masking, the diagonal falls inside tiles.
"""
from __future__ import annotations

import pytest
import torch

from cs336_systems.attention.flash_pytorch import FlashAttentionPytorch
from cs336_systems.attention.flash_triton import FlashAttentionTriton, FlashAttentionTritonPytorchBackward
from cs336_systems.attention.reference import attention_with_logsumexp

CUDA = torch.cuda.is_available()
DEVICES = [pytest.param("cuda", marks=pytest.mark.gpu)] if CUDA else ["cpu"]

# Absolute tolerances against float64 for outputs of magnitude ~1 (inputs are standard normal).
TOLERANCE = {torch.float32: 2e-5, torch.float16: 5e-3, torch.bfloat16: 4e-2}
GRAD_TOLERANCE = {torch.float32: 5e-5, torch.float16: 1e-2, torch.bfloat16: 8e-2}


def random_qkv(batch, n_q, n_k, d, dtype, device):
    q = torch.randn(batch, n_q, d, dtype=dtype, device=device, requires_grad=True)
    k = torch.randn(batch, n_k, d, dtype=dtype, device=device, requires_grad=True)
    v = torch.randn(batch, n_k, d, dtype=dtype, device=device, requires_grad=True)
    return q, k, v


def reference(q, k, v, is_causal, grad_out):
    """Float64 output, log-sum-exp and gradients of the same (already rounded) inputs."""
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    out, lse = attention_with_logsumexp(q64, k64, v64, is_causal)
    out.backward(grad_out.double())
    return out, lse, (q64.grad, k64.grad, v64.grad)


def check_against_reference(fn, q, k, v, is_causal):
    grad_out = torch.randn(q.shape, dtype=q.dtype, device=q.device)
    out = fn.apply(q, k, v, is_causal)
    saved = [t for t in out.grad_fn.saved_tensors if t.dim() == 2]    # before backward frees them
    out.backward(grad_out)
    ref_out, ref_lse, ref_grads = reference(q, k, v, is_causal, grad_out)
    tol, grad_tol = TOLERANCE[q.dtype], GRAD_TOLERANCE[q.dtype]
    assert out.dtype == q.dtype and out.shape == q.shape
    torch.testing.assert_close(out.double(), ref_out, atol=tol, rtol=tol)
    assert len(saved) == 1 and saved[0].shape == q.shape[:2], "exactly one (batch, Nq) tensor is saved: L"
    torch.testing.assert_close(saved[0].double(), ref_lse, atol=1e-4, rtol=1e-5)
    for name, got, want in zip("qkv", (q.grad, k.grad, v.grad), ref_grads):
        torch.testing.assert_close(got.double(), want, atol=grad_tol, rtol=grad_tol, msg=lambda m: f"d{name}: {m}")


# (batch, Nq, Nk, d): ragged lengths, Nq != Nk (non-causal only), every supported head dimension.
SHAPES = [(2, 45, 45, 16), (1, 64, 64, 32), (3, 37, 70, 64), (2, 50, 23, 128), (1, 1, 19, 32)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_triton_fp32(device, is_causal, shape):
    batch, n_q, n_k, d = shape
    if is_causal:
        n_k = n_q
    check_against_reference(FlashAttentionTriton, *random_qkv(batch, n_q, n_k, d, torch.float32, device), is_causal)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_triton_half_precisions(device, is_causal, dtype):
    n_q = 77
    n_k = n_q if is_causal else 52
    check_against_reference(FlashAttentionTriton, *random_qkv(2, n_q, n_k, 64, dtype, device), is_causal)


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("is_causal", [False, True])
def test_pytorch_flash_with_compiled_backward(device, is_causal):
    n_q = 70
    n_k = n_q if is_causal else 41
    check_against_reference(FlashAttentionPytorch, *random_qkv(2, n_q, n_k, 32, torch.float32, device), is_causal)


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_triton_forward_with_pytorch_backward(device):
    check_against_reference(FlashAttentionTritonPytorchBackward, *random_qkv(2, 70, 70, 32, torch.float32, device), True)


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_inputs(device):
    """Strided views (e.g. heads split out of a projection) are read through their strides."""
    base = torch.randn(2, 40, 3, 32, device=device)          # (batch, seq, which, d): q, k, v interleaved
    q, k, v = (base[:, :, i].detach().requires_grad_() for i in range(3))
    assert not q.is_contiguous()
    check_against_reference(FlashAttentionTriton, q, k, v, True)


@pytest.mark.parametrize("fn", [FlashAttentionTriton, FlashAttentionPytorch], ids=["triton", "pytorch"])
@pytest.mark.parametrize("bad, message", [
    (lambda q, k, v: (q[..., :20], k[..., :20], v[..., :20], False),
     "head dimension 20 is not supported; supported: multiples of 8 from 8 to 256"),
    (lambda q, k, v: (*(torch.cat([t] * 9, -1)[..., :264] for t in (q, k, v)), False), "head dimension 264"),
    (lambda q, k, v: (q.double(), k.double(), v.double(), False), "dtype"),
    (lambda q, k, v: (q, k.half(), v, False), "share a dtype"),
    (lambda q, k, v: (q, k[:, :10], v[:, :10], True), "causal attention needs as many queries as keys"),
    (lambda q, k, v: (q, k, v[:, :5], False), "same sequence length"),
    (lambda q, k, v: (q[0], k[0], v[0], False), "shape \\(batch, seq, d\\)"),
    (lambda q, k, v: (q, k[:1], v[:1], False), "batch sizes differ"),
    (lambda q, k, v: (q, k, v, "False"), "is_causal must be True or False, got 'False'"),
    (lambda q, k, v: (q, k, v, None), "is_causal must be True or False, got None"),
])
def test_rejects_unsupported_inputs(fn, bad, message):
    q, k, v = (torch.randn(2, 16, 32) for _ in range(3))
    with pytest.raises((ValueError, TypeError), match=message):
        fn.apply(*bad(q, k, v))


def test_public_names():
    import cs336_systems

    assert cs336_systems.FlashAttentionTriton is FlashAttentionTriton
    assert cs336_systems.FlashAttentionPytorch is FlashAttentionPytorch
    with pytest.raises(AttributeError):
        cs336_systems.NoSuchThing


@pytest.mark.parametrize("device", DEVICES)
def test_model_with_flash_backend_matches_naive(device):
    """The `flash` back end in a whole model: same logits and gradients as the naive one."""
    from cs336_basics.model import set_attention
    from cs336_systems.models import MODEL_SIZES, build_model, get_attention_backend, random_batch

    model = build_model(MODEL_SIZES["tiny"], 40, vocab_size=97, device=device)
    inputs, _ = random_batch(2, 37, vocab_size=97, device=device)
    naive_logits = model(inputs)
    naive_logits.square().mean().backward()
    naive_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    set_attention(model, get_attention_backend("flash"))
    flash_logits = model(inputs)
    flash_logits.square().mean().backward()
    torch.testing.assert_close(flash_logits, naive_logits, atol=1e-4, rtol=1e-4)
    for got, want in zip((p.grad for p in model.parameters()), naive_grads):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("device", DEVICES)
def test_cached_plan_serves_new_inputs(device, monkeypatch):
    """The second call of a shape goes through the plan cached by the first (and on a GPU through
    the compiled kernels' own launchers): it must compute the same function of new inputs."""
    from cs336_systems.attention import flash_plan

    monkeypatch.setattr(flash_plan, "_PLANS", {})
    for _ in range(2):
        check_against_reference(FlashAttentionTriton, *random_qkv(2, 53, 53, 32, torch.float32, device), True)
    assert len(flash_plan._PLANS) == 1


@pytest.mark.parametrize("device", DEVICES)
def test_misaligned_and_strided_inputs(device):
    """Pointers off 16-byte alignment and strided dO take the plain path; the results agree."""
    base = torch.randn(2, 41, 33, device=device)
    q, k, v = (base[..., 1:].clone()[..., :].detach() for _ in range(3))     # aligned copies
    q = base[..., 1:].detach().requires_grad_()                               # 4 bytes off alignment
    k, v = k.requires_grad_(), v.requires_grad_()
    assert q.data_ptr() % 16
    check_against_reference(FlashAttentionTriton, q, k, v, True)


def test_fit_to_grid_fills_the_sms():
    from cs336_systems.attention import flash_triton as ft

    tiles = ft.Tiles(ft.KernelTiles(128, 64, 8, 3), ft.KernelTiles(64, 128, 8, 3), ft.KernelTiles(128, 64, 4, 4))
    assert ft.fit_to_grid(tiles, 16, 16384, 16384, 132) == tiles          # 2048 programs: unchanged
    small = ft.fit_to_grid(tiles, 1, 2048, 2048, 132)
    assert small.forward.block_q == ft.MIN_FIT_BLOCK and small.forward.block_k <= small.forward.block_q
    assert small.dkdv.block_k == ft.MIN_FIT_BLOCK and small.dkdv.block_q <= small.dkdv.block_k
    assert ft.fit_to_grid(tiles, 1, 16384, 16384, 132).forward.block_q == 64  # 128 programs, then 256


def test_triton_36_interpreter_with_numpy_24_is_one_clear_error(monkeypatch):
    import numpy

    from cs336_systems.attention import flash_plan

    monkeypatch.setattr(numpy, "__version__", "2.4.0")
    with pytest.raises(RuntimeError, match=r"Triton 3\.6\.0's interpreter needs NumPy < 2\.4"):
        flash_plan._check_interpreter_numpy("3.6.0")
    flash_plan._check_interpreter_numpy("3.9.1")            # newer Tritons squeeze the arrays
    monkeypatch.setattr(numpy, "__version__", "2.3.5")
    flash_plan._check_interpreter_numpy("3.6.0")


# (batch, Nq, Nk, d, splits): ragged lengths; more slices than some query tiles have key tiles (their
# empty slices must weigh nothing); Nq != Nk non-causal only.
SPLIT_SHAPES = [(2, 45, 45, 16, 2), (1, 77, 77, 32, 4), (2, 37, 70, 64, 3), (1, 50, 23, 128, 8)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("shape", SPLIT_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_split_key_forward(device, is_causal, shape, monkeypatch):
    """The forward with each query tile's keys split across programs and then combined, through a
    plan that forces the split, against float64 (the backward reads its O and L)."""
    from cs336_systems.attention import flash_plan
    from cs336_systems.attention import flash_triton as ft

    batch, n_q, n_k, d, splits = shape
    if is_causal:
        n_k = n_q
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    q, k, v = random_qkv(batch, n_q, n_k, d, dtype, device)
    plan = flash_plan._Plan(q, k, v, is_causal, splits=splits)
    assert plan.splits == splits and isinstance(plan.forward, flash_plan._SplitForward)
    monkeypatch.setattr(ft, "_plan", lambda *_: plan)      # the plan FlashAttentionTriton takes
    check_against_reference(FlashAttentionTriton, q, k, v, is_causal)
    out, lse = ft.flash_forward_triton(q.detach(), k.detach(), v.detach(), is_causal, splits=splits)
    ref_out, ref_lse, _ = reference(q, k, v, is_causal, torch.zeros_like(q))
    torch.testing.assert_close(out.double(), ref_out, atol=TOLERANCE[dtype], rtol=TOLERANCE[dtype])
    torch.testing.assert_close(lse.double(), ref_lse, atol=1e-4, rtol=1e-5)


def test_forward_splits_fill_short_grids_only():
    from cs336_systems.attention import flash_triton as ft

    bf16, fp32 = torch.bfloat16, torch.float32
    t, wide = ft.KernelTiles(64, 64, 4, 3), ft.KernelTiles(128, 64, 8, 3)
    assert ft.forward_splits(wide, 16, 16384, 16384, 64, bf16, 132) == 1   # 2048 programs of 8 warps
    assert ft.forward_splits(wide, 1, 65536, 65536, 64, bf16, 132) == 1    # 512 of 8 warps: 31 per SM
    assert ft.forward_splits(t, 1, 16384, 16384, 64, bf16, 132) == 4       # 256 of 4 warps -> 1024
    assert ft.forward_splits(t, 1, 16384, 16384, 128, bf16, 132) == 2      # 16 warps per SM at d = 128
    assert ft.forward_splits(t, 1, 8192, 8192, 16, bf16, 132) == 8         # 128 -> 1024
    assert ft.forward_splits(t, 1, 2048, 2048, 64, bf16, 132) == 4         # at most 4 slices, bf16 d = 64
    assert ft.forward_splits(t, 1, 2048, 2048, 64, fp32, 132) == 8         # 8 in fp32
    assert ft.forward_splits(t, 1, 1024, 1024, 16, bf16, 132) == 4         # 16 key tiles: slices of 4
    assert ft.forward_splits(t, 1, 200, 200, 16, bf16, 132) == 1           # 4 key tiles: nothing to split
