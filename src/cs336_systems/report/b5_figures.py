"""B5's figures: the speed-up map and TFLOP/s against sequence length."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from cs336_systems.profiling.mfu import attention_peak
from cs336_systems.report.b5_grid import OURS, PASSES, PLAIN, judged, judged_on
from cs336_systems.report.common import save_figure
from cs336_systems.report.contract import Unread
from cs336_systems.report.what_ran import peak_cell, peak_words


def plot_speedup(df: pd.DataFrame, path: Path, baseline: str = PLAIN) -> None:
    """Heat maps of baseline time / our time (the timing that judges each point: graph time where
    both have it), per dtype (rows) and pass (columns); grey = not measured. The cells' numbers are
    set at the size of the axis labels: the page shows the figure about 1,100 px wide."""
    dtypes = sorted(df["dtype"].unique())
    fig, axes = plt.subplots(len(dtypes), len(PASSES), figsize=(4.2 * len(PASSES), 3.2 * len(dtypes)), squeeze=False)
    fig.subplots_adjust(hspace=0.75, wspace=0.3)
    pair = judged(df, baseline)
    ratio = dict(zip(zip(pair["dtype"], pair["pass"], pair["d"], pair["seq"]), pair["t_other"] / pair["t"]))
    seqs, ds = sorted(df["seq"].unique()), sorted(df["d"].unique())
    for row, dtype in enumerate(dtypes):
        for col, which in enumerate(PASSES):
            ax = axes[row][col]
            grid = np.array([[ratio.get((dtype, which, d, s), np.nan) for s in seqs] for d in ds], dtype=float)
            image = ax.imshow(np.log2(grid), cmap="RdYlGn", vmin=-4, vmax=4, aspect="auto")
            for i in range(len(ds)):
                for j in range(len(seqs)):
                    text = "–" if np.isnan(grid[i, j]) else f"{grid[i, j]:.1f}"
                    ax.text(j, i, text, ha="center", va="center", fontsize=9)
            ax.set_xticks(range(len(seqs)), [str(s) for s in seqs], rotation=60, fontsize=9)
            ax.set_yticks(range(len(ds)), [str(d) for d in ds], fontsize=9)
            ax.set_title(f"{dtype} {which}", fontsize=11)
            ax.set_xlabel("sequence length", fontsize=10)
            ax.set_ylabel("head dim", fontsize=10)
    fig.colorbar(image, ax=axes, shrink=0.6, label=f"log2({baseline} time / our time)")
    save_figure(fig, path)


def plotted_rates(ok: pd.DataFrame) -> pd.DataFrame:
    """Each point's achieved TFLOP/s in the timing that judges it alone: its graph time where it has
    one (GPU time, no host), else do_bench's median; ``timing`` says which."""
    graph = ok["graph_ms"].notna() & ok["flops"].notna()
    rate = np.where(graph, ok["flops"] / ok["graph_ms"] / 1e9, ok["tflops"])
    return ok.assign(rate=rate, timing=np.where(graph, "graph", "do_bench"))


def tflops_panels(ok: pd.DataFrame) -> tuple[str, list[int]]:
    """The dtype (bf16 where measured) and head dimensions (64 and 128, else the largest) plotted."""
    dtype = "bf16" if "bf16" in set(ok["dtype"]) else sorted(set(ok["dtype"]))[0] if len(ok) else "bf16"
    return dtype, [d for d in (64, 128) if d in set(ok["d"])] or sorted(set(ok["d"]))[-1:] or [64]


@dataclass(frozen=True)
class TflopsPlot:
    """What the rates figure's caption says: its dtype and head dims, how many points it draws, in
    which timing, and the peak it draws where one bounds every implementation."""
    dtype: str
    ds: list[int]
    points: int
    peak: str | None
    graph: int
    timing: str                     # b5_grid.judged_on
    do_bench: Unread[int]


# A line's legend: which timing its points are in (b5_grid.judged_on).
TIMING_LABELS = {"graph": "graph time", "do_bench": "do_bench", "mixed": "graph time where measured, else do_bench"}


def plot_tflops(df: pd.DataFrame, path: Path) -> TflopsPlot:
    """Achieved TFLOP/s over sequence length on log-log axes (the short lengths' rates are a
    thousandth of the long ones'), one panel per pass (rows) and head dimension (columns;
    ``tflops_panels``), every implementation, each point in its ``plotted_rates`` timing (the
    legend says which). Returns what the caption needs: dtype, head dims and the points per timing."""
    ok = plotted_rates(df[df["status"] == "ok"])
    dtype, ds = tflops_panels(ok)
    fig, axes = plt.subplots(len(PASSES), len(ds), figsize=(5.5 * len(ds), 3.4 * len(PASSES)), squeeze=False,
                             layout="constrained")
    shown = ok[(ok["dtype"] == dtype) & ok["d"].isin(ds)]
    # One card and a 16-bit dtype: every implementation's products run on its tensor cores, one peak.
    gpus = set(shown["gpu"].dropna())
    top = attention_peak(gpus.pop(), OURS, dtype, None) if len(gpus) == 1 and dtype != "fp32" else None
    for row, which in zip(axes, PASSES):
        for ax, d in zip(row, ds):
            for impl, part in shown[(shown["d"] == d) & (shown["pass"] == which)].groupby("impl"):
                part = part.sort_values("seq")
                label = TIMING_LABELS[judged_on(int((part["timing"] == "graph").sum()), len(part))]
                ax.plot(part["seq"], part["rate"], marker="o", label=f"{impl} ({label})")
            if top and ax.has_data():
                ax.axhline(top.flops / 1e12, color="grey", linestyle="--", linewidth=1, label=peak_cell(top) + " peak")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set(title=f"{dtype}, d = {d}, causal, {which}", xlabel="sequence length",
                   ylabel="TFLOP/s (log scale)")
            ax.grid(alpha=0.3, which="both")
            if ax.has_data():
                ax.legend(fontsize=7)
    save_figure(fig, path)
    graph = int((shown["timing"] == "graph").sum())
    return TflopsPlot(dtype, [int(d) for d in ds], int(len(shown)), peak_words(top), graph, judged_on(graph, len(shown)),
                      int((shown["timing"] == "do_bench").sum()))
