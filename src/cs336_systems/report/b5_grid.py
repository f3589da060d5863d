"""B5's grid as a frame, and the judge's verdict on two implementations at each point: do_bench's
median (``ms``, L2 flushed before each call, host launch time included where the host is slower than
the flush) and the CUDA-graph time (``graph_ms``: GPU time only; see ``attention.bench``). A
comparison is judged by ``spread.judge`` on the rounds of graph time where both sides have it, else
of do_bench's median, and says which; a pair that took fewer rounds than the judge needs settles
nothing (records that did not take turns in one row job ``b5.main`` refuses). Also the leaderboard
case's frame and timings.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from cs336_systems.attention.backends import BENCH_IMPLS
from cs336_systems.attention.flash_record import ran
from cs336_systems.report.spread import NOT_SETTLED, Verdict, judge, round_samples

PASSES = ("forward", "backward", "forward-backward")
# The implementations the section names (attention.backends.BENCH_IMPLS; a test holds them there): ours;
# plain attention, which ours is judged against throughout; SDPA's flash back end, the small-shape
# goal's; cuDNN, the leaderboard's anchor.
OURS, PLAIN, FLASH, CUDNN = "ours", "plain", "sdpa-flash", "sdpa-cudnn"
# What ours is set against: every other implementation the benchmark knows, in the order of their
# names; one a run did not measure has no pairs and is left out where it is used.
OTHERS = tuple(sorted(name for name in BENCH_IMPLS if name != OURS))
# The small-shape goal the B5 section judges: ours no slower than SDPA's flash back end at every bf16
# point from this sequence length on.
FLASH_GOAL_MIN_SEQ = 1024
# ... and, in do_bench's median (the host's launch path counted, as an eager training loop sees it),
# ours within this factor of SDPA flash's time at the same points.
EAGER_GOAL_RATIO = 1.25


@dataclass(frozen=True)
class Behind:
    """The point where ours is furthest behind another implementation, by the two medians."""
    dtype: str
    d: int
    seq: int
    pass_: str
    ours_ms: float
    other_ms: float
    ratio: float


@dataclass(frozen=True)
class EagerGoal:
    """Ours' do_bench time over another's at the points both ran, judged per point against ``ratio``:
    how many are within it, beyond it and not settled, and where ours is furthest behind."""
    points: int
    within: int
    beyond: int
    not_settled: int
    all_within: bool
    ratio: float
    worst: Behind | None


def eager_goal(df: pd.DataFrame, other: str, ratio: float, dtypes=None, min_seq: int = 0) -> EagerGoal:
    """At the points ours and ``other`` both ran (``dtypes``, N >= ``min_seq``), ours' do_bench time
    over other's, judged per point (``spread.judge`` of the two records' rounds, as a ratio): within
    ``ratio`` where the whole interval lies at or below it, beyond it where the whole interval lies
    above, else not settled (too few rounds)."""
    both = scope(judged(df, other, timing="do_bench"), dtypes, min_seq)
    both = both[both["ms"].notna() & both["ms_other"].notna()]
    if both.empty:
        return EagerGoal(0, 0, 0, 0, True, ratio, None)
    verdicts = [point_verdict(row, ratio=True) for _, row in both.iterrows()]
    within = sum(v.verdict != NOT_SETTLED and v.high <= ratio for v in verdicts)
    beyond = sum(v.verdict != NOT_SETTLED and v.low > ratio for v in verdicts)
    over = both["ms"] / both["ms_other"]
    worst = both.loc[over.idxmax()]
    return EagerGoal(int(len(both)), int(within), int(beyond), int(len(both) - within - beyond),
                     bool(within == len(both)), ratio,
                     Behind(worst["dtype"], int(worst["d"]), int(worst["seq"]), worst["pass"], float(worst["ms"]),
                            float(worst["ms_other"]), float(over.max())))


def grid_frame(records: list[dict]) -> pd.DataFrame:
    """One row per record, with what the loss analysis needs where it is known: the GPU, our
    kernels' smallest grid for the pass and the SM count, how fp32 products were computed (ours:
    the kernels' choice; plain: PyTorch's float32 matmul precision), each of ours as
    ``flash_record.ran`` gives it from the record (unknown: NaN / None), and the graph time with its
    range and what bounds a cold cache's cost (NaN where the record has no graph time)."""
    rows = []
    for r in records:
        m = r["metrics"]
        facts = ran(r)["facts"] if r["params"]["impl"] == OURS else {}
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
                     # the job whose turns measured it (None: a record that took no turns, which b5.main refuses) and its rounds
                     "job": (m.get("turns") or {}).get("job"),
                     "rounds_ms": round_samples(r, "ms"), "rounds_graph_ms": round_samples(r, "graph_ms")})
    return pd.DataFrame(rows, columns=FRAME_COLUMNS)


FRAME_COLUMNS = ["impl", "dtype", "d", "seq", "pass", "status", "ms", "tflops", "flops", "gpu", "programs",
                 "sms", "fp32_products", "graph_status", "graph_reason", "graph_ms", "graph_ms_min",
                 "graph_ms_max", "resident_bytes", "l2_bytes", "job", "rounds_ms", "rounds_graph_ms"]
KEYS = ["dtype", "d", "seq", "pass"]


def judged(df: pd.DataFrame, other: str, timing: str | None = None) -> pd.DataFrame:
    """The points ours and ``other`` both ran, one row each, ours' columns plain and ``other``'s
    suffixed ``_other``, with the timing that judges the pair: ``timing`` "graph" where both have a
    graph time, else "do_bench"; ``t`` and ``t_other`` the two times in it; and ``verdict``, the judge's
    (``spread.judge`` of the two records' rounds in that timing): ours slower ("higher"), faster
    ("lower"), neither (``WITHIN``), or ``NOT_SETTLED``: fewer rounds than the judge needs (or two
    jobs, whose rows ``b5.main`` refuses).

    ``timing="do_bench"`` judges every pair on do_bench's time (the host's launch included: what an
    eager training loop pays) even where both have a graph time."""
    ok = df[df["status"] == "ok"]
    both = ok[ok["impl"] == OURS].merge(ok[ok["impl"] == other], on=KEYS, suffixes=("", "_other"))
    graph = both["graph_ms"].notna() & both["graph_ms_other"].notna() & (timing != "do_bench")
    both = both.assign(timing=np.where(graph, "graph", "do_bench"),
                       t=np.where(graph, both["graph_ms"], both["ms"]),
                       t_other=np.where(graph, both["graph_ms_other"], both["ms_other"]))
    verdicts = [point_verdict(row) for _, row in both.iterrows()]
    return both.assign(verdict=[v.verdict for v in verdicts])


def judged_on(graph: int, points: int) -> str:
    """Which timing judged ``points`` of which ``graph`` were judged on graph time: "graph" (every
    one), "mixed" (graph time at some, do_bench's median at the rest) or "do_bench"."""
    return "graph" if graph == points else "mixed" if graph else "do_bench"


def scope(pair: pd.DataFrame, dtypes: list[str] | None = None, min_seq: int = 0) -> pd.DataFrame:
    """The rows of ``pair`` (``judged``'s) in ``dtypes`` (None: every dtype) from length ``min_seq`` on."""
    pair = pair[pair["seq"] >= min_seq]
    return pair if dtypes is None else pair[pair["dtype"].isin(dtypes)]


def point_verdict(row: pd.Series, ratio: bool = False) -> Verdict:
    """The judge on one row of ``judged``: its two records' rounds in the judging timing (``ratio``:
    their ratio against 1 instead of their difference)."""
    phase = "graph_ms" if row["timing"] == "graph" else "ms"

    def record(suffix: str) -> dict:
        job = row[f"job{suffix}"]
        return {"metrics": {"rounds": [{phase: r} for r in row[f"rounds_{phase}{suffix}"]],
                            "turns": {"job": job} if job else {}}}
    return judge(record(""), record("_other"), phase, ratio=ratio)


# The kernels each pass of ours runs (for its smallest grid; the D kernel is a few microseconds).
PASS_KERNELS = {"forward": ("forward",), "backward": ("dkdv", "dq"), "forward-backward": ("forward", "dkdv", "dq")}


def table_view(wide: pd.DataFrame) -> list[str]:
    """The wide table's columns a writeup shows: the point, our time (do_bench's, and the graph's where
    the run has one) and each ratio other ÷ ours in the timing that judges the point; the others'
    times stay in the CSV."""
    return [c for c in [*KEYS, OURS, f"{OURS} graph", *(f"{o} / {OURS}" for o in OTHERS)]
            if c in wide.columns]


def wide_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (dtype, d, seq, pass); a column of do_bench milliseconds (or OOM / skipped) per
    implementation, then, where any point has a graph time, a column of graph milliseconds (or why
    there is none) per implementation; then the ratios other ÷ ours in the timing that judges each
    point, marked " g" where it is graph time."""
    df = df.assign(cell=[f"{ms:.3f}" if s == "ok" else s.upper() for ms, s in zip(df["ms"], df["status"])])
    wide = df.pivot_table(index=KEYS, columns="impl", values="cell", aggfunc="first")
    if df["graph_ms"].notna().any():
        ok = df[df["status"] == "ok"]
        ok = ok.assign(cell=[f"{ms:.3f}" if not math.isnan(ms) else (s or "").upper()
                             for ms, s in zip(ok["graph_ms"], ok["graph_status"])])
        for impl, cells in ok.pivot_table(index=KEYS, columns="impl", values="cell", aggfunc="first").items():
            wide[f"{impl} graph"] = cells
    for other in OTHERS:
        pair = judged(df, other).set_index(KEYS)
        if len(pair):
            wide[f"{other} / {OURS}"] = pd.Series(
                [f"{b / a:.2f}" + (" g" if t == "graph" else "") for a, b, t in zip(pair["t"], pair["t_other"], pair["timing"])],
                index=pair.index)
    wide = wide.reset_index()
    wide["pass"] = pd.Categorical(wide["pass"], PASSES, ordered=True)
    return wide.sort_values(["dtype", "d", "pass", "seq"]).fillna("").reset_index(drop=True)


def leaderboard_frame(records: list[dict]) -> pd.DataFrame:
    """One row per (pass, impl), with each time over cuDNN's time for the same pass."""
    rows = [{"pass": r["params"]["pass"], "impl": r["params"]["impl"], "status": r["status"],
             "ms": r["metrics"].get("ms", math.nan), "tflops": r["metrics"].get("tflops", math.nan),
             "shape": "x".join(str(r["params"][k]) for k in ("batch", "seq", "d"))} for r in records]
    df = pd.DataFrame(rows)
    cudnn = df[df["impl"] == CUDNN].set_index("pass")["ms"]
    if len(cudnn):
        df["vs cuDNN"] = df["ms"] / df["pass"].map(cudnn)
    return df


@dataclass(frozen=True)
class Settings:
    warmup_ms: float
    rep_ms: float


@dataclass(frozen=True)
class LeaderboardTiming:
    """The do_bench warm-up and rep the leaderboard's records say they were timed with: the headline
    pass's (``total``) and the split's (``split``, its forward and backward alone), each where its
    records agree, else None; ``same``: both known and equal."""
    total: Settings | None
    split: Settings | None
    same: bool


def leaderboard_timing(records: list[dict]) -> LeaderboardTiming:
    def agreed(parts: set[str]) -> Settings | None:
        settings = {(r["params"].get("warmup_ms"), r["params"].get("rep_ms")) for r in records
                    if r.get("id") == "B5-leaderboard" and r["params"]["pass"] in parts}
        if len(settings) != 1 or None in next(iter(settings)):
            return None
        warmup_ms, rep_ms = settings.pop()
        return Settings(float(warmup_ms), float(rep_ms))
    total, split = agreed({"forward-backward"}), agreed({"forward", "backward"})
    return LeaderboardTiming(total, split, total is not None and total == split)


def ours_splits(ours: list[dict]) -> dict:
    """Whether our grid records' launches split a tile's work at any point (the forward's key split,
    the backward's split of either kernel), as ``flash_record.ran`` gives it, and the longest length
    where each was used, so that the writeup describes the kernels these records ran rather than
    the present code."""
    longest = {"forward": None, "backward": None}
    for r in ours:
        facts = ran(r)["facts"]
        seq = r["params"].get("seq")
        used = {"forward": (facts.get("splits") or 1) > 1,
                "backward": max(facts.get("backward_splits") or [1]) > 1}
        for part, on in used.items():
            if on and (longest[part] is None or seq > longest[part]):
                longest[part] = seq
    return longest
