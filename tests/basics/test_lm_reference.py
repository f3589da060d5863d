"""Whole TransformerLM against a pure-function float64 reference; state-dict layout; parameter counts."""

import math

import pytest
import torch

from cs336_basics.model import TransformerLM

CFG = dict(vocab_size=50, context_length=16, d_model=32, num_layers=2, num_heads=4, d_ff=64, rope_theta=10000.0)


def _rms_norm(x, g, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g


def _rope(x, theta):
    """Explicit pair rotation on (batch, heads, seq, d_k), positions 0..seq-1."""
    seq, d_k = x.shape[-2], x.shape[-1]
    pair = torch.arange(d_k // 2, dtype=torch.float64)
    angle = torch.arange(seq, dtype=torch.float64)[:, None] / theta ** (2 * pair / d_k)
    c, s = torch.cos(angle), torch.sin(angle)
    a, b = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = a * c - b * s
    out[..., 1::2] = a * s + b * c
    return out


def reference_lm(sd, tokens, cfg):
    """Plain tensor ops on the state dict, no modules."""
    sd = {k: v.double() for k, v in sd.items()}
    h, d = cfg["num_heads"], cfg["d_model"]
    b, seq = tokens.shape
    x = sd["token_embeddings.weight"][tokens]
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    for i in range(cfg["num_layers"]):
        p = f"layers.{i}."
        y = _rms_norm(x, sd[p + "ln1.weight"])
        q, k, v = (
            (y @ sd[p + f"attn.{name}.weight"].T).view(b, seq, h, d // h).transpose(1, 2)
            for name in ("q_proj", "k_proj", "v_proj")
        )
        q, k = _rope(q, cfg["rope_theta"]), _rope(k, cfg["rope_theta"])
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d // h)
        weights = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
        attn = (weights @ v).transpose(1, 2).reshape(b, seq, d)
        x = x + attn @ sd[p + "attn.output_proj.weight"].T
        y = _rms_norm(x, sd[p + "ln2.weight"])
        gate = y @ sd[p + "ffn.w1.weight"].T
        x = x + ((gate * torch.sigmoid(gate)) * (y @ sd[p + "ffn.w3.weight"].T)) @ sd[p + "ffn.w2.weight"].T
    return _rms_norm(x, sd["ln_final.weight"]) @ sd["lm_head.weight"].T


def _randomize_norm_gains(model):
    # Gains start at 1; perturb them so the reference actually exercises them.
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("ln1.weight", "ln2.weight", "ln_final.weight")):
                param.add_(0.3 * torch.randn_like(param))


def test_lm_matches_functional_reference():
    model = TransformerLM(**CFG)
    _randomize_norm_gains(model)
    model = model.double()
    tokens = torch.randint(0, CFG["vocab_size"], (3, CFG["context_length"]))
    logits = model(tokens)
    assert logits.shape == (3, CFG["context_length"], CFG["vocab_size"])
    assert logits.dtype == torch.float64
    # The RoPE cos/sin tables are stored in fp32 (they survive .double() with fp32 rounding), which
    # bounds agreement at ~1e-7; any real bug shows up as errors of order 1e-2 or more.
    ref = reference_lm(model.state_dict(), tokens, CFG)
    torch.testing.assert_close(logits, ref, rtol=1e-6, atol=1e-6)
    # With the tables rebuilt in fp64 the model must agree with the reference to rounding.
    for layer in model.layers:
        d_k = layer.attn.d_k
        inv_freq = CFG["rope_theta"] ** (-torch.arange(0, d_k, 2, dtype=torch.float64) / d_k)
        angles = torch.outer(torch.arange(CFG["context_length"], dtype=torch.float64), inv_freq)
        layer.attn.rope.cos, layer.attn.rope.sin = torch.cos(angles), torch.sin(angles)
    exact_logits = model(tokens)
    torch.testing.assert_close(exact_logits, ref, rtol=1e-12, atol=1e-12)
    # A shorter prefix gives the same logits for those positions (causality).
    torch.testing.assert_close(model(tokens[:, :7]), exact_logits[:, :7], rtol=1e-12, atol=1e-12)


def test_lm_float32_close_to_reference():
    model = TransformerLM(**CFG)
    tokens = torch.randint(0, CFG["vocab_size"], (2, 11))
    ref = reference_lm(model.state_dict(), tokens, CFG)
    torch.testing.assert_close(model(tokens).double(), ref, rtol=1e-4, atol=1e-4)


def test_state_dict_keys_and_shapes():
    model = TransformerLM(**CFG)
    V, d, f = CFG["vocab_size"], CFG["d_model"], CFG["d_ff"]
    expected = {"token_embeddings.weight": (V, d), "ln_final.weight": (d,), "lm_head.weight": (V, d)}
    for i in range(CFG["num_layers"]):
        for name in ("q_proj", "k_proj", "v_proj", "output_proj"):
            expected[f"layers.{i}.attn.{name}.weight"] = (d, d)
        expected[f"layers.{i}.ln1.weight"] = (d,)
        expected[f"layers.{i}.ln2.weight"] = (d,)
        expected[f"layers.{i}.ffn.w1.weight"] = (f, d)
        expected[f"layers.{i}.ffn.w3.weight"] = (f, d)
        expected[f"layers.{i}.ffn.w2.weight"] = (d, f)
    sd = model.state_dict()
    assert set(sd) == set(expected)
    assert {k: tuple(v.shape) for k, v in sd.items()} == expected


def test_too_long_sequence_rejected():
    model = TransformerLM(**CFG)
    with pytest.raises(ValueError, match="context_length"):
        model(torch.zeros(1, CFG["context_length"] + 1, dtype=torch.long))


# Expected parameter counts at vocab 10 000, from the assignment's own table. The dimensions are
# read from the project's one size table, so the pipeline and this test cannot drift apart.
EXPECTED_PARAMETERS = {
    "small": 128_625_408,
    "medium": 423_183_360,
    "large": 969_411_840,
    "xl": 1_998_235_200,
    "2.7B": 3_406_809_600,
}


@pytest.mark.parametrize("size", list(EXPECTED_PARAMETERS))
def test_parameter_counts_on_meta(size):
    from cs336_systems.models import MODEL_SIZES, build_model

    dims, V = MODEL_SIZES[size], 10_000
    d, d_ff, layers = dims.d_model, dims.d_ff, dims.num_layers
    model = build_model(dims, 1024, vocab_size=V, device="meta")
    count = sum(p.numel() for p in model.parameters())
    assert count == EXPECTED_PARAMETERS[size]
    assert count == 2 * V * d + layers * (4 * d * d + 3 * d * d_ff + 2 * d) + d
    assert count == dims.parameter_count(V)
    assert all(p.device.type == "meta" for p in model.parameters())
