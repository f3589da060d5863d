"""Where ours loses to the other implementations in B5's grid, and what the records say of why: the
peak each implementation's rate is bounded by, points whose time is not set by their work, grids of
too few programs, and out-of-memory groups. Where a point has both timings, do_bench's median is
*launch-bound* when it exceeds the slowest graph replay by more than a cold cache can explain
(``cold_cache_ms``): the rest of its time is spent launching.
"""
from __future__ import annotations

import math

import pandas as pd

from cs336_systems.accounting import memory_traffic
from cs336_systems.accounting.hardware import BY_DEVICE_NAME
from cs336_systems.profiling import mfu
from cs336_systems.report.b5_grid import judged
from cs336_systems.report.spread import NOT_SETTLED, WITHIN
from cs336_systems.report.summary_schemas import BOOL, INT, NUM, STR, arr, null, obj, opt


def cold_cache_ms(row: pd.Series) -> float:
    """The most a cold L2 cache can add to one grid row's call (``memory_traffic.cold_cache_ms``, ms);
    NaN where the card or the sizes are unknown."""
    card = BY_DEVICE_NAME.get(row["gpu"] or "")
    if card is None or card.hbm_bandwidth is None:
        return math.nan
    return memory_traffic.cold_cache_ms(row["resident_bytes"], row["l2_bytes"], card)


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
               not_settled=INT, points=points, settled=INT,
               sms_missing=null(BOOL), within=INT, won=INT,
               work_groups=null(INT), **more)
