"""The active-memory timeline: live allocations stacked over time, with the phases shaded.

Bands, bottom to top: memory live before the step (parameters, optimizer state, the batch); the
``k`` code sites that hold the most memory at the peak, each its own band (a site is the line of
our code that made the allocation, or for the backward pass the autograd node); then everything
else, grouped by the phase that allocated it. A band per site rather than per allocation, because a
large model makes thousands of equally sized activation blocks and what the reader wants to know is
which line of code makes the peak. The top edge of the stack is the live-bytes series itself.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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
    """Keep each bucket's lowest and highest total, so the drawn top edge keeps the peak."""
    n = bands.times_ms.size
    if n <= 2 * points:
        return bands
    total = bands.values.sum(axis=0)
    step = n // points
    keep = {0, n - 1}
    for start in range(0, n, step):
        chunk = total[start:start + step]
        keep.update((start + int(np.argmin(chunk)), start + int(np.argmax(chunk))))
    idx = np.array(sorted(keep))
    return Bands(bands.times_ms[idx], bands.labels, bands.values[:, idx])


def render_timeline(trace: MemoryTrace, path: str | Path, title: str, k: int = 8, points: int = 3000) -> Bands:
    """Draw the timeline PNG at ``path``; return the exact bands it was drawn from."""
    from cs336_systems.figures import plt, save_figure

    bands = stack_bands(trace, k)
    drawn = _thin(bands, points)
    total = bands.values.sum(axis=0)
    peak = int(total.max()) if total.size else 0
    unit, scale = ("GiB", 2**30) if peak >= 2 * 2**30 else ("MiB", 2**20)
    fig, ax = plt.subplots(figsize=(11, 5))
    site_colours = iter(c for i, c in enumerate(plt.get_cmap("tab10").colors) if i != 7)   # 7 is grey
    colours = []
    for b in drawn.labels:
        if b == INITIAL_BAND:
            colours.append("#8c8c8c")
        elif b.startswith("other"):
            phase = b.rsplit(" ", 1)[-1]
            colours.append(PHASE_COLOURS.get(phase, "#bbbbbb"))
        else:
            colours.append(next(site_colours, "#cccccc"))
    alphas = [0.35 if b.startswith("other") else 0.9 for b in drawn.labels]
    lower = np.zeros(drawn.times_ms.size)
    for values, colour, alpha, label in zip(drawn.values, colours, alphas, drawn.labels):
        upper = lower + values / scale
        ax.fill_between(drawn.times_ms, lower, upper, step="post", color=colour, alpha=alpha, linewidth=0,
                        label=label)
        lower = upper
    ax.step(drawn.times_ms, lower, where="post", color="black", linewidth=0.6)
    top = peak / scale * 1.12 if peak else 1
    for p in trace.phases:
        start, end = (p.start_us - trace.start_us) / 1e3, (p.end_us - trace.start_us) / 1e3
        ax.axvspan(start, end, color=PHASE_COLOURS.get(p.name, "#999999"), alpha=0.07, linewidth=0)
        ax.axvline(start, color="black", linewidth=0.5, linestyle=":")
        ax.text((start + end) / 2, top * 0.97, p.name, ha="center", va="top", fontsize=9)
    for t in trace.oom_us:
        ax.axvline((t - trace.start_us) / 1e3, color="red", linewidth=1.2)
        ax.text((t - trace.start_us) / 1e3, top * 0.9, " out of memory", color="red", fontsize=8)
    if total.size:
        ax.axhline(peak / scale, color="black", linewidth=0.6, linestyle="--")
        ax.text(0, peak / scale, f"peak {peak / scale:,.2f} {unit}", va="bottom", fontsize=8)
    ax.set(xlabel="host time since the step began (ms)", ylabel=f"live allocations ({unit})", ylim=(0, top), title=title)
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles[::-1], labels[::-1], fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    ax.annotate(f"source: {trace.source}", (1.0, -0.13), xycoords="axes fraction", ha="right", fontsize=7, color="#555")
    save_figure(fig, Path(path))
    return bands


def render_placeholder(path: str | Path, title: str, message: str) -> None:
    """A figure that says why there is no timeline (e.g. out of memory before the step began)."""
    from cs336_systems.figures import plt, save_figure

    fig, ax = plt.subplots(figsize=(11, 2.5))
    ax.axis("off")
    ax.set_title(title)
    ax.text(0.5, 0.5, message, ha="center", va="center", wrap=True, fontsize=10, color="#a00")
    save_figure(fig, Path(path))
