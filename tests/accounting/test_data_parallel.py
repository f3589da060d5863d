"""accounting.data_parallel: the closed forms the data-parallel reports set measurements against,
checked against the model itself, a brute-force search and the ring all-reduce's byte count."""
import math
import random

import pytest

from cs336_systems.accounting import data_parallel
from cs336_systems.accounting.parallelism import all_reduce_bytes
from cs336_systems.models import build_model, get_size


@pytest.mark.parametrize("name", ["tiny", "small"])
def test_naive_ddp_makes_one_call_per_trainable_tensor_and_one_more(name):
    model = build_model(get_size(name), 16, device="meta")
    tensors = sum(1 for p in model.parameters() if p.requires_grad)
    assert data_parallel.naive_calls(get_size(name)) == tensors + 1


def test_the_optimal_bucket_count_is_the_minimum_of_the_overhead_model(seed):
    rng = random.Random(seed)
    for _ in range(5):
        grad_bytes, o_s, w = rng.uniform(1e8, 1e10), rng.uniform(5e-6, 1e-4), rng.uniform(5e10, 5e11)
        best = data_parallel.optimal_buckets(grad_bytes, o_s, w)
        # a fine scan of bucket counts around the closed form's optimum finds nothing lower
        scan = [best["n_buckets"] * (0.2 + k / 500) for k in range(2000)]
        lowest = min(data_parallel.overhead_model(n, grad_bytes, o_s, w) for n in scan)
        assert best["overhead_ms"] == pytest.approx(lowest * 1e3, rel=1e-6)
        assert best["bucket_MB"] * best["n_buckets"] == pytest.approx(grad_bytes / 1e6)


def test_passes_after_backward_take_two_gradient_sweeps_each_at_the_bandwidth():
    s, bandwidth = 8e9, 4.8e12
    assert data_parallel.after_backward_pass_ms("flat", s, bandwidth) == pytest.approx(3 * 2 * s / bandwidth * 1e3)
    assert data_parallel.after_backward_pass_ms("bucketed-avg-<MB>", s, bandwidth) == 0.0
    assert data_parallel.after_backward_pass_ms("bucketed-bf16-<MB>", s, bandwidth) is None   # not whole fp32 passes
    assert data_parallel.after_backward_pass_ms("naive", s, None) is None                     # a CPU: no bandwidth


@pytest.mark.parametrize("n", [2, 4, 8])
def test_bus_bandwidth_is_the_ring_s_bytes_per_rank_over_the_time(n):
    payload, seconds = 1e9, 0.01
    assert data_parallel.bus_bandwidth(payload / seconds, n) == pytest.approx(all_reduce_bytes(payload, n) / seconds)


def test_fsdp_state_per_rank_is_below_the_replicated_and_above_its_share():
    size = get_size("xl")
    state = data_parallel.training_state_per_rank(size, 2)
    assert state["replicated"] == 16 * size.parameter_count()          # fp32 weights, gradients, two Adam moments
    assert state["replicated"] / 2 <= state["fsdp"] < state["replicated"]
    assert math.isclose(data_parallel.training_state_per_rank(size, 1)["fsdp"], state["replicated"], rel_tol=1e-9)
