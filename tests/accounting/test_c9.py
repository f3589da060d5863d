"""C9 (a)–(c) for XXL, recomputed here from the spec's constants, and the (c) derivation checked on its times."""

import math

import pytest

from cs336_systems.accounting import c9
from cs336_systems.accounting.c9 import Mesh, compute_bound_batch, forward_layer_times
from cs336_systems.accounting.transformer import MLPStack

D, F, L = 16384, 53248, 126
P = L * 2 * D * F
C, W = 4.6e14, 2 * 9e10
M_X, M_Y, X, Y = 2, 1, 16, 4


def test_a_single_device():
    a = c9.single_device_memory(tokens=2048)
    assert a["master_weights"] == a["gradients"] == 4 * P
    assert a["adam_state"] == 8 * P
    assert a["training_state"] / 1e9 == pytest.approx(3517.578215424)
    assert a["activations_per_token"] == 2 * L * (D + F) == 17_547_264
    assert a["activations"] == 2 * L * (D + F) * 2048
    ans = c9.answers()["a"]
    assert ans["h100s_for_state"] == 44                      # 3517.6 / 80 = 43.97
    assert ans["h100s_for_state_and_activations"] == math.ceil((16 * P + 2 * L * (D + F) * 2048) / 80e9) == 45


@pytest.mark.parametrize("tokens", [0, 1024, 2048, 4096, 8192])
def test_b_smallest_fsdp_degree(tokens):
    n = c9.fsdp_devices_to_fit(tokens=tokens)
    act = 2 * L * (D + F) * tokens

    def per_device(k):
        return (16 * P + act / 2) / k + act / 2

    assert per_device(n) <= 95e9 < per_device(n - 1)
    assert c9.fsdp_memory_per_device(n, tokens=tokens) == pytest.approx(per_device(n))


def test_b_state_only_and_the_floor():
    assert c9.fsdp_devices_to_fit(tokens=0) == 38                      # 3517.6 / 95 = 37.03
    t = c9.max_tokens_for_any_fsdp()
    assert L * (D + F) * t < 95e9 <= L * (D + F) * (t + 1)             # A/2 = 2·L·(D+F)·T / 2
    assert c9.fsdp_devices_to_fit(tokens=t + 1) is None


def test_c_numbers_from_the_constants():
    c = compute_bound_batch()
    alpha = C / W
    assert c.alpha == pytest.approx(2555.555, rel=1e-6)
    assert c.per_device_tokens == pytest.approx(alpha / (M_X * Y)) == pytest.approx(319.444, rel=1e-5)
    assert c.overall_tokens == pytest.approx(c.per_device_tokens * X * Y) == pytest.approx(20444.44, rel=1e-6)
    assert c.tp_limit == pytest.approx(M_Y * F / alpha) and c.tp_compute_bound


def test_c_threshold_is_where_math_meets_the_fsdp_gather():
    b = compute_bound_batch().overall_tokens
    at = forward_layer_times(b)
    assert at["math"] == pytest.approx(at["fsdp"])
    assert at["tp"] < at["math"]
    below, above = forward_layer_times(0.99 * b), forward_layer_times(1.01 * b)
    assert below["math"] < below["fsdp"] and above["math"] > above["fsdp"]
    # The per-layer times themselves, from the layout: math 4BDF/(XYC), gather 4DF/(Y·M_X·W), all-reduce 4BD/(X·M_Y·W).
    assert at["math"] == pytest.approx(4 * b * D * F / (X * Y * C))
    assert at["fsdp"] == pytest.approx(4 * D * F / (Y * M_X * W))
    assert at["tp"] == pytest.approx(4 * b * D / (X * M_Y * W))


def test_c_serial_threshold_and_tp_limit():
    c = compute_bound_batch()
    at = forward_layer_times(c.serial_overall_tokens)
    assert at["math"] == pytest.approx(at["fsdp"] + at["tp"])
    too_wide = compute_bound_batch(mesh=Mesh(x=16, y=21))
    assert not too_wide.tp_compute_bound
    t = forward_layer_times(1e6, mesh=Mesh(x=16, y=21))
    assert t["tp"] > t["math"]                                          # at any batch


def test_c_best_split_balances_all_three():
    c = compute_bound_batch()
    y = c.tp_limit
    mesh = Mesh(x=64 / y, y=y)          # 64 devices with TP at its limit (a real-valued split)
    b = c.best_split_per_device_tokens * 64
    t = forward_layer_times(b, mesh=mesh)
    assert t["math"] == pytest.approx(t["fsdp"]) and t["math"] == pytest.approx(t["tp"])


def test_c_on_a_toy_model_by_hand():
    toy = MLPStack(d_model=2, d_ff=100, num_blocks=1)
    from cs336_systems.accounting.hardware import Accelerator
    dev = Accelerator("toy", hbm_bytes=1, bf16_flops=1000.0, link_bandwidth=10.0, source="test")
    c = compute_bound_batch(toy, Mesh(x=4, y=2, m_x=1, m_y=1), dev)
    # α = 100; B/X >= α/M_X = 100 -> B = 400, B/N = 50; TP limit F/α = 1.
    assert (c.alpha, c.overall_tokens, c.per_device_tokens, c.tp_limit) == (100.0, 400.0, 50.0, 1.0)
    assert not c.tp_compute_bound


def test_tricks_have_equations_and_references():
    assert len(c9.TRICKS) >= 5
    for t in c9.TRICKS:
        assert t.equation and t.references and ("arXiv:" in t.references or "Scale Your Model" in t.references)
