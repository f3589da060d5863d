"""How busy an A2 profile's GPU was: kernels per step and kernel time against the step's time.

An A2 record (``profiling.profile``) holds, per mode, a kernel table of the *first* instance of
each phase range (nsys ``--filter-nvtx``, or torch.profiler's window) and every instance's length
(``ranges``). Per mode, over its phases (as A2(a) does for the forward):

    kernels = Σ instances over the phases' tables,  kernel_ms = Σ their kernel time,
    busy_share = kernel_ms / Σ the phase ranges' mean length

Kernels on one stream do not overlap, so their summed time is the time the GPU was busy; a share
well under one means the GPU waited between kernels: the step is bound by launching them. Only
CUDA tables count: a CPU profile's operator self times say nothing about a GPU.
"""
from __future__ import annotations

from cs336_systems.profiling.ranges import MODE_PHASES


def mode_busy(result: dict, mode: str) -> dict | None:
    """One mode's kernels, kernel time and step time (its phase ranges' mean length, ms), or None
    where a phase's table or range is missing (a filter that matched nothing says nothing)."""
    phases = MODE_PHASES[mode]
    tables = [result["tables"].get(name) for name in phases]
    lengths = [next((r for r in result.get("ranges", []) if r["range"] == name), None) for name in phases]
    if not all(tables) or None in lengths:
        return None
    kernel_ms = sum(row["total_ns"] for table in tables for row in table) / 1e6
    step_ms = sum(r["avg_ns"] for r in lengths) / 1e6
    return {"kernels": sum(row["instances"] for table in tables for row in table),
            "kernel_ms": kernel_ms, "step_ms": step_ms, "busy_share": kernel_ms / step_ms}


def profile_busy(record: dict) -> list[dict]:
    """One row per ok mode of an A2 record with CUDA kernel tables: size, context, batch, mode,
    kernels, kernel_ms, step_ms (the phase ranges' mean length) and busy_share."""
    m, p = record.get("metrics") or {}, record["params"]
    if record.get("status") != "ok" or m.get("table_unit") != "CUDA kernels":
        return []
    rows = []
    for mode, result in m.get("modes", {}).items():
        if result.get("status") != "ok" or (busy := mode_busy(result, mode)) is None:
            continue
        rows.append({"size": p["size"], "context": p["context"], "batch": p["batch"], "mode": mode, **busy,
                     "source": m.get("source")})
    return rows
