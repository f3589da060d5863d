"""How long an E1 job's per-rung copies take from host to device: the 2.7B model's fp32 weights
(restore) and the reference's gradients (the gradient check), each 10.7 GB in the model's tensors,
from pageable against page-locked memory, in turns. Run on a GPU from the repository root:
    python lab/e1-rungs/probe_host_copy.py [SIZE]
"""
import statistics
import sys
import time

import torch

from cs336_systems.models import build_model, get_size
from cs336_systems.training_step.check import host_copy


def timed(fn) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def main(size: str = "2.7B") -> None:
    params = list(build_model(get_size(size), 1024, device="cuda").parameters())
    gb = sum(p.numel() * p.element_size() for p in params) / 1e9
    pageable = [p.detach().to("cpu", copy=True) for p in params]
    pinned = [host_copy(p) for p in params]
    assert all(t.is_pinned() for t in pinned) and not any(t.is_pinned() for t in pageable)

    def back(saved, non_blocking):
        with torch.no_grad():
            for p, s in zip(params, saved):
                p.copy_(s, non_blocking=non_blocking)

    times = {"pageable": [], "page-locked": [], "page-locked, non-blocking": []}
    for _ in range(5):          # in turns
        times["pageable"].append(timed(lambda: back(pageable, False)))
        times["page-locked"].append(timed(lambda: back(pinned, False)))
        times["page-locked, non-blocking"].append(timed(lambda: back(pinned, True)))
    down = {"pageable": timed(lambda: [p.detach().to("cpu", copy=True) for p in params]),
            "page-locked": timed(lambda: [host_copy(p) for p in params])}
    print(f"{size}: {len(params)} tensors, {gb:.1f} GB, {torch.cuda.get_device_name()}")
    for how, t in times.items():
        med = statistics.median(t)
        print(f"  host -> device, {how}: median {med:.3f} s ({gb / med:.1f} GB/s), 5 turns {', '.join(f'{x:.3f}' for x in t)}")
    for how, t in down.items():
        print(f"  device -> host, {how} (allocating): {t:.3f} s ({gb / t:.1f} GB/s)")


if __name__ == "__main__":
    main(*sys.argv[1:])
