"""A1 report: the benchmark table (mean ± std per phase), two figures, and the writeup's numbers.

    python -m cs336_systems.report.a1 --records r1.json ... --warmup-records w1.json ... --out-dir DIR
"""
from __future__ import annotations

import statistics

import argparse
import math
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from cs336_systems.models import MODEL_SIZES
from cs336_systems.models import MODES as MODE_ORDER
from cs336_systems.report.common import load_records, run_provenance, save_figure, write_summary, write_table

PHASES = ("forward", "backward", "optimizer", "step")


def records_frame(records: list[dict]) -> pd.DataFrame:
    """One row per record: its grid point, status and per-phase mean / std (ms)."""
    rows = []
    for r in records:
        p, m = r["params"], r["metrics"]
        row = {k: p[k] for k in ("size", "context", "mode", "precision", "warmup", "steps")}
        row["status"] = r["status"]
        for phase in PHASES:
            row[f"{phase}_mean"] = m.get(phase, {}).get("mean", math.nan)
            row[f"{phase}_std"] = m.get(phase, {}).get("std", math.nan)
        row["peak_gib"] = (m.get("peak_memory_bytes") or math.nan) / 2**30
        rows.append(row)
    df = pd.DataFrame(rows)
    df["size"] = pd.Categorical(df["size"], [s for s in MODEL_SIZES if s in set(df["size"])], ordered=True)
    df["mode"] = pd.Categorical(df["mode"], [m for m in MODE_ORDER if m in set(df["mode"])], ordered=True)
    df["precision"] = pd.Categorical(df["precision"], [p for p in ("fp32", "bf16") if p in set(df["precision"])], ordered=True)
    return df.sort_values(["size", "mode", "precision", "context", "warmup"]).reset_index(drop=True)


def _cell(row: pd.Series, phase: str) -> str:
    if row["status"] != "ok":
        return row["status"].upper()
    mean, std = row[f"{phase}_mean"], row[f"{phase}_std"]
    return "" if math.isnan(mean) else f"{mean:.2f} ± {std:.2f}"


def display_table(df: pd.DataFrame) -> pd.DataFrame:
    """The table people read: one row per grid point, 'mean ± std' ms per phase, OOM spelled out."""
    out = df[["size", "context", "mode", "precision"]].astype(str).copy()
    for phase in PHASES:
        out[f"{phase} (ms)"] = [_cell(row, phase) for _, row in df.iterrows()]
    out["peak (GiB)"] = [f"{g:.2f}" if not math.isnan(g) else "" for g in df["peak_gib"]]
    return out


def plot_time_vs_context(df: pd.DataFrame, path: Path) -> None:
    """One panel per mode; colour = size, line style = precision; failed points as x on the top edge."""
    modes = list(df["mode"].cat.categories)
    fig, axes = plt.subplots(1, len(modes), figsize=(4.5 * len(modes), 4), squeeze=False, sharey=True)
    colours = {size: f"C{i}" for i, size in enumerate(df["size"].cat.categories)}
    styles = {"fp32": "-", "bf16": "--"}
    contexts = sorted(df["context"].unique())
    top = df["step_mean"].max() * 1.5
    for ax, mode in zip(axes[0], modes):
        for (size, precision), part in df[df["mode"] == mode].groupby(["size", "precision"], observed=True):
            ok, failed = part[part["status"] == "ok"], part[part["status"] != "ok"]
            ax.plot(ok["context"], ok["step_mean"], styles.get(precision, ":"), marker="o", color=colours[size],
                    label=f"{size} {precision}")
            ax.scatter(failed["context"], [top] * len(failed), marker="x", color=colours[size])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(contexts, [str(c) for c in contexts])
        ax.xaxis.set_minor_formatter(plt.NullFormatter())
        ax.set(title=mode, xlabel="context length")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("time per step (ms, mean)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(6, len(labels)), fontsize=8, bbox_to_anchor=(0.5, -0.2),
               title="size and precision (x on the top edge: out of memory or error)", title_fontsize=8)
    save_figure(fig, path)


def plot_warmup(records: list[dict], path: Path) -> None:
    sizes = [s for s in MODEL_SIZES if any(r["params"]["size"] == s for r in records)]
    fig, axes = plt.subplots(1, max(1, len(sizes)), figsize=(4 * max(1, len(sizes)), 3.6), squeeze=False)
    for ax, size in zip(axes[0], sizes):
        for r in sorted((r for r in records if r["params"]["size"] == size), key=lambda r: r["params"]["warmup"]):
            if r["status"] == "ok":
                samples = r["metrics"]["step"]["samples"]
                ax.plot(range(1, len(samples) + 1), samples, marker=".", label=f"{r['params']['warmup']} warm-up")
        ax.set(title=size, xlabel="timed step", ylim=(0, None))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("step time (ms)")
    save_figure(fig, path)


def _direction(gap: float, spread: float) -> str:
    return "higher" if gap > spread else "lower" if gap < -spread else "within the spread"


def warmup_summary(records: list[dict]) -> list[dict]:
    """Per size and warm-up count: mean, std, first vs later steps, and the mean relative to the
    longest warm-up of the same size (``vs_longest``: 0.05 = 5 % slower)."""
    rows = []
    for r in records:
        if r["status"] != "ok":
            continue
        s = r["metrics"]["step"]
        later = s["samples"][1:]
        rows.append({"size": r["params"]["size"], "warmup": r["params"]["warmup"], "mean": s["mean"], "std": s["std"],
                     "n": len(s["samples"]), "first": s["samples"][0],
                     "rest_mean": statistics.fmean(later) if later else s["samples"][0],
                     "rest_std": statistics.stdev(later) if len(later) > 1 else 0.0,
                     # the prose may call the first step slow only if it is slower than every later one
                     "first_slowest": bool(later) and s["samples"][0] > max(later)})
    rows.sort(key=lambda x: (list(MODEL_SIZES).index(x["size"]), x["warmup"]))
    longest = {row["size"]: row for row in rows}           # sorted: the last row of a size wins
    for row in rows:
        ref = longest[row["size"]]
        row["first_vs_rest"] = row["first"] / row["rest_mean"]
        row["vs_longest"] = row["mean"] / ref["mean"] - 1
        row["std_vs_longest"] = row["std"] / ref["std"] if ref["std"] else None
        # Which way the mean moved, and whether the later steps (all but the first) moved too, each
        # against two standard errors of the steady steps of both processes. The prose names a
        # direction only from these.
        spread = 2 * (row["rest_std"] ** 2 / max(1, row["n"] - 1) + ref["std"] ** 2 / ref["n"]) ** 0.5
        row["vs_longest_direction"] = _direction(row["mean"] - ref["mean"], spread)
        row["later_direction"] = _direction(row["rest_mean"] - ref["mean"], spread)
    return rows


def summarize(df: pd.DataFrame, records: list[dict], warmup_records: list[dict]) -> dict:
    """The numbers the A1 section quotes."""
    ok = df[df["status"] == "ok"]
    fb = ok[(ok["mode"] == "forward-backward") & (ok["precision"] == "fp32")]
    # Spread as coefficient of variation (std / mean) of every timed phase of every point.
    cv = pd.concat([ok[f"{phase}_std"] / ok[f"{phase}_mean"] for phase in ("forward", "backward", "optimizer")]).dropna()
    worst = ok.loc[cv.idxmax()] if len(cv) else None
    timed = {
        f"{row['size']}@{row['context']}": {"forward": row["forward_mean"], "backward": row["backward_mean"]}
        for _, row in fb.iterrows()
    }
    failed = df[df["status"] != "ok"]
    cv_by_precision = {
        precision: float(pd.concat([part[f"{ph}_std"] / part[f"{ph}_mean"] for ph in ("forward", "backward", "optimizer")]
                                   ).dropna().median())
        for precision, part in ok.groupby("precision", observed=True)
    }
    # How forward time grows from the shortest to the longest context, per size (fp32 forward mode):
    # a model whose time barely grows is bound by kernel launches, not by arithmetic.
    fwd = ok[(ok["mode"] == "forward") & (ok["precision"] == "fp32")]
    growth = {}
    for size, part in fwd.groupby("size", observed=True):
        part = part.sort_values("context")
        if len(part) > 1:
            growth[size] = {"from": int(part["context"].iloc[0]), "to": int(part["context"].iloc[-1]),
                            "ratio": float(part["forward_mean"].iloc[-1] / part["forward_mean"].iloc[0])}
    return {
        "provenance": run_provenance(records + warmup_records),
        "points": len(df), "ok": int(len(ok)),
        "not_ok": [f"{r['size']} ctx {r['context']} {r['mode']} {r['precision']}: {r['status']}" for _, r in failed.iterrows()],
        "fp32_forward_backward": timed,
        "cv_median": float(cv.median()) if len(cv) else None,
        "cv_max": float(cv.max()) if len(cv) else None,
        "cv_max_point": f"{worst['size']} ctx {worst['context']} {worst['mode']} {worst['precision']}" if worst is not None else None,
        "backward_over_forward_median": float((fb["backward_mean"] / fb["forward_mean"]).median()) if len(fb) else None,
        "cv_by_precision": cv_by_precision,
        "forward_growth": growth,
        "warmup": warmup_summary(warmup_records),
        "on_gpu": any(r["provenance"].get("gpu") for r in warmup_records),
        "batch": int(records[0]["params"]["batch"]) if records else None,
        "warmup_steps": int(records[0]["params"]["warmup"]) if records else None,
        "steps": int(records[0]["params"]["steps"]) if records else None,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.report.a1", description=__doc__.split("\n\n")[0])
    p.add_argument("--records", nargs="+", required=True)
    p.add_argument("--warmup-records", nargs="*", default=[])
    p.add_argument("--out-dir", required=True, type=Path)
    args = p.parse_args(argv)
    records, warmup_records = load_records(args.records), load_records(args.warmup_records)
    df = records_frame(records)
    write_table(display_table(df), args.out_dir)
    plot_time_vs_context(df, args.out_dir / "time_vs_context.png")
    plot_warmup(warmup_records, args.out_dir / "warmup.png")
    write_summary(args.out_dir / "summary.json", summarize(df, records, warmup_records))
    print(f"A1 report: {len(df)} points ({(df['status'] == 'ok').sum()} ok) -> {args.out_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
