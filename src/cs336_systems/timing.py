"""Timing helpers: synchronised phase timers and the out-of-memory test.

GPU work is asynchronous: a Python timer around a launch measures the launch, not the work.
Every phase timer therefore synchronises the device before it reads the clock at both ends.
"""
from __future__ import annotations

import statistics
import timeit
from contextlib import contextmanager
from typing import Callable, Iterator

import torch


def synchronize(device: torch.device | str) -> None:
    """Wait for all queued work on ``device`` (no-op on the CPU, whose ops are synchronous)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class PhaseTimer:
    """Collects wall-clock durations (milliseconds) per named phase.

    >>> timer = PhaseTimer("cpu")
    >>> with timer.phase("forward"):
    ...     pass
    >>> len(timer.samples["forward"])
    1
    """

    def __init__(self, device: torch.device | str):
        self.device = torch.device(device)
        self.samples: dict[str, list[float]] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        synchronize(self.device)
        start = timeit.default_timer()
        yield
        synchronize(self.device)
        self.samples.setdefault(name, []).append((timeit.default_timer() - start) * 1e3)


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


def reset_peak_memory(device: torch.device | str) -> None:
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def exception_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (at most 300 characters): what a record keeps of an error."""
    text = str(exc)
    return f"{type(exc).__name__}: {text.splitlines()[0][:300] if text else ''}"


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


def call_counting_oom(fn: Callable[[], dict]) -> tuple[str, dict, str | None]:
    """Run ``fn``; return ``("ok", metrics, None)`` or ``("oom", {}, message)``.

    Anything that is not an allocation failure propagates: an error is a bug to see, not a
    result to tabulate.
    """
    result: list[dict] = []
    message = oom_during(lambda: result.append(fn()))
    return ("oom", {}, message) if message else ("ok", result[0], None)
