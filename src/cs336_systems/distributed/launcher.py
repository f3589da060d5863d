"""Run one function on N ranks of a process group, CPU (Gloo) or GPU (NCCL), and collect what each
rank returns.

    results = run_on_ranks(train, world_size=2, args=(config,))          # Gloo on the CPU
    results = run_on_ranks(train, world_size=2, backend="nccl")         # rank r on cuda:r

No fixed port: the parent opens the rendezvous store on a port the OS picks and hands its number to
the children, so parallel test runs cannot collide. Every wait has a limit — the whole run, the
process-group start and each collective — and a failure names the rank and carries its traceback.
"""
from __future__ import annotations

import datetime
import os
import queue
import sys
import time
import traceback
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from cs336_systems.timing import exception_line

HOST = "127.0.0.1"


class RankFailed(RuntimeError):
    """A rank raised, died or did not finish in time. The message's first line names the rank and
    what went wrong there (the line a record keeps); a raised rank's traceback follows it."""

    def __init__(self, rank: int, detail: str):
        super().__init__(f"rank {rank} failed: {detail}")
        self.rank, self.detail = rank, detail


def device_for(rank: int, backend: str) -> torch.device:
    """The device a rank computes on: under NCCL the GPU its process was given (``cuda:rank`` here, its
    local rank's under a launcher, ``ranks.run_launched``), the CPU under Gloo."""
    return torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")


def _child(rank: int, world_size: int, backend: str, port: int, collective_timeout_s: float,
           fn: Callable, args: tuple, results: mp.Queue) -> None:
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank)
        else:
            torch.set_num_threads(cpu_threads_per_rank(world_size))
        timeout = datetime.timedelta(seconds=collective_timeout_s)
        store = dist.TCPStore(HOST, port, world_size, is_master=False, timeout=timeout)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=timeout,
                                **({"device_id": torch.device("cuda", rank)} if backend == "nccl" else {}))
        try:
            value = fn(rank, world_size, *args)
        finally:
            dist.destroy_process_group()
        results.put((rank, True, value))
    except BaseException as exc:  # noqa: BLE001 - whatever it was, the parent must hear which rank
        # Its own line first (a traceback ends with it, but a message of several lines buries it).
        results.put((rank, False, f"{exception_line(exc)}\n{traceback.format_exc()}"))
    _leave(results)


def _leave(results: mp.Queue) -> None:
    """End a rank once its message is in the pipe, without the interpreter's teardown: a spawned
    process exits through ``sys.exit``, whose clearing of torch's modules took ~1 s a rank (several
    under load) after the work was done. Its process group is destroyed already, and it writes no
    files."""
    results.close()
    results.join_thread()           # the message has left this process
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_on_ranks(fn: Callable[..., Any], world_size: int, args: tuple = (), *, backend: str = "gloo",
                 timeout_s: float = 300, collective_timeout_s: float = 120) -> list[Any]:
    """Call ``fn(rank, world_size, *args)`` in ``world_size`` fresh processes that share a process
    group; return the values in rank order. ``fn`` and its arguments must be picklable (a module-level
    function). Return plain Python values or NumPy arrays, not tensors: torch.multiprocessing sends a
    tensor as a shared-memory handle that dies with the rank's process. Raises ``RankFailed`` for the first rank that raised, died or overran ``timeout_s``."""
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be gloo or nccl, got {backend!r}")
    if backend == "nccl" and torch.cuda.device_count() < world_size:
        raise ValueError(f"NCCL with {world_size} ranks needs {world_size} GPUs; "
                         f"this machine has {torch.cuda.device_count()}")
    timeout = datetime.timedelta(seconds=collective_timeout_s)
    store = dist.TCPStore(HOST, 0, world_size, is_master=True, timeout=timeout, wait_for_workers=False)
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_child, args=(rank, world_size, backend, store.port, collective_timeout_s,
                                              fn, args, results), daemon=True)
             for rank in range(world_size)]
    for p in procs:
        p.start()
    values: dict[int, Any] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(values) < world_size:
            try:
                rank, ok, value = results.get(timeout=1.0)
            except queue.Empty:
                dead = [r for r, p in enumerate(procs) if r not in values and p.exitcode not in (None, 0)]
                if dead:
                    raise RankFailed(dead[0], f"process exited with code {procs[dead[0]].exitcode}") from None
                if time.monotonic() > deadline:
                    missing = sorted(set(range(world_size)) - set(values))
                    raise RankFailed(missing[0], f"no result within {timeout_s:g} s "
                                                 f"(ranks still running: {missing})") from None
                continue
            if not ok:
                raise RankFailed(rank, value)
            values[rank] = value
    finally:
        for p in procs:
            p.join(timeout=10 if len(values) == world_size else 0.1)
            if p.is_alive():
                p.kill()
                p.join()
        del store
    return [values[r] for r in range(world_size)]


def cpu_threads_per_rank(world_size: int) -> int:
    """Intra-op threads for each CPU rank, so N ranks do not oversubscribe the cores."""
    return max(1, (os.cpu_count() or 1) // world_size)
