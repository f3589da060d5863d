"""C1 report: all-reduce time, algorithm and bus bandwidth against size, per backend and world
size; skipped configurations listed with their reason; and, per (backend, world size), the fit
t(bytes) = o + bytes / w that C8's overhead model uses.

    python -m cs336_systems.report.c1 --rows gloo_x2.json nccl_x2.json ... --out-dir DIR
"""
from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from cs336_systems.report.common import rows_report_args, run_provenance, save_figure, write_summary, write_table

MB = 10**6


def _range(low: float | None, high: float | None) -> str:
    """Fastest–slowest timed call (ms): the spread beside the median."""
    return "" if low is None or high is None else f"{low:.4g}–{high:.4g}"


def frame(records: list[dict]) -> pd.DataFrame:
    rows = []
    for r in records:
        p, m = r["params"], r["metrics"]
        rows.append({"backend": p["backend"], "world_size": p["world_size"], "size_mb": p["size_mb"],
                     "status": r["status"], "ms": m.get("ms"), "ms_range": _range(m.get("ms_min"), m.get("ms_max")),
                     "algbw_GBps": m.get("algbw_GBps"),
                     "busbw_GBps": m.get("busbw_GBps"), "reason": r.get("reason") or r.get("message") or ""})
    return pd.DataFrame(rows).sort_values(["backend", "world_size", "size_mb"]).reset_index(drop=True)


def fit_latency_bandwidth(part: pd.DataFrame) -> dict | None:
    """Least squares of t = o + bytes / w over the sizes measured, in relative error (weights 1/t)
    so the small sizes that carry o are not drowned by the large ones: o in ms, w in GB/s."""
    ok = part[part["status"] == "ok"]
    if len(ok) < 2:
        return None
    seconds = ok["ms"] / 1e3
    slope, intercept = np.polyfit(ok["size_mb"] * MB, seconds, 1, w=1 / seconds)
    return {"o_ms": float(intercept * 1e3), "w_GBps": float(1 / slope / 1e9) if slope > 0 else None,
            "sizes": int(len(ok))}


def plot(df: pd.DataFrame, path: Path) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for (backend, world), part in df[df["status"] == "ok"].groupby(["backend", "world_size"]):
        style = "-" if backend == "nccl" else "--"
        for ax, col in zip(axes, ("ms", "algbw_GBps", "busbw_GBps")):
            ax.plot(part["size_mb"], part[col], style, marker="o", label=f"{backend}, {world} ranks")
    for ax, label in zip(axes, ("time per all-reduce (ms)", "algorithm bandwidth (GB/s)", "bus bandwidth (GB/s)")):
        ax.set(xscale="log", yscale="log", xlabel="tensor size (MB)", ylabel=label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    save_figure(fig, path)


def main(argv=None) -> int:
    records, out_dir = rows_report_args("cs336_systems.report.c1", __doc__, argv)
    df = frame(records)
    write_table(df.round(4), out_dir)
    plot(df, out_dir / "allreduce.png")
    fits = {f"{b}_x{w}": fit for (b, w), part in df.groupby(["backend", "world_size"])
            if (fit := fit_latency_bandwidth(part)) is not None}
    ok = df[df["status"] == "ok"]
    largest = ok[ok["size_mb"] == ok["size_mb"].max()] if len(ok) else ok
    write_summary(out_dir / "summary.json", {
        "provenance": run_provenance(records),
        "fits": fits,
        "skipped": [{"backend": b, "world_size": int(w), "reason": part["reason"].iloc[0]}
                    for (b, w), part in df[df["status"] == "skipped"].groupby(["backend", "world_size"])],
        "at_largest": [{"backend": r.backend, "world_size": int(r.world_size), "size_mb": float(r.size_mb),
                        "ms": float(r.ms), "busbw_GBps": float(r.busbw_GBps)} for r in largest.itertuples()],
        "sizes_mb": sorted(float(s) for s in df["size_mb"].unique()),
    })
    print(f"C1 report: {len(df)} rows -> {out_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
