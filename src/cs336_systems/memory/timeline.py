"""The active-memory timeline: live allocations stacked over time, with the phases shaded.

Bands, bottom to top: memory live before the step (parameters, optimizer state, the batch); the
``k`` code sites that hold the most memory at the peak, each its own band (a site is the line of
our code that made the allocation, or for the backward pass the autograd node); then everything
else, grouped by the phase that allocated it. A band per site rather than per allocation, because a
large model makes thousands of equally sized activation blocks and what the reader wants to know is
which line of code makes the peak. The top edge of the stack is the live-bytes series itself.

The measuring job stores the bands in its record (``timeline_data``) and the A5 report draws them
(``cs336_systems.report.a5_timeline``), so that a figure redraws from committed records; nothing
here draws, and an edit to the drawing re-runs the report, not the measurement.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cs336_systems.memory.events import MemoryTrace, allocations, phase_at

INITIAL_BAND = "live before the step"
PHASE_COLOURS = {"forward": "#4c72b0", "backward": "#dd8452", "optimizer": "#55a868"}


@dataclass
class Bands:
    times_ms: np.ndarray          # x: one point before the first event, then one per event
    labels: list[str]             # bottom to top
    values: np.ndarray            # (len(labels), len(times_ms)) live bytes per band


def site_of(event) -> str:
    if event.frame:
        return event.frame
    if event.node:
        return f"{event.node} (autograd)"
    return f"aten::{event.op}" if event.op else "unattributed"


def stack_bands(trace: MemoryTrace, k: int = 8) -> Bands:
    """Live bytes per band after each event (exact, no thinning)."""
    allocs = allocations(trace)
    n = len(trace.events)
    t0 = trace.start_us
    times = np.array([t0] + [e.time_us for e in trace.events], dtype=float)
    times_ms = (times - t0) / 1e3

    def label(a) -> str:
        return INITIAL_BAND if a.event is None else site_of(a.event)

    # Rank sites by the bytes they hold at the peak of the total.
    delta = np.zeros(n + 1, dtype=np.int64)
    for a in allocs:
        delta[a.start + 1] += a.size
        if a.end is not None:
            delta[a.end + 1] -= a.size
    total = np.cumsum(delta)
    peak_at = int(np.argmax(total)) if n else 0
    held: dict[str, int] = {}
    for a in allocs:
        if a.event is not None and a.start + 1 <= peak_at and (a.end is None or a.end + 1 > peak_at):
            held[label(a)] = held.get(label(a), 0) + a.size
    top = [s for s, _ in sorted(held.items(), key=lambda kv: -kv[1])[:k]]

    def band(a) -> str:
        if a.event is None:
            return INITIAL_BAND
        site = label(a)
        if site in top:
            return site
        phase = phase_at(trace, a.event.time_us)
        return f"other, allocated in {phase}" if phase else "other"

    others = sorted({band(a) for a in allocs} - set(top) - {INITIAL_BAND},
                    key=lambda b: (list(PHASE_COLOURS).index(b.rsplit(" ", 1)[-1])
                                   if b.rsplit(" ", 1)[-1] in PHASE_COLOURS else 99, b))
    labels = [INITIAL_BAND] + others + top
    index = {b: i for i, b in enumerate(labels)}
    deltas = np.zeros((len(labels), n + 1), dtype=np.int64)
    for a in allocs:
        row = index[band(a)]
        deltas[row, a.start + 1] += a.size
        if a.end is not None:
            deltas[row, a.end + 1] -= a.size
    return Bands(times_ms, labels, np.cumsum(deltas, axis=1))


def _thin(bands: Bands, points: int) -> Bands:
    """Keep each of ``points`` buckets' lowest and highest total, so the top edge keeps the peak."""
    n = bands.times_ms.size
    if n <= 2 * points:
        return bands
    total = bands.values.sum(axis=0)
    bounds = np.linspace(0, n, points + 1).astype(int)      # equal buckets: at most 2 * points + 2 kept
    keep = {0, n - 1}
    for start, end in zip(bounds[:-1], bounds[1:]):
        chunk = total[start:end]
        keep.update((start + int(np.argmin(chunk)), start + int(np.argmax(chunk))))
    idx = np.array(sorted(keep))
    return Bands(bands.times_ms[idx], bands.labels, bands.values[:, idx])


def timeline_data(trace: MemoryTrace, k: int = 8, points: int = 200) -> dict:
    """The timeline as the record keeps it (JSON-ready), for the report to draw.

    The bands are thinned to at most ``2 * points + 2`` times, values in MiB to two decimals: the
    record is committed, and the writer indents every number onto its own line. The peak is the
    exact one, from the unthinned bands.
    """
    bands = stack_bands(trace, k)
    thinned = _thin(bands, points)
    total = bands.values.sum(axis=0)
    t0 = trace.start_us
    return {
        "source": trace.source,
        "k": k,
        "peak_bytes": int(total.max()) if total.size else 0,
        "labels": thinned.labels,
        "times_ms": [round(float(t), 3) for t in thinned.times_ms],
        "values_mib": [[round(float(v) / 2**20, 2) for v in row] for row in thinned.values],
        "phases": [{"name": p.name, "start_ms": round((p.start_us - t0) / 1e3, 3),
                    "end_ms": round((p.end_us - t0) / 1e3, 3)} for p in trace.phases],
        "oom_ms": [round((t - t0) / 1e3, 3) for t in trace.oom_us],
    }
