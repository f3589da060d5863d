"""B3 / B4 report, from the one checks record ``attention.check`` writes: B3, the error tables of our
FlashAttention Functions against float64; B4, the two backward paths timed side by side (and the
worst error, which B4's text quotes too). Each run of it writes one deliverable's folder.

    python -m cs336_systems.report.flash_checks B3 --records results/RUN/B3/records/checks.json --out-dir DIR
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from cs336_systems.attention.tuned_tiles import TUNED
from cs336_systems.report.common import load_record_lists, run_provenance, write_summary, write_table

QUANTITIES = ("o", "lse", "dq", "dk", "dv")


def error_table(records: list[dict]) -> pd.DataFrame:
    """One row per (function, dtype, causal): our error and plain attention's, per quantity."""
    rows = []
    for r in records:
        p = r["params"]
        row = {"function": p["function"], "dtype": p["dtype"], "causal": p["causal"], "status": r["status"]}
        for key in QUANTITIES:
            row[f"{key}_ours"] = r["metrics"]["ours"][key] if r["status"] == "ok" else None
            row[f"{key}_plain"] = r["metrics"]["plain"][key] if r["status"] == "ok" else None
        rows.append(row)
    return pd.DataFrame(rows)


def worst_ratio(errors: pd.DataFrame) -> dict:
    """Per dtype: the largest ours ÷ plain error ratio over functions, causal settings and quantities
    (how far from what plain attention in that dtype achieves our worst case is)."""
    out = {}
    for dtype, part in errors[errors["status"] == "ok"].groupby("dtype"):
        worst = None
        for _, row in part.iterrows():
            for key in QUANTITIES:
                ratio = row[f"{key}_ours"] / max(row[f"{key}_plain"], 1e-30)
                if worst is None or ratio > worst["ratio"]:
                    worst = {"ratio": float(ratio), "function": row["function"], "causal": bool(row["causal"]),
                             "quantity": key, "ours": float(row[f"{key}_ours"]), "plain": float(row[f"{key}_plain"])}
        out[dtype] = worst
    return out


def time_table(records: list[dict]) -> pd.DataFrame:
    rows = [{"function": r["params"]["function"], "dtype": r["params"]["dtype"],
             "shape": "×".join(map(str, r["params"]["shape"])), "status": r["status"],
             "forward_ms": r["metrics"].get("forward_ms"), "backward_ms": r["metrics"].get("backward_ms")}
            for r in records]
    return pd.DataFrame(rows)


def backward_speedup(times: pd.DataFrame) -> dict:
    """Per dtype: the compiled PyTorch backward's time ÷ the Triton backward's."""
    ok = times[times["status"] == "ok"].set_index(["dtype", "function"])["backward_ms"]
    return {dtype: {"triton_ms": float(ok[(dtype, "triton")]), "pytorch_ms": float(ok[(dtype, "triton-pytorch-backward")]),
                    "speedup": float(ok[(dtype, "triton-pytorch-backward")] / ok[(dtype, "triton")])}
            for dtype in sorted({d for d, _ in ok.index})
            if (dtype, "triton") in ok.index and (dtype, "triton-pytorch-backward") in ok.index}


def tuner_choices(tuned: dict = TUNED) -> list[dict]:
    """What the tuner measured and committed in ``attention/tuned_tiles.py`` per (dtype, head dim): the
    best dK/dV and the best dQ launch on its GPU and shape, and, for entries tuned while a fused
    backward (dQ added atomically inside the dK/dV pass) was still a candidate, that fused launch
    too. The fused path lost every such measurement and is gone from the kernels; an entry tuned
    since has no fused time (None), and the backward that runs is dK/dV then dQ."""
    out = []
    for key, entry in sorted(tuned.items()):
        m = entry["measured"]
        separate = m["ms"]["dkdv"] + m["ms"]["dq"]
        fused = m["ms"].get("fused")
        out.append({"key": key, "gpu": m["gpu"], "shape": m["shape"], "causal": m["causal"],
                    "chosen": m.get("backward", "dkdv+dq"), "fused_ms": fused, "dkdv_ms": m["ms"]["dkdv"],
                    "dq_ms": m["ms"]["dq"], "separate_ms": separate,
                    "fused_over_separate": None if fused is None else fused / separate})
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.report.flash_checks", description=__doc__.split("\n\n")[0])
    p.add_argument("deliverable", choices=["B3", "B4"])
    p.add_argument("--records", required=True, help="the JSON list written by cs336_systems.attention.check")
    p.add_argument("--out-dir", required=True, type=Path)
    args = p.parse_args(argv)
    records = load_record_lists([args.records])
    if not records:
        p.error(f"{args.records}: no records")
    errors_records = [r for r in records if r["params"]["kind"] == "error"]
    time_records = [r for r in records if r["params"]["kind"] == "time"]
    errors, times = error_table(errors_records), time_table(time_records)
    if args.deliverable == "B3":
        write_table(errors, args.out_dir)
        shape = errors_records[0]["params"]["shape"] if errors_records else None
        write_summary(args.out_dir / "summary.json", {
            "provenance": run_provenance(errors_records), "shape": shape,
            "statuses": errors["status"].value_counts().to_dict(), "worst_ratio": worst_ratio(errors)})
    else:
        write_table(times, args.out_dir)
        write_summary(args.out_dir / "summary.json", {
            "provenance": run_provenance(records), "shape": time_records[0]["params"]["shape"] if time_records else None,
            "statuses": times["status"].value_counts().to_dict() if len(times) else {},
            "backward": backward_speedup(times) if len(times) else {}, "worst_ratio": worst_ratio(errors),
            "tuner": tuner_choices()})
    print(f"{args.deliverable} report: {len(errors)} error rows, {len(times)} timing rows", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
