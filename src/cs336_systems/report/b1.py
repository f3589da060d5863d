"""B1 / B2(a) report: plain attention time and memory over d × sequence, eager and compiled, and the
memory accounting of the smallest out-of-memory case set beside the measurements.

    python -m cs336_systems.report.b1 --rows eager_d16.json ... --out-dir DIR
"""
from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from cs336_systems.report.common import rows_report_args, run_provenance, save_figure, write_summary, write_table

MIB = 2**20


def frame(records: list[dict]) -> pd.DataFrame:
    rows = []
    for r in records:
        p, m = r["params"], r["metrics"]
        acc = m.get("accounting_bytes", {})
        rows.append({"d": p["d"], "seq": p["seq"], "compiled": p["compiled"], "status": r["status"],
                     "forward_ms": m.get("forward_ms", math.nan), "backward_ms": m.get("backward_ms", math.nan),
                     "measured_before_backward_MiB": (m.get("memory_before_backward_bytes") or math.nan) / MIB,
                     # peaks of one forward and one backward; absent from records made before they were measured
                     "forward_peak_MiB": (m.get("forward_peak_bytes") or math.nan) / MIB,
                     "backward_peak_MiB": (m.get("backward_peak_bytes") or math.nan) / MIB,
                     "failed_during": m.get("failed_during"),
                     "predicted_saved_MiB": acc.get("saved", math.nan) / MIB,
                     "predicted_backward_peak_MiB": acc.get("backward_peak", math.nan) / MIB})
    return pd.DataFrame(rows).sort_values(["compiled", "d", "seq"]).reset_index(drop=True)


def plot(df: pd.DataFrame, path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    ok = df[df["status"] == "ok"]
    for (d, compiled), part in ok.groupby(["d", "compiled"]):
        style = "--" if compiled else "-"
        axes[0].plot(part["seq"], part["forward_ms"] + part["backward_ms"], style, marker="o",
                     label=f"d={d}{' compiled' if compiled else ''}")
        if not compiled:
            axes[1].plot(part["seq"], part["measured_before_backward_MiB"], marker="o", label=f"d={d} measured")
    eager = df[~df["compiled"]].drop_duplicates("seq")
    axes[1].plot(eager["seq"], eager["predicted_saved_MiB"], "k:", label="predicted (d=16)")
    for ax, label in zip(axes, ("forward + backward (ms)", "memory before backward (MiB)")):
        ax.set(xscale="log", yscale="log", xlabel="sequence length", ylabel=label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    save_figure(fig, path)


_UNITS = {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024}
_ALLOCATOR_FIELDS = {
    "capacity_MiB": r"total capacity of ([\d.]+) (\w+)",
    "requested_MiB": r"Tried to allocate ([\d.]+) (\w+)",
    "allocated_MiB": r"([\d.]+) (\w+) is allocated by PyTorch",
}


def allocator_state(message: str | None) -> dict[str, float]:
    """The numbers in PyTorch's CUDA out-of-memory message (card capacity, the allocation that
    failed, what tensors held then), so the accounting can be set beside what really happened."""
    state = {}
    for key, pattern in _ALLOCATOR_FIELDS.items():
        match = re.search(pattern, message or "")
        if match and match.group(2) in _UNITS:
            state[key] = float(match.group(1)) * _UNITS[match.group(2)]
    return state


def summarize(df: pd.DataFrame, records: list[dict]) -> dict:
    eager = df[~df["compiled"]]
    oom = eager[eager["status"] == "oom"].sort_values(["seq", "d"])
    ok = eager[eager["status"] == "ok"]
    smallest = oom.iloc[0] if len(oom) else None
    messages = {(r["params"]["d"], r["params"]["seq"]): r.get("message") for r in records
                if r["status"] == "oom" and not r["params"]["compiled"]}
    # Accounting check where both exist: measured memory before backward ÷ predicted saved bytes.
    check = (ok["measured_before_backward_MiB"] / ok["predicted_saved_MiB"]).dropna()
    largest_ok = ok.sort_values("seq").iloc[-1] if len(ok) else None
    return {
        "provenance": run_provenance(records),
        "points": int(len(df)), "statuses": df["status"].value_counts().to_dict(),
        "smallest_oom": None if smallest is None else {
            "d": int(smallest["d"]), "seq": int(smallest["seq"]),
            "predicted_saved_MiB": float(smallest["predicted_saved_MiB"]),
            "predicted_backward_peak_MiB": float(smallest["predicted_backward_peak_MiB"]),
            "allocator": allocator_state(messages.get((smallest["d"], smallest["seq"])))},
        "largest_ok": None if largest_ok is None else {
            "d": int(largest_ok["d"]), "seq": int(largest_ok["seq"]),
            "measured_MiB": float(largest_ok["measured_before_backward_MiB"]),
            "predicted_MiB": float(largest_ok["predicted_saved_MiB"])},
        "measured_over_predicted": {"median": float(check.median()), "min": float(check.min()),
                                    "max": float(check.max())} if len(check) else None,
    }


def main(argv=None) -> int:
    records, out_dir = rows_report_args("cs336_systems.report.b1", __doc__, argv)
    df = frame(records)
    shown = df.assign(**{c: df[c].round(3) for c in df.columns if c.endswith(("_ms", "_MiB"))})
    write_table(shown, out_dir)
    plot(df, out_dir / "time_and_memory.png")
    write_summary(out_dir / "summary.json", summarize(df, records))
    print(f"B1 report: {len(df)} points -> {out_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
