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
from pathlib import Path

import pandas as pd

from cs336_systems.report.b5_figures import plot_speedup, plot_tflops
from cs336_systems.report.b5_grid import (EAGER_GOAL_RATIO, FLASH_GOAL_MIN_SEQ, KEYS, eager_goal, grid_frame, judged,
                                          leaderboard_frame, leaderboard_timing, ours_splits, table_view, wide_table)
from cs336_systems.report.b5_losses import (FLAT_FACTOR, FLAT_SPAN, gap_trend, losses, losses_schema, oom_groups,
                                            timing_check)
from cs336_systems.report.common import load_record_lists, run_provenance, write_summary, write_table
from cs336_systems.report.spread import MIN_ROUNDS
from cs336_systems.report.summary_schemas import (BOOL, INT, NUM, PROVENANCE, STR, arr, mapping, null, obj,
                                                  one_of_types, opt, section)
from cs336_systems.report.what_ran import ran_schema, tuned_elsewhere, what_ran


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
        # the rounds of the row jobs, in which the implementations took turns at each point
        "rounds": sorted({len(r) for r in ok["rounds_ms"] if r}),
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
