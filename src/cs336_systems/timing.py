"""Timing helpers: synchronised timers, the do_bench wrapper, and failures as results.

GPU work is asynchronous: a Python timer around a launch measures the launch, not the work.
Every phase timer therefore synchronises the device before it reads the clock at both ends.

Every experiment records a measurement that raised the same way: ``attempt`` runs it, and
``failure_status`` turns the exception into the record's status and message (``oom`` for an
allocation failure, ``error`` otherwise; one line; an error's traceback goes to the log).
"""
from __future__ import annotations

import statistics
import timeit
import traceback
from contextlib import contextmanager
from typing import Callable, Iterator

import torch


def synchronize(device: torch.device | str) -> None:
    """Wait for all queued work on ``device`` (no-op on the CPU, whose ops are synchronous)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class PhaseTimer:
    """Collects wall-clock durations (milliseconds) per named phase, and in ``host`` how long of each
    the host took to queue the phase's work (until its body returned, before the closing
    synchronisation). A phase whose host time is nearly all of it is bound by the host: the GPU
    waited for Python's launches, and the time says how fast the host was, which differs between
    processes on one machine (``report.spread.HOST_SWING``). On the CPU both are the same.

    >>> timer = PhaseTimer("cpu")
    >>> with timer.phase("forward"):
    ...     pass
    >>> len(timer.samples["forward"]), len(timer.host["forward"])
    (1, 1)
    """

    def __init__(self, device: torch.device | str):
        self.device = torch.device(device)
        self.samples: dict[str, list[float]] = {}
        self.host: dict[str, list[float]] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        synchronize(self.device)
        start = timeit.default_timer()
        yield
        queued = timeit.default_timer()
        synchronize(self.device)
        end = timeit.default_timer()
        self.samples.setdefault(name, []).append((end - start) * 1e3)
        self.host.setdefault(name, []).append((queued - start) * 1e3)


def loop_ms(fn: Callable[[], object], iters: int, device: torch.device | str) -> float:
    """Mean milliseconds per call of ``iters`` back-to-back calls of ``fn``, timed as one phase:
    synchronised before the first call and after the last, not between calls."""
    timer = PhaseTimer(device)
    with timer.phase("loop"):
        for _ in range(iters):
            fn()
    return timer.samples["loop"][0] / iters


def median_ms(fn: Callable[[], object], *, warmup_ms: float = 25, rep_ms: float = 100,
              grad_to_none=None) -> float:
    """Median milliseconds of ``fn()``: ``triton.testing.do_bench`` on CUDA (warm-up and repetitions
    by time, the L2 cache flushed between calls); on the CPU, one untimed call, then a timer loop of
    at most 20 calls or ``rep_ms``, whichever ends first."""
    if torch.cuda.is_available():
        import triton.testing
        return float(triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, grad_to_none=grad_to_none,
                                             return_mode="median"))
    fn()
    samples = []
    deadline = timeit.default_timer() + rep_ms / 1e3
    while not samples or (timeit.default_timer() < deadline and len(samples) < 20):
        start = timeit.default_timer()
        fn()
        samples.append((timeit.default_timer() - start) * 1e3)
    return statistics.median(samples)


def summarize(samples: list[float]) -> dict[str, float]:
    """Mean, sample standard deviation, median, min and max of a list of times (ms)."""
    if not samples:
        raise ValueError("no samples to summarise")
    return {
        "mean": statistics.fmean(samples),
        "std": statistics.stdev(samples) if len(samples) > 1 else 0.0,
        "median": statistics.median(samples),
        "min": min(samples),
        "max": max(samples),
        "n": len(samples),
    }


_OOM_MESSAGES = ("out of memory", "can't allocate memory", "cannot allocate memory")


def is_out_of_memory(exc: BaseException) -> bool:
    """True for the allocation failures of the CUDA caching allocator and of the CPU allocator."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc).lower() for m in _OOM_MESSAGES)


def free_device_memory(device: torch.device | str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def peak_memory_bytes(device: torch.device | str) -> int | None:
    """Peak bytes allocated by tensors on ``device`` since the last reset (None on the CPU)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return None


def allocator_calls(device: torch.device | str) -> int | None:
    """How many times the caching allocator has gone to the driver on ``device`` so far: its device
    allocations (cudaMalloc) plus its retries (a failed allocation that freed the cache and tried
    again). Each costs milliseconds and a synchronisation; a timed step that makes one is slower for
    a reason outside the step (None on the CPU)."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    stats = torch.cuda.memory_stats(device)
    return stats.get("num_device_alloc", 0) + stats.get("num_alloc_retries", 0)


def reset_peak_memory(device: torch.device | str) -> None:
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def exception_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (at most 300 characters): what a record keeps of an error."""
    text = str(exc)
    return f"{type(exc).__name__}: {text.splitlines()[0][:300] if text else ''}"


def failure_status(exc: BaseException) -> tuple[str, str]:
    """The record status and message of a measurement that raised ``exc``: ``("oom", line)`` for an
    allocation failure (``is_out_of_memory``), else ``("error", line)``, with ``line`` the one line
    of ``exception_line``. An error's traceback goes to stderr, which is the rule's log."""
    if is_out_of_memory(exc):
        return "oom", exception_line(exc)
    traceback.print_exception(exc)
    return "error", exception_line(exc)


def attempt(fn: Callable[[], dict]) -> tuple[str, dict, str | None]:
    """Run ``fn``: ``("ok", metrics, None)``, or ``(status, {}, message)`` of ``failure_status``
    when it raises. A failure is a result to record, not a crash."""
    try:
        return "ok", fn(), None
    except Exception as exc:  # noqa: BLE001 - recorded as oom / error; an error's traceback goes to the log
        status, message = failure_status(exc)
        return status, {}, message


def oom_during(fn: Callable[[], object]) -> str | None:
    """Run ``fn``; None when it finishes, the failure's line when it runs out of memory. Anything
    else propagates."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - filtered just below
        if not is_out_of_memory(exc):
            raise
        return exception_line(exc)
    return None
