"""Model building blocks against independent PyTorch references."""

import math

import pytest
import torch
import torch.nn.functional as F

from cs336_basics.model import (
    Embedding,
    Linear,
    MultiHeadSelfAttention,
    RMSNorm,
    RotaryPositionalEmbedding,
    SwiGLU,
    TransformerLM,
    causal_attention,
    scaled_dot_product_attention,
    set_attention,
    silu,
    softmax,
)


def test_linear_matches_matmul_and_f_linear():
    layer = Linear(24, 40)
    assert layer.weight.shape == (40, 24)
    x = torch.randn(3, 5, 24)
    out = layer(x)
    torch.testing.assert_close(out, x @ layer.weight.T)
    torch.testing.assert_close(out, F.linear(x, layer.weight))


def test_linear_init_is_truncated_normal():
    d_in, d_out = 300, 500
    weight = Linear(d_in, d_out).weight.detach()
    std = math.sqrt(2 / (d_in + d_out))
    # Truncation at 3 sigma shrinks the std by ~1.3%; 150k samples pin it well.
    assert weight.std().item() == pytest.approx(std, rel=0.03)
    assert weight.abs().max().item() <= 3 * std + 1e-7


def test_embedding_matches_f_embedding():
    emb = Embedding(50, 16)
    assert emb.weight.shape == (50, 16)
    ids = torch.randint(0, 50, (4, 7))
    torch.testing.assert_close(emb(ids), F.embedding(ids, emb.weight))
    assert emb.weight.abs().max().item() <= 3.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rmsnorm_matches_torch(dtype):
    norm = RMSNorm(32)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(32))
    norm = norm.to(dtype)
    x = (torch.randn(4, 6, 32) * 3).to(dtype)
    out = norm(x)
    assert out.dtype == dtype
    ref = F.rms_norm(x.float(), (32,), norm.weight.float(), eps=1e-5).to(dtype)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(out, ref, **tol)


def test_silu_and_softmax():
    x = torch.randn(5, 9) * 4
    torch.testing.assert_close(silu(x), F.silu(x))
    for dim in (0, 1, -1):
        torch.testing.assert_close(softmax(x, dim), torch.softmax(x, dim))
    big = torch.randn(5, 9).sign() * 1e4 + torch.randn(5, 9)
    out = softmax(big, -1)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, torch.softmax(big, -1))


def test_swiglu_matches_formula():
    ffn = SwiGLU(16, 40)
    x = torch.randn(2, 3, 16)
    w1, w2, w3 = ffn.w1.weight, ffn.w2.weight, ffn.w3.weight
    ref = (F.silu(x @ w1.T) * (x @ w3.T)) @ w2.T
    torch.testing.assert_close(ffn(x), ref)


def _random_mask(*shape):
    mask = torch.rand(*shape) > 0.5
    mask[..., 0] = True  # every query must see at least one key, else the row is all -inf
    return mask[..., torch.randperm(shape[-1])]


@pytest.mark.parametrize("lead", [(), (3,), (2, 3), (2, 2, 3)])
def test_sdpa_matches_torch(lead):
    n, m, d_k, d_v = 5, 7, 8, 6
    q, k, v = torch.randn(*lead, n, d_k), torch.randn(*lead, m, d_k), torch.randn(*lead, m, d_v)
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v), F.scaled_dot_product_attention(q, k, v))
    mask = _random_mask(*lead, n, m)
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, mask), F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    )


def test_sdpa_broadcast_mask():
    q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 4, 6, 8), torch.randn(2, 4, 6, 8)
    mask = _random_mask(5, 6)
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, mask), F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    )


def test_causal_attention_matches_torch():
    q, k, v = (torch.randn(2, 3, 9, 8) for _ in range(3))
    torch.testing.assert_close(causal_attention(q, k, v), F.scaled_dot_product_attention(q, k, v, is_causal=True))
    torch.testing.assert_close(causal_attention(q, k, v, is_causal=False), F.scaled_dot_product_attention(q, k, v))


def _rope_loop(x, positions, theta):
    """Explicit per-pair rotation, one (position, pair) at a time."""
    out = torch.empty_like(x)
    d_k = x.shape[-1]
    for idx in torch.cartesian_prod(*(torch.arange(s) for s in x.shape[:-1])).reshape(-1, x.dim() - 1):
        idx = tuple(idx.tolist())
        pos = positions[idx[-positions.dim():]].item() if positions.dim() else positions.item()
        for pair in range(d_k // 2):
            angle = pos * theta ** (-2 * pair / d_k)
            c, s = math.cos(angle), math.sin(angle)
            a, b = x[idx + (2 * pair,)].item(), x[idx + (2 * pair + 1,)].item()
            out[idx + (2 * pair,)] = a * c - b * s
            out[idx + (2 * pair + 1,)] = a * s + b * c
    return out


def test_rope_matches_pair_rotation_with_shuffled_positions():
    theta, d_k, max_len = 10000.0, 8, 64
    rope = RotaryPositionalEmbedding(theta, d_k, max_len)
    x = torch.randn(2, 5, d_k)
    positions = torch.stack([torch.randperm(max_len)[:5] for _ in range(2)])  # (batch, seq), non-contiguous
    torch.testing.assert_close(rope(x, positions), _rope_loop(x, positions, theta), rtol=1e-4, atol=1e-5)
    shared = torch.randperm(max_len)[:5]  # (seq,) broadcast over batch
    torch.testing.assert_close(rope(x, shared), _rope_loop(x, shared, theta), rtol=1e-4, atol=1e-5)
    assert not any(k in ("cos", "sin") for k in rope.state_dict())


def _mhsa_reference(mhsa, x, positions, theta):
    b, s, d = x.shape
    h = mhsa.num_heads
    d_k = d // h

    def heads(t):
        return t.view(b, s, h, d_k).transpose(1, 2)

    q, k, v = heads(x @ mhsa.q_proj.weight.T), heads(x @ mhsa.k_proj.weight.T), heads(x @ mhsa.v_proj.weight.T)
    # RoPE via complex multiplication: an independent formulation of the pair rotation.
    freqs = theta ** (-torch.arange(0, d_k, 2, dtype=torch.float64) / d_k)
    rot = torch.polar(torch.ones(s, d_k // 2, dtype=torch.float64), positions[:, None].double() * freqs)

    def rope(t):
        tc = torch.view_as_complex(t.double().reshape(b, h, s, d_k // 2, 2).contiguous())
        return torch.view_as_real(tc * rot).reshape(b, h, s, d_k).to(t.dtype)

    out = F.scaled_dot_product_attention(rope(q), rope(k), v, is_causal=True)
    return out.transpose(1, 2).reshape(b, s, d) @ mhsa.output_proj.weight.T


def test_mhsa_with_rope_matches_reference():
    theta = 10000.0
    mhsa = MultiHeadSelfAttention(32, 4, max_seq_len=16, theta=theta)
    x = torch.randn(3, 10, 32)
    positions = torch.arange(10)
    ref = _mhsa_reference(mhsa, x, positions, theta)
    torch.testing.assert_close(mhsa(x), ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(mhsa(x, positions), ref, rtol=1e-4, atol=1e-5)


def test_mhsa_rope_needs_max_seq_len():
    with pytest.raises(ValueError, match="max_seq_len"):
        MultiHeadSelfAttention(32, 4, theta=10000.0)


def test_set_attention_swaps_backend():
    model = TransformerLM(50, 16, 32, 2, 4, 64, 10000.0)
    tokens = torch.randint(0, 50, (2, 12))
    baseline = model(tokens)
    calls = []

    def counting_sdpa(q, k, v, is_causal):
        calls.append(q.shape)
        return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)

    set_attention(model, counting_sdpa)
    swapped = model(tokens)
    assert len(calls) == 2
    assert calls[0] == (2, 4, 12, 8)
    torch.testing.assert_close(swapped, baseline, rtol=1e-4, atol=1e-5)
    set_attention(model, causal_attention)
    model(tokens)
    assert len(calls) == 2  # the default back end is back; the counter is not called

    # Per-instance: another model is unaffected by the swap above.
    other = TransformerLM(50, 16, 32, 1, 4, 64, 10000.0, attention_fn=counting_sdpa)
    other(tokens)
    assert len(calls) == 3
    assert all(layer.attn.attention_fn is causal_attention for layer in model.layers)
