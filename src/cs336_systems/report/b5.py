"""B5 report: FlashAttention timings as a table, a speed-up map, TFLOP/s against sequence length,
the leaderboard case, and the numbers the writeup quotes. The grid and its verdicts are
``report.b5_grid``'s, the figures ``report.b5_figures``', where ours loses and why
``report.b5_losses``', and what our kernels ran ``report.what_ran``'s; this module puts them into the
section's summary.

    python -m cs336_systems.report.b5 --rows row1.json ... --leaderboard leaderboard.json --out-dir DIR
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from cs336_systems.attention.flash_record import commit_of
from cs336_systems.report import contract
from cs336_systems.report.b5_figures import TflopsPlot, plot_speedup, plot_tflops
from cs336_systems.report.b5_grid import (CUDNN, EAGER_GOAL_RATIO, FLASH, FLASH_GOAL_MIN_SEQ, KEYS, OTHERS, OURS,
                                          PLAIN, EagerGoal, LeaderboardTiming, eager_goal, grid_frame, judged, judged_on,
                                          leaderboard_frame, leaderboard_timing, ours_splits, table_view, wide_table)
from cs336_systems.report.b5_losses import (FLAT_FACTOR, FLAT_SPAN, GapTrend, Losses, OutOfMemory, TimingCheck,
                                            gap_trend, losses, oom_groups, timing_check)
from cs336_systems.report.common import load_record_lists, run_provenance, write_table
from cs336_systems.report.contract import Summary
from cs336_systems.report.spread import MIN_ROUNDS
from cs336_systems.report.what_ran import WhatRan, tuned_elsewhere, what_ran

@dataclass(frozen=True)
class At:
    dtype: str
    d: str
    seq: str
    pass_: str


@dataclass(frozen=True)
class Ratio:
    """Another implementation's time over ours at the points both ran (in the timing that judges
    each), at the median point, its best and worst, and how many points graph time judged."""
    median: float
    max: float
    max_at: At
    min: float
    min_at: At
    points: int
    by_graph: int
    judged_on: str                  # b5_grid.judged_on


def ratios(df: pd.DataFrame) -> dict[str, Ratio]:
    out = {}
    for other in OTHERS:
        pair = judged(df, other)
        r = (pair["t_other"] / pair["t"]).set_axis(pd.MultiIndex.from_frame(pair[KEYS])).sort_index()
        if len(r):
            graphed = int((pair["timing"] == "graph").sum())
            out[other] = Ratio(float(r.median()), float(r.max()), At(*map(str, r.idxmax())), float(r.min()),
                               At(*map(str, r.idxmin())), int(len(r)), graphed, judged_on(graphed, len(r)))
    return out


@dataclass(frozen=True)
class SplitPart:
    """The leaderboard case's forward alone or backward alone, where ours and cuDNN both have a time."""
    ours: float
    cudnn: float
    ours_over_cudnn: float


@dataclass(frozen=True)
class B5Summary(Summary):
    tuned_elsewhere: list[str]
    points: int
    ok: int
    statuses: dict[str, int]
    rounds: list[int]               # of the row jobs, in which the implementations took turns at each point
    min_rounds: int                 # the fewest rounds in which the judge decides anything
    ratios: dict[str, Ratio]
    plain_first_oom_seq: int | None
    plain_oom: list[OutOfMemory]
    losses_vs_plain: Losses
    flash_goal: Losses
    flash_goal_min_seq: int
    flash_eager_goal: EagerGoal
    bf16_gap_trend: GapTrend
    flat_factor: float
    flat_span: int
    flat_work: int
    timing_check: TimingCheck
    ours_splits: dict[str, int | None]
    # what our kernels ran (what_ran): in the grid, its tiles keyed by dtype and d, and at which commits;
    # in the leaderboard, the facts of its launch path
    ours_ran: WhatRan
    ours_commits: list[str]
    leaderboard_ran: WhatRan
    ours_first_oom_seq: int | None
    max_seq: int
    leaderboard: dict[str, float | None]
    leaderboard_split: dict[str, SplitPart]
    leaderboard_failed: dict[str, str]
    leaderboard_timing: LeaderboardTiming
    leaderboard_shape: str | None
    ours_over_cudnn: float | None
    ours_over_flash: float | None
    tflops_plot: TflopsPlot
    table_view: list[str]


CONTRACTS = {"B5": B5Summary}


def _over(times: dict, a: str, b: str) -> float | None:
    return times[a] / times[b] if times.get(a) and times.get(b) else None


def _first_oom(groups: list[OutOfMemory]) -> int | None:
    """The shortest length at which an implementation ran out of memory (``oom_groups``)."""
    return min((g.first_seq for g in groups), default=None)


def summarize(df: pd.DataFrame, board: pd.DataFrame, records: list[dict], tflops_plot: TflopsPlot,
              shown: list[str]) -> B5Summary:
    ok, plain_oom = df[df["status"] == "ok"], oom_groups(df, PLAIN)
    ours = [r for r in records if r.get("id") == "B5" and r["params"].get("impl") == OURS]
    # the leaderboard's times, per pass and implementation (None: it did not run)
    by_pass = {which: {row["impl"]: (None if math.isnan(row["ms"]) else row["ms"]) for _, row in part.iterrows()}
               for which, part in board.groupby("pass")} if len(board) else {}
    board_ms = by_pass.get("forward-backward", {})
    split = {}
    for which in ("forward", "backward"):
        times = by_pass.get(which, {})
        if (ratio := _over(times, OURS, CUDNN)) is not None:
            split[which] = SplitPart(times[OURS], times[CUDNN], ratio)
    board_failed = {f'{r["params"]["impl"]} ({r["params"]["pass"]})':
                    " ".join(f"{r['status']}: {r.get('message', r.get('reason', ''))}".split())[:160]
                    for r in records if r["id"] == "B5-leaderboard" and r["status"] not in ("ok", "skipped")}
    return B5Summary(
        provenance=run_provenance(records),
        tuned_elsewhere=tuned_elsewhere([r for r in records if r["params"].get("impl") == OURS]),
        points=int(len(df)), ok=int(len(ok)), statuses=df["status"].value_counts().to_dict(),
        rounds=sorted({len(r) for r in ok["rounds_ms"] if r}), min_rounds=MIN_ROUNDS, ratios=ratios(df),
        plain_first_oom_seq=_first_oom(plain_oom), plain_oom=plain_oom, losses_vs_plain=losses(df, PLAIN),
        flash_goal=losses(df, FLASH, dtypes=["bf16"], min_seq=FLASH_GOAL_MIN_SEQ),
        flash_goal_min_seq=FLASH_GOAL_MIN_SEQ,
        flash_eager_goal=eager_goal(df, FLASH, EAGER_GOAL_RATIO, dtypes=["bf16"], min_seq=FLASH_GOAL_MIN_SEQ),
        bf16_gap_trend=gap_trend(df), flat_factor=FLAT_FACTOR, flat_span=FLAT_SPAN, flat_work=FLAT_SPAN ** 2,
        timing_check=timing_check(df), ours_splits=ours_splits(ours), ours_ran=what_ran(ours),
        ours_commits=sorted({commit_of(r)[:10] for r in ours}),
        leaderboard_ran=what_ran([r for r in records if r.get("id") == "B5-leaderboard"
                                  and r["params"].get("impl") == OURS], facts=("path", "order", "backward")),
        ours_first_oom_seq=_first_oom(oom_groups(df, OURS)), max_seq=int(df["seq"].max()), leaderboard=board_ms,
        leaderboard_split=split, leaderboard_failed=board_failed, leaderboard_timing=leaderboard_timing(records),
        leaderboard_shape=board["shape"].iloc[0] if len(board) else None,
        ours_over_cudnn=_over(board_ms, OURS, CUDNN), ours_over_flash=_over(board_ms, OURS, FLASH), tflops_plot=tflops_plot, table_view=shown)


def apart(df: pd.DataFrame) -> list[str]:
    """The rows (dtype, d) whose points that ran come from more than one job, or from none: the section
    words every comparison as the implementations' turns in their row's job (``attention.bench``)."""
    ran = df[df["status"] == "ok"]
    jobs = ran.groupby(["dtype", "d"])["job"].agg(lambda j: (j.nunique(), j.isna().any()))
    return [f"{dtype} d = {d}" for (dtype, d), (n, none) in jobs.items() if n > 1 or none]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.report.b5", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", nargs="+", required=True)
    p.add_argument("--leaderboard", required=True)
    p.add_argument("--out-dir", required=True, type=Path)
    args = p.parse_args(argv)
    records, board_records = load_record_lists(args.rows), load_record_lists([args.leaderboard])
    df = grid_frame(records)
    if split := apart(df):
        raise SystemExit(f"B5 report: the rows {', '.join(split)} were not measured in one job each; measure "
                         "those rows again (remove their records) so that their implementations take turns")
    wide = wide_table(df)
    write_table(wide, args.out_dir)
    board = leaderboard_frame(board_records)
    board.to_csv(args.out_dir / "leaderboard.csv", index=False)
    plot_speedup(df, args.out_dir / "speedup.png")
    plotted = plot_tflops(df, args.out_dir / "tflops.png")
    contract.write(args.out_dir / "summary.json",
                   summarize(df, board, records + board_records, plotted, table_view(wide)))
    print(f"B5 report: {len(df)} points -> {args.out_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
