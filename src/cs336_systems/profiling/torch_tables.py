"""The A2 tables from torch.profiler, where Nsight Systems is absent (the CPU, or no ``nsys``).

Same record shape as the nsys path, built from the profiler's events:

- range totals (like ``nvtx_sum``): every instance of each ``record_function`` range, CPU wall time;
- per range, a table of what ran inside its *first* instance (as ``--filter-nvtx`` does): on CUDA
  the kernels, on the CPU the operators with their *self* time (so nested operators are not
  counted twice).

Membership is by time window, not by thread: autograd runs CUDA backward work on its own thread,
whose operators are not children of the "backward" range. The phase ranges enclose a device
synchronisation at each end (the phase timer runs inside the range), so everything a phase
launched has finished inside its window. The attention ranges do not synchronise; on CUDA their
window is the range's GPU-side twin event (the span of the kernels it launched).
"""
from __future__ import annotations

from dataclasses import dataclass

from cs336_systems.profiling.ranges import ATTENTION_RANGES, MEASURED, MODE_PHASES, WARMUP

RANGE_NAMES = frozenset({*ATTENTION_RANGES, MEASURED, WARMUP, *(p for ps in MODE_PHASES.values() for p in ps)})


@dataclass(frozen=True)
class Event:
    name: str
    on_gpu: bool
    start_us: float
    end_us: float
    self_us: float        # CPU self time; for a kernel, its duration


def plain_events(profiler) -> list[Event]:
    """torch.profiler's FunctionEvents as plain ``Event`` values."""
    out = []
    for e in profiler.events():
        on_gpu = "cuda" in str(e.device_type).lower()
        start, end = float(e.time_range.start), float(e.time_range.end)
        out.append(Event(e.name, on_gpu, start, end, end - start if on_gpu else float(e.self_cpu_time_total)))
    return out


def range_totals(events: list[Event]) -> list[dict]:
    """Instances and wall-clock totals (ns) of each of our ranges, from its CPU-side events."""
    rows = []
    for name in sorted({e.name for e in events if not e.on_gpu and e.name in RANGE_NAMES}):
        durations = sorted((e.end_us - e.start_us) * 1e3 for e in events if not e.on_gpu and e.name == name)
        n = len(durations)
        rows.append({"domain": "", "range": name, "instances": n, "total_ns": sum(durations),
                     "avg_ns": sum(durations) / n, "med_ns": durations[n // 2] if n % 2 else
                     (durations[n // 2 - 1] + durations[n // 2]) / 2, "min_ns": durations[0], "max_ns": durations[-1]})
    return rows


def range_table(events: list[Event], range_name: str, gpu: bool) -> list[dict]:
    """What ran inside the first instance of ``range_name``: name, total ns, instances; largest first."""
    instances = sorted((e for e in events if e.name == range_name and not e.on_gpu), key=lambda e: e.start_us)
    if not instances:
        return []
    window = instances[0]
    if gpu and range_name in ATTENTION_RANGES:
        twins = [e for e in events if e.on_gpu and e.name == range_name and e.start_us >= window.start_us]
        if twins:
            window = min(twins, key=lambda e: e.start_us)
    totals: dict[str, list[float]] = {}
    for e in events:
        if e.on_gpu != gpu or e.name in RANGE_NAMES or e.name.startswith(("[", "ProfilerStep")):
            continue
        if window.start_us <= e.start_us and e.end_us <= window.end_us:
            t = totals.setdefault(e.name, [0.0, 0])
            t[0] += e.self_us * 1e3
            t[1] += 1
    rows = [{"name": name, "total_ns": t, "instances": n} for name, (t, n) in totals.items()]
    return sorted(rows, key=lambda r: -r["total_ns"])
