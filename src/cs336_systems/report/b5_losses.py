"""Where ours loses to the other implementations in B5's grid, and what the records say of why: the
peak each implementation's rate is bounded by (``profiling.mfu.attention_peak``), points whose time is not set by their work, grids of
too few programs, and out-of-memory groups. Where a point has both timings, do_bench's median is
*launch-bound* when it exceeds the slowest graph replay by more than a cold cache can explain
(``cold_cache_ms``): the rest of its time is spent launching.
"""
from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass

import pandas as pd

from cs336_systems.accounting import memory_traffic
from cs336_systems.accounting.hardware import BY_DEVICE_NAME
from cs336_systems.profiling.mfu import attention_peak
from cs336_systems.report.b5_grid import (
    OURS,
    PLAIN,
    judged,
    judged_on,
    point_verdict,
    scope,
)
from cs336_systems.report.contract import Unread
from cs336_systems.report.spread import NOT_SETTLED, WITHIN, ranges_apart
from cs336_systems.report.what_ran import peak_cell, peak_words


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


@dataclass(frozen=True)
class ImplTiming:
    points: int
    launch_bound: int
    not_judged: Unread[int]
    max_seq: int | None             # the longest launch-bound length


@dataclass(frozen=True)
class GraphFailure:
    points: int
    impls: list[str]
    reason: str


@dataclass(frozen=True)
class TimingCheck:
    """do_bench against graph time over the points that have both: how many are launch-bound, per
    implementation too, how many could not be judged, and where every graph replay took longer than
    do_bench's median; and the graph failures by status with one reason each."""
    points: int
    launch_bound: int
    not_judged: int
    per_impl: dict[str, ImplTiming]
    graph_slower: int
    failed: dict[str, GraphFailure]


def timing_check(df: pd.DataFrame) -> TimingCheck:
    ok = df[df["status"] == "ok"]
    both = ok[ok["graph_ms"].notna()]
    bound = launch_bound(both)
    per_impl = {}
    for impl, part in both.groupby("impl"):
        b = bound[part.index]
        hit = part[b == True]  # noqa: E712 - None (not judged) is neither
        per_impl[impl] = ImplTiming(int(len(part)), int(len(hit)), int(b.isna().sum()),
                                    int(hit["seq"].max()) if len(hit) else None)
    failed = ok[ok["graph_status"].notna() & ~ok["graph_status"].isin(["ok", "skipped"])]
    return TimingCheck(int(len(both)), int((bound == True).sum()), int(bound.isna().sum()), per_impl,  # noqa: E712
                       int((both["graph_ms_min"] > both["ms"]).sum()),
                       {status: GraphFailure(int(len(part)), sorted(part["impl"].unique()),
                                             " ".join(str(part["graph_reason"].iloc[0]).split())[:160])
                        for status, part in failed.groupby("graph_status")})


# A point's time is not set by its work when the time moves by less than FLAT_FACTOR between it and
# the lengths FLAT_SPAN times shorter and longer (never down), where the series has them (at least one):
# FLAT_SPAN² times the work for less than FLAT_FACTOR times the time ("flat"); or when the next
# length measured (more work) took less time. Two lengths never take turns, so each length's time is
# the range of its rounds, and an order between two lengths holds only where their ranges say so
# (spread.ranges_apart): "less" where they lie apart, "less than FLAT_FACTOR times" where even the
# longer's slowest round is, against the shorter's fastest.
FLAT_FACTOR, FLAT_SPAN = 2.0, 4
FOLD_GROUPS = 12        # a table of more groups of lost points than this is folded in the section
# Below this share of the peak a grid with too few programs does not explain the rate by itself.
GRID_EXPLAINS = 0.5


def time_range(rounds: list) -> tuple[float, float]:
    """A point's time as the lowest and highest of its rounds' samples (every B5 record took turns:
    ``b5.main`` refuses one that did not)."""
    samples = [t for r in rounds for t in r]
    return min(samples), max(samples)


def flat_points(ok: pd.DataFrame, rounds: str = "rounds_ms") -> set[tuple]:
    """(impl, dtype, d, pass, seq) of every point whose time is not set by its work (see FLAT_FACTOR),
    each length's time the range of its ``rounds`` column's samples (``time_range``)."""
    out = set()
    for key, part in ok.groupby(["impl", "dtype", "d", "pass"]):
        ms = {seq: time_range(r) for seq, r in zip(part["seq"], part[rounds])}
        seqs = sorted(ms)
        for seq, longer in itertools.pairwise(seqs):
            if ranges_apart(ms[longer], ms[seq]) == "lower":
                out.add((*key, int(seq)))
        for seq, t in ms.items():
            shorter, longer = seq // FLAT_SPAN, seq * FLAT_SPAN
            pairs = [(ms[shorter], t)] if seq % FLAT_SPAN == 0 and shorter in ms else []
            pairs += [(t, ms[longer])] if longer in ms else []
            if pairs and all(ranges_apart(longer, shorter) != "lower" and longer[1] < FLAT_FACTOR * shorter[0]
                             for shorter, longer in pairs):
                out.add((*key, int(seq)))
    return out


@dataclass(frozen=True)
class LostPoint:
    """One point where ours is slower, in the timing that judged it: both times and useful rates,
    each against the peak that bounds it, and our smallest grid against the SM count where the
    records carry them (``grid_explains``: a grid too short to fill the GPU accounts for the rate)."""
    seq: int
    ours_ms: Unread[float]
    other_ms: Unread[float]
    ours_tflops: float
    other_tflops: float
    peak: Unread[str | None]
    ours_of_peak: float | None
    other_of_peak: float | None
    peak_short: str | None
    other_peak_short: str | None
    programs: int | None
    sms: int | None
    grid_explains: Unread[bool | None]     # counted in Losses (grid_explained, unexplained)
    # what the table says of a grid too short to fill the GPU: it "explains" the rate, or it is
    # "short" but alone not the cause; None where the grid fills the GPU or that is not known
    grid: str | None
    flat: Unread[bool]              # its time is not set by its work (``flat_points``)


@dataclass(frozen=True)
class LostGroup:
    """Lost points of one dtype, d, pass, timing and flatness: their lengths, the range of each side's
    times, and the worst of them (the largest ours ÷ other)."""
    dtype: str
    d: int
    pass_: str
    timing: str
    flat: bool
    seqs: list[int]
    ours_ms: list[float]
    other_ms: list[float]
    worst: LostPoint


@dataclass(frozen=True)
class Losses:
    """Ours against one other implementation at the points both ran: the judge's verdicts counted
    (``won`` faster, ``within`` the spread, ``lost`` slower; ``settled`` the points it decides), in graph
    time where both have it (``by_graph`` points), the same pairs' losses on do_bench's time, and the
    lost points in groups with what limits our kernels there."""
    points: int
    lost: int
    by_graph: int
    judged_on: str                  # b5_grid.judged_on
    lost_in_do_bench: int           # the same pairs judged on do_bench's time, launch included
    within: int
    won: int
    settled: int
    not_settled: int
    groups: list[LostGroup]
    fold: bool
    unexplained: int
    by_dtype: dict[str, int]
    flat_lost: int
    work_groups: int
    max_of_peak: float | None
    grid_explained: int
    sms_missing: bool


def losses(df: pd.DataFrame, other: str, dtypes=None, min_seq: int = 0) -> Losses:
    """Where ours is slower than ``other`` in the timing that judges each point (``judged``):
    every such point grouped by (dtype, d, pass, timing, flat), each group with its lengths and times
    and, for groups that are not flat, the diagnostics of its worst point (``_diagnose``).
    Flatness is tested on the series of the judging timing."""
    ok = df[df["status"] == "ok"]
    flat = {"do_bench": flat_points(ok),
            "graph": flat_points(ok.assign(ms=ok["graph_ms"]).dropna(subset=["ms"]), "rounds_graph_ms")}
    both = scope(judged(df, other), dtypes, min_seq)
    lost = both[both["verdict"] == "higher"].sort_values(["dtype", "d", "pass", "timing", "seq"])
    points = []             # (its group's key, the point), in the sorted order
    for _, row in lost.iterrows():
        is_flat = (OURS, row["dtype"], row["d"], row["pass"], int(row["seq"])) in flat[row["timing"]]
        points.append(((row["dtype"], int(row["d"]), row["pass"], row["timing"], is_flat),
                       _diagnose(row, other, is_flat)))
    # a group is a run of consecutive points of one key
    groups = [_group(key, [p for _, p in run]) for key, run in itertools.groupby(points, key=lambda kp: kp[0])]
    work = [g for g in groups if not g.flat]
    shares = [p.ours_of_peak for _, p in points if not p.flat and p.ours_of_peak is not None]
    verdict, eager = both["verdict"], scope(judged(df, other, timing="do_bench"), dtypes, min_seq)
    by_graph = int((both["timing"] == "graph").sum())
    return Losses(
        points=int(len(both)), lost=int(len(lost)), by_graph=by_graph, judged_on=judged_on(by_graph, len(both)),
        lost_in_do_bench=int((eager["verdict"] == "higher").sum()),
        within=int((verdict == WITHIN).sum()), won=int((verdict == "lower").sum()),
        settled=int((verdict != NOT_SETTLED).sum()), not_settled=int((verdict == NOT_SETTLED).sum()),
        groups=groups, fold=len(groups) > FOLD_GROUPS, unexplained=sum(not g.worst.grid_explains for g in work),
        by_dtype=dict(sorted(Counter(lost["dtype"]).items())), flat_lost=sum(p.flat for _, p in points),
        work_groups=len(work), max_of_peak=max(shares) if shares else None,
        grid_explained=sum(1 for g in groups if g.worst.grid_explains),
        sms_missing=any(p.programs is not None and p.sms is None for _, p in points))


def _group(key: tuple, points: list[LostPoint]) -> LostGroup:
    ours, other = [p.ours_ms for p in points], [p.other_ms for p in points]
    return LostGroup(*key, [p.seq for p in points], [min(ours), max(ours)], [min(other), max(other)],
                     max(points, key=lambda p: p.ours_ms / p.other_ms))


def _none(value: float) -> float | None:
    return None if isinstance(value, float) and math.isnan(value) else value


def _diagnose(row: pd.Series, other: str, flat: bool) -> LostPoint:
    ours_peak = attention_peak(row["gpu"], OURS, row["dtype"], row["fp32_products"])
    other_peak = attention_peak(row["gpu_other"], other, row["dtype"], row["fp32_products_other"])
    name, flops = peak_words(ours_peak), ours_peak.flops if ours_peak else math.nan
    other_flops = other_peak.flops if other_peak else math.nan
    # Rates in the judging timing: graph time's from the FLOPs, do_bench's the rate the record carries.
    ours_tflops, other_tflops = ((row["flops"] / row["t"] / 1e9, row["flops_other"] / row["t_other"] / 1e9)
                                 if row["timing"] == "graph" else (row["tflops"], row["tflops_other"]))
    programs = None if math.isnan(row["programs"]) else int(row["programs"])
    sms = None if programs is None or math.isnan(row["sms"]) else int(row["sms"])
    busy = min(1.0, programs / sms) if sms else None
    of_busy_peak = _none(ours_tflops * 1e12 / (busy * flops)) if busy else None
    short = busy is not None and busy < 1
    # without the card's peak the share says nothing
    explains = None if busy is None or math.isnan(flops) else bool(short and of_busy_peak >= GRID_EXPLAINS)
    return LostPoint(
        int(row["seq"]), float(row["t"]), float(row["t_other"]), float(ours_tflops), float(other_tflops), name,
        _none(ours_tflops * 1e12 / flops), _none(other_tflops * 1e12 / other_flops),
        peak_cell(ours_peak), peak_cell(other_peak), programs, sms, explains,
        "explains" if explains else "short" if explains is not None and short else None, flat)


@dataclass(frozen=True)
class OutOfMemory:
    """Where one implementation ran out of memory in one dtype and pass: the first length, the head dims."""
    dtype: str
    pass_: str
    first_seq: int
    ds: list[int]


def oom_groups(df: pd.DataFrame, impl: str) -> list[OutOfMemory]:
    oom = df[(df["impl"] == impl) & (df["status"] == "oom")]
    return [OutOfMemory(dtype, which, int(part["seq"].min()), sorted(map(int, part["d"].unique())))
            for (dtype, which), part in oom.groupby(["dtype", "pass"])]


@dataclass(frozen=True)
class Tally:
    """One statement about a series, counted over the series: where the records settle that it holds,
    that it does not (``fails``), and where overlapping intervals leave it open."""
    holds: int
    fails: Unread[int]
    open: int


@dataclass(frozen=True)
class GapTrend:
    """Per (d, pass) series of one dtype, plain's time ÷ ours (in the timing that judges each point)
    along the lengths both ran, in how many series it is larger at the longest length than at the
    shortest (``larger_at_end``), rises at every longer length (``rises_throughout``), first falls to
    its lowest at a length past the shortest (``first_falls``, with the lengths where those lows are)
    and ends below its highest (``ends_below_top``). The ends alone hide a dip or a fall between them.

    Each length's ratio has the judge's interval over its rounds (``b5_grid.point_verdict``), and two
    lengths never take turns with each other: one is above another only where the two intervals do
    not overlap (``_apart``), and a statement resting on a pair that overlaps is open."""
    series: int
    larger_at_end: Tally
    rises_throughout: Tally
    first_falls: Tally
    lowest_at: list[int]
    ends_below_top: Tally
    widens_everywhere: bool


@dataclass(frozen=True)
class _Point:
    """One length of a series: plain ÷ ours by the two medians, and its interval by the judge (NaN where
    the judge settles nothing there)."""
    seq: int
    ratio: float
    low: float
    high: float


def _apart(a: _Point, b: _Point) -> str:
    return ranges_apart((a.low, a.high), (b.low, b.high))


def _outcome(holds: bool, fails: bool) -> str:
    return "holds" if holds else "fails" if fails else "open"


def _series_outcomes(points: list[_Point]) -> dict[str, str]:
    """Each statement's outcome on one series ("holds", "fails" or "open"), and its lowest length by the
    medians. Larger at the end: the longest length apart above the shortest (below: fails). Rises
    throughout: every step apart upwards (one apart downwards: fails). First falls to its lowest: the
    lowest length past the shortest and apart below every other (the shortest apart below every other:
    fails). Ends below its highest: some length apart above the longest (the longest apart above every
    other: fails)."""
    first, last = points[0], points[-1]
    steps = [_apart(b, a) for a, b in itertools.pairwise(points)]
    # the lowest length by the medians: it is where the series is lowest only if it lies below every other
    low = min(points, key=lambda p: p.ratio)

    def below_all(p: _Point) -> bool:
        return all(_apart(p, q) == "lower" for q in points if q is not p)
    return {
        "larger_at_end": _outcome(_apart(last, first) == "higher", _apart(last, first) == "lower"),
        "rises_throughout": _outcome(all(s == "higher" for s in steps), "lower" in steps),
        "first_falls": _outcome(low is not first and below_all(low), below_all(first)),
        "ends_below_top": _outcome(any(_apart(last, q) == "lower" for q in points),
                                   all(_apart(last, q) == "higher" for q in points if q is not last)),
        "lowest_at": low.seq,
    }


def gap_trend(df: pd.DataFrame, dtype: str = "bf16") -> GapTrend:
    pair = judged(df, PLAIN)
    pair = pair[pair["dtype"] == dtype].sort_values(["d", "pass", "seq"])
    outcomes = []
    for _, part in pair.groupby(["d", "pass"]):
        if len(part) < 2:
            continue
        points = []
        for _, row in part.iterrows():
            # the judge's interval is ours ÷ plain's; plain ÷ ours is its reciprocal (unbounded above
            # where the interval reaches down to zero)
            v = point_verdict(row, ratio=True)
            low, high = ((1 / v.high, 1 / v.low if v.low > 0 else math.inf) if v.verdict != NOT_SETTLED
                         else (math.nan, math.nan))
            points.append(_Point(int(row["seq"]), float(row["t_other"] / row["t"]), low, high))
        outcomes.append(_series_outcomes(points))

    def tally(statement: str) -> Tally:
        kinds = Counter(o[statement] for o in outcomes)
        return Tally(kinds["holds"], kinds["fails"], kinds["open"])
    rising = tally("rises_throughout")
    return GapTrend(len(outcomes), tally("larger_at_end"), rising, tally("first_falls"),
                    sorted({o["lowest_at"] for o in outcomes if o["first_falls"] == "holds"}),
                    tally("ends_below_top"), rising.holds == len(outcomes))
