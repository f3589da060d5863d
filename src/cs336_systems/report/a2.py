"""A2 report: the profile tables answering (a)–(e), a category-share figure, the writeup's numbers.

    python -m cs336_systems.report.a2 --records r1.json ... --out-dir DIR

Every kernel table in a record describes the *first measured instance* of its range (one forward
pass, one backward pass, one optimizer step, one attention call), so counts read "per step" or
"per call". Tables written: ``table_a`` (forward time: NVTX vs Python, vs the forward's kernel time, vs
A1's timing of the same point when ``--a1-records`` gives it), ``table_b`` (top forward
kernel), ``table_c`` (non-matmul forward kernels above ``SHARE_THRESHOLD``), ``table_d`` (category
shares per mode), ``table_e`` (softmax vs the attention matmuls: time and FLOPs), ``failed``.
"""
from __future__ import annotations

import argparse
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from cs336_systems.accounting.hardware import BY_DEVICE_NAME
from cs336_systems.models import MODEL_SIZES
from cs336_systems.profiling.busy import mode_busy
from cs336_systems.profiling.classify import CATEGORIES, short_name
from cs336_systems.profiling.flops import attention_flops
from cs336_systems.profiling.ranges import ATTENTION_RANGES as ATTENTION
from cs336_systems.profiling.ranges import FINAL, MODE_PHASES, PHASE_RANGES, SCORES, SOFTMAX
from cs336_systems.report import contract
from cs336_systems.report.a1 import LAUNCH_BOUND_BUSY
from cs336_systems.report.common import load_records, run_provenance, save_figure, write_table
from cs336_systems.report.contract import Summary, Unread
from cs336_systems.report.spread import NOT_SETTLED, WITHIN, Estimate, judge, ranges_apart

SHARE_THRESHOLD = 0.01        # (c): a non-matmul kernel with at least this share of forward time
# (e): passes our softmax (cs336_basics.model.softmax) makes over the B·H·T² scores: amax reads them;
# the subtraction, exp and division each read and write them; the sum reads them
SOFTMAX_PASSES = 8
ELEMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
MEMORY_BOUND = 0.5            # (e): a kernel moving bytes at over this share of the card's bandwidth
# (e): passes the scores range makes over the B·H·T² scores beside its product, at the least: the
# 1/√d scaling reads and writes them, the masked fill reads and writes them (the T×T mask's own
# building and inverting, and the fill's reads of it, left out: a floor)
SCORES_EXTRA_PASSES = 4
MODES = tuple(MODE_PHASES)
PHASE_RANGE_NAMES = set(PHASE_RANGES.values())


def _point(r: dict) -> str:
    return f"{r['params']['size']} ctx {r['params']['context']}"


def _sorted(records: list[dict]) -> list[dict]:
    order = list(MODEL_SIZES)
    return sorted(records, key=lambda r: (order.index(r["params"]["size"]) if r["params"]["size"] in order else 99,
                                          r["params"]["context"]))


def _modes(r: dict) -> dict:
    return r["metrics"].get("modes", {}) if r["status"] != "error" or r["metrics"] else {}


def _ok(r: dict, mode: str) -> dict | None:
    m = _modes(r).get(mode)
    return m if m and m["status"] == "ok" else None


def _nvtx(m: dict, name: str) -> dict | None:
    return next((x for x in m.get("ranges", []) if x["range"] == name), None)


def merged(tables: list[list[dict]]) -> list[dict]:
    """Several kernel tables summed by kernel name (and category), largest first."""
    out: dict[tuple, dict] = {}
    for table in tables:
        for row in table:
            key = (row["name"], row["category"])
            acc = out.setdefault(key, {"name": row["name"], "category": row["category"], "total_ns": 0.0, "instances": 0})
            acc["total_ns"] += row["total_ns"]
            acc["instances"] += row["instances"]
    return sorted(out.values(), key=lambda r: -r["total_ns"])


def category_shares(rows: list[dict]) -> dict[str, float]:
    total = sum(r["total_ns"] for r in rows)
    return {c: (sum(r["total_ns"] for r in rows if r["category"] == c) / total if total else math.nan) for c in CATEGORIES}


def failed_points(records: list[dict]) -> list[dict]:
    out = []
    for r in _sorted(records):
        modes = _modes(r)
        if not modes:
            out.append({"point": _point(r), "mode": "all", "status": r["status"], "message": r.get("message", "")})
        for mode, m in modes.items():
            if m["status"] != "ok":
                out.append({"point": _point(r), "mode": mode, "status": m["status"], "message": m.get("message") or ""})
    return out


def a1_forward(a1_records: list[dict]) -> dict[tuple, dict]:
    """A1's own timing of the forward passes, by (size, context, batch): fp32, eager, naive
    attention — the same work as A2's forward mode, timed in another process without NVTX or nsys."""
    out = {}
    for r in a1_records:
        p = r["params"]
        if (r["status"] == "ok" and p.get("mode") == "forward" and p.get("precision", "fp32") == "fp32"
                and not p.get("compile") and p.get("attention", "naive") == "naive"):
            out[(p["size"], p["context"], p["batch"])] = r["metrics"]["forward"]
    return out


def table_a(records: list[dict], a1_records: list[dict] = ()) -> pd.DataFrame:
    """(a): the NVTX forward range against the Python timer it encloses (so their ratio only shows
    what the markers cost), against the GPU time of the forward's own kernels (how busy the GPU
    was), and against A1's timing of the same point where the run has it (an independent timer)."""
    a1 = a1_forward(a1_records)
    rows = []
    for r in _sorted(records):
        m = _ok(r, "forward")
        if not m:
            continue
        nv = _nvtx(m, "forward")
        nv_ms = nv["avg_ns"] / 1e6 if nv else math.nan
        py = m["python_ms"]["forward"]["mean"]
        busy = mode_busy(m, "forward")       # the same busy share A1's "bound by" reads
        kernel_ms = busy["kernel_ms"] if busy else math.nan
        count = busy["kernels"] if busy else 0
        p = r["params"]
        other = a1.get((p["size"], p["context"], p["batch"]))
        timer = forward_estimate(m["python_ms"]["forward"])
        # the first measured forward's kernels over the longest and the shortest timed forward: how far
        # the busy share moves with the range's length from one measured forward to the next
        lengths = m["python_ms"]["forward"].get("samples") or []
        low, high = ((kernel_ms / max(lengths), kernel_ms / min(lengths)) if lengths and min(lengths) > 0
                     else (math.nan, math.nan))
        rows.append({"point": _point(r), "nvtx_forward_ms": nv_ms, "python_forward_ms": py,
                     "python_forward_se_ms": timer.se,
                     "nvtx_over_python": nv_ms / py, "instances": nv["instances"] if nv else 0,
                     # the kernel table is the first measured forward's; the range's mean is close to it
                     "kernel_ms": kernel_ms, "kernels": count, "gpu_busy": busy["busy_share"] if busy else math.nan,
                     "gpu_busy_low": low, "gpu_busy_high": high,
                     # two different "per kernel" times: the GPU's time in each kernel, and the
                     # range's wall time per kernel launched (the host's pace where the GPU waits)
                     "kernel_us_per_kernel": 1e3 * kernel_ms / count if count else math.nan,
                     "range_us_per_kernel": 1e3 * nv_ms / count if count else math.nan,
                     "a1_forward_ms": other["mean"] if other else math.nan,
                     "a1_std_ms": other["std"] if other else math.nan,
                     "nvtx_over_a1": nv_ms / other["mean"] if other else math.nan})
    return pd.DataFrame(rows)


def forward_estimate(timed: dict) -> Estimate:
    """The Python timer's forward mean with its standard error (nan without its samples)."""
    n = timed.get("n") or len(timed.get("samples") or ())
    if not n:
        return Estimate(timed["mean"], math.nan)
    return Estimate.from_samples(timed["mean"], timed.get("std", math.nan), n)


def a_findings(a: pd.DataFrame) -> dict:
    """What (a)'s prose says, from the table: host-bound points, and a shorter context whose
    forward took longer than the next longer one's.

    "Took longer" is the judge's (``spread.judge`` of the Python timer's per-process means: the
    range encloses the timer). Each point is its own process (an A2 job a point), so two points are
    judged by how much processes of one point differ; with one process a point nothing measures
    that, and the pair is ``shorter_not_settled``, not a finding (``shorter_within_spread`` where
    several processes put the two within their scatter). For each pair whose shorter context took
    longer: whether the GPU's own work still grew with context (``kernels_grow``), and whether the
    host issued kernels at a slower pace in the shorter point's process (``slower_issue``: more
    wall time per kernel launched), which is no property of the workload when the two launched
    about as many kernels. NVTX against A1's timing of the same point is judged the same way."""
    if not len(a):      # no forward ran: nothing measured, nothing compared
        return {"host_bound": [], "host_bound_not_settled": [], "slower_shorter": [], "shorter_within_spread": [], "shorter_not_settled": [],
                "a1_compared": 0, "a1_outside_spread": [], "a1_not_settled": 0, "markers_cost": None,
                "busy_range": None, "nvtx_over_a1_range": None}
    # the GPU idle most of the forward, waiting on the host: below the line against every timed forward's
    # length; a point whose shares lie on both sides of it (or are unknown, its mean share below) is not settled
    bound = [host_bound_verdict(r) for r in a.itertuples()]
    host = a[[v == "lower" for v in bound]]
    host_unsettled = a[[v == NOT_SETTLED and (not math.isnan(r.gpu_busy_low) or r.gpu_busy < LAUNCH_BOUND_BUSY)
                   for v, r in zip(bound, a.itertuples())]]
    slower, within, unsettled = [], [], []
    processes = dict(tuple(a.groupby("point", sort=False)))      # a row per process (record) of a point
    means = a.groupby("point", sort=False).mean(numeric_only=True)
    sizes, contexts = _size_context(pd.Series(means.index))
    points = pd.DataFrame({"point": means.index, "size": sizes.values, "context": contexts.values})
    for size, part in points.groupby("size", sort=False):
        part = list(part.sort_values("context").itertuples())
        for lo, hi in zip(part, part[1:]):
            short, long = means.loc[lo.point], means.loc[hi.point]
            v = judge(list(processes[lo.point]["python_forward_ms"]), list(processes[hi.point]["python_forward_ms"]))
            pair = {"size": size, "short": int(lo.context), "long": int(hi.context),
                    "short_ms": float(short["python_forward_ms"]), "long_ms": float(long["python_forward_ms"])}
            details = {
                "short_kernel_ms": float(short["kernel_ms"]), "long_kernel_ms": float(long["kernel_ms"]),
                "short_busy": float(short["gpu_busy"]),
                "short_kernels": int(short["kernels"]), "long_kernels": int(long["kernels"]),
                "short_range_us_per_kernel": float(short["range_us_per_kernel"]),
                "long_range_us_per_kernel": float(long["range_us_per_kernel"]),
                "kernels_grow": bool(short["kernel_ms"] < long["kernel_ms"]),
                "slower_issue": bool(short["range_us_per_kernel"] > long["range_us_per_kernel"]),
                # launched about as many kernels (within 10 %): then the slower pace is the process's
                "similar_kernel_count": bool(short["kernels"] <= 1.1 * long["kernels"])}
            if v.verdict == "higher":
                slower.append(pair | details)
            elif v.verdict == NOT_SETTLED and pair["short_ms"] > pair["long_ms"]:
                unsettled.append(pair | details)
            elif v.verdict == WITHIN and pair["short_ms"] > pair["long_ms"]:
                within.append(pair)
    # same work, another process (A1's): judged against how much A2's processes of the point differ
    compared = [p for p in processes if not math.isnan(means.loc[p, "a1_forward_ms"])]
    a1_verdicts = {p: judge(list(processes[p]["nvtx_forward_ms"]), [float(means.loc[p, "a1_forward_ms"])]).verdict
                   for p in compared}
    outside = [p for p, v in a1_verdicts.items() if v in ("higher", "lower")]
    return {"host_bound": [{"point": r.point, "gpu_busy": float(r.gpu_busy), "kernels": int(r.kernels),
                            "kernel_us_per_kernel": float(r.kernel_us_per_kernel),
                            "range_us_per_kernel": float(r.range_us_per_kernel)} for r in host.itertuples()],
            "host_bound_not_settled": [{"point": r.point, "gpu_busy": float(r.gpu_busy),
                                        "busy": None if math.isnan(r.gpu_busy_low) else [float(r.gpu_busy_low),
                                                                                         float(r.gpu_busy_high)]}
                                       for r in host_unsettled.itertuples()],
            "slower_shorter": slower, "shorter_within_spread": within, "shorter_not_settled": unsettled,
            "a1_compared": len(compared),
            "a1_outside_spread": outside,
            "a1_outside_named": named_briefly(outside, compared),
            "a1_not_settled": sum(v == NOT_SETTLED for v in a1_verdicts.values()),
            # the most the NVTX range exceeds the Python timer it encloses, as a share of it
            "markers_cost": float(a["nvtx_over_python"].max() - 1),
            "busy_range": [float(a["gpu_busy"].min()), float(a["gpu_busy"].max())],
            "nvtx_over_a1_range": [float(a["nvtx_over_a1"].min()), float(a["nvtx_over_a1"].max())]
            if a["nvtx_over_a1"].notna().any() else None}


def host_bound_verdict(row) -> str:
    """A forward's busy share against ``LAUNCH_BOUND_BUSY`` (``spread.ranges_apart``): "lower"
    (host-bound) only where its kernels over every timed forward's length are below the line,
    "higher" only where all are above it, ``NOT_SETTLED`` where they lie on both sides or the
    timed forwards' lengths were not kept."""
    if math.isnan(row.gpu_busy_low):
        return NOT_SETTLED
    return ranges_apart([row.gpu_busy_low, row.gpu_busy_high], [LAUNCH_BOUND_BUSY, LAUNCH_BOUND_BUSY])


def named_briefly(chosen: list[str], among: list[str]) -> dict:
    """The shorter way to name ``chosen`` of ``among``: themselves, or all but the rest
    (``all_but``), so a sentence never lists most of a grid."""
    rest = [p for p in among if p not in chosen]
    return {"all_but": True, "points": rest} if len(rest) < len(chosen) else {"all_but": False, "points": chosen}


def _forward_tables(records: list[dict]):
    """(record, its forward-mode forward kernel table) for every point whose forward mode ran."""
    for r in _sorted(records):
        m = _ok(r, "forward")
        if m and m["tables"].get("forward"):
            yield r, m["tables"]["forward"]


def table_b(records: list[dict]) -> pd.DataFrame:
    rows = []
    for r, fwd in _forward_tables(records):
        top = fwd[0]
        row = {"point": _point(r), "top_forward_kernel": short_name(top["name"]), "category": top["category"],
               "calls_per_forward": top["instances"],
               "share_of_forward": top["total_ns"] / sum(x["total_ns"] for x in fwd), "top_fwd_bwd_kernel": None,
               "same_top": None}
        fb = _ok(r, "forward-backward")
        if fb and fb["tables"].get("forward") and fb["tables"].get("backward"):
            both = merged([fb["tables"]["forward"], fb["tables"]["backward"]])
            row["top_fwd_bwd_kernel"] = short_name(both[0]["name"])
            row["top_fwd_bwd_category"] = both[0]["category"]
            row["same_top"] = both[0]["name"] == top["name"]
        rows.append(row)
    return pd.DataFrame(rows)


def top_is_clear(tables: list[list[dict]]) -> bool:
    """Whether the first table's top kernel comes before its runner-up beyond what the profile's own
    repeats of that work show: ``tables`` are the same phases' kernel tables from each mode that ran
    them (one process: each mode a fresh model running the same passes), each kernel's totals over
    them a range, and the order holds only where the two ranges do not overlap
    (``spread.ranges_apart``). One table measures no spread: not clear."""
    if len(tables) < 2 or len(tables[0]) < 2:
        return len(tables) >= 2 and len(tables[0]) == 1
    top, runner_up = tables[0][0]["name"], tables[0][1]["name"]

    def totals(name: str) -> list[float]:
        return [sum(r["total_ns"] for r in t if r["name"] == name) for t in tables]
    a, b = totals(top), totals(runner_up)
    return ranges_apart([min(a), max(a)], [min(b), max(b)]) == "higher"


def top_clear(records: list[dict]) -> dict[str, dict]:
    """Per point whose forward-backward mode ran: whether its top forward kernel and its top kernel
    over forward and backward together are both clear of their runners-up (``clear``, by
    ``top_is_clear``): the forward's over every mode's forward table (``forwards`` of them), forward
    and backward's over every mode that ran both (``both``)."""
    out = {}
    for r in _sorted(records):
        fb = _ok(r, "forward-backward")
        if not (fb and fb["tables"].get("forward") and fb["tables"].get("backward")):
            continue
        ran = [m for m in (_ok(r, mode) for mode in MODES) if m]
        forwards = [merged([m["tables"]["forward"]]) for m in ran if m["tables"].get("forward")]
        both = [merged([m["tables"]["forward"], m["tables"]["backward"]]) for m in (fb, *[x for x in ran if x is not fb])
                if m["tables"].get("forward") and m["tables"].get("backward")]
        out[_point(r)] = {"clear": top_is_clear(forwards) and top_is_clear(both),
                          "forwards": len(forwards), "both": len(both)}
    return out


def b_findings(b: pd.DataFrame, clear: dict[str, dict] | None = None) -> dict | None:
    """(b) in numbers: the top kernel's categories, how often it runs and its share, and where the
    forward+backward top differs, what that one is. Whether the forward's top is also the top over
    forward and backward is counted only at the points ``clear`` says both tops are clear of their
    runners-up (``top_clear``); the others are too close to call (``too_close``), and without
    ``clear`` every compared point is."""
    if not len(b):
        return None
    clear = clear or {}
    settled = b["point"].map(lambda p: clear.get(p, {}).get("clear", False))
    close = [p for p, s, t in zip(b["point"], settled, b["same_top"]) if t is not None and not s]
    repeats = [clear[p] for p in b["point"] if p in clear]
    kept = b[settled]
    differ = kept[kept["same_top"] == False]  # noqa: E712 - None (not profiled) is neither
    layout = lambda name: (re.search(r"_(nn|nt|tn|tt)_", name) or [None, None])[1]  # noqa: E731 - cuBLAS's operand layout tag
    return {"categories": sorted(b["category"].unique()), "points": int(len(b)),
            "calls": [int(b["calls_per_forward"].min()), int(b["calls_per_forward"].max())],
            "share": [float(b["share_of_forward"].min()), float(b["share_of_forward"].max())],
            "differ": int(len(differ)), "compared": int(b["same_top"].notna().sum()),
            "same": int((kept["same_top"] == True).sum()),  # noqa: E712
            "too_close": [{"points": close}] if close else [],
            # the fewest repeats of the passes a compared point's order was judged over
            "repeats": {"forwards": min(x["forwards"] for x in repeats), "both": min(x["both"] for x in repeats)}
            if repeats else None,
            "differ_categories": sorted(differ["top_fwd_bwd_category"].dropna().unique())
            if "top_fwd_bwd_category" in differ else [],
            # whether every differing pair names different operand layouts (e.g. forward tn, backward nn/nt)
            "differ_in_layout": bool(len(differ)) and all(
                layout(f) and layout(g) and layout(f) != layout(g)
                for f, g in zip(differ["top_forward_kernel"], differ["top_fwd_bwd_kernel"]))}


def c_findings(records: list[dict], top: int = 5) -> dict | None:
    """(c) in numbers: the share of forward time in non-matmul kernels per point, and the non-matmul
    kernels above the threshold at the most points, with their median share there."""
    shares, seen = [], {}
    for r, fwd in _forward_tables(records):
        total = sum(x["total_ns"] for x in fwd)
        shares.append(sum(x["total_ns"] for x in fwd if x["category"] != "GEMM") / total)
        by_name: dict[tuple, float] = {}       # kernels differing only in template arguments, together
        for k in fwd:
            if k["category"] != "GEMM":
                key = (short_name(k["name"]), k["category"])
                by_name[key] = by_name.get(key, 0.0) + k["total_ns"] / total
        for key, share in by_name.items():
            if share >= SHARE_THRESHOLD:
                seen.setdefault(key, []).append(share)
    if not shares:
        return None
    ranked = sorted(seen.items(), key=lambda kv: (-len(kv[1]), -sorted(kv[1])[len(kv[1]) // 2]))[:top]
    return {"points": len(shares), "categories": sorted({cat for _, cat in seen}), "non_gemm_share": [min(shares), float(pd.Series(shares).median()), max(shares)],
            "kernels": [{"kernel": name, "category": cat, "points": len(v), "median_share": float(pd.Series(v).median())}
                        for (name, cat), v in ranked]}


def table_c(records: list[dict]) -> pd.DataFrame:
    rows = []
    for r, fwd in _forward_tables(records):
        total = sum(x["total_ns"] for x in fwd)
        for k in fwd:
            if k["category"] != "GEMM" and k["total_ns"] >= SHARE_THRESHOLD * total:
                rows.append({"point": _point(r), "kernel": short_name(k["name"]), "category": k["category"],
                             "share_of_forward": k["total_ns"] / total, "calls_per_forward": k["instances"]})
    return pd.DataFrame(rows)


def table_d(records: list[dict]) -> pd.DataFrame:
    rows = []
    for r in _sorted(records):
        for mode in MODES:
            m = _ok(r, mode)
            if not m:
                continue
            step = merged([m["tables"].get(p, []) for p in MODE_PHASES[mode]])
            total = sum(x["total_ns"] for x in step)
            rows.append({"point": _point(r), "mode": mode, "step_kernel_ms": total / 1e6,
                         **{f"{c}_share": s for c, s in category_shares(step).items()}})
    return pd.DataFrame(rows)


def share_scatter(records: list[dict]) -> dict[str, float]:
    """Per point, how far one profiled pass's category shares move when the same work runs again:
    every mode of a point runs the same forward (a fresh model each, one process), so the largest
    range, over the categories, of a category's share of the forward's kernel time across the
    modes' forward tables. Points with fewer than two forward tables measure none and are left out."""
    out = {}
    for r in _sorted(records):
        shares = [category_shares(m["tables"]["forward"]) for m in (_ok(r, mode) for mode in MODES)
                  if m and m["tables"].get("forward")]
        if len(shares) >= 2:
            out[_point(r)] = max(max(x[c] for x in shares) - min(x[c] for x in shares) for c in CATEGORIES)
    return out


def largest_gain(row: dict, scatter: float | None) -> str | None:
    """The category a training step gains the most share in over inference at one point (``row``: a
    ``summarize`` growth row), where that holds beyond the profile's repeats: each gain is the
    difference of two shares, so with every share off by up to ``scatter`` it is off by up to twice
    that, and the largest gain counts only where its range lies above the runner-up's
    (``spread.ranges_apart``). None where it does not, or where nothing measured a scatter."""
    first, second = sorted(("elementwise", "optimizer", "other"), key=lambda c: row[c], reverse=True)[:2]
    if scatter is None:
        return None
    first_range, second_range = ([row[c] - 2 * scatter, row[c] + 2 * scatter] for c in (first, second))
    return first if ranges_apart(first_range, second_range) == "higher" else None


def _size_context(point: pd.Series) -> tuple[pd.Series, pd.Series]:
    parts = point.str.split(" ctx ")
    return parts.str[0], parts.str[1].astype(int)


def empty_categories(d: pd.DataFrame) -> list[str]:
    """Categories with no kernel time at any point and mode: the table and the figure leave them
    out (our softmax's kernels are generic ones, counted as elementwise, so "attention-softmax"
    holds only fused softmax or attention kernels, which the naive model does not launch)."""
    return [c for c in CATEGORIES if not len(d) or not (d[f"{c}_share"].fillna(0) > 0).any()]


def d_findings(d: pd.DataFrame, growth: list[dict], scatter: dict[str, float] | None = None) -> dict | None:
    """(d) in numbers, from one profiled step per point and mode (so no spread: "rises" means the
    single measurements rise, and the smallest step of a rise or fall is kept for the words to set
    beside that): per mode, the contexts at which the GEMM share rises with model size at every
    step, and how a training step's shares differ from inference's: which category gains the most
    share is counted only at the points where ``largest_gain`` settles it with the point's
    ``scatter`` (``share_scatter``); the others are ``too_close``."""
    if not len(d):
        return None
    sizes, contexts = _size_context(d["point"])
    by_mode = {}
    for mode, part in d.assign(size=sizes, context=contexts).groupby("mode", sort=False):
        rising, series, rises = [], {}, []
        for context, rows in part.groupby("context"):
            shares = rows.set_index("size")["GEMM_share"].reindex([s for s in MODEL_SIZES if s in set(rows["size"])])
            series[int(context)] = {"sizes": list(shares.index), "shares": [float(v) for v in shares]}
            steps = [b - a for a, b in zip(shares, shares.iloc[1:])]
            if steps and min(steps) > 0:
                rising.append(int(context))
                rises.append(min(steps))
        by_mode[mode] = {"contexts": sorted(series), "rising_with_size": rising, "series": series,
                         "rising_at_every_context": len(rising) == len(series),
                         "smallest_rise_points": 100 * min(rises) if rises else None}
    out = {"gemm_by_mode": by_mode, "empty_categories": empty_categories(d)}
    if growth:
        g = pd.DataFrame(growth)
        scatter = scatter or {}
        gained = [largest_gain(row, scatter.get(row["point"])) for row in growth]
        measured = [scatter[row["point"]] for row in growth if row["point"] in scatter]
        g_sizes, g_contexts = _size_context(g["point"])
        falls = {size: -part.sort_values("context")["optimizer"].diff().max()
                 for size, part in g.assign(size=g_sizes, context=g_contexts).groupby("size", sort=False)
                 if len(part) > 1 and part.sort_values("context")["optimizer"].is_monotonic_decreasing}
        drop = [float((g["gemm_forward"] - g["gemm_train"]).min()), float((g["gemm_forward"] - g["gemm_train"]).max())]
        most = {c: gained.count(c) for c in dict.fromkeys(gained) if c is not None}
        out["train"] = {"gemm_drop": drop, "gemm_drop_points": [100 * drop[0], 100 * drop[1]],
                        "mostly_optimizer": most.get("optimizer", 0) > len(growth) / 2,
                        "too_close": [row["point"] for row, c in zip(growth, gained) if c is None],
                        "scatter_points": [100 * min(measured), 100 * max(measured)] if measured else None,
                        "optimizer_falls_for_every_size": len(falls) == int(g_sizes.nunique()),
                        "smallest_optimizer_fall_points": 100 * float(min(falls.values())) if falls else None,
                        "largest_gain": most, "points": len(growth)}
    return out


def attention_call_ns(m: dict) -> tuple[dict[str, float], dict[str, float], str] | None:
    """GPU time of one call of each attention range, the kernels one call launches, and where
    they come from.

    nsys: the range's GPU projection (the span of the GPU work launched inside it, summed over its
    instances) and its GPU operations, each over its instance count. Its ``--filter-nvtx`` kernel
    table cannot serve: an attention range holds no synchronisation, so its CPU time window closes
    long before the kernels it launched run, and the window catches whatever else the GPU was
    running then. torch.profiler: the range's table, which assigns each kernel to the operator
    that launched it.
    """
    projection = {x["range"]: x for x in m.get("gpu_projection") or []}
    if all(name in projection and projection[name]["instances"] for name in ATTENTION):
        per_call = {name: projection[name]["instances"] for name in ATTENTION}
        return ({name: projection[name]["proj_ns"] / per_call[name] for name in ATTENTION},
                {name: projection[name]["gpu_ops"] / per_call[name] for name in ATTENTION}, "nsys GPU projection")
    if not m.get("gpu_projection") and all(m["tables"].get(name) for name in ATTENTION):
        return ({name: sum(x["total_ns"] for x in m["tables"][name]) for name in ATTENTION},
                {name: sum(x["instances"] for x in m["tables"][name]) for name in ATTENTION},
                "torch.profiler range tables")
    return None


def table_e(records: list[dict]) -> pd.DataFrame:
    """(e): per point, one attention call's three ranges, the kernels each launches, and the
    softmax against two references, time ratio over FLOP ratio ("per FLOP"): the final matmul
    alone (its range holds the product with V, and a copy), and the scores range plus the final
    one (the scores range holds QKᵀ with the 1/√d scaling and the causal mask: elementwise work
    over the T² scores beside its product)."""
    rows = []
    for r in _sorted(records):
        m = _ok(r, "forward")
        found = attention_call_ns(m) if m else None
        if not found:
            continue
        t, kernels, source = found
        p = r["params"]
        flops = attention_flops(p["batch"], p["num_heads"], p["context"], p["d_model"] // p["num_heads"])
        both = t[SCORES] + t[FINAL]
        time_final = t[SOFTMAX] / t[FINAL] if t[FINAL] else math.nan
        time_both = t[SOFTMAX] / both if both else math.nan
        flops_final = flops["softmax"] / flops["final_matmul"]
        flops_both = flops["softmax"] / (flops["scores_matmul"] + flops["final_matmul"])
        scores = p["batch"] * p["num_heads"] * p["context"] ** 2
        softmax_bytes = SOFTMAX_PASSES * scores * ELEMENT_BYTES.get(p.get("precision", "fp32"), 4)
        card = BY_DEVICE_NAME.get(r.get("provenance", {}).get("gpu") or "")
        bandwidth = softmax_bytes / (t[SOFTMAX] / 1e9) if t[SOFTMAX] else math.nan
        # the softmax's two floors: its bytes at the card's bandwidth over its arithmetic's time
        # (softmax_arithmetic_s); above 1, memory sets the floor
        floors = ((softmax_bytes / card.hbm_bandwidth) / softmax_arithmetic_s(flops["softmax"], scores, card)
                  if card and card.hbm_bandwidth and card.fp32_flops and card.special_function_ops else math.nan)
        rows.append({"point": _point(r), "scores_us": t[SCORES] / 1e3, "softmax_us": t[SOFTMAX] / 1e3, "final_matmul_us": t[FINAL] / 1e3,
                     "kernels_per_call": " / ".join(f"{kernels[name]:g}" for name in ATTENTION),
                     "matmul_flops": flops["final_matmul"], "softmax_flops": flops["softmax"],
                     "time_softmax_over_final": time_final, "flops_softmax_over_final": flops_final,
                     "per_flop_vs_final": time_final / flops_final,
                     "time_softmax_over_scores_and_final": time_both, "flops_softmax_over_both_matmuls": flops_both,
                     "per_flop_vs_scores_and_final": time_both / flops_both,
                     "softmax_gb": softmax_bytes / 1e9, "softmax_tb_per_s": bandwidth / 1e12,
                     "softmax_hbm_share": bandwidth / card.hbm_bandwidth if card and card.hbm_bandwidth else math.nan,
                     "softmax_memory_over_arithmetic_floor": floors,
                     "source": source})
    return pd.DataFrame(rows)


def softmax_arithmetic_s(flops: float, scores: int, card) -> float:
    """The least time the softmax's arithmetic takes on ``card``: one exp a score on the
    special-function units (``card.special_function_ops``, an eighth of the fp32 lanes' rate on
    Hopper), every other operation (max, subtract, sum, divide) one instruction on an fp32 lane
    (``card.fp32_flops / 2``: the peak counts a multiply-add as 2 FLOPs, and none of these is one).
    Elementwise work runs on no tensor core."""
    return scores / card.special_function_ops + (flops - scores) / (card.fp32_flops / 2)


def arithmetic_rates(records: list[dict]) -> dict | None:
    """The two rates ``softmax_arithmetic_s`` counts at, in tera-operations a second, where every
    record ran on one card the project knows both of; else None."""
    cards = {BY_DEVICE_NAME.get(r.get("provenance", {}).get("gpu") or "") for r in records}
    card = cards.pop() if len(cards) == 1 else None
    if card is None or not card.special_function_ops or not card.fp32_flops:
        return None
    return {"exp_tera": card.special_function_ops / 1e12, "lane_tera": card.fp32_flops / 2 / 1e12}


def longest_work(longest: list[str], a: pd.DataFrame | None) -> list[dict]:
    """Whether the spans at each size's longest context are its kernels' work more than the gaps
    between their launches: the forward around the attention ranges, in the same process (table
    (a)'s *GPU busy*), kept the GPU busy above ``LAUNCH_BOUND_BUSY`` of its range at every one
    against every timed forward's length ("work"), "host-bound" at those below it against every one,
    else ``NOT_SETTLED`` (``host_bound_verdict``). A span counts the idle gaps between its kernels,
    so a host-bound forward's spans time the host. One entry, or none where table (a) lacks the
    busy share of a longest point (nothing then says which the spans time)."""
    if a is None or not len(a):
        return []
    rows = {r.point: r for r in a.itertuples()}
    if any(p not in rows or math.isnan(rows[p].gpu_busy) for p in longest):
        return []
    shares = [float(rows[p].gpu_busy) for p in longest]
    said = [host_bound_verdict(rows[p]) for p in longest]
    host = [p for p, v in zip(longest, said) if v == "lower"]
    verdict = "host-bound" if host else "work" if all(v == "higher" for v in said) else NOT_SETTLED
    return [{"busy": [min(shares), max(shares)], "verdict": verdict, "host_bound": host}]


def scores_extra(longest: pd.DataFrame) -> dict | None:
    """The scores range's time beyond the final matmul's (the same matmul FLOPs) at each size's
    longest context, against the least its passes over the scores take at the card's bandwidth
    (``SCORES_EXTRA_PASSES`` passes of the softmax's element size): ``floor_share``, the floor over
    that extra time (lowest, highest), and ``verdict``: "fits" where the floor is at most the extra
    time at every point (the passes may be what it holds), "exceeds" where it is longer somewhere
    (they cannot all be, and the ranges' timing is in doubt). None without the card's bandwidth."""
    if longest["softmax_hbm_share"].isna().any():
        return None
    bandwidth = longest["softmax_tb_per_s"] * 1e12 / longest["softmax_hbm_share"]
    floor_us = SCORES_EXTRA_PASSES / SOFTMAX_PASSES * longest["softmax_gb"] * 1e9 / bandwidth * 1e6
    extra_us = longest["scores_us"] - longest["final_matmul_us"]
    if not (extra_us > 0).all():
        return None
    share = floor_us / extra_us
    return {"passes": SCORES_EXTRA_PASSES, "floor_share": [float(share.min()), float(share.max())],
            "verdict": "fits" if (share <= 1).all() else "exceeds"}


def memory_bound(longest: pd.DataFrame) -> str | None:
    """What bounds the softmax at each size's longest context: "memory" where, at every one, its
    bytes take longer at the card's bandwidth than its arithmetic at the card's rates
    (``softmax_arithmetic_s``: its exps on the special-function units) and it moves
    them at over ``MEMORY_BOUND`` of that bandwidth; "arithmetic" where its FLOPs' floor is not
    below its bytes' somewhere (the bandwidth then is not shown to be the limit); "below" where it
    moves its bytes at under ``MEMORY_BOUND`` somewhere; None without the card's bandwidth or peak."""
    share, floors = longest["softmax_hbm_share"], longest["softmax_memory_over_arithmetic_floor"]
    if share.isna().any() or floors.isna().any():
        return None
    if not (floors > 1).all():
        return "arithmetic"
    return "memory" if (share > MEMORY_BOUND).all() else "below"


def e_findings(e: pd.DataFrame, a: pd.DataFrame | None = None) -> dict | None:
    """(e) in numbers: the per-FLOP ratios at each size's longest context and their medians over all
    points; whether the longest contexts' spans are their kernels' work more than the gaps between
    their launches, by the GPU busy share of the forward around them (``a``: table (a), same processes)."""
    if not len(e):
        return None
    sizes, contexts = _size_context(e["point"])
    longest = e.loc[contexts.groupby(sizes, sort=False).idxmax()]
    pick = lambda df, col: [float(df[col].min()), float(df[col].max())]  # noqa: E731
    vs_final = pick(longest, "per_flop_vs_final")
    floors = pick(longest, "softmax_memory_over_arithmetic_floor") \
        if longest["softmax_memory_over_arithmetic_floor"].notna().all() else None
    scores_over_final = pick(longest.assign(r=longest["scores_us"] / longest["final_matmul_us"]), "r")
    return {"longest": [{"point": r.point, "per_flop_vs_final": float(r.per_flop_vs_final),
                         "softmax_gb": float(r.softmax_gb), "softmax_tb_per_s": float(r.softmax_tb_per_s),
                         "softmax_hbm_share": None if math.isnan(r.softmax_hbm_share) else float(r.softmax_hbm_share),
                         "per_flop_vs_scores_and_final": float(r.per_flop_vs_scores_and_final),
                         "time_softmax_over_final": float(r.time_softmax_over_final),
                         "flops_softmax_over_final": float(r.flops_softmax_over_final)} for r in longest.itertuples()],
            "longest_vs_final": vs_final,
            # per FLOP against the final matmul at every longest context: slower, faster, or either
            "per_flop": "slower" if vs_final[0] > 1 else "faster" if vs_final[1] < 1 else "mixed",
            "longest_final_vs": [1 / vs_final[1], 1 / vs_final[0]],
            "longest_vs_scores_and_final": pick(longest, "per_flop_vs_scores_and_final"),
            # the two matmuls do the same FLOPs: the scores range's extra time is its scaling and mask
            "longest_scores_over_final": scores_over_final,
            "scores_slower_than_final": scores_over_final[0] > 1,
            "scores_extra": scores_extra(longest),
            "median_vs_final": float(e["per_flop_vs_final"].median()),
            "median_vs_scores_and_final": float(e["per_flop_vs_scores_and_final"].median()),
            "kernels_per_call": sorted(set(e["kernels_per_call"])), "sources": sorted(set(e["source"])),
            "longest_work": longest_work(list(longest["point"]), a),
            "softmax_hbm_share": pick(longest, "softmax_hbm_share") if longest["softmax_hbm_share"].notna().all() else None,
            "memory_over_arithmetic": floors, "memory_bound": memory_bound(longest),
            "softmax_passes": SOFTMAX_PASSES, "memory_bound_share": MEMORY_BOUND}


def plot_shares(d: pd.DataFrame, path: Path, unit: str) -> None:
    """Stacked shares of one step's kernel time per category, a panel per mode; categories with no
    time anywhere are left out (``empty_categories``), each keeping its colour."""
    modes = [m for m in MODES if len(d) and m in set(d["mode"])]
    shown = [c for c in CATEGORIES if c not in empty_categories(d)]
    fig, axes = plt.subplots(1, max(1, len(modes)), figsize=(4.5 * max(1, len(modes)), 4), squeeze=False, sharey=True)
    for ax, mode in zip(axes[0], modes):
        part = d[d["mode"] == mode]
        bottom = [0.0] * len(part)
        for i, c in enumerate(CATEGORIES):
            if c not in shown:
                continue
            values = part[f"{c}_share"].fillna(0).tolist()
            ax.bar(range(len(part)), values, bottom=bottom, color=f"C{i}", label=c)
            bottom = [b + v for b, v in zip(bottom, values)]
        ax.set_xticks(range(len(part)), part["point"], rotation=60, ha="right", fontsize=7)
        ax.set(title=mode, ylim=(0, 1))
    axes[0][0].set_ylabel(f"share of one step's summed kernel time\n({unit}, first measured step)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=max(1, len(shown)), fontsize=8, bbox_to_anchor=(0.5, 1.08))
    save_figure(fig, path)


def _fmt(df: pd.DataFrame) -> pd.DataFrame:
    out = df.copy()
    for c in out.columns:
        if c.endswith("share") or c == "share_of_forward" or c.startswith("gpu_busy"):
            out[c] = [f"{100 * v:.1f} %" if isinstance(v, float) and not math.isnan(v) else "" for v in out[c]]
        elif out[c].dtype.kind == "f":
            out[c] = [f"{v:.4g}" if not math.isnan(v) else "" for v in out[c]]
    return out


def summarize(records: list[dict], tables: dict[str, pd.DataFrame]) -> dict:
    sources = sorted({r["metrics"].get("source") for r in records if r["metrics"].get("source")})
    units = sorted({r["metrics"].get("table_unit") for r in records if r["metrics"].get("table_unit")})
    d = tables["d"]
    growth = []
    for point in (d["point"].unique() if len(d) else []):
        part = d[d["point"] == point].set_index("mode")
        if {"forward", "train-step"} <= set(part.index):
            growth.append({"point": point, **{c: float(part.loc["train-step", f"{c}_share"] - part.loc["forward", f"{c}_share"])
                                              for c in CATEGORIES},
                           "gemm_forward": float(part.loc["forward", "GEMM_share"]),
                           "gemm_train": float(part.loc["train-step", "GEMM_share"])})
    records_list = lambda df: df.to_dict(orient="records") if len(df) else []  # noqa: E731
    return {
        "provenance": run_provenance(records),
        "sources": sources, "table_units": units, "mixed_sources": len(sources) > 1,
        "fallback_reasons": sorted({r["metrics"].get("fallback_reason") for r in records if r["metrics"].get("fallback_reason")}),
        "nsys_versions": sorted({(r["metrics"].get("nsys") or {}).get("version") or "" for r in records} - {""}),
        "warnings": [w for r in records for w in r["metrics"].get("warnings", [])],
        # Only the phase ranges' kernel tables are used (attention ranges: see attention_call_ns).
        "empty_filters": [f"{_point(r)}: {f}" for r in records for f in r["metrics"].get("empty_filters", [])
                          if f.split("@")[0] in PHASE_RANGE_NAMES],
        "failed": failed_points(records),
        "batch": records[0]["params"]["batch"] if records else None,
        "warmup_steps": records[0]["params"]["warmup"] if records else None,
        "steps": records[0]["params"]["steps"] if records else None,
        "share_threshold": SHARE_THRESHOLD,
        "a": records_list(tables["a"]),
        "a_findings": a_findings(tables["a"]), "host_bound_below": LAUNCH_BOUND_BUSY,
        "b_findings": b_findings(tables["b"], top_clear(records)), "c_findings": c_findings(records),
        "d": records_list(d), "d_growth": growth, "d_findings": d_findings(d, growth, share_scatter(records)),
        "e": records_list(tables["e"]),
        "e_findings": (found := e_findings(tables["e"], tables["a"])) and found | {"rates": arithmetic_rates(records)},
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.report.a2", description=__doc__.split("\n\n")[0])
    p.add_argument("--records", nargs="+", required=True)
    p.add_argument("--a1-records", nargs="*", default=[],
                   help="A1's records of the same run, if it has them: (a) compares A1's forward timing")
    p.add_argument("--out-dir", required=True, type=Path)
    args = p.parse_args(argv)
    try:
        records = load_records(args.records)
        a1_records = load_records(args.a1_records)
    except (OSError, ValueError) as exc:
        p.error(str(exc))
    if any(r["id"] != "A2" for r in records):
        p.error("--records: not all records are A2 records")
    if any(r["id"] != "A1" for r in a1_records):
        p.error("--a1-records: not all records are A1 records")
    tables = {"a": table_a(records, a1_records), "b": table_b(records), "c": table_c(records), "d": table_d(records),
              "e": table_e(records), "failed": pd.DataFrame(failed_points(records))}
    # table_d leaves out the categories with no kernel time anywhere (as the figure does); the summary keeps them
    written = dict(tables, d=tables["d"].drop(columns=[f"{c}_share" for c in empty_categories(tables["d"])
                                                       if f"{c}_share" in tables["d"]]))
    for key, df in written.items():
        write_table(_fmt(df) if len(df) else pd.DataFrame({"(none)": []}), args.out_dir, f"table_{key}" if key != "failed" else "failed")
    units = sorted({r["metrics"].get("table_unit") for r in records if r["metrics"].get("table_unit")})
    plot_shares(tables["d"], args.out_dir / "category_shares.png", ", ".join(units) or "no data")
    contract.write(args.out_dir / "summary.json", contract.fill(A2Summary, summarize(records, tables), "A2's summary"))
    print(f"A2 report: {len(records)} points -> {args.out_dir}", file=sys.stderr)
    return 0


# What the section's words read of this report's summary (report.contract), filled from the mapping
# ``summarize`` assembles.
@dataclass(frozen=True, kw_only=True)
class HostBound:
    point: str
    gpu_busy: float
    kernels: int
    kernel_us_per_kernel: float
    range_us_per_kernel: float


@dataclass(frozen=True, kw_only=True)
class HostBoundNotSettled:
    """A forward whose busy share (over the mean range) is below the host-bound line but whose kernels
    over its timed forwards' lengths lie on both sides of it (``busy``; None where not kept)."""
    point: str
    gpu_busy: float
    busy: list[float] | None


@dataclass(frozen=True, kw_only=True)
class Shorter:
    """A shorter context against a longer one of the same size, each's range in ms."""
    size: str
    short: int
    long: int
    short_ms: float
    long_ms: float


@dataclass(frozen=True, kw_only=True)
class ShorterNotSettled(Shorter):
    short_kernel_ms: float
    long_kernel_ms: float


@dataclass(frozen=True, kw_only=True)
class SlowerShorter(ShorterNotSettled):
    """A shorter context whose range took longer, with what its kernels say of why."""
    short_kernels: int
    long_kernels: int
    short_range_us_per_kernel: float
    long_range_us_per_kernel: float
    kernels_grow: bool | None
    similar_kernel_count: bool
    slower_issue: bool | None


@dataclass(frozen=True, kw_only=True)
class NamedPoints:
    all_but: bool
    points: list[str]


@dataclass(frozen=True, kw_only=True)
class AFindings:
    """(a): the NVTX ranges against A1's timings, and what the kernels say of the short contexts."""
    busy_range: list[float] | None
    host_bound: list[HostBound] | None
    host_bound_not_settled: list[HostBoundNotSettled]
    nvtx_over_a1_range: list[float] | None
    markers_cost: float | None
    a1_compared: int | None
    a1_outside_spread: list[str] | None
    a1_outside_named: NamedPoints | None = None
    a1_not_settled: int
    slower_shorter: list[SlowerShorter]
    shorter_within_spread: list[Shorter] | None
    shorter_not_settled: list[ShorterNotSettled] | None


@dataclass(frozen=True, kw_only=True)
class Repeats:
    """How many modes ran a point's forward pass, and its forward and backward passes (the fewest)."""
    forwards: int
    both: int


@dataclass(frozen=True, kw_only=True)
class TooClose:
    """The points where a top kernel's totals over the profile's repeated passes overlap its runner-up's."""
    points: list[str]


@dataclass(frozen=True, kw_only=True)
class BFindings:
    points: int
    too_close: list[TooClose]           # one entry, or none where every compared point is clear
    repeats: Repeats | None
    compared: int | None
    same: int
    differ: int | None
    differ_categories: list[str]
    differ_in_layout: bool | None
    categories: list[str]
    calls: list[int]
    share: list[float]


@dataclass(frozen=True, kw_only=True)
class TopKernel:
    kernel: str
    category: str
    median_share: float
    points: int


@dataclass(frozen=True, kw_only=True)
class CFindings:
    points: int
    categories: list[str]
    kernels: list[TopKernel]
    non_gemm_share: list[float]


@dataclass(frozen=True, kw_only=True)
class Series:
    sizes: list[str]
    shares: list[float]


@dataclass(frozen=True, kw_only=True)
class GemmByMode:
    contexts: list[int]
    series: dict[str, Series]
    rising_at_every_context: bool
    rising_with_size: list[int] | None
    smallest_rise_points: float | None      # the least one size gains on the next, over the rising contexts


@dataclass(frozen=True, kw_only=True)
class Train:
    points: int
    gemm_drop_points: list[float]
    largest_gain: dict[str, int]        # per category, the points where it gains the most beyond the scatter
    too_close: list[str]                # the points where the two largest gains lie within it
    scatter_points: list[float] | None  # least and most scatter of a point's shares (percentage points)
    mostly_optimizer: bool
    optimizer_falls_for_every_size: bool
    smallest_optimizer_fall_points: float | None    # the least one context loses to the next, over the sizes where it falls


@dataclass(frozen=True, kw_only=True)
class DFindings:
    empty_categories: list[str] | None
    gemm_by_mode: dict[str, GemmByMode] | None
    train: Train | None = None


@dataclass(frozen=True, kw_only=True)
class Growth:
    """One point's shares from forward to a training step."""
    point: str
    gemm_forward: float
    gemm_train: float
    elementwise: float
    optimizer: float
    other: float


@dataclass(frozen=True, kw_only=True)
class Longest:
    point: str
    softmax_gb: float
    softmax_tb_per_s: float
    time_softmax_over_final: float
    flops_softmax_over_final: float


@dataclass(frozen=True, kw_only=True)
class LongestWork:
    """The forward's GPU busy share at each size's longest context (its lowest and highest), and
    whether every one is above the host-bound line ("work") or which are below it ("host-bound"),
    each against every timed forward's length (``host_bound_verdict``); else not settled."""
    busy: list[float]
    verdict: str
    host_bound: list[str]


@dataclass(frozen=True, kw_only=True)
class ScoresExtra:
    """The scores range's time beyond the final matmul's against its passes' bandwidth floor (``scores_extra``)."""
    passes: int
    floor_share: list[float]
    verdict: str


@dataclass(frozen=True, kw_only=True)
class Rates:
    """Tera-operations a second: exps on the special-function units, other operations on the fp32 lanes."""
    exp_tera: float
    lane_tera: float


@dataclass(frozen=True, kw_only=True)
class EFindings:
    """(e): the attention softmax against the matrix products around it."""
    sources: list[str]
    per_flop: str
    median_vs_final: float
    median_vs_scores_and_final: float
    longest: list[Longest]
    longest_vs_final: list[float]
    longest_final_vs: list[float]
    longest_scores_over_final: list[float]
    longest_vs_scores_and_final: list[float]
    scores_slower_than_final: bool
    longest_work: list[LongestWork]
    softmax_passes: int
    softmax_hbm_share: list[float] | None
    memory_over_arithmetic: list[float] | None      # the bytes' floor over the arithmetic's (memory_bound)
    rates: Rates | None = None                      # what the arithmetic's floor counts at (softmax_arithmetic_s)
    scores_extra: ScoresExtra | None
    memory_bound: str | None
    memory_bound_share: float


@dataclass(frozen=True, kw_only=True)
class Failed:
    point: str
    mode: str
    status: str


@dataclass(frozen=True, kw_only=True)
class A2Summary(Summary):
    sources: list[str]
    table_units: list[str]
    mixed_sources: bool
    fallback_reasons: list[str]
    nsys_versions: list[str]
    warnings: list[Any] | None
    empty_filters: list[Any] | None
    failed: list[Failed] | None
    batch: int
    warmup_steps: int
    steps: int
    share_threshold: float
    host_bound_below: float
    a: list[Any] | None
    d: Unread[list[dict[str, Any]]]         # table (d)'s rows and table (e)'s, unrounded, as a test reads them
    e: Unread[list[dict[str, Any]]]
    a_findings: AFindings
    b_findings: BFindings | None
    c_findings: CFindings | None
    d_growth: list[Growth] | None
    d_findings: DFindings | None
    e_findings: EFindings | None


CONTRACTS = {"A2": A2Summary}


if __name__ == "__main__":
    sys.exit(main())
