"""Head dimensions that are not a power of two, or above 128, in the Triton kernels.

The kernels' tiles are a power of two wide (``flash_tiles.padded_head_dim``), or two such chunks
side by side where that is narrower (``flash_tiles.head_chunks``: 80 as 64 + 16, 72 as 64 + 16 with
8 masked, 160 as 128 + 32), and mask the columns past d; these tests hold the forward, dQ, dK and dV against float64 attention for such head
dimensions (80 and 96 as in the course's larger models, 160 to 256 past d = 128, and small odd
multiples of 8), with ragged lengths, in each dtype, causal and not. Without CUDA they run in
Triton's interpreter on short sequences; the ``gpu`` test runs them compiled on realistic lengths
against PyTorch's SDPA.
"""
from __future__ import annotations

import pytest
import torch

from cs336_systems.attention import flash_plan as fp
from cs336_systems.attention import flash_record
from cs336_systems.attention import flash_tiles
from cs336_systems.attention import flash_triton as ft
from cs336_systems.attention.flash_triton import FlashAttentionTriton
from cs336_systems.attention.inputs import check_inputs
from cs336_systems.attention.reference import attention_with_logsumexp

from .test_flash import CUDA, GRAD_TOLERANCE, TOLERANCE, check_against_reference, random_qkv, reference

fp32, fp16, bf16 = torch.float32, torch.float16, torch.bfloat16
interpreter_only = pytest.mark.skipif(CUDA, reason="compiled, these head dimensions are test_against_sdpa's")

# (batch, Nq, Nk, d, dtype, causal): lengths not multiples of the interpreter's 16- and 32-row
# tiles; Nk != Nq only without the mask (causal uses Nk = Nq).
CASES = [(2, 37, 37, 80, fp32, True), (1, 45, 70, 80, bf16, False), (2, 33, 33, 96, bf16, True),
         (1, 50, 23, 96, fp32, False), (1, 41, 41, 160, fp32, True), (2, 29, 52, 192, bf16, False),
         (1, 35, 35, 256, bf16, True), (1, 23, 40, 256, fp32, False), (2, 17, 17, 24, fp16, True),
         (1, 53, 31, 40, fp32, False), (1, 19, 19, 8, fp16, False), (1, 30, 30, 136, bf16, True)]


def _case_id(case) -> str:
    batch, n_q, n_k, d, dtype, causal = case
    return f"d{d}-{str(dtype)[6:]}-{batch}x{n_q}x{n_k}-{'causal' if causal else 'full'}"


@interpreter_only
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_forward_and_gradients(case):
    batch, n_q, n_k, d, dtype, causal = case
    check_against_reference(FlashAttentionTriton, *random_qkv(batch, n_q, n_k, d, dtype, "cpu"), causal)


@interpreter_only
@pytest.mark.parametrize("is_causal", [False, True])
def test_split_kernels_and_plain_path(is_causal, monkeypatch):
    """The split-key forward and the split backward, whose partial buffers are d (not the padded
    width) wide and whose combine kernels mask the padding too, through a plan that forces them;
    then the plain launches with strided dO."""
    n_q, d = 45, 72
    q, k, v = random_qkv(2, n_q, n_q if is_causal else 38, d, fp32, "cpu")
    plan = fp._Plan(q, k, v, is_causal, splits=3, split_backward=(2, 3))
    monkeypatch.setattr(ft, "_plan", lambda *_: plan)
    check_against_reference(FlashAttentionTriton, q, k, v, is_causal)
    q, k, v = (t.detach() for t in (q, k, v))
    grad_out = torch.randn(2, d, n_q).transpose(1, 2)
    out, lse = ft.flash_forward_triton(q, k, v, is_causal, splits=2)
    grads = ft.flash_backward_triton(q, k, v, out, grad_out, lse, is_causal, splits=(3, 2))
    ref_out, ref_lse, ref_grads = reference(q, k, v, is_causal, grad_out)
    torch.testing.assert_close(out.double(), ref_out, atol=TOLERANCE[fp32], rtol=TOLERANCE[fp32])
    torch.testing.assert_close(lse.double(), ref_lse, atol=1e-4, rtol=1e-5)
    for name, got, want in zip("qkv", grads, ref_grads):
        tol = GRAD_TOLERANCE[fp32]
        torch.testing.assert_close(got.double(), want, atol=tol, rtol=tol, msg=lambda m: f"d{name}: {m}")  # noqa: B023


@interpreter_only
def test_columns_past_d_are_never_read():
    """q, k, v and dO as the first 80 columns of 128-wide rows whose other columns are NaN: a single
    padding column read unmasked would put NaN into the output or a gradient."""
    def views(n):
        wide = torch.randn(1, n, 3, 128)
        wide[..., 80:] = float("nan")
        return [wide[:, :, i, :80].requires_grad_() for i in range(3)]
    q, k, v = views(39)
    (wide_grad := torch.full((1, 39, 128), float("nan")))[..., :80] = torch.randn(1, 39, 80)
    grad_out = wide_grad[..., :80]
    out = FlashAttentionTriton.apply(q, k, v, True)
    out.backward(grad_out)
    ref_out, _, ref_grads = reference(q, k, v, True, grad_out)
    torch.testing.assert_close(out.double(), ref_out, atol=TOLERANCE[fp32], rtol=TOLERANCE[fp32])
    for got, want in zip((q.grad, k.grad, v.grad), ref_grads):
        torch.testing.assert_close(got.double(), want, atol=GRAD_TOLERANCE[fp32], rtol=GRAD_TOLERANCE[fp32])


def test_accepted_head_dimensions():
    q = torch.empty(1, 4, 8)
    for d in range(8, 257, 8):
        q = torch.empty(1, 4, d)
        check_inputs(q, q, q, True)
    for d in (4, 12, 20, 100, 260, 264, 512):
        q = torch.empty(1, 4, d)
        with pytest.raises(ValueError, match=f"head dimension {d} is not supported; supported: multiples of 8 "
                                             "from 8 to 256"):
            check_inputs(q, q, q, True)


def test_head_chunks_cover_d_in_fewer_columns_than_padding():
    """Every accepted d: one or two power-of-two chunks of at least 16 columns that hold d; two only
    where they are narrower than the padded width and the first is wholly inside d."""
    def power_of_two(n):
        return n >= 16 and n & (n - 1) == 0
    for d in range(8, 257, 8):
        first, second = flash_tiles.head_chunks(d)
        whole = flash_tiles.padded_head_dim(d)
        assert power_of_two(first) and first + second >= d
        if second:
            assert power_of_two(second) and first < d and first + second < whole
        else:
            assert first == whole
    assert [flash_tiles.head_chunks(d) for d in (64, 72, 80, 96, 112, 160, 256)] == [
        (64, 0), (64, 16), (64, 16), (64, 32), (128, 0), (128, 32), (256, 0)]


def test_tiles_for_every_head_dimension(monkeypatch):
    """Off the interpreter: d = 16 to 128 keep their tiles (the tuner's winners where it measured);
    any other d takes its own tuned entry where the tuner measured it (bf16 d = 80, the 2.7B
    model's), else its padded width's, tuned or default, and the records say so."""
    monkeypatch.setattr(flash_tiles, "interpreting", lambda: False)
    for dtype in (fp32, fp16, bf16):
        for d in range(8, 257, 8):
            width = flash_tiles.padded_head_dim(d)
            assert width >= max(d, 16) and width & (width - 1) == 0 and width < 2 * max(d, 16)
            tiles = ft.choose_tiles(d, dtype)
            own = flash_tiles.TUNED.get(f"{flash_tiles._dtype_name(dtype)}_d{d}")
            if own is None:
                assert tiles == ft.choose_tiles(width, dtype)
            tuned = own or flash_tiles.TUNED.get(f"{flash_tiles._dtype_name(dtype)}_d{width}")
            assert tiles == (ft.Tiles.from_json(tuned["tiles"]) if tuned else ft.default_tiles(width, dtype))
            assert flash_record.tiles_from(d, dtype) == ("tuned" if tuned else "default")
    assert flash_tiles.tuned_key(80, bf16) == "bf16_d80" and flash_tiles.tuned_key(72, bf16) == "bf16_d128"
    assert flash_tiles.tuned_key(48, bf16) == "bf16_d64"
    assert flash_tiles.tuned_key(256, bf16) is None and flash_tiles.tuned_key(80, fp32) is None
    # 256 wide: shorter tiles than d = 128's, none longer than 64 rows.
    for dtype in (fp32, bf16):
        wide = ft.default_tiles(256, dtype)
        assert all(max(t.block_q, t.block_k) <= 64 for t in (wide.forward, wide.dkdv, wide.dq))


# (d, dtype, causal, N) compiled on a GPU, the heads folded into a batch of 4.
GPU_CASES = [(80, bf16, True, 2048), (80, fp32, False, 1024), (96, bf16, False, 1500), (160, bf16, True, 1024),
             (192, fp32, True, 1200), (256, bf16, True, 4096), (256, fp32, False, 1024), (40, bf16, True, 3000)]


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: f"d{c[0]}-{str(c[1])[6:]}-{'causal' if c[2] else 'full'}-{c[3]}")
def test_against_sdpa(case):
    """Output and gradients as close to float64 attention as PyTorch's SDPA in the same dtype, up
    to a factor of 4 or a floor of the dtype's rounding of the largest value."""
    d, dtype, causal, n = case
    q, k, v = random_qkv(4, n, n, d, dtype, "cuda")
    grad_out = torch.randn_like(q)
    ours = [FlashAttentionTriton.apply(q, k, v, causal)]
    ours += torch.autograd.grad(ours[0], (q, k, v), grad_out)
    sdpa = [torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)]
    sdpa += torch.autograd.grad(sdpa[0], (q, k, v), grad_out)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = [attention_with_logsumexp(q64, k64, v64, causal)[0]]
    ref += torch.autograd.grad(ref[0], (q64, k64, v64), grad_out.double())
    floor = {fp32: 2e-5, bf16: 4e-3}[dtype]
    for name, got, theirs, want in zip(("O", "dQ", "dK", "dV"), ours, sdpa, ref):
        assert got.dtype == dtype and got.shape == want.shape
        err, sdpa_err = ((x.double() - want).abs().max().item() for x in (got, theirs))
        limit = max(4 * sdpa_err, floor * want.abs().max().item())
        assert err <= limit, f"{name}: max error {err:.3g}, SDPA's {sdpa_err:.3g}, limit {limit:.3g}"
