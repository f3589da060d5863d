"""Where each strategy stops being compute-bound, against closed-form crossings done by hand."""

import math

import pytest

from cs336_systems.accounting import scaling
from cs336_systems.accounting.hardware import H100_DGX_IB, H100_NVLINK
from cs336_systems.accounting.parallelism import STRATEGIES, DenseModel
from cs336_systems.accounting.transformer import XXL
from cs336_systems.models import MODEL_SIZES

B = 2 ** 20
C, W = 989e12, 450e9
XL = DenseModel.from_transformer("xl", MODEL_SIZES["xl"])
BIG = DenseModel.from_mlp_stack("XXL", XXL)


def test_dp_crossing_by_hand():
    # compute 6·Pm·B/(N·C) = comm 2·(N−1)/N·2·P/W  <=>  N − 1 = 1.5·(Pm/P)·B·W/C
    n = math.floor(1 + 1.5 * XL.matmul_parameters / XL.parameters * B * W / C)
    assert scaling.max_compute_bound_devices("DP", XL, H100_NVLINK, B) == n
    assert 700 < n < 720


def test_fsdp_crossing_by_hand():
    # comm 3·(N−1)/N·2·P/W: N − 1 = (Pm/P)·B·W/C
    n = math.floor(1 + BIG.matmul_parameters / BIG.parameters * B * W / C)
    assert scaling.max_compute_bound_devices("FSDP", BIG, H100_NVLINK, B) == n == 478


def test_tp_crossing_does_not_depend_on_the_batch():
    # XXL: 2 all-reduces of [B, D] per block per step; ratio 2·(N−1)·C/(3·F·W) <= 1
    n = math.floor(1 + 3 * 53248 * W / (2 * C))
    for tokens in (2 ** 14, B, 2 ** 24):
        assert scaling.max_compute_bound_devices("TP", BIG, H100_NVLINK, tokens) == n == 37


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("cluster", [H100_NVLINK, H100_DGX_IB])
def test_limit_is_the_crossing(strategy, cluster):
    y = scaling.best_tp_degree(BIG, cluster) if strategy == "FSDP+TP" else None
    step = y or 1
    top = scaling.max_compute_bound_devices(strategy, BIG, cluster, B, y)
    assert not scaling.evaluate(strategy, BIG, top, cluster, B, y).comm_bound
    assert scaling.evaluate(strategy, BIG, top + step, cluster, B, y).comm_bound


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_comm_over_compute_never_falls_with_more_devices(strategy):
    y = 8 if strategy == "FSDP+TP" else None
    ratios = [(p.comm_s / p.compute_s) for n in range(8, 4096, 8)
              for p in [scaling.evaluate(strategy, BIG, n, H100_DGX_IB, B, y)]]
    assert all(b >= a * (1 - 1e-12) for a, b in zip(ratios, ratios[1:]))


def test_memory_limits():
    assert scaling.min_fitting_devices("DP", BIG, H100_NVLINK) is None
    assert scaling.min_fitting_devices("FSDP", BIG, H100_NVLINK) == 44           # 3517.6 GB / 80 GB = 43.97
    assert scaling.min_fitting_devices("FSDP+TP", BIG, H100_NVLINK, tp_degree=8) == 48
    assert scaling.min_fitting_devices("DP", XL, H100_NVLINK) == 1               # 16 · 2.0e9 = 32 GB


def test_verdicts_for_xxl():
    v = {x.strategy: x for x in scaling.verdicts([BIG], [H100_NVLINK])}
    assert not v["DP"].usable                      # 3.5 TB of state on every device
    assert not v["TP"].usable                      # comm-bound at 38 devices, fits only from 44
    assert v["FSDP"].usable and v["FSDP+TP"].usable
    assert v["FSDP+TP"].compute_bound_up_to > v["FSDP"].compute_bound_up_to
