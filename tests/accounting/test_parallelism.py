"""Collective volumes against a simulated ring, and per-strategy traffic on hand-sized toys."""

import pytest

from cs336_systems.accounting.hardware import GB, H100_DGX_IB, H100_NVLINK, H100_SXM
from cs336_systems.accounting.parallelism import (DenseModel, all_gather_bytes, all_reduce_bytes, comm_time,
                                                  fsdp_transformer_state_bytes, reduce_scatter_bytes,
                                                  state_bytes_per_device, step_collectives)
from cs336_systems.models import MODEL_SIZES


def simulated_ring_all_reduce(values: list[list[float]]) -> tuple[list[list[float]], list[int]]:
    """Ring all-reduce on n devices holding n chunks each; returns the results and elements each device sent."""
    n = len(values)
    data = [list(v) for v in values]
    sent = [0] * n
    # Reduce-scatter: at step s device i sends chunk (i - s) to device i+1, which adds it.
    for s in range(n - 1):
        msgs = [(i, (i - s) % n, data[i][(i - s) % n]) for i in range(n)]
        for i, c, v in msgs:
            data[(i + 1) % n][c] += v
            sent[i] += 1
    # All-gather: device i now owns chunk (i + 1); pass finished chunks around.
    for s in range(n - 1):
        msgs = [(i, (i + 1 - s) % n, data[i][(i + 1 - s) % n]) for i in range(n)]
        for i, c, v in msgs:
            data[(i + 1) % n][c] = v
            sent[i] += 1
    return data, sent


@pytest.mark.parametrize("n", [2, 3, 4, 7, 8])
def test_ring_all_reduce_volume(n):
    values = [[float(10 * i + c) for c in range(n)] for i in range(n)]
    result, sent = simulated_ring_all_reduce(values)
    total = [sum(v[c] for v in values) for c in range(n)]
    assert all(r == total for r in result)                 # the simulation is a real all-reduce
    payload = n * 1000.0                                   # n chunks of 1000 bytes
    assert all(s * 1000.0 == pytest.approx(all_reduce_bytes(payload, n)) for s in sent)
    assert all_reduce_bytes(payload, n) == pytest.approx(2 * (n - 1) / n * payload)


def test_gather_and_scatter_by_hand():
    assert all_gather_bytes(400, 4) == 300
    assert reduce_scatter_bytes(400, 4) == 300
    assert all_reduce_bytes(400, 1) == 0


TOY = DenseModel("toy", parameters=1000, matmul_parameters=900, d_model=4, num_layers=2,
                 tp_allreduces_per_layer_forward=1)


def test_dp_and_fsdp_traffic_by_hand():
    (dp,) = step_collectives("DP", TOY, devices=4, tokens=10)
    assert dp.bytes_per_device == 2 * 3 / 4 * 2000          # bf16 gradients: 2000 bytes
    (fsdp,) = step_collectives("FSDP", TOY, devices=4, tokens=10)
    assert fsdp.bytes_per_device == 3 * 3 / 4 * 2000        # gather, gather, reduce-scatter
    assert fsdp.bytes_per_device / dp.bytes_per_device == 1.5


def test_tp_traffic_by_hand():
    # 2 layers x (1 forward + 1 backward) all-reduce of [10 tokens, 4] bf16 = 80 bytes; 2 devices send 80 each.
    (tp,) = step_collectives("TP", TOY, devices=2, tokens=10)
    assert tp.bytes_per_device == 4 * 80


def test_fsdp_tp_reduces_to_its_parts():
    fsdp_only = step_collectives("FSDP+TP", TOY, devices=4, tokens=10, tp_degree=1)
    assert fsdp_only[0].bytes_per_device == step_collectives("FSDP", TOY, 4, 10)[0].bytes_per_device
    tp_only = step_collectives("FSDP+TP", TOY, devices=4, tokens=10, tp_degree=4)
    assert tp_only[1].bytes_per_device == step_collectives("TP", TOY, 4, 10)[0].bytes_per_device
    assert tp_only[0].bytes_per_device == 0
    # x = 2, y = 2: FSDP of half the weights (1000 bytes bf16) over 2; TP of 5 tokens over 2.
    fsdp, tp = step_collectives("FSDP+TP", TOY, devices=4, tokens=10, tp_degree=2)
    assert fsdp.bytes_per_device == 3 * 1 / 2 * 1000
    assert tp.bytes_per_device == 4 * (2 * 1 / 2 * 5 * 4 * 2)


def test_bad_strategy_and_tp_degree():
    with pytest.raises(ValueError, match="unknown strategy"):
        step_collectives("ZeRO-9", TOY, 4, 10)
    with pytest.raises(ValueError, match="divides"):
        step_collectives("FSDP+TP", TOY, 6, 10, tp_degree=4)


def test_cluster_bandwidth_follows_the_node():
    # TP of 8 neighbours stays on NVLink; FSDP groups of stride 8 leave the node.
    _, tp = step_collectives("FSDP+TP", TOY, devices=16, tokens=10, tp_degree=8)
    fsdp, _ = step_collectives("FSDP+TP", TOY, devices=16, tokens=10, tp_degree=8)
    assert comm_time([tp], H100_DGX_IB) == pytest.approx(tp.bytes_per_device / (450 * GB))
    assert comm_time([fsdp], H100_DGX_IB) == pytest.approx(fsdp.bytes_per_device / (50 * GB))
    assert comm_time([fsdp], H100_NVLINK) == pytest.approx(fsdp.bytes_per_device / (450 * GB))
    assert H100_SXM.link_bandwidth * 2 == 900 * GB                    # NVLink 4: 900 GB/s both ways


def test_state_per_device():
    assert state_bytes_per_device("DP", TOY, 8) == 16_000
    assert state_bytes_per_device("FSDP", TOY, 8) == 2_000


def test_fsdp_state_keeps_norms_whole():
    tiny = MODEL_SIZES["tiny"]      # d 64, d_ff 128, 2 layers, vocab 10000
    sharded = 2 * 10000 * 64 + 2 * (4 * 64 * 64 + 3 * 64 * 128)
    norms = 2 * 2 * 64 + 64
    assert fsdp_transformer_state_bytes(tiny, 1) == 16 * (sharded + norms) == 16 * tiny.parameter_count()
    assert fsdp_transformer_state_bytes(tiny, 4) == 16 * (sharded / 4 + norms)
