"""B5 report: FlashAttention timings as a table, a speed-up map, TFLOP/s against sequence length,
the leaderboard case, and the numbers the writeup quotes.

Two timings per point where the records have both: do_bench's median (``ms``, L2 flushed before
each call, host launch time included where the host is slower than the flush) and the CUDA-graph
time (``graph_ms``: GPU time only; see ``attention.bench``). A comparison of two implementations at
a point is judged by ``spread.judge`` on the rounds of graph time where both have it, else of
do_bench's median, and says which; records that did not take turns in one row job (or took fewer
rounds than the judge needs) settle nothing.
Where a point has both, do_bench's median is *launch-bound* when it exceeds the slowest graph replay
by more than a cold cache can explain (``cold_cache_ms``): the rest of its time is spent launching.

What our kernels ran (tiles, tile order, fp32 products, splits, backward) comes from the records
(``attention.flash_record.ran``); ``what_ran`` puts it in words, saying where records do not give
it, and the writeup states nothing about our kernels beyond it.

    python -m cs336_systems.report.b5 --rows row1.json ... --leaderboard leaderboard.json --out-dir DIR
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from cs336_systems.accounting.hardware import BY_DEVICE_NAME
from cs336_systems.profiling import mfu
from cs336_systems.attention.flash_record import TREE, ran, shape_of
from cs336_systems.report.common import load_record_lists, run_provenance, save_figure, write_summary, write_table
from cs336_systems.report.spread import MIN_ROUNDS, NOT_SETTLED, WITHIN, Verdict, judge, round_samples
from cs336_systems.report.summary_schemas import (BOOL, INT, NUM, PROVENANCE, STR, arr, mapping, null, obj,
                                                  one_of_types, opt, section)

PASSES = ("forward", "backward", "forward-backward")
# The small-shape goal the B5 section judges: ours no slower than SDPA's flash back end at every bf16
# point from this sequence length on.
FLASH_GOAL_MIN_SEQ = 1024
# ... and, in do_bench's median (the host's launch path counted, as an eager training loop sees it),
# ours within this factor of SDPA flash's time at the same points.
EAGER_GOAL_RATIO = 1.25


def eager_goal(df: pd.DataFrame, other: str, ratio: float, dtypes=None, min_seq: int = 0) -> dict:
    """At the points ours and ``other`` both ran (``dtypes``, N >= ``min_seq``), ours' do_bench time
    over other's, judged per point (``spread.judge`` of the two records' rounds, as a ratio): within
    ``ratio`` where the whole interval lies at or below it, beyond it where the whole interval lies
    above, else not settled (one process a side, or too few rounds); and the point where ours is
    furthest behind, by the two medians."""
    both = judged(df, "ours", other, timing="do_bench")
    both = both[(both["seq"] >= min_seq) & both["ms"].notna() & both["ms_other"].notna()]
    if dtypes is not None:
        both = both[both["dtype"].isin(dtypes)]
    if both.empty:
        return {"points": 0, "within": 0, "beyond": 0, "not_settled": 0, "all_within": True, "ratio": ratio,
                "worst": None}
    verdicts = [_verdict(row, ratio=True) for _, row in both.iterrows()]
    within = sum(v.verdict != NOT_SETTLED and v.high <= ratio for v in verdicts)
    beyond = sum(v.verdict != NOT_SETTLED and v.low > ratio for v in verdicts)
    over = both["ms"] / both["ms_other"]
    worst = both.loc[over.idxmax()]
    return {"points": int(len(both)), "within": int(within), "beyond": int(beyond),
            "not_settled": int(len(both) - within - beyond), "all_within": bool(within == len(both)), "ratio": ratio,
            "worst": {"dtype": worst["dtype"], "d": int(worst["d"]), "seq": int(worst["seq"]), "pass": worst["pass"],
                      "ours_ms": float(worst["ms"]), "other_ms": float(worst["ms_other"]), "ratio": float(over.max())}}


def grid_frame(records: list[dict]) -> pd.DataFrame:
    """One row per record, with what the loss analysis needs where it is known: the GPU, our
    kernels' smallest grid for the pass and the SM count, how fp32 products were computed (ours:
    the kernels' choice; plain: PyTorch's float32 matmul precision), each of ours as
    ``flash_record.ran`` gives it from the record (unknown: NaN / None), and the graph time with its
    range and what bounds a cold cache's cost (records from before graph timing: NaN, graph status
    None)."""
    rows = []
    for r in records:
        m = r["metrics"]
        what = ran(r) if r["params"]["impl"] == "ours" else {"facts": {}}
        facts = what["facts"]
        programs = [n for k in PASS_KERNELS[r["params"]["pass"]] if (n := (facts.get("programs") or {}).get(k))]
        graph_ok = m.get("graph_status") == "ok"
        rows.append({**{k: r["params"][k] for k in ("impl", "dtype", "d", "seq", "pass")}, "status": r["status"],
                     "ms": m.get("ms", math.nan), "tflops": m.get("tflops", math.nan),
                     "flops": m.get("flops", math.nan),
                     "gpu": (r.get("provenance") or {}).get("gpu"),
                     "programs": min(programs) if programs else math.nan,
                     "sms": facts.get("sms") or math.nan,
                     "fp32_products": facts.get("products") or m.get("float32_matmul_precision"),
                     "graph_status": m.get("graph_status"), "graph_reason": m.get("graph_reason"),
                     **{k: (m[k] if graph_ok and m.get(k) is not None else math.nan)
                        for k in ("graph_ms", "graph_ms_min", "graph_ms_max", "resident_bytes", "l2_bytes")},
                     # the job whose turns measured it (None: a record of its own process) and its rounds
                     "job": (m.get("turns") or {}).get("job"),
                     "rounds_ms": round_samples(r, "ms"), "rounds_graph_ms": round_samples(r, "graph_ms")})
    return pd.DataFrame(rows, columns=FRAME_COLUMNS)


FRAME_COLUMNS = ["impl", "dtype", "d", "seq", "pass", "status", "ms", "tflops", "flops", "gpu", "programs",
                 "sms", "fp32_products", "graph_status", "graph_reason", "graph_ms", "graph_ms_min",
                 "graph_ms_max", "resident_bytes", "l2_bytes", "job", "rounds_ms", "rounds_graph_ms"]
KEYS = ["dtype", "d", "seq", "pass"]


def judged(df: pd.DataFrame, impl: str, other: str, timing: str | None = None) -> pd.DataFrame:
    """The points both ran, one row each, ``impl``'s columns plain and ``other``'s suffixed
    ``_other``, with the timing that judges the pair: ``timing`` "graph" where both have a graph
    time, else "do_bench"; ``t`` and ``t_other`` the two times in it; and ``verdict``, the judge's
    (``spread.judge`` of the two records' rounds in that timing): ``impl`` slower ("higher"), faster
    ("lower"), neither (``WITHIN``), or ``NOT_SETTLED`` — measured each in its own process (records
    from before B5's rows took turns), which carries no spread across processes, or in fewer
    rounds than the judge needs. ``paired``: measured in one job's turns.

    ``timing="do_bench"`` judges every pair on do_bench's time (the host's launch included: what an
    eager training loop pays) even where both have a graph time."""
    ok = df[df["status"] == "ok"]
    both = ok[ok["impl"] == impl].merge(ok[ok["impl"] == other], on=KEYS, suffixes=("", "_other"))
    graph = both["graph_ms"].notna() & both["graph_ms_other"].notna() & (timing != "do_bench")
    both = both.assign(timing=np.where(graph, "graph", "do_bench"),
                       t=np.where(graph, both["graph_ms"], both["ms"]),
                       t_other=np.where(graph, both["graph_ms_other"], both["ms_other"]))
    verdicts = [_verdict(row) for _, row in both.iterrows()]
    return both.assign(verdict=[v.verdict for v in verdicts], paired=[v.paired for v in verdicts])


def _verdict(row: pd.Series, ratio: bool = False) -> Verdict:
    """The judge on one row of ``judged``: its two records' rounds in the judging timing (``ratio``:
    their ratio against 1 instead of their difference)."""
    phase = "graph_ms" if row["timing"] == "graph" else "ms"

    def record(suffix: str) -> dict:
        job = row[f"job{suffix}"]
        return {"metrics": {"rounds": [{phase: r} for r in row[f"rounds_{phase}{suffix}"]],
                            "turns": {"job": job} if job else {}}}
    return judge(record(""), record("_other"), phase, ratio=ratio)


def cold_cache_ms(row: pd.Series) -> float:
    """The most a cold L2 cache can add to one call's time, in ms: every byte resident before the
    call read once from device memory, plus a whole L2 of dirty lines (do_bench's flush is a memset)
    written back, at the card's datasheet bandwidth. NaN where the card or the sizes are unknown."""
    card = BY_DEVICE_NAME.get(row["gpu"] or "")
    if card is None or card.hbm_bandwidth is None:
        return math.nan
    return (row["resident_bytes"] + row["l2_bytes"]) / card.hbm_bandwidth * 1e3


def launch_bound(df: pd.DataFrame) -> pd.Series:
    """Per row: True where do_bench's median exceeds the slowest graph replay plus ``cold_cache_ms``
    (launching, not the GPU's work, set the rest of it); False where it does not; None where the
    row has no graph time or the bound is unknown."""
    def one(row):
        cold = cold_cache_ms(row) if not math.isnan(row["graph_ms"]) else math.nan
        return None if math.isnan(cold) else bool(row["ms"] > row["graph_ms_max"] + cold)
    return df.apply(one, axis=1, result_type="reduce") if len(df) else pd.Series(dtype=object)


def timing_check(df: pd.DataFrame) -> dict:
    """do_bench against graph time over the points that have both: per implementation how many,
    how many are launch-bound (with the longest such length), how many could not be judged, and
    where every graph replay took longer than do_bench's median; and the graph failures by status
    with one reason each."""
    ok = df[df["status"] == "ok"]
    both = ok[ok["graph_ms"].notna()]
    bound = launch_bound(both)
    per_impl = {}
    for impl, part in both.groupby("impl"):
        b = bound[part.index]
        hit = part[b == True]  # noqa: E712 - None (not judged) is neither
        per_impl[impl] = {"points": int(len(part)), "launch_bound": int(len(hit)),
                          "not_judged": int(b.isna().sum()),
                          "max_seq": int(hit["seq"].max()) if len(hit) else None}
    failed = ok[ok["graph_status"].notna() & ~ok["graph_status"].isin(["ok", "skipped"])]
    return {"points": int(len(both)), "launch_bound": int((bound == True).sum()),  # noqa: E712
            "not_judged": int(bound.isna().sum()), "per_impl": per_impl,
            "graph_slower": int((both["graph_ms_min"] > both["ms"]).sum()),
            "failed": {status: {"points": int(len(part)), "impls": sorted(part["impl"].unique()),
                                "reason": " ".join(str(part["graph_reason"].iloc[0]).split())[:160]}
                       for status, part in failed.groupby("graph_status")}}


# The kernels each pass of ours runs (for its smallest grid; the D kernel is a few microseconds).
PASS_KERNELS = {"forward": ("forward",), "backward": ("dkdv", "dq"), "forward-backward": ("forward", "dkdv", "dq")}


def table_view(wide: pd.DataFrame) -> list[str]:
    """The wide table's columns a writeup shows: the point, our time (do_bench's, and the graph's where
    the run has one) and each ratio other ÷ ours in the timing that judges the point; the others'
    times stay in the CSV."""
    return [c for c in [*KEYS, "ours", "ours graph", *(f"{o} / ours" for o in ("plain", "sdpa-cudnn", "sdpa-flash"))]
            if c in wide.columns]


def wide_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (dtype, d, seq, pass); a column of do_bench milliseconds (or OOM / skipped) per
    implementation, then, where any point has a graph time, a column of graph milliseconds (or why
    there is none) per implementation; then the ratios other ÷ ours in the timing that judges each
    point, marked " g" where it is graph time."""
    df = df.assign(cell=[f"{ms:.3f}" if s == "ok" else s.upper() for ms, s in zip(df["ms"], df["status"])])
    wide = df.pivot_table(index=KEYS, columns="impl", values="cell", aggfunc="first")
    if df["graph_ms"].notna().any():
        graph = df[df["status"] == "ok"].assign(
            cell=[f"{ms:.3f}" if not math.isnan(ms) else (s or "").upper()
                  for ms, s in zip(*(df[df["status"] == "ok"][c] for c in ("graph_ms", "graph_status")))])
        for impl, cells in graph.pivot_table(index=KEYS, columns="impl", values="cell", aggfunc="first").items():
            wide[f"{impl} graph"] = cells
    for other in ("plain", "sdpa-cudnn", "sdpa-flash"):
        pair = judged(df, "ours", other).set_index(KEYS)
        if len(pair):
            wide[f"{other} / ours"] = pd.Series(
                [f"{b / a:.2f}" + (" g" if t == "graph" else "") for a, b, t in zip(pair["t"], pair["t_other"], pair["timing"])],
                index=pair.index)
    wide = wide.reset_index()
    wide["pass"] = pd.Categorical(wide["pass"], PASSES, ordered=True)
    return wide.sort_values(["dtype", "d", "pass", "seq"]).fillna("").reset_index(drop=True)


def plot_speedup(df: pd.DataFrame, path: Path, baseline: str = "plain") -> None:
    """Heat maps of baseline time / our time (the timing that judges each point: graph time where
    both have it), per dtype (rows) and pass (columns); grey = not measured."""
    dtypes = sorted(df["dtype"].unique())
    fig, axes = plt.subplots(len(dtypes), len(PASSES), figsize=(4.6 * len(PASSES), 3.4 * len(dtypes)), squeeze=False)
    fig.subplots_adjust(hspace=0.75, wspace=0.3)
    pair = judged(df, "ours", baseline)
    ratio = dict(zip(zip(pair["dtype"], pair["pass"], pair["d"], pair["seq"]), pair["t_other"] / pair["t"]))
    for row, dtype in enumerate(dtypes):
        for col, which in enumerate(PASSES):
            ax = axes[row][col]
            seqs, ds = sorted(df["seq"].unique()), sorted(df["d"].unique())
            grid = np.array([[ratio.get((dtype, which, d, s), np.nan) for s in seqs] for d in ds], dtype=float)
            image = ax.imshow(np.log2(grid), cmap="RdYlGn", vmin=-4, vmax=4, aspect="auto")
            for i in range(len(ds)):
                for j in range(len(seqs)):
                    text = "–" if np.isnan(grid[i, j]) else f"{grid[i, j]:.1f}"
                    ax.text(j, i, text, ha="center", va="center", fontsize=6)
            ax.set_xticks(range(len(seqs)), [str(s) for s in seqs], rotation=60, fontsize=7)
            ax.set_yticks(range(len(ds)), [str(d) for d in ds], fontsize=7)
            ax.set_title(f"{dtype} {which}", fontsize=9)
            ax.set_xlabel("sequence length", fontsize=8)
            ax.set_ylabel("head dim", fontsize=8)
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


def plot_tflops(df: pd.DataFrame, path: Path) -> dict:
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
    name, top = peak(gpus.pop(), "ours", dtype, None) if len(gpus) == 1 and dtype != "fp32" else (None, math.nan)
    for row, which in zip(axes, PASSES):
        for ax, d in zip(row, ds):
            for impl, part in shown[(shown["d"] == d) & (shown["pass"] == which)].groupby("impl"):
                part = part.sort_values("seq")
                timings = set(part["timing"])
                label = {frozenset({"graph"}): "graph time", frozenset({"do_bench"}): "do_bench"}.get(
                    frozenset(timings), "graph time where measured, else do_bench")
                ax.plot(part["seq"], part["rate"], marker="o", label=f"{impl} ({label})")
            if name and ax.has_data():
                ax.axhline(top / 1e12, color="grey", linestyle="--", linewidth=1,
                           label=PEAK_SHORT.get(name, name) + " peak")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set(title=f"{dtype}, d = {d}, causal, {which}", xlabel="sequence length",
                   ylabel="TFLOP/s (log scale)")
            ax.grid(alpha=0.3, which="both")
            if ax.has_data():
                ax.legend(fontsize=7)
    save_figure(fig, path)
    graph = int((shown["timing"] == "graph").sum())
    return {"dtype": dtype, "ds": [int(d) for d in ds], "points": int(len(shown)), "peak": name,
            "graph": graph, "all_graph": graph == len(shown), "do_bench": int((shown["timing"] == "do_bench").sum())}


def peak(gpu: str | None, impl: str, dtype: str, fp32_products: str | None) -> tuple[str | None, float]:
    """(name, FLOP/s) of the peak that bounds one implementation's useful rate on this card (the
    datasheet peaks ``profiling.mfu.peak`` looks up by the GPU name in a record's provenance), or
    (None, nan) for an unknown card. bf16: the dense tensor-core peak. fp32: plain attention's
    matmuls follow PyTorch's float32 matmul precision ("highest", the default the bench leaves
    alone: CUDA-core sgemm; "high": TF32 tensor cores; "medium": bf16 ones); ours' products are 3xTF32 (a
    third of the TF32 peak, three products per useful one) or FMA on the CUDA cores ("ieee"), and
    where a record does not say, the CUDA-core peak, the lowest of the two: a rate far below it is
    far below either."""
    card = BY_DEVICE_NAME.get(gpu or "")
    if card is None or card.fp32_flops is None or card.tf32_flops is None:
        return None, math.nan
    if dtype != "fp32":
        return _PEAK_NAMES["bf16"], mfu.peak(gpu, "bf16").flops
    if fp32_products == "tf32x3":
        return "a third of the TF32 tensor-core peak (3xTF32)", mfu.peak(gpu, "fp32", "high").flops / 3
    setting = fp32_products if fp32_products in mfu.FP32_MATMUL else mfu.DEFAULT_FP32_MATMUL_PRECISION
    name = _PEAK_NAMES[mfu.FP32_MATMUL[setting]]
    if impl == "ours" and fp32_products not in mfu.FP32_MATMUL and fp32_products != "ieee":
        name += ", the lowest its products could run at"
    return name, mfu.peak(gpu, "fp32", setting).flops


# What the peaks of ``peak`` are called in the writeup's sentences, by the arithmetic that runs.
_PEAK_NAMES = {"bf16": "the dense bf16 tensor-core peak", "tf32": "the TF32 tensor-core peak",
               "fp32": "the fp32 CUDA-core peak"}


# The peaks of ``peak`` as a table cell names them.
PEAK_SHORT = {"the dense bf16 tensor-core peak": "bf16 tensor cores", "the TF32 tensor-core peak": "TF32 tensor cores",
              "a third of the TF32 tensor-core peak (3xTF32)": "TF32 tensor cores ÷ 3",
              "the fp32 CUDA-core peak": "fp32 CUDA cores",
              "the fp32 CUDA-core peak, the lowest its products could run at": "fp32 CUDA cores (the lowest)"}


# A point's time is not set by its work when the time moves by less than FLAT_FACTOR between it and
# the lengths FLAT_SPAN times shorter and longer (never down), where the series has them (at least one):
# FLAT_SPAN² times the work for less than FLAT_FACTOR times the time ("flat"); or when the next
# length measured (more work) took no longer.
FLAT_FACTOR, FLAT_SPAN = 2.0, 4
FOLD_GROUPS = 12        # a table of more groups of lost points than this is folded in the section
# Below this share of the peak a grid with too few programs does not explain the rate by itself.
GRID_EXPLAINS = 0.5


def flat_points(ok: pd.DataFrame) -> set[tuple]:
    """(impl, dtype, d, pass, seq) of every point whose time is not set by its work (see FLAT_FACTOR)."""
    out = set()
    for key, part in ok.groupby(["impl", "dtype", "d", "pass"]):
        ms = dict(zip(part["seq"], part["ms"]))
        seqs = sorted(ms)
        for seq, longer in zip(seqs, seqs[1:]):
            if ms[longer] <= ms[seq]:
                out.add((*key, int(seq)))
        for seq, t in ms.items():
            pairs = [(ms[shorter], t) for shorter in (seq // FLAT_SPAN,) if shorter in ms and shorter * FLAT_SPAN == seq]
            pairs += [(t, ms[seq * FLAT_SPAN])] if seq * FLAT_SPAN in ms else []
            if pairs and all(shorter <= longer < FLAT_FACTOR * shorter for shorter, longer in pairs):
                out.add((*key, int(seq)))
    return out


def losses(df: pd.DataFrame, other: str, dtypes=None, min_seq: int = 0) -> dict:
    """Where ours is slower than ``other`` in the timing that judges each point (``judged``):
    every such point grouped by (dtype, d, pass, timing, flat), each group with its lengths and times
    and, for groups that are not flat, the diagnostics of its worst point (ours' and other's useful
    rate in that timing against the peak that bounds each, and our smallest grid against the SM count
    where the records carry it). Flatness is tested on the series of the judging timing."""
    ok = df[df["status"] == "ok"]
    flat = {"do_bench": flat_points(ok),
            "graph": flat_points(ok.assign(ms=ok["graph_ms"]).dropna(subset=["ms"]))}
    both = judged(df, "ours", other)
    both = both[both["seq"] >= min_seq]
    if dtypes is not None:
        both = both[both["dtype"].isin(dtypes)]
    lost = both[both["verdict"] == "higher"].sort_values(["dtype", "d", "pass", "timing", "seq"])
    groups, points = [], []
    for _, row in lost.iterrows():
        is_flat = ("ours", row["dtype"], row["d"], row["pass"], int(row["seq"])) in flat[row["timing"]]
        point = _diagnose(row, other) | {"flat": bool(is_flat)}
        points.append(point | {"dtype": row["dtype"]})
        last = groups[-1] if groups else None
        if last and (last["dtype"], last["d"], last["pass"], last["timing"], last["flat"]) == \
                (row["dtype"], int(row["d"]), row["pass"], row["timing"], is_flat):
            last["points"].append(point)
        else:
            groups.append({"dtype": row["dtype"], "d": int(row["d"]), "pass": row["pass"], "timing": row["timing"],
                           "flat": bool(is_flat), "points": [point]})
    for g in groups:
        g["seqs"] = [p["seq"] for p in g["points"]]
        g["ours_ms"] = [min(p["ours_ms"] for p in g["points"]), max(p["ours_ms"] for p in g["points"])]
        g["other_ms"] = [min(p["other_ms"] for p in g["points"]), max(p["other_ms"] for p in g["points"])]
        g["worst"] = max(g["points"], key=lambda p: p["ours_ms"] / p["other_ms"])
        del g["points"]
    work_set = [p for p in points if not p["flat"]]
    shares = [p["ours_of_peak"] for p in work_set if p["ours_of_peak"] is not None]
    eager = judged(df, "ours", other, timing="do_bench")
    eager = eager[(eager["seq"] >= min_seq) & (eager["dtype"].isin(dtypes) if dtypes is not None else True)]
    by_graph, paired = int((both["timing"] == "graph").sum()), int(both["paired"].sum())
    return {"points": int(len(both)), "lost": int(len(lost)),
            "by_graph": by_graph, "all_by_graph": by_graph == len(both),
            # the same pairs judged on do_bench's time, launch included, where the verdict above used graph time
            "lost_in_do_bench": int((eager["verdict"] == "higher").sum()),
            # paired: the points measured in one job, judged per round; within: those whose difference
            # is inside the spread across rounds; won: faster beyond it; not settled: points the
            # records cannot judge (each from its own process, or too few rounds)
            "paired": paired, "all_paired": paired == len(both),
            "within": int((both["verdict"] == WITHIN).sum()),
            "won": int((both["verdict"] == "lower").sum()),
            "settled": int((both["verdict"] != NOT_SETTLED).sum()),
            "not_settled": int((both["verdict"] == NOT_SETTLED).sum()),
            # of those: measured each in its own process, and paired in fewer rounds than the judge needs
            "not_settled_unpaired": int(((both["verdict"] == NOT_SETTLED) & ~both["paired"].astype(bool)).sum()),
            "not_settled_few_rounds": int(((both["verdict"] == NOT_SETTLED) & both["paired"].astype(bool)).sum()),
            "groups": groups, "fold": len(groups) > FOLD_GROUPS,
            "unexplained": sum(1 for g in groups if not g["flat"] and not g["worst"].get("grid_explains")),
            "by_dtype": {dtype: sum(p["dtype"] == dtype for p in points) for dtype in sorted({p["dtype"] for p in points})},
            "flat_lost": len(points) - len(work_set), "work_groups": sum(1 for g in groups if not g["flat"]),
            "max_of_peak": max(shares) if shares else None,
            "grid_explained": sum(1 for g in groups if g["worst"].get("grid_explains")),
            "sms_missing": any(p.get("programs") is not None and p.get("sms") is None for p in points)}


def _diagnose(row: pd.Series, other: str) -> dict:
    name, flops = peak(row["gpu"], "ours", row["dtype"], row["fp32_products"])
    other_name, other_flops = peak(row["gpu_other"], other, row["dtype"], row["fp32_products_other"])
    # Rates in the judging timing; records that predate "flops" judge on do_bench only, whose rate they carry.
    ours_tflops, other_tflops = ((row["flops"] / row["t"] / 1e9, row["flops_other"] / row["t_other"] / 1e9)
                                 if row["timing"] == "graph" else (row["tflops"], row["tflops_other"]))
    point = {"seq": int(row["seq"]), "ours_ms": float(row["t"]), "other_ms": float(row["t_other"]),
             "ours_tflops": float(ours_tflops), "other_tflops": float(other_tflops),
             "peak": name, "peak_tflops": flops / 1e12, "ours_of_peak": ours_tflops * 1e12 / flops,
             "other_peak": other_name, "other_of_peak": other_tflops * 1e12 / other_flops,
             "peak_short": PEAK_SHORT.get(name), "other_peak_short": PEAK_SHORT.get(other_name)}
    if not math.isnan(row["programs"]):
        point["programs"] = int(row["programs"])
    if not (math.isnan(row["programs"]) or math.isnan(row["sms"])):
        busy = min(1.0, row["programs"] / row["sms"])
        point.update(sms=int(row["sms"]), busy=busy, short_grid=busy < 1,
                     of_busy_peak=ours_tflops * 1e12 / (busy * flops))
        if not math.isnan(flops):       # without the card's peak the share says nothing
            point["grid_explains"] = bool(busy < 1 and point["of_busy_peak"] >= GRID_EXPLAINS)
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in point.items()}


def oom_groups(df: pd.DataFrame, impl: str) -> list[dict]:
    """Where ``impl`` ran out of memory: per (dtype, pass), the first length and the head dims."""
    oom = df[(df["impl"] == impl) & (df["status"] == "oom")]
    return [{"dtype": dtype, "pass": which, "first_seq": int(part["seq"].min()), "ds": sorted(map(int, part["d"].unique()))}
            for (dtype, which), part in oom.groupby(["dtype", "pass"])]


def gap_trend(df: pd.DataFrame, dtype: str = "bf16") -> dict:
    """Per (d, pass) series of ``dtype``, plain's time ÷ ours (in the timing that judges each point)
    along the lengths both ran: in how many series it is larger at the longest length than at the
    shortest (``widening``), rises at every longer length (``rising_throughout``), first falls to a
    lowest point past the shortest length (``first_falls``, with the lengths where those lows are),
    and ends below its highest (``falls_at_top``). The ends alone hide a dip or a fall between them."""
    pair = judged(df, "ours", "plain")
    pair = pair[pair["dtype"] == dtype]
    out = {"series": 0, "widening": 0, "rising_throughout": 0, "first_falls": 0, "lowest_at": [], "falls_at_top": 0}
    if not len(pair):
        return out
    ratio = (pair["t_other"] / pair["t"]).set_axis(pd.MultiIndex.from_frame(pair[["d", "pass", "seq"]])).sort_index()
    lows = []
    for _, part in ratio.groupby(level=["d", "pass"]):
        values = list(part)
        if len(values) < 2:
            continue
        out["series"] += 1
        out["widening"] += int(values[-1] > values[0])
        out["rising_throughout"] += int(all(b > a for a, b in zip(values, values[1:])))
        low = values.index(min(values))
        if low > 0:
            out["first_falls"] += 1
            lows.append(int(part.index[low][-1]))
        out["falls_at_top"] += int(values[-1] < max(values))
    out["lowest_at"] = sorted(set(lows))
    out["widens_everywhere"] = out["rising_throughout"] == out["series"]
    return out


def leaderboard_frame(records: list[dict]) -> pd.DataFrame:
    """One row per (pass, impl), with each time over cuDNN's time for the same pass. Records from
    before the split was measured carry no pass: they are the forward + backward case."""
    rows = [{"pass": r["params"].get("pass", "forward-backward"), "impl": r["params"]["impl"], "status": r["status"],
             "ms": r["metrics"].get("ms", math.nan), "tflops": r["metrics"].get("tflops", math.nan),
             "shape": "x".join(str(r["params"][k]) for k in ("batch", "seq", "d"))} for r in records]
    df = pd.DataFrame(rows)
    cudnn = df[df["impl"] == "sdpa-cudnn"].set_index("pass")["ms"]
    if len(cudnn):
        df["vs cuDNN"] = df["ms"] / df["pass"].map(cudnn)
    return df


def leaderboard_timing(records: list[dict]) -> dict:
    """The do_bench warm-up and rep (ms) the leaderboard's records say they were timed with: the
    headline pass's (``total``) and the split's (``split``, its forward and backward alone), each
    ``{"warmup_ms", "rep_ms"}`` where its records agree, else None; ``same``: both known and equal."""
    def agreed(parts: set[str]) -> dict | None:
        settings = {(r["params"].get("warmup_ms"), r["params"].get("rep_ms")) for r in records
                    if r.get("id") == "B5-leaderboard" and r["params"].get("pass", "forward-backward") in parts}
        if len(settings) != 1 or None in next(iter(settings)):
            return None
        warmup_ms, rep_ms = settings.pop()
        return {"warmup_ms": float(warmup_ms), "rep_ms": float(rep_ms)}
    total, split = agreed({"forward-backward"}), agreed({"forward", "backward"})
    return {"total": total, "split": split, "same": total is not None and total == split}


def ours_splits(records: list[dict]) -> dict:
    """Whether our records' launches split a tile's work at any point (the forward's key split, the
    backward's split of either kernel), as ``flash_record.ran`` gives it, and the longest length
    where each was used, so that the writeup describes the kernels these records ran rather than
    the present code."""
    longest = {"forward": None, "backward": None}
    for r in records:
        if r.get("id") != "B5" or r["params"].get("impl") != "ours":
            continue
        facts = ran(r)["facts"]
        seq = r["params"].get("seq")
        used = {"forward": (facts.get("splits") or 1) > 1,
                "backward": max(facts.get("backward_splits") or [1]) > 1}
        for part, on in used.items():
            if on and (longest[part] is None or seq > longest[part]):
                longest[part] = seq
    return longest


# --- what ran: the facts about our kernels the writeup may state, each with where it comes from ---

FACT_LABELS = {"order": "causal tile order", "tiles": "tiles", "products": "fp32 products", "splits": "split launches",
               "backward": "backward", "path": "launch path"}
PHRASES = {
    "order": {"longest-first": "the longest causal tiles issued first",
              "index": "tiles in index order (the first programs of the forward and dQ passes hold the shortest "
                       "causal query tiles)"},
    "products": {"ieee": "IEEE fp32 FMA (on a GPU, the CUDA cores)", "tf32x3": "three TF32 tensor-core products each (3xTF32)",
                 "tf32": "TF32 tensor cores", "upcast": "fp32 (Triton's CPU interpreter)"},
    "backward": {"dkdv+dq": "a dK/dV kernel, then a dQ kernel (no atomics)",
                 "fused": "one dK/dV kernel adding dQ atomically", "compiled-pytorch": "the compiled PyTorch backward"},
    "delta": {"pytorch": "D = rowsum(dO ∘ O) in PyTorch", "triton": "D = rowsum(dO ∘ O) in a Triton kernel"},
    "tiles_from": {"tuned": "the tuner's (attention/tuned_tiles.py) where it has an entry",
                   "default": "the defaults where the tuner has no entry",
                   "interpreter": "the small tiles of Triton's CPU interpreter"},
    "path": {"plan": "the eager call's cached per-shape plan", "plain": "plain launches",
             "compiled": "plain launches under torch.compile",
             "compiled-plan": "the cached per-shape plan, called from the compiled graph through the custom op", "pytorch": "PyTorch tiles (no Triton)"},
}


def _phrase(fact: str, record: dict, facts: dict) -> str | None:
    """One record's value of ``fact`` in words; "" where the fact does not apply to the record
    (fp32 products of a bf16 record, splits of the compiled PyTorch backward); None where unknown."""
    if fact == "products" and record["params"].get("dtype") != "fp32":
        return ""
    if fact == "order" and not shape_of(record)["causal"]:
        return ""                           # every tile is as long without the mask
    if fact == "backward":
        kernels = facts.get("backward")
        if kernels is None:
            return None
        delta = PHRASES["delta"].get(facts.get("delta"))
        after = f", after {delta}" if delta and kernels != "compiled-pytorch" else ""
        return PHRASES["backward"].get(kernels, kernels) + after
    if fact == "splits":
        if "splits" not in facts:
            return None
        return "split" if facts["splits"] > 1 or max(facts.get("backward_splits") or [1]) > 1 else "none"
    if fact == "tiles":
        if not facts.get("tiles"):
            return None
        return PHRASES["tiles_from"].get(facts.get("tiles_from"), "as listed")
    value = facts.get(fact)
    return None if value is None else PHRASES[fact].get(value, value)


def _source(missing: int, total: int) -> str:
    """Where a fact came from, in words: the records, where they say it."""
    if not missing:
        return "the records"
    if missing == total:
        return "not known: the records do not say"
    return f"the records; not known for {missing} of {total} records"


def _tile(t: dict | None) -> str:
    if not t:
        return "—"
    extra = f" ({t['num_warps']}w, {t['num_stages']}s)" if "num_warps" in t else ""
    return f"{t['block_q']}×{t['block_k']}{extra}"


def shape_seq(record: dict) -> int:
    p = record["params"]
    return int(p["shape"][1] if "shape" in p else p["seq"])


def by_dtype_and_d(record: dict) -> tuple:
    return record["params"].get("dtype"), record["params"].get("d")


def tile_rows(resolved: list[tuple[dict, dict]], key=by_dtype_and_d) -> list[dict]:
    """One row per (``key``, tile set): the lengths it ran at and each kernel's tiles."""
    rows: dict = {}
    for record, what in resolved:
        tiles = what["facts"].get("tiles")
        if not tiles:
            continue
        cells = tuple(_tile(tiles.get(k)) for k in ("forward", "dkdv", "dq"))
        rows.setdefault((*key(record), cells), set()).add(shape_seq(record))
    out = []
    for (*k, cells), seqs in sorted(rows.items(), key=lambda item: (item[0][:-1], min(item[1]))):
        seqs = sorted(seqs)
        out.append({"key": list(k), "seqs": f"{seqs[0]}" if len(seqs) == 1 else f"{seqs[0]}–{seqs[-1]}",
                    "forward": cells[0], "dkdv": cells[1], "dq": cells[2]})
    return out


def tree_differences(resolved: list[tuple[dict, dict]]) -> dict | None:
    """How the kernels of these records compare with this tree's in the facts of
    ``flash_record.TREE``: ``compared``, the facts known for them, and ``differs``, those in which
    they differ, each with what ran and what the tree runs, in words. fp32 products count only on a
    card with TF32 tensor cores (where the tree runs 3xTF32), the order only under the causal mask.
    None where the records and their commits say none of these facts."""
    seen: dict[str, set] = {}
    for record, what in resolved:
        facts = what["facts"]
        for name in TREE:
            value = facts.get(name)
            card = BY_DEVICE_NAME.get((record.get("provenance") or {}).get("gpu") or "")
            if value is None or (name == "products" and (record["params"].get("dtype") != "fp32" or card is None
                                                         or card.tf32_flops is None)):
                continue
            if (name == "order" and not shape_of(record)["causal"]) or value == "compiled-pytorch":
                continue                    # no order without the mask; the PyTorch backward by choice
            seen.setdefault(name, set()).add(value)
    if not seen:
        return None
    out = []
    for name, values in ((name, seen[name]) for name in TREE if name in seen):
        tree = TREE[name] if isinstance(TREE[name], tuple) else (TREE[name],)
        if values - set(tree):
            words = SHORT[name]
            out.append({"fact": name, "label": words["label"], "ran": sorted(words.get(v, v) for v in values - set(tree)),
                        "tree": [words.get(v, v) for v in tree]})
    return {"compared": [SHORT[name]["label"] for name in TREE if name in seen], "differs": out}


# The facts of ``tree_differences`` in a few words.
SHORT = {"order": {"label": "causal tile order", "longest-first": "longest first", "index": "index order"},
         "tiles_from": {"label": "tile choice", "fixed": "fixed per dtype and head dimension", "tuned": "the tuner's",
                        "default": "defaults", "interpreter": "the interpreter's"},
         "products": {"label": "fp32 products", "ieee": "IEEE FMA", "tf32x3": "3xTF32"},
         "delta": {"label": "where D = rowsum(dO ∘ O) is computed", "pytorch": "in PyTorch", "triton": "in a Triton kernel"},
         "backward": {"label": "backward kernels", "dkdv+dq": "dK/dV then dQ", "fused": "fused, dQ added atomically"}}


def tuned_entry(dtype: str | None, d: int) -> str | None:
    """The entry of ``attention/tuned_tiles.py`` whose tiles a (dtype name, head dimension) takes, by
    ``flash_tiles.tuned_key``'s rule (its own entry, else its padded width's; a test holds the two
    equal), without importing the kernels."""
    from cs336_systems.attention.tuned_tiles import TUNED

    for width in (d, max(16, 1 << (d - 1).bit_length())):
        if f"{dtype}_d{width}" in TUNED:
            return f"{dtype}_d{width}"
    return None


def tuned_elsewhere(records: list[dict]) -> list[str]:
    """The cards on which the tuner chose the tiles that ``records``' shapes take (``tuned_entry``),
    where none of ``records`` ran: those tiles run here untuned for this card (the tuner is not
    re-run per card). Entries for shapes the records do not have say nothing about them."""
    from cs336_systems.attention.tuned_tiles import TUNED

    here = {r["provenance"].get("gpu") for r in records}
    used = {tuned_entry((shape := shape_of(r))["dtype"], shape["d"]) for r in records} - {None}
    return sorted({TUNED[key]["measured"]["gpu"] for key in used} - here) if any(here) else []


def what_ran(records: list[dict], facts=tuple(FACT_LABELS), key=by_dtype_and_d) -> dict:
    """What our kernels ran in ``records`` (ours only), for the writeup: per fact its value(s) in
    words and whether the records say it (``flash_record.ran``);
    the commits; the tile sets (``tile_rows``); whether the tiles changed with the length."""
    resolved = [(r, ran(r)) for r in records]
    rows = []
    for fact in facts:
        values, missing, applies = set(), 0, 0
        for record, what in resolved:
            phrase = _phrase(fact, record, what["facts"])
            if phrase == "":
                continue
            applies += 1
            if phrase is None:
                missing += 1
                continue
            values.add(phrase)
        if applies:
            rows.append({"fact": fact, "label": FACT_LABELS[fact], "values": sorted(values),
                         "source": _source(missing, applies), "known": applies - missing,
                         "records": applies})
    tiles = tile_rows(resolved, key)
    tree = tree_differences(resolved)
    varies = {tuple(t["key"]) for t in tiles}
    dates = sorted(r["provenance"]["utc"][:10] for r in records if r.get("provenance"))
    return {"records": len(records), "commits": sorted({w["commit"][:10] for _, w in resolved}),
            "dates": [dates[0], dates[-1]] if dates else [], "facts": rows,
            "tiles": tiles, "tiles_vary_with_length": len(varies) < len(tiles), "tree": tree,
            "several_lengths": len({shape_seq(r) for r in records}) > 1}


def summarize(df: pd.DataFrame, board: pd.DataFrame, records: list[dict]) -> dict:
    ok = df[df["status"] == "ok"]
    ratios = {}
    for other in ("plain", "sdpa-cudnn", "sdpa-flash"):
        pair = judged(df, "ours", other)
        r = (pair["t_other"] / pair["t"]).set_axis(pd.MultiIndex.from_frame(pair[KEYS])).sort_index()
        if len(r):
            best, worst = r.idxmax(), r.idxmin()
            graphed = int((pair["timing"] == "graph").sum())
            ratios[other] = {"median": float(r.median()), "max": float(r.max()),
                             "max_at": dict(zip(KEYS, map(str, best))),
                             "min": float(r.min()),
                             "min_at": dict(zip(KEYS, map(str, worst))),
                             "points": int(len(r)), "by_graph": graphed, "all_by_graph": graphed == len(r)}
    plain_oom = df[(df["impl"] == "plain") & (df["status"] == "oom")]
    ours_oom = df[(df["impl"] == "ours") & (df["status"] == "oom")]
    by_pass = {which: {row["impl"]: (None if math.isnan(row["ms"]) else row["ms"]) for _, row in part.iterrows()}
               for which, part in board.groupby("pass")} if len(board) else {}
    board_ms = by_pass.get("forward-backward", {})
    flash_over_ours = (board_ms["sdpa-flash"] / board_ms["ours"]
                       if board_ms.get("ours") and board_ms.get("sdpa-flash") else None)
    board_failed = {f'{r["params"]["impl"]} ({r["params"].get("pass", "forward-backward")})': " ".join(f"{r['status']}: {r.get('message', r.get('reason', ''))}".split())[:160]
                    for r in records if r["id"] == "B5-leaderboard" and r["status"] not in ("ok", "skipped")}
    return {
        "provenance": run_provenance(records),
        "tuned_elsewhere": tuned_elsewhere([r for r in records if r["params"].get("impl") == "ours"]),
        "points": int(len(df)), "ok": int(len(ok)),
        "statuses": df["status"].value_counts().to_dict(),
        # how many points that ran were measured in a row job's turns (the rest each in its own process)
        "in_turns": int(ok["job"].notna().sum()), "not_in_turns": int(ok["job"].isna().sum()), "rounds": sorted({len(r) for r in ok["rounds_ms"] if r}),
        "min_rounds": MIN_ROUNDS,       # the fewest rounds in which the judge decides anything
        "ratios": ratios,
        "plain_first_oom_seq": int(plain_oom["seq"].min()) if len(plain_oom) else None,
        "plain_oom": oom_groups(df, "plain"),
        "losses_vs_plain": losses(df, "plain"),
        "flash_goal": losses(df, "sdpa-flash", dtypes=["bf16"], min_seq=FLASH_GOAL_MIN_SEQ),
        "flash_goal_min_seq": FLASH_GOAL_MIN_SEQ,
        "flash_eager_goal": eager_goal(df, "sdpa-flash", EAGER_GOAL_RATIO, dtypes=["bf16"], min_seq=FLASH_GOAL_MIN_SEQ),
        "bf16_gap_trend": gap_trend(df),
        "flat_factor": FLAT_FACTOR, "flat_span": FLAT_SPAN, "flat_work": FLAT_SPAN ** 2,
        "timing_check": timing_check(df),
        "ours_splits": ours_splits(records),
        "ours_ran": what_ran([r for r in records if r.get("id") == "B5" and r["params"].get("impl") == "ours"]),
        "leaderboard_ran": what_ran([r for r in records if r.get("id") == "B5-leaderboard"
                                     and r["params"].get("impl") == "ours"], facts=("path", "order", "backward")),
        "ours_first_oom_seq": int(ours_oom["seq"].min()) if len(ours_oom) else None,
        "max_seq": int(df["seq"].max()),
        "leaderboard": board_ms,
        "leaderboard_split": {which: by_pass[which] for which in ("forward", "backward") if which in by_pass},
        # ours' time over cuDNN's, forward alone and backward alone, where both have one
        "leaderboard_split_over_cudnn": {which: by_pass[which]["ours"] / by_pass[which]["sdpa-cudnn"]
                                         for which in ("forward", "backward")
                                         if by_pass.get(which, {}).get("ours") and by_pass[which].get("sdpa-cudnn")},
        "leaderboard_failed": board_failed,
        "leaderboard_timing": leaderboard_timing(records),
        "leaderboard_shape": board["shape"].iloc[0] if len(board) else None,
        "ours_over_cudnn": (board_ms.get("ours") / board_ms["sdpa-cudnn"]
                            if board_ms.get("ours") and board_ms.get("sdpa-cudnn") else None),
        "flash_over_ours": flash_over_ours,
        "ours_over_flash": 1 / flash_over_ours if flash_over_ours else None,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.report.b5", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", nargs="+", required=True)
    p.add_argument("--leaderboard", required=True)
    p.add_argument("--out-dir", required=True, type=Path)
    args = p.parse_args(argv)
    records, board_records = load_record_lists(args.rows), load_record_lists([args.leaderboard])
    df = grid_frame(records)
    wide = wide_table(df)
    write_table(wide, args.out_dir)
    board = leaderboard_frame(board_records)
    board.to_csv(args.out_dir / "leaderboard.csv", index=False)
    plot_speedup(df, args.out_dir / "speedup.png")
    plotted = plot_tflops(df, args.out_dir / "tflops.png")
    summary = summarize(df, board, records + board_records) | {"tflops_plot": plotted, "table_view": table_view(wide)}
    write_summary(args.out_dir / "summary.json", summary)
    print(f"B5 report: {len(df)} points -> {args.out_dir}", file=sys.stderr)
    return 0


def ran_schema(key: dict = STR, **more) -> dict:
    """``what_ran``'s summary as the sections' schemas declare it (B3's and B4's too): ``key`` the type
    of a tile row's key."""
    fact = obj(fact=STR, known=null(INT), label=STR, source=STR, values=null(arr(STR)))
    tile = obj(dkdv=STR, dq=STR, forward=STR, key=arr(key), seqs=STR)
    differs = obj(label=STR, ran=arr(STR), tree=arr(STR))
    return obj(facts=arr(fact), several_lengths=BOOL, records=null(INT), tiles=null(arr(tile)),
               tiles_vary_with_length=null(BOOL), tree=null(obj(compared=arr(STR), differs=null(arr(differs)))),
               **more)


def losses_schema(of_peak: dict, short_grid: dict | opt, points: dict, **more) -> dict:
    """``losses``' summary: ``of_peak`` and ``short_grid`` the types of the worst point's share of peak
    and whether its grid left SMs idle, known for every point where the comparison is in bf16 alone."""
    worst = obj(short_grid=short_grid, grid_explains=opt(null(BOOL)), other_of_peak=of_peak, other_peak_short=null(STR),
                other_tflops=NUM, ours_of_peak=of_peak, ours_tflops=NUM, peak_short=null(STR),
                programs=opt(null(INT)), seq=INT, sms=opt(null(INT)))
    group = obj({"pass": STR}, d=INT, dtype=STR, flat=null(BOOL), other_ms=arr(NUM), ours_ms=arr(NUM),
                seqs=arr(INT), timing=STR, worst=worst)
    return obj(by_graph=null(INT), flat_lost=null(INT), fold=BOOL,
               grid_explained=null(INT), groups=arr(group), lost=null(INT), max_of_peak=null(NUM),
               not_settled=INT, not_settled_few_rounds=INT, not_settled_unpaired=INT, points=points, settled=INT,
               sms_missing=null(BOOL), within=INT, won=INT,
               work_groups=null(INT), **more)


# What writeup/templates/sections/B5.md.j2 reads of this report's summary (report.summary_schemas).
_AT = obj({"pass": STR}, d=STR, dtype=STR, seq=STR)
_SPLIT = opt(null(obj({"ours": opt(null(NUM)), "sdpa-cudnn": opt(null(NUM))})))
SUMMARY_SCHEMAS: dict[str, dict] = {"B5": section(
    bf16_gap_trend=obj(series=null(INT), widening=INT, rising_throughout=INT, first_falls=INT, lowest_at=arr(INT),
                       falls_at_top=INT, widens_everywhere=opt(BOOL)),
    flash_eager_goal=null(obj(all_within=BOOL, beyond=INT, not_settled=INT, points=null(INT), ratio=NUM, within=INT, worst=null(obj(
        {"pass": STR}, d=INT, dtype=STR, other_ms=NUM, ours_ms=NUM, ratio=NUM, seq=INT)))),
    flash_goal=losses_schema(of_peak=NUM, short_grid=BOOL, points=null(INT), lost_in_do_bench=INT,
                             all_by_graph=BOOL),
    flash_goal_min_seq=INT,
    flat_factor=NUM,
    flat_span=INT,
    flat_work=INT,
    in_turns=null(INT),
    not_in_turns=INT,
    leaderboard=obj({"ours": NUM, "sdpa-cudnn": null(NUM), "sdpa-flash": null(NUM)}),
    leaderboard_failed=mapping(),
    leaderboard_ran=opt(null(obj(facts=null(arr(obj(known=INT, label=STR, source=STR, values=arr(STR)))),
                                 records=null(INT)))),
    leaderboard_shape=STR,
    leaderboard_timing=obj(total=null(obj(warmup_ms=NUM, rep_ms=NUM)), split=null(obj(warmup_ms=NUM, rep_ms=NUM)),
                           same=BOOL),
    leaderboard_split=obj(backward=_SPLIT, forward=_SPLIT),
    leaderboard_split_over_cudnn=obj(backward=opt(NUM), forward=opt(NUM)),
    losses_vs_plain=losses_schema(of_peak=null(NUM), short_grid=opt(BOOL), points=INT, by_dtype=mapping(INT),
                                  unexplained=null(INT)),
    max_seq=INT,
    min_rounds=INT,
    ok=INT,
    ours_first_oom_seq=null(INT),
    ours_over_cudnn=null(NUM),
    ours_over_flash=null(NUM),
    ours_ran=ran_schema(key=one_of_types(INT, STR), commits=arr(STR)),
    ours_splits=null(obj(backward=opt(null(INT)), forward=opt(null(INT)))),
    plain_first_oom_seq=null(INT),
    plain_oom=null(arr(obj({"pass": STR}, ds=arr(INT), dtype=STR, first_seq=INT))),
    points=INT,
    provenance=PROVENANCE,
    tuned_elsewhere=arr(STR),
    ratios=obj({
        "plain": opt(obj(all_by_graph=BOOL, by_graph=opt(null(INT)), max=NUM, max_at=_AT, median=NUM, min=NUM, min_at=_AT, points=INT)),
        "sdpa-cudnn": opt(obj(by_graph=null(INT), max=NUM, median=NUM, min=NUM, points=INT))}),
    rounds=arr(INT),
    statuses=mapping(INT),
    tflops_plot=opt(null(obj(all_graph=BOOL, ds=arr(INT), dtype=STR, graph=null(INT), peak=null(STR), points=INT))),
    table_view=arr(STR),
    timing_check=obj(failed=mapping(obj(impls=arr(STR), points=INT, reason=STR)), graph_slower=null(INT),
                     launch_bound=null(INT), not_judged=null(INT),
                     per_impl=mapping(obj(launch_bound=INT, max_seq=null(INT), points=INT)), points=null(INT)),
)}

if __name__ == "__main__":
    sys.exit(main())
