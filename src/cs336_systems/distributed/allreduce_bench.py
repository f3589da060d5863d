"""C1: all-reduce of float32 tensors, timed on every rank of one (backend, world size).

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m cs336_systems.distributed.allreduce_bench \
        --backend nccl --world-size 2 --sizes-mb 1 10 100 1000 --out row.json
    srun --nodes 2 --ntasks-per-node 1 python -m cs336_systems.distributed.allreduce_bench --backend nccl --world-size 2 ...

Started by a launcher (torchrun, srun: ``ranks.from_environment``), each process is one rank and rank
0 writes the records, which say where the ranks ran (``launch``: the launcher, hosts, nodes, ranks per
node). Started without one, it starts its ranks itself on this host (``launcher.run_on_ranks``).

Gloo runs on CPU tensors, NCCL on one GPU per rank. First one all-reduce of every rank's rank + 1
is checked against n(n+1)/2 (``sum_checked``; a wrong sum fails the row). Per size: 5 warm-up calls (``--warmup``), then
``--iters`` timed calls, each between two barriers-by-synchronization; every rank times its own
calls and the times are gathered to rank 0. A call's time is the slowest rank's (the collective is
done only when the last rank is), and the record holds the median over calls. Bandwidths in GB/s
(10⁹ B/s): algorithm bandwidth = bytes / time; bus bandwidth = algbw × 2(n−1)/n, the share of the
data each link of a ring carries, comparable across world sizes.

A world size the machine cannot host (more ranks than GPUs for NCCL, than cores for Gloo) is written
as ``skipped`` records with the reason, so the table shows the gap instead of hiding it.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch
import torch.distributed as dist

from cs336_systems.distributed.launcher import device_for, run_on_ranks
from cs336_systems.distributed.ranks import Launch, LaunchError, from_environment, launch_for, leave, run_launched, spawned
from cs336_systems.records import log, make_record, write_json_atomic
from cs336_systems.timing import PhaseTimer, synchronize

MB = 10**6
FP32 = 4


def bus_bandwidth(algbw: float, world_size: int) -> float:
    return algbw * 2 * (world_size - 1) / world_size


def _time_allreduce(rank: int, world_size: int, backend: str, sizes_mb: list[float], warmup: int,
                    iters: int) -> list[list[float]] | None:
    """On each rank: per size, the milliseconds of each timed call. Rank 0 returns every rank's lists."""
    device = device_for(rank, backend)
    # Once a row, what the call computes: every rank's rank + 1 sums to n(n+1)/2 on every rank (a
    # transport that drops or garbles data would still be timed). A wrong sum fails the row.
    check = torch.full((1024,), float(rank + 1), device=device)
    dist.all_reduce(check)
    expected = world_size * (world_size + 1) / 2
    if not bool(torch.all(check == expected)):
        raise RuntimeError(f"all-reduce summed to {sorted(set(check.tolist()))} on rank {rank}, not {expected:g}")
    per_size = []
    for size_mb in sizes_mb:
        tensor = torch.randn(int(size_mb * MB) // FP32, device=device)
        for _ in range(warmup):
            dist.all_reduce(tensor)
        synchronize(device)
        timer = PhaseTimer(device)                # synchronises before and after each call
        for _ in range(iters):
            dist.barrier()
            with timer.phase("all_reduce"):
                dist.all_reduce(tensor)
        per_size.append(timer.samples["all_reduce"])
        del tensor
    gathered = [None] * world_size
    dist.all_gather_object(gathered, per_size)
    return gathered if rank == 0 else None


def capacity(backend: str) -> tuple[int, str]:
    """How many ranks this machine can host for ``backend``, and what limits it."""
    if backend == "nccl":
        return torch.cuda.device_count(), "GPUs"
    return os.cpu_count() or 1, "CPU cores"


def run(backend: str, world_size: int, sizes_mb: list[float], warmup: int, iters: int,
        timeout_s: float, launch: Launch | None = None, skip: str | None = None) -> list[dict] | None:
    """The row's records (None on a launched rank other than 0, which writes nothing); ``skip``: the
    reason the row was not started (``placement.Unplaced``), written as its records."""
    def params(size_mb):
        return {"backend": backend, "world_size": world_size, "size_mb": size_mb,
                "device": "cuda" if backend == "nccl" else "cpu", "warmup": warmup, "iters": iters}

    if skip:
        log(f"C1 {backend} x{world_size}: skipped ({skip})")
        return [make_record("C1", params(s), "skipped", reason=skip) for s in sizes_mb]
    writes = launch is None or launch.rank == 0
    available, unit = capacity(backend)
    launched = spawned(world_size) if launch is None else launch.where()
    here = launched["ranks_per_node"] or world_size         # the ranks this host runs
    if here > available:
        if not writes:
            return None
        reason = f"{here} ranks need {here} {unit}; this machine has {available}"
        log(f"C1 {backend} x{world_size}: skipped ({reason})")
        return [make_record("C1", params(s), "skipped", reason=reason) for s in sizes_mb]
    if launch is None:
        per_rank = run_on_ranks(_time_allreduce, world_size, args=(backend, sizes_mb, warmup, iters),
                                backend=backend, timeout_s=timeout_s)[0]
    else:
        gathered = run_launched(_time_allreduce, launch, args=(backend, sizes_mb, warmup, iters), backend=backend)
        if not writes:
            return None
        per_rank = gathered[0]
    records = []
    for i, size_mb in enumerate(sizes_mb):
        # A call is finished when its slowest rank is.
        call_ms = [max(rank_times[i][k] for rank_times in per_rank) for k in range(iters)]
        ms = statistics.median(call_ms)
        algbw = size_mb * MB / (ms / 1e3) / 1e9
        metrics = {"ms": ms, "ms_min": min(call_ms), "ms_max": max(call_ms),
                   "algbw_GBps": algbw, "busbw_GBps": bus_bandwidth(algbw, world_size),
                   "per_rank_median_ms": [statistics.median(t[i]) for t in per_rank],
                   "sum_checked": True,         # _time_allreduce's sum of every rank's rank + 1 was right
                   "launch": launched}
        records.append(make_record("C1", params(size_mb), "ok", metrics))
        log(f"C1 {backend} x{world_size} {size_mb:g} MB: {ms:.3f} ms, busbw {metrics['busbw_GBps']:.2f} GB/s")
    return records


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.distributed.allreduce_bench",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=["gloo", "nccl"], required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--sizes-mb", type=float, nargs="+", required=True, help="tensor sizes in MB (10^6 bytes)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--timeout-s", type=float, default=540, help="limit for the whole row")
    p.add_argument("--out", required=True)
    p.add_argument("--skip", metavar="REASON", help="start no ranks: write the row as skipped, for this reason")
    args = p.parse_args(argv)
    if args.world_size < 2:
        p.error("--world-size must be at least 2 (an all-reduce over one rank moves nothing)")
    if min(args.sizes_mb) <= 0 or args.iters < 1 or args.warmup < 0:
        p.error("sizes must be positive, --iters at least 1, --warmup not negative")
    try:
        launch = launch_for(args.world_size)
    except LaunchError as exc:
        p.error(str(exc))
    records = run(args.backend, args.world_size, args.sizes_mb, args.warmup, args.iters, args.timeout_s, launch,
                  args.skip)
    if records is not None:
        write_json_atomic(args.out, records)
        log(f"wrote {len(records)} records -> {args.out}")
    return 0


if __name__ == "__main__":
    code = main()
    if from_environment() is not None:
        leave(code)
    sys.exit(code)
