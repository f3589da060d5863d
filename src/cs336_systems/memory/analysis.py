"""What a memory trace says: its peak, where the peak falls, per-phase numbers, the largest
allocations and the code that made them, and a short series for plots (all JSON-ready)."""
from __future__ import annotations

from collections import defaultdict

from cs336_systems.memory.events import MemoryTrace, allocations, live_series, phase_at


def peak(trace: MemoryTrace) -> dict:
    """The most bytes live at once, when (ms from the trace start) and in which phase."""
    times, values = live_series(trace)
    if not values:
        return {"bytes": trace.initial_bytes, "time_ms": 0.0, "phase": None, "event": None}
    i = max(range(len(values)), key=values.__getitem__)
    return {"bytes": values[i], "time_ms": (times[i] - trace.start_us) / 1e3, "phase": phase_at(trace, times[i]),
            "event": i}


def phase_summary(trace: MemoryTrace) -> list[dict]:
    """Per phase: its span (ms from the trace start), the live bytes when it starts and ends, its
    peak, and the bytes it allocated and freed."""
    times, values = live_series(trace)
    out = []
    for p in trace.phases:
        idx = [i for i, t in enumerate(times) if p.start_us <= t <= p.end_us]
        before = [values[i] for i, t in enumerate(times) if t < p.start_us]
        at_start = before[-1] if before else trace.initial_bytes
        in_phase = [trace.events[i] for i in idx]
        out.append({
            "name": p.name,
            "start_ms": (p.start_us - trace.start_us) / 1e3,
            "end_ms": (p.end_us - trace.start_us) / 1e3,
            "bytes_at_start": at_start,
            "bytes_at_end": values[idx[-1]] if idx else at_start,
            "peak_bytes": max([values[i] for i in idx], default=at_start),
            "allocated_bytes": sum(e.size for e in in_phase if e.kind == "alloc"),
            "freed_bytes": sum(e.size for e in in_phase if e.kind == "free"),
            "events": len(idx),
        })
    return out


def top_allocations(trace: MemoryTrace, phase: str | None = "forward", k: int = 10) -> list[dict]:
    """The ``k`` largest allocation sizes made during ``phase`` (None: the whole trace), grouped by
    the code that made them: one row per (size, project frame, op, autograd node) with its count."""
    groups: dict[tuple, int] = defaultdict(int)
    for a in allocations(trace):
        e = a.event
        if e is None or (phase is not None and phase_at(trace, e.time_us) != phase):
            continue
        groups[(e.size, e.frame, e.op, e.node)] += 1
    rows = [{"size_bytes": size, "count": n, "frame": frame, "op": op, "node": node}
            for (size, frame, op, node), n in groups.items()]
    rows.sort(key=lambda r: (-r["size_bytes"], -r["count"], str(r["frame"])))
    return rows[:k]


def downsample(trace: MemoryTrace, points: int = 1500) -> list[list[float]]:
    """``[ms from start, live bytes]`` pairs, at most about ``2 * points`` of them: each bucket of
    events keeps its minimum and maximum, so the peak survives the thinning."""
    times, values = live_series(trace)
    if not times:
        return []
    t0 = trace.start_us
    step = max(1, len(times) // points)
    out = [[0.0, trace.initial_bytes]]
    for start in range(0, len(times), step):
        bucket = range(start, min(start + step, len(times)))
        lo = min(bucket, key=values.__getitem__)
        hi = max(bucket, key=values.__getitem__)
        for i in sorted({lo, hi}):
            out.append([round((times[i] - t0) / 1e3, 4), values[i]])
    return out


def analyse(trace: MemoryTrace, top_phase: str | None = "forward", k: int = 10) -> dict:
    """Everything a record keeps from a trace."""
    return {
        "source": trace.source,
        "phase_source": trace.phase_source,
        "events": len(trace.events),
        "initial_bytes": trace.initial_bytes,
        "peak": peak(trace),
        "phases": phase_summary(trace),
        "top_allocations": top_allocations(trace, top_phase, k),
        "oom_ms": [(t - trace.start_us) / 1e3 for t in trace.oom_us],
        "series": downsample(trace),
    }
