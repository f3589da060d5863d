"""What one traced training step of a data-parallel variant shows (torch.profiler's trace as
``distributed.traces`` stores it): its timeline, how long the compute lane sat idle, and its
kernels' GPU time by kind. One profiled step each: a look, not a measurement with a spread.
"""
from __future__ import annotations

import re
from pathlib import Path

import matplotlib.pyplot as plt

from cs336_systems.report.common import save_figure
from cs336_systems.report.ddp_rows import step_times, trace_label

def is_kernel(interval: dict) -> bool:
    """A kernel (or, on the CPU, an operator) — not a ``phase:*`` annotation. The profiler also puts
    the ``record_function`` phase markers on the GPU's timeline, as bars spanning the whole phase;
    counted as compute they hid every wait (naive DDP's ~50 ms all-reduce after backward read as
    3.4 µs of idle), so the lanes below hold kernels only. Traces from before train_bench dropped
    them still carry them, hence the filter here."""
    return not interval.get("name", "").startswith("phase:")


LABEL_SHARE = 0.06      # a phase narrower than this share of the step is left unnamed in its box


def plot_timelines(traces: dict[str, list[dict]], path: Path) -> None:
    """One panel per traced variant, three lanes: when the CPU issued each phase, and the GPU's
    compute and communication kernels (which run later than they are issued)."""
    fig, axes = plt.subplots(len(traces) or 1, 1, figsize=(11, 2.0 * max(1, len(traces)) + 0.6), squeeze=False)
    colors = {"forward": "#9ab8dd", "backward": "#e8b27d", "wait": "#e08a8a", "optimizer": "#8cc98c"}
    for ax, (variant, intervals) in zip(axes[:, 0], traces.items()):
        phases = [i for i in intervals if i["lane"] == "phase"]
        span = max((i["end_us"] for i in intervals), default=1.0) / 1e3
        # One bar collection per kernel lane: a step holds ~15 000 kernels, and a collection per
        # kernel made matplotlib rescale the axes once per kernel (minutes per figure).
        lanes = {"compute": [], "communication": []}
        for i in intervals:
            start, width = i["start_us"] / 1e3, max((i["end_us"] - i["start_us"]) / 1e3, 0.01)
            if i["lane"] == "phase":
                ax.broken_barh([(start, width)], (1.65, 0.7), color=colors.get(i["name"], "#ccc"))
                # a name wider than its box would run into the next one's: the colour (legend) says it
                if width >= LABEL_SHARE * span:
                    ax.text(start + width / 2, 2.0, i["name"], fontsize=7, ha="center", va="center")
            elif is_kernel(i):
                lanes["communication" if i["lane"] == "communication" else "compute"].append((start, width))
        for y, (lane, bars) in enumerate(lanes.items()):
            if bars:
                ax.broken_barh(bars, (y - 0.35, 0.7), color="tab:red" if y else "tab:blue")
        ax.set(yticks=[0, 1, 2], yticklabels=["compute", "communication", "issued (CPU)"], ylim=(-0.6, 2.6))
        named = [n for n in colors if n in {i["name"] for i in phases}]
        if ax is axes[0, 0] and named:  # one legend for the figure: the colours are the same in every panel
            ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=colors[n]) for n in named], labels=named,
                      fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
        ax.set_title(variant, fontsize=9)
    axes[-1, 0].set_xlabel("ms since the start of the traced step")
    fig.tight_layout()
    save_figure(fig, path)


# A compute-lane gap longer than this (ms) is a wait: longer than any launch's gap between kernels.
LONG_GAP_MS = 0.5


def compute_gaps(intervals: list[dict]) -> dict | None:
    """How long the compute lane sat idle between its first and last kernel (ms), and the longest
    single gap: the time compute waited, e.g. for a weight still being gathered."""
    spans = sorted((i["start_us"], i["end_us"]) for i in intervals if i["lane"] == "compute" and is_kernel(i))
    if not spans:
        return None
    idle, longest, long_gaps, reach = 0.0, 0.0, 0, spans[0][1]
    for start, end in spans[1:]:
        if start > reach:
            idle += start - reach
            longest = max(longest, start - reach)
            long_gaps += start - reach > LONG_GAP_MS * 1e3
        reach = max(reach, end)
    span = reach - spans[0][0]
    return {"span_ms": span / 1e3, "idle_ms": idle / 1e3, "idle_share": idle / span if span > 0 else 0.0,
            "longest_gap_ms": longest / 1e3, "gaps_over_half_ms": long_gaps}


# What a traced kernel does, from its name: NCCL's collectives (the communication lane), matrix
# products (cuBLAS / CUTLASS), copies (casts are copies between dtypes: the bf16 buckets' and
# PyTorch DDP's copies into and out of its buckets); everything else (the model's elementwise work,
# the optimizer, the wrappers' divisions: a name does not tell a gradient's mean from a softmax's
# division) is "other". The profiler also puts annotations on the GPU's
# timeline (nccl:all_reduce beside its kernel, DistributedDataParallel.forward spanning a phase):
# they are not kernels and are left out.
KERNEL_KINDS = (("matmul", re.compile(r"gemm|xmma|cutlass|nvjet|cublas", re.IGNORECASE)),
                ("copy", re.compile(r"copy|Memcpy", re.IGNORECASE)))


ANNOTATION = re.compile(r"^(nccl:|DistributedDataParallel\.|Optimizer\.|ProfilerStep|FSDP\.)")


# The traced variant whose matmuls are the reference: naive DDP all-reduces after backward, so its
# matrix products never share the GPU with a collective.
QUIET_TRACE = "naive"


def kernel_time(intervals: list[dict]) -> dict[str, float] | None:
    """GPU time (ms) of one traced step's kernels by kind: ``communication`` (the communication
    lane), then ``KERNEL_KINDS`` and ``other`` on the compute lane; kernels that overlap each count
    whole. NCCL's kernel time includes the time it spins waiting for the other rank, so it is an
    upper bound of the transfers. None for a trace without kernels (a CPU run's operators are not
    kernels: ``gpu`` traces only)."""
    found = {"communication": 0.0, **{kind: 0.0 for kind, _ in KERNEL_KINDS}, "other": 0.0}
    kernels = [i for i in intervals if i["lane"] in ("compute", "communication") and is_kernel(i)
               and not ANNOTATION.match(i.get("name", ""))]
    if not kernels or not any(i.get("name", "").startswith(("void ", "nccl", "sm", "Memcpy", "Memset")) for i in kernels):
        return None
    for i in kernels:
        ms = (i["end_us"] - i["start_us"]) / 1e3
        if i["lane"] == "communication":
            found["communication"] += ms
            continue
        kind = next((k for k, pattern in KERNEL_KINDS if pattern.search(i["name"])), "other")
        found[kind] += ms
    return found


def step_scatter(record: dict | None) -> float | None:
    """The fastest–slowest width of a record's timed steps (ms): how much one step of its turns
    differs from another; None without a record or its steps."""
    times = step_times(record)
    return max(times) - min(times) if times else None


def where_time_goes(traces: dict[str, list[dict]], chosen: list[tuple[str, str]],
                    records: dict[str, dict[str, dict]] | None = None) -> dict[str, dict]:
    """Per traced step of ``chosen`` (variant, precision), keyed by ``trace_label``: its kernel time by kind, and its matmul and
    copy time against naive DDP's traced step of the same precision (``matmul_over_quiet_ms``: what
    sharing the GPU with collectives cost the matrix products, where they are the same products;
    ``copy_over_quiet_ms``: the copies and casts a variant adds). One profiled step each: a look,
    not a measurement with a spread. So the matmuls' excess is that cost only where it exceeds how
    much one step differs from another (``matmul_beyond_scatter``): the wider of the two variants'
    fastest–slowest timed steps (``step_scatter_ms``, from ``records``, precision -> variant ->
    record); None where either has no timed steps, there is no naive trace to set it against, or the
    step is naive's own. The copies' excess is held to the same scatter (``copy_beyond_scatter``):
    one traced step each cannot tell a smaller one from how much one step differs from another."""
    times = {label: kernel_time(traces[label]) for v, p in [*chosen, *((QUIET_TRACE, p) for _, p in chosen)]
             if (label := trace_label(v, p)) in traces}
    out = {}
    for variant, precision in chosen:
        label = trace_label(variant, precision)
        found = times.get(label)
        if found is None:
            continue
        quiet = times.get(trace_label(QUIET_TRACE, precision))
        ran = (records or {}).get(precision, {})
        widths = [step_scatter(ran.get(v)) for v in (variant, QUIET_TRACE)]
        scatter = None if None in widths else max(widths)
        excess = found["matmul"] - quiet["matmul"] if quiet else None
        copies = found["copy"] - quiet["copy"] if quiet else None
        judged = excess is not None and scatter is not None and variant != QUIET_TRACE
        out[label] = found | {"matmul_over_quiet_ms": excess, "copy_over_quiet_ms": copies,
                              "step_scatter_ms": scatter, "matmul_beyond_scatter": excess > scatter if judged else None,
                              "copy_beyond_scatter": copies > scatter if judged else None}
    return out


def untraced_idle(gaps: dict | None, record: dict | None) -> dict | None:
    """How much of a traced step's idle compute lane the timed steps hold. The kernels kept the lane
    busy for the trace's span less its idle time; if they take as long untraced, a timed step holds
    its time less that busy time idle (``idle_ms`` by the median step, ``idle_slowest_ms`` by the
    slowest; more, where the profiler slowed the kernels themselves); the rest of the trace's idle
    time is the profiler's (``profiler_ms``). ``mostly_profiler``, over the timed steps' scatter:
    True where even the slowest holds less than half the trace's idle time, False where even the
    fastest holds half or more, None (not settled) between."""
    m = record["metrics"] if record else {}
    if not gaps or not gaps.get("span_ms") or m.get("step_ms") is None:
        return None
    busy = gaps["span_ms"] - gaps["idle_ms"]
    times = step_times(record) or [m["step_ms"]]
    idle, slowest, fastest = (max(0.0, t - busy) for t in (m["step_ms"], max(times), min(times)))
    half = gaps["idle_ms"] / 2
    return {"traced_ms": gaps["span_ms"], "traced_idle_ms": gaps["idle_ms"], "busy_ms": busy,
            "step_ms": m["step_ms"], "idle_ms": idle, "idle_share": idle / m["step_ms"], "idle_slowest_ms": slowest,
            "profiler_ms": gaps["idle_ms"] - idle,
            "mostly_profiler": True if slowest < half else False if fastest >= half else None}
