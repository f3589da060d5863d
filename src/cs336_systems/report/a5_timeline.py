"""A5's active-memory timeline, drawn from the bands a record keeps (``memory.timeline.timeline_data``).

Bands stacked bottom to top: grey for what was live before the step, one colour per code site that
holds the most memory at the peak, pale bands in the phase's colour for everything else; the black
top edge is the live-bytes series. Phases are shaded and named, allocation failures are red lines,
and the dashed line is the exact peak (the stored bands are thinned, keeping each bucket's extremes).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

import numpy as np

from cs336_systems.report.common import plt, save_figure
from cs336_systems.memory.timeline import INITIAL_BAND, PHASE_COLOURS

MIB = 2**20


def _colours(labels: list[str]) -> list[str]:
    site_colours = iter(c for i, c in enumerate(plt.get_cmap("tab10").colors) if i != 7)   # 7 is grey
    out = []
    for b in labels:
        if b == INITIAL_BAND:
            out.append("#8c8c8c")
        elif b.startswith("other"):
            out.append(PHASE_COLOURS.get(b.rsplit(" ", 1)[-1], "#bbbbbb"))
        else:
            out.append(next(site_colours, "#cccccc"))
    return out


def legend_name(site: str, allocations: Sequence[dict]) -> str:
    """A band's name in the legend: the function and the operations that allocated at its code site
    (the record's largest allocations say which), then the place, e.g. ``softmax: exp (model.py:89)``
    for ``cs336_basics/model.py:89 softmax``. Bands that are not a code site keep their name."""
    place, _, function = site.partition(" ")
    if ":" not in place or not function:
        return site
    ops = []
    for a in allocations:
        op = re.sub(r"_[A-Z]\w*$", "", a.get("op") or "")   # the overload (sub_Tensor, masked_fill_Scalar) says nothing here
        if a.get("frame") == site and op and op not in ops:
            ops.append(op)
    return f"{function}{': ' + ', '.join(ops) if ops else ''} ({place.rsplit('/', 1)[-1]})"


# Where what was live before the step is at least this share of the peak (a forward pass over the
# weights), the y axis starts just below it: from zero the step's own rise is a sliver on a slab.
FLOOR_SHARE = 0.5


def y_floor(timeline: dict) -> float:
    """Where the y axis starts, in MiB: 0, or just below the least of what was live before the step
    where that is at least ``FLOOR_SHARE`` of the peak."""
    peak_mib = timeline["peak_bytes"] / MIB
    before = [np.asarray(v, dtype=float) for v, b in zip(timeline["values_mib"], timeline["labels"]) if b == INITIAL_BAND]
    least = float(before[0].min()) if before and before[0].size else 0.0
    return 0.95 * least if peak_mib and least >= FLOOR_SHARE * peak_mib else 0.0


def draw(timeline: dict, path: str | Path, title: str, allocations: Sequence[dict] = ()) -> None:
    """Draw the timeline PNG at ``path`` from a record's ``timeline``; ``allocations``, the record's
    largest allocations, name the operations behind each code site's band (``legend_name``)."""
    peak = timeline["peak_bytes"]
    unit, scale = ("GiB", 1024) if peak >= 2 * 2**30 else ("MiB", 1)     # the bands are in MiB
    times = np.asarray(timeline["times_ms"], dtype=float)
    labels = timeline["labels"]
    fig, ax = plt.subplots(figsize=(10, 4))
    alphas = [0.35 if b.startswith("other") else 0.9 for b in labels]
    lower = np.zeros(times.size)
    names = [legend_name(b, allocations) for b in labels]
    for values, colour, alpha, label in zip(timeline["values_mib"], _colours(labels), alphas, names):
        upper = lower + np.asarray(values, dtype=float) / scale
        ax.fill_between(times, lower, upper, step="post", color=colour, alpha=alpha, linewidth=0, label=label)
        lower = upper
    ax.step(times, lower, where="post", color="black", linewidth=0.6)
    floor = y_floor(timeline) / scale
    top = floor + (peak / MIB / scale - floor) * 1.12 if peak else 1
    for p in timeline["phases"]:
        start, end = p["start_ms"], p["end_ms"]
        ax.axvspan(start, end, color=PHASE_COLOURS.get(p["name"], "#999999"), alpha=0.07, linewidth=0)
        ax.axvline(start, color="black", linewidth=0.5, linestyle=":")
        ax.text((start + end) / 2, floor + (top - floor) * 0.97, p["name"], ha="center", va="top", fontsize=9)
    for t in timeline["oom_ms"]:
        ax.axvline(t, color="red", linewidth=1.2)
        ax.text(t, floor + (top - floor) * 0.9, " out of memory", color="red", fontsize=8)
    if times.size:
        ax.axhline(peak / MIB / scale, color="black", linewidth=0.6, linestyle="--")
        ax.text(0, peak / MIB / scale, f"peak {peak / MIB / scale:,.2f} {unit}", va="bottom", fontsize=8)
    ylabel = f"live allocations ({unit})" + (f", axis from {floor:,.1f}" if floor else "")
    ax.set(xlabel="host time since the step began (ms)", ylabel=ylabel, ylim=(floor, top), title=title)
    handles, legend_labels = ax.get_legend_handles_labels()
    ax.legend(handles[::-1], legend_labels[::-1], fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    ax.annotate(f"source: {timeline['source']}", (1.0, -0.13), xycoords="axes fraction", ha="right", fontsize=7,
                color="#555")
    save_figure(fig, Path(path))


def draw_placeholder(path: str | Path, title: str, message: str) -> None:
    """A figure that says why there is no timeline (e.g. out of memory before the step began)."""
    fig, ax = plt.subplots(figsize=(11, 2.5))
    ax.axis("off")
    ax.set_title(title)
    ax.text(0.5, 0.5, message, ha="center", va="center", wrap=True, fontsize=10, color="#a00")
    save_figure(fig, Path(path))
