"""Beyond C9: how far each strategy scales on H100s before a step is communication-bound.

Strong scaling: a fixed global batch of ``GLOBAL_BATCH_TOKENS`` tokens per optimizer step is split
over N devices, so the per-device batch is B/N. Per step and device,

- compute: 6·P_matmul·B/(N·C), the same for every strategy (each splits the FLOPs evenly);
- communication: the bytes of ``parallelism.step_collectives`` over the link bandwidth.

A strategy "scales to" the largest N at which communication takes no longer than compute (so
it can hide under it). Model state (fp32 weights, gradients, Adam) must also fit in 80 GB;
activations are left out, since gradient accumulation or checkpointing bounds them without
changing the per-step traffic of DP and TP.
"""
from __future__ import annotations

from dataclasses import dataclass

from cs336_systems.accounting.hardware import GB, Cluster
from cs336_systems.accounting.parallelism import (STRATEGIES, DenseModel, comm_time, compute_time,
                                                  state_bytes_per_device, step_collectives)

# 2^20 ≈ 1M tokens per optimizer step: the order of the batches large LMs train with.
GLOBAL_BATCH_TOKENS = 2 ** 20
TP_DEGREES = (2, 4, 8)   # TP stays inside one 8-GPU node, where NVLink is


@dataclass(frozen=True)
class Point:
    strategy: str
    devices: int
    tp_degree: int | None
    compute_s: float
    comm_s: float
    state_GB: float

    @property
    def comm_bound(self) -> bool:
        return self.comm_s > self.compute_s


def evaluate(strategy: str, model: DenseModel, devices: int, cluster: Cluster,
             tokens: int = GLOBAL_BATCH_TOKENS, tp_degree: int | None = None) -> Point:
    collectives = step_collectives(strategy, model, devices, tokens, tp_degree)
    return Point(strategy, devices, tp_degree, compute_time(model, devices, tokens, cluster),
                 comm_time(collectives, cluster), state_bytes_per_device(strategy, model, devices) / GB)


def _device_counts(strategy: str, tp_degree: int | None, tokens: int) -> tuple[int, int]:
    """(step, largest N): FSDP+TP needs multiples of its TP degree; at least one token per device."""
    step = tp_degree if strategy == "FSDP+TP" else 1
    return step, tokens // step * step


def max_compute_bound_devices(strategy: str, model: DenseModel, cluster: Cluster,
                              tokens: int = GLOBAL_BATCH_TOKENS, tp_degree: int | None = None) -> int | None:
    """Largest N (a multiple of the TP degree for FSDP+TP) with comm <= compute; None if even the smallest is comm-bound.

    comm/compute never falls as N grows (compute shrinks as 1/N, ring traffic per device does not
    shrink that fast), so a binary search over N finds the crossing.
    """
    step, top = _device_counts(strategy, tp_degree, tokens)

    def ok(k: int) -> bool:
        return not evaluate(strategy, model, k * step, cluster, tokens, tp_degree).comm_bound

    lo, hi = 1, top // step
    if not ok(lo):
        return None
    while lo < hi:                       # invariant: ok(lo)
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid - 1)
    return lo * step


def min_fitting_devices(strategy: str, model: DenseModel, cluster: Cluster, tp_degree: int | None = None) -> int | None:
    """Smallest N whose per-device model state fits the device's memory; None if none does (DP never shards)."""
    hbm = int(cluster.device.hbm_bytes)
    whole = int(state_bytes_per_device(strategy, model, 1))
    if strategy == "DP":
        return 1 if whole <= hbm else None
    step = tp_degree if strategy == "FSDP+TP" else 1
    n = -(-whole // hbm)                  # ceil(16·P / HBM), in integers
    return -(-n // step) * step           # up to a multiple of the TP degree


@dataclass(frozen=True)
class Verdict:
    cluster: str
    model: str
    strategy: str
    tp_degree: int | None
    fits_from: int | None             # smallest N whose model state fits
    compute_bound_up_to: int | None   # largest N with comm <= compute
    tokens_per_device_at_limit: float | None

    @property
    def usable(self) -> bool:
        return (self.fits_from is not None and self.compute_bound_up_to is not None
                and self.fits_from <= self.compute_bound_up_to)


def best_tp_degree(model: DenseModel, cluster: Cluster, tokens: int = GLOBAL_BATCH_TOKENS) -> int:
    """The TP degree (inside a node) at which FSDP+TP stays compute-bound to the most devices."""
    def reach(y: int) -> int:
        return max_compute_bound_devices("FSDP+TP", model, cluster, tokens, y) or 0
    return max(TP_DEGREES, key=lambda y: (reach(y), -y))


def verdict(strategy: str, model: DenseModel, cluster: Cluster, tokens: int = GLOBAL_BATCH_TOKENS) -> Verdict:
    y = best_tp_degree(model, cluster, tokens) if strategy == "FSDP+TP" else None
    top = max_compute_bound_devices(strategy, model, cluster, tokens, y)
    return Verdict(cluster.name, model.name, strategy, y, min_fitting_devices(strategy, model, cluster, y),
                   top, None if top is None else tokens / top)


def verdicts(models: list[DenseModel], clusters: list[Cluster], tokens: int = GLOBAL_BATCH_TOKENS) -> list[Verdict]:
    return [verdict(s, m, c, tokens) for c in clusters for m in models for s in STRATEGIES]
