"""B5 report: FlashAttention timings as a table, a speed-up map, TFLOP/s against sequence length,
the leaderboard case, and the numbers the writeup quotes.

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

from cs336_systems.report.common import load_record_lists, run_provenance, save_figure, write_summary, write_table

PASSES = ("forward", "backward", "forward-backward")


def grid_frame(records: list[dict]) -> pd.DataFrame:
    rows = [{**{k: r["params"][k] for k in ("impl", "dtype", "d", "seq", "pass")}, "status": r["status"],
             "ms": r["metrics"].get("ms", math.nan), "tflops": r["metrics"].get("tflops", math.nan)} for r in records]
    return pd.DataFrame(rows)


def wide_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (dtype, d, seq, pass); a column of milliseconds (or OOM / skipped) per implementation."""
    df = df.assign(cell=[f"{ms:.3f}" if s == "ok" else s.upper() for ms, s in zip(df["ms"], df["status"])])
    wide = df.pivot_table(index=["dtype", "d", "seq", "pass"], columns="impl", values="cell", aggfunc="first")
    ms = df[df["status"] == "ok"].pivot_table(index=["dtype", "d", "seq", "pass"], columns="impl", values="ms")
    for other in ("plain", "sdpa-cudnn", "sdpa-flash"):
        if "ours" in ms and other in ms:
            wide[f"{other} / ours"] = (ms[other] / ms["ours"]).map(lambda x: "" if math.isnan(x) else f"{x:.2f}")
    wide = wide.reset_index()
    wide["pass"] = pd.Categorical(wide["pass"], PASSES, ordered=True)
    return wide.sort_values(["dtype", "d", "pass", "seq"]).fillna("").reset_index(drop=True)


def plot_speedup(df: pd.DataFrame, path: Path, baseline: str = "plain") -> None:
    """Heat maps of baseline time / our time, per dtype (rows) and pass (columns); grey = not measured."""
    dtypes = sorted(df["dtype"].unique())
    fig, axes = plt.subplots(len(dtypes), len(PASSES), figsize=(4.6 * len(PASSES), 3.4 * len(dtypes)), squeeze=False)
    fig.subplots_adjust(hspace=0.75, wspace=0.3)
    ok = df[df["status"] == "ok"]
    for row, dtype in enumerate(dtypes):
        for col, which in enumerate(PASSES):
            ax = axes[row][col]
            part = ok[(ok["dtype"] == dtype) & (ok["pass"] == which)]
            ms = part.pivot_table(index="d", columns=["impl", "seq"], values="ms")
            seqs, ds = sorted(df["seq"].unique()), sorted(df["d"].unique())
            grid = np.full((len(ds), len(seqs)), np.nan)
            for i, d in enumerate(ds):
                for j, s in enumerate(seqs):
                    try:
                        grid[i, j] = ms.loc[d, (baseline, s)] / ms.loc[d, ("ours", s)]
                    except KeyError:
                        pass
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


def plot_tflops(df: pd.DataFrame, path: Path) -> None:
    """Achieved TFLOP/s over sequence length, one panel per pass (rows) and head dimension 64 and
    128 (columns; the largest measured one if neither), every implementation, bf16 where measured."""
    ok = df[df["status"] == "ok"]
    dtype = "bf16" if "bf16" in set(ok["dtype"]) else sorted(set(ok["dtype"]))[0] if len(ok) else "bf16"
    ds = [d for d in (64, 128) if d in set(ok["d"])] or sorted(set(ok["d"]))[-1:] or [64]
    fig, axes = plt.subplots(len(PASSES), len(ds), figsize=(5.5 * len(ds), 3.4 * len(PASSES)), squeeze=False,
                             layout="constrained")
    for row, which in zip(axes, PASSES):
        for ax, d in zip(row, ds):
            for impl, part in ok[(ok["dtype"] == dtype) & (ok["d"] == d) & (ok["pass"] == which)].groupby("impl"):
                part = part.sort_values("seq")
                ax.plot(part["seq"], part["tflops"], marker="o", label=impl)
            ax.set_xscale("log", base=2)
            ax.set(title=f"{dtype}, d = {d}, causal, {which}", xlabel="sequence length", ylabel="TFLOP/s")
            ax.grid(alpha=0.3)
            if ax.has_data():
                ax.legend(fontsize=8)
    save_figure(fig, path)


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


def summarize(df: pd.DataFrame, board: pd.DataFrame, records: list[dict]) -> dict:
    ok = df[df["status"] == "ok"]
    ms = ok.pivot_table(index=["dtype", "d", "seq", "pass"], columns="impl", values="ms")
    ratios = {}
    for other in ("plain", "sdpa-cudnn", "sdpa-flash"):
        if "ours" in ms and other in ms:
            r = (ms[other] / ms["ours"]).dropna()
            if len(r):
                best, worst = r.idxmax(), r.idxmin()
                ratios[other] = {"median": float(r.median()), "max": float(r.max()),
                                 "max_at": dict(zip(["dtype", "d", "seq", "pass"], map(str, best))),
                                 "min": float(r.min()),
                                 "min_at": dict(zip(["dtype", "d", "seq", "pass"], map(str, worst)))}
    plain_oom = df[(df["impl"] == "plain") & (df["status"] == "oom")]
    ours_oom = df[(df["impl"] == "ours") & (df["status"] == "oom")]
    by_pass = {which: {row["impl"]: (None if math.isnan(row["ms"]) else row["ms"]) for _, row in part.iterrows()}
               for which, part in board.groupby("pass")} if len(board) else {}
    board_ms = by_pass.get("forward-backward", {})
    board_failed = {f'{r["params"]["impl"]} ({r["params"].get("pass", "forward-backward")})': " ".join(f"{r['status']}: {r.get('message', r.get('reason', ''))}".split())[:160]
                    for r in records if r["id"] == "B5-leaderboard" and r["status"] not in ("ok", "skipped")}
    return {
        "provenance": run_provenance(records),
        "points": int(len(df)), "ok": int(len(ok)),
        "statuses": df["status"].value_counts().to_dict(),
        "ratios": ratios,
        "plain_first_oom_seq": int(plain_oom["seq"].min()) if len(plain_oom) else None,
        "ours_first_oom_seq": int(ours_oom["seq"].min()) if len(ours_oom) else None,
        "max_seq": int(df["seq"].max()),
        "leaderboard": board_ms,
        "leaderboard_split": {which: by_pass[which] for which in ("forward", "backward") if which in by_pass},
        "leaderboard_failed": board_failed,
        "leaderboard_shape": board["shape"].iloc[0] if len(board) else None,
        "ours_over_cudnn": (board_ms.get("ours") / board_ms["sdpa-cudnn"]
                            if board_ms.get("ours") and board_ms.get("sdpa-cudnn") else None),
        "flash_over_ours": (board_ms["sdpa-flash"] / board_ms.get("ours")
                            if board_ms.get("ours") and board_ms.get("sdpa-flash") else None),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.report.b5", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", nargs="+", required=True)
    p.add_argument("--leaderboard", required=True)
    p.add_argument("--out-dir", required=True, type=Path)
    args = p.parse_args(argv)
    records, board_records = load_record_lists(args.rows), load_record_lists([args.leaderboard])
    df = grid_frame(records)
    write_table(wide_table(df), args.out_dir)
    board = leaderboard_frame(board_records)
    board.to_csv(args.out_dir / "leaderboard.csv", index=False)
    plot_speedup(df, args.out_dir / "speedup.png")
    plot_tflops(df, args.out_dir / "tflops.png")
    write_summary(args.out_dir / "summary.json", summarize(df, board, records + board_records))
    print(f"B5 report: {len(df)} points -> {args.out_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
