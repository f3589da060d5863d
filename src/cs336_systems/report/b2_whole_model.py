"""B2(b) from the compile-bench records: the whole model eager against compiled, per size and mode.

Each record (``python -m cs336_systems.compile_bench``) holds both variants of one grid point timed in
one process; this module turns them into the table people read, the speed-up figure and the numbers
the writeup quotes. ``build_report`` in ``cs336_systems.report.b2`` calls it.
"""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from cs336_systems.models import MODEL_SIZES
from cs336_systems.models import MODES as MODE_ORDER
from cs336_systems.report.common import save_figure

PHASES = ("forward", "backward", "optimizer", "step")
DISPLAY_COLUMNS = ["size", "mode", "eager step (ms)", "compiled step (ms)", "step ×", "forward ×", "backward ×",
                   "optimizer ×", "compile (s)", "eager peak (GiB)", "compiled peak (GiB)", "loss |Δ|"]


def check_records(records: list[dict]) -> None:
    """Stop with one line on a record that is not a compile-bench record."""
    for r in records:
        if r["id"] != "B2" or "variants" not in r["metrics"]:
            raise ValueError(f"not a B2 whole-model record (id {r['id']!r}, params {r['params']})")
        missing = {"size", "mode", "compile", "context", "batch"} - set(r["params"])
        if missing:
            raise ValueError(f"B2 whole-model record lacks params {sorted(missing)}")


def frame(records: list[dict]) -> pd.DataFrame:
    """One row per record: the grid point, each variant's status, per-phase means (ms), memory, the
    compile time, the speed-ups and the loss check. Absent values are NaN."""
    rows = []
    for r in records:
        p, m = r["params"], r["metrics"]
        variants = m.get("variants", {})
        row = {"size": p["size"], "mode": p["mode"], "compile": p["compile"], "context": p["context"],
               "batch": p["batch"]}
        for name in ("eager", "compiled"):
            v = variants.get(name, {"status": r["status"]})
            row[f"{name}_status"] = v["status"]
            row[f"{name}_message"] = v.get("message")
            for phase in PHASES:
                row[f"{name}_{phase}_ms"] = v.get(phase, {}).get("mean", math.nan)
            row[f"{name}_step_std_ms"] = v.get("step", {}).get("std", math.nan)
            row[f"{name}_peak_GiB"] = (v.get("peak_memory_bytes") or math.nan) / 2**30
        row["compile_s"] = math.nan if m.get("compile_seconds") is None else m["compile_seconds"]
        for phase in PHASES:
            row[f"{phase}_speedup"] = (m.get("speedup") or {}).get(phase, math.nan)
        check = m.get("loss_check") or {}
        row["loss_abs_diff"] = check.get("abs_diff", math.nan)
        row["loss_passed"] = check.get("passed")
        row["loss_rtol"] = check.get("rtol", math.nan)
        row["compiled_graphs"] = m.get("compiled_graphs")
        rows.append(row)
    df = pd.DataFrame(rows)
    df["size"] = pd.Categorical(df["size"], [s for s in MODEL_SIZES if s in set(df["size"])], ordered=True)
    df["mode"] = pd.Categorical(df["mode"], [m for m in MODE_ORDER if m in set(df["mode"])], ordered=True)
    return df.sort_values(["size", "mode"]).reset_index(drop=True)


def _time(row: pd.Series, variant: str) -> str:
    if row[f"{variant}_status"] != "ok":
        return row[f"{variant}_status"].upper()
    return f"{row[f'{variant}_step_ms']:.2f} ± {row[f'{variant}_step_std_ms']:.2f}"


def _num(value: float, digits: int = 2) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def display_table(df: pd.DataFrame) -> pd.DataFrame:
    """The table people read: step times (mean ± std ms), speed-ups (eager ÷ compiled), compile
    time, peak memory and the loss difference; a variant that did not run says why (OOM, ERROR)."""
    out = pd.DataFrame({"size": df["size"].astype(str), "mode": df["mode"].astype(str)})
    out["eager step (ms)"] = [_time(row, "eager") for _, row in df.iterrows()]
    out["compiled step (ms)"] = [_time(row, "compiled") for _, row in df.iterrows()]
    for phase, label in (("step", "step ×"), ("forward", "forward ×"), ("backward", "backward ×"),
                         ("optimizer", "optimizer ×")):
        out[label] = [_num(v) for v in df[f"{phase}_speedup"]]
    out["compile (s)"] = [_num(v, 1) for v in df["compile_s"]]
    out["eager peak (GiB)"] = [_num(v) for v in df["eager_peak_GiB"]]
    out["compiled peak (GiB)"] = [_num(v) for v in df["compiled_peak_GiB"]]
    out["loss |Δ|"] = ["" if math.isnan(v) else f"{v:.1e}" for v in df["loss_abs_diff"]]
    return out[DISPLAY_COLUMNS]


def empty_table() -> pd.DataFrame:
    return pd.DataFrame(columns=DISPLAY_COLUMNS)


def plot(df: pd.DataFrame | None, path: Path) -> None:
    """Left: step speed-up per size, one bar per mode (x where a variant did not run). Right: compile
    time. Without records, a figure that says so (the rule's output exists either way)."""
    fig, (speed, comp) = plt.subplots(1, 2, figsize=(11, 4))
    empty = df is None or df.empty
    sizes = [] if empty else list(df["size"].cat.categories)
    modes = [] if empty else list(df["mode"].cat.categories)
    width = 0.8 / max(1, len(modes))
    x = np.arange(len(sizes))
    for i, mode in enumerate(modes):
        part = df[df["mode"] == mode].set_index("size")
        for ax, column in ((speed, "step_speedup"), (comp, "compile_s")):
            values = [part[column].get(s, math.nan) if s in part.index else math.nan for s in sizes]
            ax.bar(x + (i - (len(modes) - 1) / 2) * width, values, width, label=mode, color=f"C{i}")
        failed = [j for j, s in enumerate(sizes) if s in part.index and math.isnan(part["step_speedup"][s])]
        speed.scatter(x[failed] + (i - (len(modes) - 1) / 2) * width, [0.05] * len(failed), marker="x",
                      color=f"C{i}", zorder=3)
    speed.axhline(1.0, color="k", lw=0.8, ls="--")
    speed.set(ylabel="eager ÷ compiled step time", title="speed-up (above 1: compiled is faster)")
    comp.set(ylabel="seconds", title="compile time (first calls beyond steady speed)")
    for ax in (speed, comp):
        ax.set_xticks(x, sizes)
        ax.set_xlabel("model size")
        ax.grid(alpha=0.3, axis="y")
    if modes:
        speed.legend(fontsize=8, title="mode (x: a variant did not run)", title_fontsize=8)
    else:
        speed.text(0.5, 0.5, "no whole-model records", ha="center", transform=speed.transAxes)
    save_figure(fig, path)


def _spread(values: pd.Series) -> dict | None:
    values = values.dropna().astype(float)
    if not len(values):
        return None
    return {"median": float(values.median()), "min": float(values.min()), "max": float(values.max())}


def _point(row: pd.Series) -> dict:
    return {"size": str(row["size"]), "mode": str(row["mode"]), "speedup": float(row["step_speedup"]),
            "eager_ms": float(row["eager_step_ms"]), "compiled_ms": float(row["compiled_step_ms"])}


def summarize(df: pd.DataFrame) -> dict:
    """The numbers the B2(b) part of the section quotes."""
    ok = df.dropna(subset=["step_speedup"])
    checked = df[df["loss_passed"].notna()]
    first = df.iloc[0]
    return {
        "compile": sorted(set(df["compile"])),
        "context": int(first["context"]), "batch": int(first["batch"]),
        "points": len(df), "both_ok": len(ok),
        "step_speedup": _spread(ok["step_speedup"]),
        "step_speedup_by_mode": {str(mode): _spread(part["step_speedup"])
                                 for mode, part in ok.groupby("mode", observed=True)},
        "step_speedup_by_size": {str(size): float(part["step_speedup"].median())
                                 for size, part in ok.groupby("size", observed=True)},
        "compiled_graphs": sorted({int(g) for g in df["compiled_graphs"].dropna()}),
        "phase_speedup": {phase: _spread(ok[f"{phase}_speedup"]) for phase in ("forward", "backward", "optimizer")},
        "best": _point(ok.loc[ok["step_speedup"].idxmax()]) if len(ok) else None,
        "worst": _point(ok.loc[ok["step_speedup"].idxmin()]) if len(ok) else None,
        "compile_seconds": _spread(df["compile_s"]),
        "compile_seconds_by_size": {str(size): float(part["compile_s"].max())
                                    for size, part in df.dropna(subset=["compile_s"]).groupby("size", observed=True)},
        "loss_checks": {"checked": len(checked), "passed": int(checked["loss_passed"].astype(bool).sum()),
                        "max_abs_diff": float(checked["loss_abs_diff"].max()) if len(checked) else None,
                        "rtol": float(checked["loss_rtol"].max()) if len(checked) else None,
                        "failed": [f"{r['size']} {r['mode']}" for _, r in checked.iterrows() if not r["loss_passed"]]},
        "not_ok": [f"{r['size']} {r['mode']}: " + ", ".join(
                       f"{v} {r[f'{v}_status']}" + (f" ({r[f'{v}_message']})" if r[f"{v}_message"] else "")
                       for v in ("eager", "compiled") if r[f"{v}_status"] != "ok")
                   for _, r in df.iterrows() if r["eager_status"] != "ok" or r["compiled_status"] != "ok"],
        "fits_only_compiled": [f"{r['size']} {r['mode']}" for _, r in df.iterrows()
                               if r["eager_status"] == "oom" and r["compiled_status"] == "ok"],
    }
