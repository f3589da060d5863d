"""A4 report: the toy model's dtype table, layer-norm errors, and full (fp32) vs bf16 timing from A1.

    python -m cs336_systems.report.a4 --dtypes dtypes.json --timing-records A1/records/*.json --out-dir DIR

Writes ``table.*`` (dtype of each stage per device and autocast dtype), ``layernorm.*`` (relative
error of layer norm in fp16 / bf16 against float64), ``timing.*`` (forward and backward, fp32 vs
bf16 autocast, per size), ``speedup.png`` and ``summary.json``.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from cs336_systems.models import MODEL_SIZES
from cs336_systems.precision.autocast_dtypes import STAGES
from cs336_systems.report.common import (load_record_lists, load_records, run_provenance, save_figure,
                                         write_summary, write_table)

# (A1 mode, phase) pairs the timing table shows: forward alone (no_grad), and both phases of forward+backward.
TIMED = (("forward", "forward"), ("forward-backward", "forward"), ("forward-backward", "backward"))
FORWARD, BACKWARD = "forward of forward+backward", "backward of forward+backward"


def series_name(mode: str, phase: str) -> str:
    """How a (mode, phase) pair is named in the plot and the summary."""
    return "forward only (no_grad)" if mode == "forward" else f"{phase} of forward+backward"


def _column(params: dict) -> str:
    return f"{params['device']} {params['autocast_dtype']}"


def dtype_table(records: list[dict]) -> pd.DataFrame:
    """Rows: stages of the toy model; columns: device and autocast dtype; a cell says the dtype,
    or why there is none (``skipped`` / ``error``, reasons in the summary)."""
    table = {"stage": list(STAGES)}
    for r in records:
        if r["params"]["part"] != "dtypes":
            continue
        if r["status"] == "ok":
            table[_column(r["params"])] = [r["metrics"]["stages"][s] for s in STAGES]
        else:
            table[_column(r["params"])] = [r["status"]] * len(STAGES)
    return pd.DataFrame(table)


def _error(value: float) -> str:
    return "inf/NaN" if math.isinf(value) or math.isnan(value) else f"{value:.1e}"


def layernorm_frame(records: list[dict]) -> pd.DataFrame:
    rows = [dict(row, device=r["params"]["device"]) for r in records
            if r["params"]["part"] == "layernorm" and r["status"] == "ok" for row in r["metrics"]["rows"]]
    return pd.DataFrame(rows)


def layernorm_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per device, input case and dtype; one column per way of computing layer norm."""
    if df.empty:
        return pd.DataFrame({"note": ["no layer-norm measurement ran"]})
    wide = df.pivot_table(index=["device", "offset", "spread", "dtype"], columns="variant", values="rel_error",
                          aggfunc="first", sort=False)
    out = wide.map(_error).reset_index()
    out.columns.name = None
    return out.rename(columns={"offset": "mean offset"})


def timing_frame(records: list[dict]) -> pd.DataFrame:
    """One row per size, context, (mode, phase): fp32 and bf16 means and the speedup fp32 / bf16."""
    by_point = {(r["params"]["size"], r["params"]["context"], r["params"]["mode"], r["params"]["precision"]): r
                for r in records}
    rows = []
    sizes = [s for s in MODEL_SIZES if any(key[0] == s for key in by_point)]
    contexts = sorted({key[1] for key in by_point})
    for size in sizes:
        for context in contexts:
            for mode, phase in TIMED:
                cells = {}
                for precision in ("fp32", "bf16"):
                    r = by_point.get((size, context, mode, precision))
                    if r is None:
                        cells[precision] = (None, math.nan, math.nan)
                    elif r["status"] != "ok":
                        cells[precision] = (r["status"], math.nan, math.nan)
                    else:
                        timed = r["metrics"][phase]
                        cells[precision] = ("ok", timed["mean"], timed.get("std", math.nan))
                if all(status is None for status, _, _ in cells.values()):
                    continue
                (_, fp32, fp32_std), (_, bf16, bf16_std) = cells["fp32"], cells["bf16"]
                rows.append({"size": size, "context": context, "mode": mode, "phase": phase,
                             "fp32_status": cells["fp32"][0], "bf16_status": cells["bf16"][0],
                             "fp32_ms": fp32, "fp32_std_ms": fp32_std, "bf16_ms": bf16, "bf16_std_ms": bf16_std,
                             "speedup": fp32 / bf16,
                             # First-order spread of the ratio of two independent means' samples.
                             "speedup_std": fp32 / bf16 * math.hypot(fp32_std / fp32, bf16_std / bf16)})
    return pd.DataFrame(rows)


def _mean_std(mean: float, std: float, unit: str = "") -> str:
    return f"{mean:.2f}{unit}" if math.isnan(std) else f"{mean:.2f} ± {std:.2f}{unit}"


def timing_table(df: pd.DataFrame) -> pd.DataFrame:
    """Means ± standard deviations over the timed steps; the speedup's spread is propagated from them."""
    def cell(status, mean, std):
        return _mean_std(mean, std) if status == "ok" else (status or "missing").upper()

    return pd.DataFrame({
        "size": df["size"], "context": df["context"], "mode": df["mode"], "phase": df["phase"],
        "fp32 (ms)": [cell(*c) for c in zip(df["fp32_status"], df["fp32_ms"], df["fp32_std_ms"])],
        "bf16 autocast (ms)": [cell(*c) for c in zip(df["bf16_status"], df["bf16_ms"], df["bf16_std_ms"])],
        "speedup fp32/bf16": ["" if math.isnan(v) else _mean_std(v, s, "×") for v, s in zip(df["speedup"], df["speedup_std"])],
    })


def plot_speedup(df: pd.DataFrame, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4))
    sizes = list(dict.fromkeys(df["size"]))
    for (context, mode, phase), part in df.groupby(["context", "mode", "phase"], sort=False):
        part = part.set_index("size").reindex(sizes)
        ax.plot(range(len(sizes)), part["speedup"], marker="o", label=f"{series_name(mode, phase)}, context {context}")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(range(len(sizes)), sizes)
    ax.set(xlabel="model size", ylabel="speedup of bf16 autocast (fp32 time / bf16 time)")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    save_figure(fig, path)


def summarize(dtype_records: list[dict], timing_records: list[dict], ln: pd.DataFrame, timing: pd.DataFrame) -> dict:
    dtypes = {}
    for r in dtype_records:
        if r["params"]["part"] == "dtypes":
            entry = {"status": r["status"], "reason": r.get("reason") or r.get("message")}
            if r["status"] == "ok":
                entry["stages"] = r["metrics"]["stages"]
            dtypes.setdefault(r["params"]["device"], {})[r["params"]["autocast_dtype"]] = entry
    layernorm = {}
    for row in ln.to_dict("records"):
        case = f"offset {row['offset']:g}, spread {row['spread']:g}"
        layernorm.setdefault(row["device"], {}).setdefault(case, {}).setdefault(row["dtype"], {})[row["variant"]] = {
            "rel_error": None if math.isinf(row["rel_error"]) or math.isnan(row["rel_error"]) else row["rel_error"],
            "output_dtype": row["output_dtype"]}
    ok = timing.dropna(subset=["speedup"]) if not timing.empty else timing
    speedups = {f"{r['size']} ctx {r['context']} {series_name(r['mode'], r['phase'])}": r["speedup"] for r in ok.to_dict("records")}
    trend = {}
    for (context, mode, phase), part in (ok.groupby(["context", "mode", "phase"], sort=False) if len(ok) else []):
        trend[f"{series_name(mode, phase)}, context {context}"] = {
            "smallest": part["size"].iloc[0], "smallest_speedup": part["speedup"].iloc[0],
            "largest": part["size"].iloc[-1], "largest_speedup": part["speedup"].iloc[-1]}
    # The case the prose quotes: the largest mean offset at spread 1, on each device.
    focus = {}
    for device, part in (ln.groupby("device") if not ln.empty else []):
        unit_spread = part[part["spread"] == 1.0]
        if len(unit_spread):
            offset = float(unit_spread["offset"].max())
            focus[device] = {"offset": offset, **layernorm[device][f"offset {offset:g}, spread 1"]}
    by_phase = {}
    for r in ok.to_dict("records") if len(ok) else []:
        by_phase.setdefault(series_name(r["mode"], r["phase"]), []).append(r["speedup"])
    median = {phase: float(pd.Series(v).median()) for phase, v in by_phase.items()}
    skipped = [f"{d} {t}: {e['status']} ({e['reason']})" for d, per in dtypes.items() for t, e in per.items()
               if e["status"] != "ok"]
    return {
        "provenance": run_provenance(dtype_records + timing_records),
        "dtype_provenance": run_provenance(dtype_records),
        "timing_provenance": run_provenance(timing_records) if timing_records else None,
        "dtypes": dtypes,
        "dtypes_not_ok": skipped,
        "layernorm": layernorm,
        "layernorm_focus": focus,
        "layernorm_autocast_output": [f"{device} {dtype}: {e['stages']['LayerNorm output']}" for device, per in dtypes.items()
                                      for dtype, e in per.items() if e["status"] == "ok"],
        "speedups": speedups,
        "speedup_trend": trend,
        # Claims the prose makes only when the records bear them out.
        "timing_sizes": int(ok["size"].nunique()) if len(ok) else 0,
        "speedup_grows_with_size": bool(trend) and all(t["smallest"] != t["largest"] for t in trend.values()) and all(t["largest_speedup"] > t["smallest_speedup"] for t in trend.values()),
        "median_speedup_by_phase": median,
        "backward_gains_more": (BACKWARD in median and FORWARD in median and median[BACKWARD] >= median[FORWARD]),
        "timing_not_ok": list(dict.fromkeys(
            f"{r['size']} ctx {r['context']} {r['mode']}: fp32 {r['fp32_status']}, bf16 {r['bf16_status']}"
            for r in timing.to_dict("records") if "ok" != r["fp32_status"] or "ok" != r["bf16_status"])),
        "layernorm_shape": next(([r["params"]["rows"], r["params"]["width"]] for r in dtype_records
                                 if r["params"]["part"] == "layernorm" and r["status"] == "ok"), None),
        "timing_batch": int(timing_records[0]["params"]["batch"]) if timing_records else None,
        "timing_steps": timing_records[0]["params"].get("steps") if timing_records else None,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.report.a4", description=__doc__.split("\n\n")[0])
    p.add_argument("--dtypes", required=True, help="the JSON list of records the toy-model job wrote")
    p.add_argument("--timing-records", nargs="*", default=[], help="A1 records, fp32 and bf16")
    p.add_argument("--out-dir", required=True, type=Path)
    args = p.parse_args(argv)
    try:
        dtype_records = load_record_lists([args.dtypes])
        timing_records = load_records(args.timing_records)
    except (OSError, ValueError) as exc:
        p.error(str(exc))
    ln = layernorm_frame(dtype_records)
    timing = timing_frame(timing_records)
    write_table(dtype_table(dtype_records), args.out_dir)
    write_table(layernorm_table(ln), args.out_dir, "layernorm")
    write_table(timing_table(timing) if not timing.empty else pd.DataFrame({"note": ["no A1 records given"]}),
                args.out_dir, "timing")
    plot_speedup(timing if not timing.empty else pd.DataFrame(columns=["size", "context", "mode", "phase", "speedup"]),
                 args.out_dir / "speedup.png")
    write_summary(args.out_dir / "summary.json", summarize(dtype_records, timing_records, ln, timing))
    print(f"A4 report: {len(dtype_records)} toy-model records, {len(timing_records)} A1 records -> {args.out_dir}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
