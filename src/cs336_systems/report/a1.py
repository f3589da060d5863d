"""A1 report: the benchmark table (mean ± std per phase, achieved TFLOP/s and MFU, launch-bound
points), two figures, and the writeup's numbers.

    python -m cs336_systems.report.a1 --records r1.json ... --warmup-records w1.json ... \
        [--profiles A2/records/*.json] --out-dir DIR

Every "slower", "faster" or "grows" handed to the prose is the judge's (``spread.judge``). A grid
point's precisions take turns in rounds in one job, its heat (``metrics.turns``), so bf16 against
fp32 is judged *paired*: the per-round difference against its spread across rounds. A pair whose
records name two jobs is no shape the benchmark writes, and the report refuses it (two processes
differ by more than one process's own spread, which the warm-up study measures). The warm-up
study's processes are judged against the warm processes' own scatter (``spread.judge_processes``).

A point is *launch-bound* when its GPU sits idle most of the step, as an A2 profile of the same
point in the same run shows (``--profiles``, fp32 only): A2's kernel time per step fills less than
half of *this table's* step time (A1's unprofiled step: A2's own step runs under the profiler and its
NVTX ranges, so its length is not A1's). The timings alone cannot show it: whether a step's time
follows its work would set it against a longer context's step, and each context and mode is a job
of its own, which the judge does not compare.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from cs336_systems.models import MODEL_SIZES, ModelSize
from cs336_systems.models import MODES as MODE_ORDER
from cs336_systems.profiling.busy import profile_busy
from cs336_systems.profiling.flops import model_step_flops
from cs336_systems.profiling.mfu import achieved, peak, utilisation
from cs336_systems.report import contract
from cs336_systems.report.common import load_records, run_provenance, save_figure, write_table
from cs336_systems.report.contract import Summary, Unread
from cs336_systems.report.spread import (FEW_ROUNDS, HOST, HOST_SWING, MIN_ROUNDS, NOT_SETTLED, WITHIN, Verdict,
                                         across_processes, as_time, judge, judge_processes, ranges_apart,
                                         require_one_job, trend_of)

PHASES = ("forward", "backward", "optimizer", "step")
KEY = ("size", "context", "mode", "precision")
LAUNCH_BOUND_BUSY = 0.5  # GPU busy share under which a profiled step is launch-bound


def records_frame(records: list[dict]) -> pd.DataFrame:
    """One row per record: its grid point, status, per-phase mean / std / n (ms), and the step's
    FLOPs, achieved TFLOP/s and MFU against its card's peak for its precision (``profiling.mfu``)."""
    rows = []
    for r in records:
        p, m = r["params"], r["metrics"]
        row = {k: p[k] for k in ("size", "context", "mode", "precision", "warmup", "steps", "batch")}
        row["status"] = r["status"]
        for phase in PHASES:
            row[f"{phase}_mean"] = m.get(phase, {}).get("mean", math.nan)
            row[f"{phase}_std"] = m.get(phase, {}).get("std", math.nan)
        row["peak_gib"] = (m.get("peak_memory_bytes") or math.nan) / 2**30
        size = ModelSize(*(p[k] for k in ("d_model", "d_ff", "num_layers", "num_heads")))
        row["flops"] = model_step_flops(size, batch=p["batch"], context=p["context"], mode=p["mode"],
                                        vocab_size=p["vocab_size"])
        forward_flops = model_step_flops(size, batch=p["batch"], context=p["context"], mode="forward",
                                         vocab_size=p["vocab_size"])
        row["backward_flops_ratio"] = row["flops"] / forward_flops - 1 if "backward" in m else math.nan
        row["backward_ratio_low"], row["backward_ratio_high"] = step_ratio_range(m)
        card = peak(r["provenance"].get("gpu"), p["precision"], p.get("float32_matmul_precision"))
        row["peak_basis"] = card.basis
        ok = r["status"] == "ok" and row["step_mean"] > 0
        row["tflops"] = achieved(row["flops"], row["step_mean"] / 1e3) / 1e12 if ok else math.nan
        mfu = utilisation(row["flops"], row["step_mean"] / 1e3, card.flops) if ok else None
        row["mfu"] = math.nan if mfu is None else mfu
        rows.append(row)
    df = pd.DataFrame(rows)
    df["size"] = pd.Categorical(df["size"], [s for s in MODEL_SIZES if s in set(df["size"])], ordered=True)
    df["mode"] = pd.Categorical(df["mode"], [m for m in MODE_ORDER if m in set(df["mode"])], ordered=True)
    df["precision"] = pd.Categorical(df["precision"], [p for p in ("fp32", "bf16") if p in set(df["precision"])], ordered=True)
    return df.sort_values(["size", "mode", "precision", "context", "warmup"]).reset_index(drop=True)


def step_ratio_range(metrics: dict) -> tuple[float, float]:
    """The lowest and highest backward / forward of one step over a record's timed steps (the two
    phases' samples, step by step), nan where the record has no samples of both for every step."""
    fwd, bwd = ((metrics.get(ph) or {}).get("samples") or () for ph in ("forward", "backward"))
    if not fwd or len(fwd) != len(bwd) or min(fwd) <= 0:
        return math.nan, math.nan
    ratios = [b / f for f, b in zip(fwd, bwd)]
    return min(ratios), max(ratios)


def _key(point) -> tuple:
    """(size, context, mode, precision) of a record's params or of a ``records_frame`` row."""
    return tuple(str(point[k]) if k != "context" else int(point[k]) for k in KEY)


def by_point(records: list[dict]) -> dict[tuple, dict]:
    return {_key(r["params"]): r for r in records}


def paired_verdict(a: dict, b: dict) -> Verdict:
    """The judge's verdict on record ``a``'s step against ``b``'s, paired over the rounds of the job
    both took turns in; a ``ValueError`` where their ``metrics.turns`` name two jobs (see the
    module's doc)."""
    size, context, mode, _ = _key(a["params"])
    require_one_job({r["params"]["precision"]: r for r in (a, b)}, f"A1 records of {size} ctx {context} {mode}")
    return judge(a, b, "step")


def mark_launch_bound(df: pd.DataFrame, profiles: list[dict] = ()) -> pd.DataFrame:
    """Add what bounds each point, as far as an A2 profile of the same fp32 point and batch says
    (``profiles``: ``profiling.busy.profile_busy`` rows; see the module's doc):

    - ``busy_share`` and ``launch_bound``: A2's kernel time per step over this row's own
      (unprofiled) step time. The two come from two processes, and a step that waits on launches
      moves with its host's speed from one process to another by up to ``HOST_SWING``
      (``report.spread``), so the share is settled only beyond that: launch-bound where even a host
      that much faster leaves it under ``LAUNCH_BOUND_BUSY``, not launch-bound where even one that
      much slower leaves it above, None between (``launch_not_settled``) and without a profile;
    - ``bound_by``: the table's words for it, empty without a profile."""
    busy = {(str(b["size"]), int(b["context"]), b["mode"], int(b["batch"])): b for b in profiles}

    def bound(row) -> dict:
        out = {"busy_share": math.nan, "launch_bound": None, "bound_by": "", "a2_profile": None}
        b = busy.get((str(row["size"]), int(row["context"]), str(row["mode"]), int(row["batch"])))
        if row["status"] == "ok" and b is not None and row["precision"] == "fp32" and row["step_mean"] > 0:
            # A2's kernel time against A1's own step: A2's step, under the profiler, is longer
            share = b["kernel_ms"] / row["step_mean"]
            launch = {"lower": True, "higher": False}.get(across_processes(share, LAUNCH_BOUND_BUSY))
            out.update(busy_share=share, launch_bound=launch,
                       a2_profile={"kernels": int(b["kernels"]), "kernel_ms": float(b["kernel_ms"])},
                       bound_by={True: "launches: ", False: "", None: "not settled: "}[launch]
                       + f"kernels {100 * share:.0f} % of step")
        return out

    columns = [bound(row) for _, row in df.iterrows()]
    return df.assign(**{key: [c[key] for c in columns] for key in columns[0]})




def bf16_against_fp32(df: pd.DataFrame, records: list[dict]) -> list[dict]:
    """Per grid point timed in both precisions: the judge's verdict on the bf16 step against the
    fp32 one, paired over the rounds of the job they took turns in (``paired_verdict``), its
    interval in ms and, where it settles nothing, the judge's reason (``not_settled_why``)."""
    ok = df[df["status"] == "ok"]
    records = by_point(records)
    out = []
    for (size, context, mode), part in ok.groupby(["size", "context", "mode"], observed=True):
        by = {str(r["precision"]): r for _, r in part.iterrows()}
        if "fp32" in by and "bf16" in by:
            fp32, bf16 = by["fp32"], by["bf16"]
            v = paired_verdict(records[_key(bf16)], records[_key(fp32)])
            out.append({"size": str(size), "context": int(context), "mode": str(mode),
                        "fp32_ms": fp32["step_mean"], "fp32_std_ms": fp32["step_std"],
                        "bf16_ms": bf16["step_mean"], "bf16_std_ms": bf16["step_std"],
                        "bf16_is": as_time(v.verdict), "not_settled_why": v.reason, "how": f"paired, {v.rounds} rounds",
                        # the interval of bf16's step minus fp32's (median per round); nan where not settled
                        "low_ms": v.low, "high_ms": v.high,
                        "bound_by": {"fp32": fp32["bound_by"], "bf16": bf16["bound_by"]}})
    return out


def _cell(row: pd.Series, phase: str) -> str:
    if row["status"] != "ok":
        return row["status"].upper()
    mean, std = row[f"{phase}_mean"], row[f"{phase}_std"]
    return "" if math.isnan(mean) else f"{mean:.2f} ± {std:.2f}"


def display_table(df: pd.DataFrame, comparisons: list[dict] = ()) -> pd.DataFrame:
    """The table people read: one row per grid point, 'mean ± std' ms per phase, OOM spelled out;
    on bf16 rows, the step against fp32's and over how many rounds (``bf16_against_fp32``)."""
    out = df[["size", "context", "mode", "precision"]].astype(str).copy()
    for phase in PHASES:
        out[f"{phase} (ms)"] = [_cell(row, phase) for _, row in df.iterrows()]
    out["peak (GiB)"] = [f"{g:.2f}" if not math.isnan(g) else "" for g in df["peak_gib"]]
    out["TFLOP/s"] = ["" if math.isnan(t) else f"{t:.1f}" for t in df["tflops"]]
    out["MFU"] = ["" if math.isnan(u) else f"{100 * u:.1f} %" for u in df["mfu"]]
    if "bound_by" in df:
        out["bound by"] = df["bound_by"]
    verdicts = {(c["size"], c["context"], c["mode"]): f"{c['bf16_is']} ({c['how']})" for c in comparisons}
    out["bf16 vs fp32"] = [verdicts.get((str(r["size"]), int(r["context"]), str(r["mode"])), "")
                           if str(r["precision"]) == "bf16" else "" for _, r in df.iterrows()]
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


def warmup_point(records: list[dict]) -> dict | None:
    """The one workload the warm-up study times (mode, context, precision, batch, steps), or None
    without records; the figure and the prose name it."""
    keys = ("mode", "context", "precision", "batch", "steps")
    points = {tuple(r["params"].get(k) for k in keys) for r in records}
    if not points:
        return None
    if len(points) > 1:
        raise ValueError(f"A1 warm-up records mix workloads: {sorted(points, key=str)}")
    return dict(zip(keys, points.pop()))


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
        ax.legend(fontsize=7, title="one process each", title_fontsize=7)
    axes[0][0].set_ylabel("step time (ms)")
    point = warmup_point(records)
    if point:
        fig.suptitle(f"{point['mode']} step, context {point['context']}, {point['precision']}, batch {point['batch']}: "
                     "each timed step after 0, 1, 2, … untimed warm-up steps", fontsize=9)
    save_figure(fig, path)


def warmup_summary(records: list[dict]) -> list[dict]:
    """Per size and warm-up count: mean, std, first vs later steps, and the mean relative to the
    longest warm-up of the same size (``vs_longest``: 0.05 = 5 % slower).

    A process without warm-up (``warmup == 0``) is compared with the processes of its size that had
    some (``ref_*``, ``vs_warm``, ``later_vs_warm``): its mean, and its later steps alone, each by
    ``spread.judge_processes`` against the warm processes' means, since two processes differ by
    more than one process's standard error says: the interval a new process of that kind would fall
    in. With a single warm process that scatter is unknown and the verdict is not settled
    (``ref_between`` False)."""
    rows = []
    for r in records:
        if r["status"] != "ok":
            continue
        s = r["metrics"]["step"]
        later = s["samples"][1:]
        rows.append({"size": r["params"]["size"], "warmup": r["params"]["warmup"], "mean": s["mean"], "std": s["std"],
                     "first": s["samples"][0],
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
        row.update(_against_warm(row, [w for w in rows if w["size"] == row["size"] and w["warmup"] > 0]))
    return rows


def _against_warm(row: dict, warm: list[dict]) -> dict:
    """A cold process (no warm-up) against the warm processes of its size (see warmup_summary)."""
    if row["warmup"] > 0 or not warm:
        return {"ref_mean": None, "ref_processes": len(warm), "ref_between": None, "vs_warm": None,
                "later_vs_warm": None, "vs_warm_direction": None, "later_direction": None}
    means = [w["mean"] for w in warm]
    ref = statistics.fmean(means)
    return {"ref_mean": ref, "ref_processes": len(warm), "ref_between": len(warm) > 1,
            "vs_warm": row["mean"] / ref - 1, "later_vs_warm": row["rest_mean"] / ref - 1,
            "vs_warm_direction": judge_processes([row["mean"]], means).verdict,
            "later_direction": judge_processes([row["rest_mean"]], means).verdict}


def warm_processes(rows: list[dict]) -> list[dict]:
    """Per size, the processes with warm-up against each other: how far apart their means are
    (``spread``: largest over smallest, minus one) and ``order``, ``spread.trend_of`` the judge's
    verdict on each step up in warm-up count ("falls": each longer warm-up faster beyond the
    spread). A step is judged by the processes' own scatter (``spread.judge``, per-process means):
    with one process a warm-up count, not settled (``one_process_each``)."""
    out = []
    for size in dict.fromkeys(row["size"] for row in rows):
        warm = [w for w in rows if w["size"] == size and w["warmup"] > 0]
        if len(warm) < 2:
            continue
        by_count: dict[int, list[float]] = {}
        for w in warm:
            by_count.setdefault(w["warmup"], []).append(w["mean"])
        counts = sorted(by_count)
        steps = [judge(by_count[b], by_count[a]) for a, b in zip(counts, counts[1:])]
        means = [w["mean"] for w in warm]
        out.append({"size": size, "warmups": counts, "spread": max(means) / min(means) - 1,
                    "order": trend_of(steps), "one_process_each": all(len(v) == 1 for v in by_count.values())})
    return out


def warm_order(warm: list[dict]) -> str | None:
    """What the answer says of the warm processes' order by warm-up count (``warm_processes``): "falls"
    where at some size each longer warm-up is faster beyond the spread, else "one process each" or
    "not settled" where some size's order is not settled, else "no order"; None without them."""
    if not warm:
        return None
    orders = {w["order"] for w in warm}
    if "falls" in orders:
        return "falls"
    if NOT_SETTLED not in orders:
        return "no order"
    one_each = any(w["one_process_each"] for w in warm if w["order"] == NOT_SETTLED)
    return "one process each" if one_each else NOT_SETTLED


def fb_rows(fb: pd.DataFrame) -> list[dict]:
    """fp32 forward+backward points as the prose's table reads them: size, context, forward,
    backward and step means (ms) and backward / forward, in the table's order; and that ratio
    against the backward's matrix-product FLOPs over the forward's (``flops_ratio``, the closed
    form): ``against_flops`` is ``spread.ranges_apart`` of the range of the point's per-step
    ratios against it ("higher"/"lower": every step's ratio beyond it; ``NOT_SETTLED``: the range
    holds it), None where the record has no per-step samples of both phases."""
    rows = []
    for _, r in fb.iterrows():
        low, high, flops = r["backward_ratio_low"], r["backward_ratio_high"], r["backward_flops_ratio"]
        rows.append({"size": str(r["size"]), "context": int(r["context"]), "forward": float(r["forward_mean"]),
                     "backward": float(r["backward_mean"]), "ratio": float(r["backward_mean"] / r["forward_mean"]),
                     "step": float(r["step_mean"]), "flops_ratio": float(flops),
                     "against_flops": None if math.isnan(low) else ranges_apart((low, high), (flops, flops))})
    return rows


def backward_flops_reading(rows: list[dict]) -> str:
    """What the FLOPs' ratio says of the points' times (``fb_rows``' ``against_flops``): "departs"
    where some point's steps all lie to one side of it (the two passes ran their matrix-product
    FLOPs at two rates there), "holds" where every point's steps hold it, "unchecked" where some
    point has no per-step times of both phases and none departs."""
    readings = [r["against_flops"] for r in rows]
    if any(v in ("higher", "lower") for v in readings):
        return "departs"
    return "holds" if readings and all(v == NOT_SETTLED for v in readings) else "unchecked"


def backward_against_flops(rows: list[dict]) -> list[dict]:
    """``fb_rows`` grouped by ``against_flops``: the range of the steps' ratios holds the FLOPs' ratio
    (``NOT_SETTLED``), lies above it or below it; per group its points and the lowest and highest
    of their mean ratios, empty groups left out."""
    out = []
    for reading in (NOT_SETTLED, "higher", "lower"):
        group = [r for r in rows if r["against_flops"] == reading]
        if group:
            out.append({"reading": reading, "points": [f"{r['size']} ctx {r['context']}" for r in group],
                        "low": min(r["ratio"] for r in group), "high": max(r["ratio"] for r in group)})
    return out


def _point(row) -> dict:
    return {"size": str(row["size"]), "context": int(row["context"]), "mode": str(row["mode"]),
            "precision": str(row["precision"]), "mfu": None if math.isnan(row["mfu"]) else float(row["mfu"])}


def phase_cv(part: pd.DataFrame) -> pd.Series:
    """The spread as coefficient of variation (std / mean) of every timed phase of every point."""
    return pd.concat([part[f"{ph}_std"] / part[f"{ph}_mean"] for ph in ("forward", "backward", "optimizer")]).dropna()


def summarize(df: pd.DataFrame, records: list[dict], warmup_records: list[dict]) -> dict:
    """The numbers the A1 section quotes."""
    ok = df[df["status"] == "ok"]
    fb = ok[(ok["mode"] == "forward-backward") & (ok["precision"] == "fp32")]
    cv = phase_cv(ok)
    worst = ok.loc[cv.idxmax()] if len(cv) else None
    failed = df[df["status"] != "ok"]
    # How forward time grows from the shortest to the longest context, per size (fp32 forward mode).
    fwd = ok[(ok["mode"] == "forward") & (ok["precision"] == "fp32")]
    growth = {}
    for size, part in fwd.groupby("size", observed=True):
        part = part.sort_values("context")
        if len(part) > 1:
            growth[size] = {"from": int(part["context"].iloc[0]), "to": int(part["context"].iloc[-1]),
                            "ratio": float(part["forward_mean"].iloc[-1] / part["forward_mean"].iloc[0]),
                            "flops_ratio": float(part["flops"].iloc[-1] / part["flops"].iloc[0])}
    forward_backward = fb_rows(fb)
    # the two contexts are separate jobs, which the judge does not pair
    time_against_work = {size: across_processes(g["ratio"], g["flops_ratio"]) for size, g in growth.items()}
    # MFU: the best point of each precision, and how many points have a peak at all.
    with_peak = ok.dropna(subset=["mfu"])
    best = {}
    for precision, part in with_peak.groupby("precision", observed=True):
        top = part.loc[part["mfu"].idxmax()]
        best[str(precision)] = {"point": f"{top['size']} ctx {top['context']} {top['mode']}", "mfu": float(top["mfu"]),
                                "tflops": float(top["tflops"]), "basis": top["peak_basis"]}
    launch = ok[ok["launch_bound"] == True]     # noqa: E712 - None (no profile) is neither
    comparisons = bf16_against_fp32(df, records)
    warmups = warmup_summary(warmup_records)
    warm = warm_processes(warmups)
    return {
        "provenance": run_provenance(records + warmup_records),
        "points": len(df), "ok": int(len(ok)),
        "not_ok": [f"{r['size']} ctx {r['context']} {r['mode']} {r['precision']}: {r['status']}" for _, r in failed.iterrows()],
        "fp32_forward_backward": {f"{r['size']}@{r['context']}": {ph: r[f"{ph}_mean"] for ph in ("forward", "backward")}
                                  for _, r in fb.iterrows()},
        "fp32_forward_backward_rows": forward_backward,
        # the backward's matrix-product FLOPs over the forward's (the closed form: the same at every point)
        "backward_flops_ratio": float(fb["backward_flops_ratio"].median()) if len(fb) else None,
        "backward_against_flops": backward_against_flops(forward_backward),
        "backward_flops_reading": backward_flops_reading(forward_backward),
        "cv_median": float(cv.median()) if len(cv) else None,
        "cv_max": float(cv.max()) if len(cv) else None,
        "cv_max_point": f"{worst['size']} ctx {worst['context']} {worst['mode']} {worst['precision']}" if worst is not None else None,
        "backward_over_forward_median": float((fb["backward_mean"] / fb["forward_mean"]).median()) if len(fb) else None,
        "cv_by_precision": {p: float(phase_cv(part).median()) for p, part in ok.groupby("precision", observed=True)},
        "forward_growth": growth,
        "forward_grows_less_than_work": [size for size, v in time_against_work.items() if v == "lower"],
        "forward_growth_not_settled": [size for size, v in time_against_work.items() if v == NOT_SETTLED],
        "mfu_peaks": sorted(set(ok["peak_basis"])),
        "mfu_points": int(len(with_peak)),
        "mfu_best": best,
        # a row each (the section's table): A2's kernels and kernel time against this step
        "launch_bound": [_point(r) | {**r["a2_profile"], "busy_share": float(r["busy_share"]),
                                      "step_ms": float(r["step_mean"])}
                         for _, r in launch.iterrows()],
        "profiled_points": int(ok["busy_share"].notna().sum()),
        "launch_not_settled": int((ok["busy_share"].notna() & ok["launch_bound"].isna()).sum()),
        "launch_bound_busy": LAUNCH_BOUND_BUSY,
        "bf16_slower": [c for c in comparisons if c["bf16_is"] == "slower"],
        "bf16_within_spread": [c for c in comparisons if c["bf16_is"] == WITHIN],
        "bf16_not_settled": [c for c in comparisons if c["bf16_is"] == NOT_SETTLED],
        "bf16_faster_count": sum(c["bf16_is"] == "faster" for c in comparisons),
        "bf16_compared": len(comparisons),
        # pairs the judge could not settle: fewer rounds than it needs, or one side bound by
        # the host and the other not, by less than the host's speed moves between processes
        "bf16_too_few_rounds": sum(c["not_settled_why"] == FEW_ROUNDS for c in comparisons),
        "bf16_host_bound": sum(c["not_settled_why"] == HOST for c in comparisons),
        "host_swing": HOST_SWING,
        "bf16_none_settled": bool(comparisons) and all(c["bf16_is"] == NOT_SETTLED for c in comparisons),
        "min_rounds": MIN_ROUNDS,
        "rounds": int(records[0]["params"]["rounds"]) if records else None,
        "warmup": warmups,
        "warm_processes": warm,
        "warm_spread_max": max((w["spread"] for w in warm), default=None),
        "warm_order": warm_order(warm),
        # without warm-up, the first timed step slower than every later one at every size
        "cold_first_slowest": all(w["first_slowest"] for w in warmups if w["warmup"] == 0),
        "warmup_point": warmup_point(warmup_records),
        "on_gpu": any(r["provenance"].get("gpu") for r in warmup_records),
        "batch": int(records[0]["params"]["batch"]) if records else None,
        "warmup_steps": int(records[0]["params"]["warmup"]) if records else None,
        "steps": int(records[0]["params"]["steps"]) if records else None,
        # a cheap point's turns last at least min_turn_ms: the most timed steps any point took in a turn
        "min_turn_ms": records[0]["params"].get("min_turn_ms") if records else None,
        "most_steps_per_turn": max((r["metrics"].get("turns", {}).get("steps_per_turn") or 0
                                    for r in records if r["status"] == "ok"), default=0) or None,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.report.a1", description=__doc__.split("\n\n")[0])
    p.add_argument("--records", nargs="+", required=True)
    p.add_argument("--warmup-records", nargs="*", default=[])
    p.add_argument("--profiles", nargs="*", default=[],
                   help="this run's A2 records: GPU busy share of the fp32 points they profiled")
    p.add_argument("--out-dir", required=True, type=Path)
    args = p.parse_args(argv)
    records, warmup_records = load_records(args.records), load_records(args.warmup_records)
    try:
        warmup_point(warmup_records)
    except ValueError as exc:
        p.error(str(exc))
    df = mark_launch_bound(records_frame(records), [b for r in load_records(args.profiles) for b in profile_busy(r)])
    try:
        comparisons = bf16_against_fp32(df, records)
    except ValueError as exc:
        p.error(str(exc))
    write_table(display_table(df, comparisons), args.out_dir)
    plot_time_vs_context(df, args.out_dir / "time_vs_context.png")
    plot_warmup(warmup_records, args.out_dir / "warmup.png")
    contract.write(args.out_dir / "summary.json", contract.fill(A1Summary, summarize(df, records, warmup_records),
                                                                "A1's summary"))
    print(f"A1 report: {len(df)} points ({(df['status'] == 'ok').sum()} ok) -> {args.out_dir}", file=sys.stderr)
    return 0


# What the section's words read of this report's summary (report.contract), filled from the mapping
# ``summarize`` assembles.
@dataclass(frozen=True, kw_only=True)
class At:
    """A point the prose names."""
    size: str
    context: int
    mode: str


@dataclass(frozen=True, kw_only=True)
class Bf16At(At):
    """A point of the bf16-against-fp32 comparison, with the judge's verdict (which a test reads)."""
    bf16_is: Unread[str]


@dataclass(frozen=True, kw_only=True)
class Bf16Slower(Bf16At):
    """A point where bf16 is slower than fp32: both times, the judge's interval and what bounds each."""
    fp32_ms: float
    fp32_std_ms: float
    bf16_ms: float
    bf16_std_ms: float
    low_ms: float
    high_ms: float
    how: str
    bound_by: dict[str, str | None]


@dataclass(frozen=True, kw_only=True)
class LaunchBound(At):
    """A point whose kernels keep the GPU busy for less than ``launch_bound_busy`` of its step."""
    precision: Unread[str]
    kernels: int
    kernel_ms: float
    busy_share: float
    step_ms: float


@dataclass(frozen=True, kw_only=True)
class Growth:
    """The forward's time from one context to the next against its FLOPs'."""
    from_: int
    to: int
    ratio: float
    flops_ratio: float


@dataclass(frozen=True, kw_only=True)
class ForwardBackward:
    size: str
    context: int
    forward: float
    backward: float
    step: float
    ratio: float
    flops_ratio: Unread[float]
    against_flops: Unread[str | None]


@dataclass(frozen=True, kw_only=True)
class AgainstFlops:
    """Points whose backward / forward, over their steps' range, holds the FLOPs' ratio, or lies above or below it."""
    reading: str
    points: list[str]
    low: float
    high: float


@dataclass(frozen=True, kw_only=True)
class MfuBest:
    point: str
    mfu: float
    tflops: float
    basis: str


@dataclass(frozen=True, kw_only=True)
class WarmProcess:
    """The warm-up study's processes at one size: the order they ran in and how far their steps spread."""
    size: str
    order: str
    warmups: list[int]
    spread: float
    one_process_each: bool


@dataclass(frozen=True, kw_only=True)
class Warmup:
    """One warm-up count at one size: the first step against the rest and against the warm ones."""
    size: str
    warmup: int
    mean: float
    std: float
    first: float
    first_slowest: bool
    first_vs_rest: float
    rest_mean: float
    rest_std: float
    vs_longest: float
    vs_warm: float | None
    vs_warm_direction: str | None
    later_vs_warm: float | None
    later_direction: str | None
    ref_mean: float | None
    ref_between: bool | None
    ref_processes: int


@dataclass(frozen=True, kw_only=True)
class WarmupPoint:
    context: int
    batch: int
    mode: str
    precision: str
    steps: int


@dataclass(frozen=True, kw_only=True)
class A1Summary(Summary):
    points: int
    ok: int
    on_gpu: bool | None
    not_ok: list[str] | None
    batch: int
    steps: int
    rounds: int | None
    min_turn_ms: float | None
    most_steps_per_turn: int | None
    cv_by_precision: dict[str, float]
    cv_median: float | None
    cv_max: float
    cv_max_point: str
    launch_bound: list[LaunchBound] | None
    launch_bound_busy: float
    profiled_points: int | None
    launch_not_settled: int | None
    forward_growth: dict[str, Growth] | None
    forward_grows_less_than_work: list[str] | None
    forward_growth_not_settled: list[str] | None
    fp32_forward_backward: Unread[dict[str, Any]]     # point -> fp32's forward and backward, as tests read them
    fp32_forward_backward_rows: list[ForwardBackward] | None
    backward_over_forward_median: float | None
    backward_flops_ratio: float | None
    backward_against_flops: list[AgainstFlops]
    backward_flops_reading: str        # backward_flops_reading's: "departs", "holds" or "unchecked"
    mfu_best: dict[str, MfuBest]
    mfu_peaks: list[str]
    mfu_points: int | None
    bf16_compared: int | None
    bf16_faster_count: int
    bf16_slower: list[Bf16Slower] | None
    bf16_within_spread: list[Bf16At] | None
    bf16_not_settled: list[Bf16At]
    bf16_too_few_rounds: int
    bf16_host_bound: int
    bf16_none_settled: bool
    host_swing: float
    min_rounds: int
    warmup_point: WarmupPoint | None
    warmup_steps: int
    warmup: list[Warmup] | None
    warm_processes: list[WarmProcess] | None
    warm_spread_max: float | None
    warm_order: str | None
    cold_first_slowest: bool


CONTRACTS = {"A1": A1Summary}


if __name__ == "__main__":
    sys.exit(main())
