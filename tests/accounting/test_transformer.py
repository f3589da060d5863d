"""Parameter counts, memory and FLOPs against hand-counted toys and the real cs336_basics model."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from cs336_basics.model import Embedding, Linear
from cs336_systems.accounting.transformer import (XXL, MLPStack, forward_flops, saved_activation_bytes,
                                                  train_step_flops, training_state_bytes,
                                                  transformer_matmul_parameters, transformer_parameter_breakdown,
                                                  transformer_parameter_tensors)
from cs336_systems.models import MODEL_SIZES, build_model

TOY = MLPStack(d_model=3, d_ff=5, num_blocks=2)


def test_toy_mlp_stack_by_hand():
    # Two blocks of a 3x5 and a 5x3 matrix: 2 * (15 + 15) = 60 weights.
    assert TOY.parameter_count() == 60
    # Saved per token: each block keeps its 3-wide input and its 5-wide hidden: 2 * (3 + 5) = 16 values.
    assert TOY.saved_activation_values_per_token() == 16
    assert saved_activation_bytes(TOY, tokens=10) == 16 * 10 * 2      # bf16
    assert saved_activation_bytes(TOY, tokens=10, dtype="fp32") == 16 * 10 * 4


def test_xxl_from_the_spec():
    d, f, blocks = 16384, 53248, 126
    assert XXL.parameter_count() == blocks * (d * f + f * d) == 219_848_638_464
    assert XXL.saved_activation_values_per_token() == 126 * 69632


def test_training_state_is_sixteen_bytes_per_parameter():
    state = training_state_bytes(1000)
    assert state == {"master_weights": 4000, "gradients": 4000, "adam_state": 8000}


@pytest.mark.parametrize("size", ["tiny", "small", "xl"])
def test_breakdown_matches_the_real_model(size):
    model = build_model(MODEL_SIZES[size], 16, device="meta")
    by_kind = {"embedding": 0, "attention": 0, "ffn": 0, "norms": 0, "lm_head": 0}
    for name, p in model.named_parameters():
        kind = ("embedding" if name.startswith("token_embeddings") else "lm_head" if name.startswith("lm_head")
                else "attention" if ".attn." in name else "ffn" if ".ffn." in name
                else "norms" if ".ln" in name or name.startswith("ln_final") else name)
        by_kind[kind] += p.numel()
    assert transformer_parameter_breakdown(MODEL_SIZES[size]) == by_kind


@pytest.mark.parametrize("size", ["tiny", "xl"])
def test_parameter_tensors_are_the_real_model_s(size):
    model = build_model(MODEL_SIZES[size], 16, device="meta")
    matrices = sum(1 for m in model.modules() if isinstance(m, (Linear, Embedding)))
    found = transformer_parameter_tensors(MODEL_SIZES[size])
    assert found["matrices"] == matrices and sum(found.values()) == len(list(model.parameters()))


def test_matmul_parameters_are_the_linear_weights():
    model = build_model(MODEL_SIZES["tiny"], 16, device="meta")
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, Linear))
    assert transformer_matmul_parameters(MODEL_SIZES["tiny"]) == linear
    # tiny by hand: 2 layers * (4*64*64 + 3*64*128) + LM head 10000*64
    assert linear == 2 * (16384 + 24576) + 640_000 == 721_920


def test_two_and_six_flops_per_parameter_against_torch_counter():
    torch.manual_seed(0)
    layers = []
    for _ in range(TOY.num_blocks):
        layers += [torch.nn.Linear(TOY.d_model, TOY.d_ff, bias=False), torch.nn.Linear(TOY.d_ff, TOY.d_model, bias=False)]
    net = torch.nn.Sequential(*layers)
    tokens = 7
    x = torch.randn(tokens, TOY.d_model, requires_grad=True)   # so backward forms every input gradient
    with FlopCounterMode(display=False) as fwd:
        y = net(x)
    assert fwd.get_total_flops() == forward_flops(TOY.matmul_parameter_count(), tokens) == 2 * 60 * 7
    with FlopCounterMode(display=False) as both:
        net(x).sum().backward()
    assert both.get_total_flops() == train_step_flops(TOY.matmul_parameter_count(), tokens) == 6 * 60 * 7
    del y
