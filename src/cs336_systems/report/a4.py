"""A4 report: the toy model's dtype table, layer-norm errors, and full (fp32) vs bf16 timing from A1.

    python -m cs336_systems.report.a4 --dtypes dtypes.json --timing-records A1/records/*.json \
        --kernel-records A4/records/kernels_*.json --out-dir DIR

Writes ``table.*`` (dtype of each stage per device and autocast dtype), ``layernorm.*`` (relative
error of layer norm in fp16 / bf16 against float64), ``timing.*`` (forward and backward, fp32 vs
bf16 autocast, per size), ``speedup.png``, ``kernels.*`` (one A1 point's kernels per step by kind,
fp32 beside bf16; a note where this run has no such record) and ``summary.json``.

Every "faster" and "slower" the summary hands the prose is the judge's (``spread.judge``);
anything it does not decide is reported as within the spread or not settled. bf16 against fp32 at
one point is *paired* where one job timed both in turns (A1's group jobs, A4's kernel job): the
speedup fp32 / bf16 per round, its interval from the rounds' spread (``judge(fp32, bf16, phase,
ratio=True)``). Records of separate processes (runs measured before those jobs) are not settled:
processes differ by more than one process's own spread, which one process a side does not measure.
Speedups of different sizes come from different jobs, one a size, so how the speedup moves with
size is not settled by any record, and no verdict is taken on it (``speedup_trends``); backward's speedup
against forward's, from the same rounds, is judged per round (``spread.judge_rounds``).
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from cs336_systems.models import MODEL_SIZES
from cs336_systems.profiling.step_kernels import KINDS
from cs336_systems.report import contract
from cs336_systems.report.a1 import LAUNCH_BOUND_BUSY
from cs336_systems.report.common import (load_record_lists, load_records, run_provenance, save_figure,
                                         write_table)
from cs336_systems.report.contract import Summary, Unread
from cs336_systems.report.spread import (NOT_SETTLED, WITHIN, as_time, judge, judge_rounds, round_differences,
                                         require_one_job, round_samples, same_job)

# How a bf16-against-fp32 comparison was judged: over one job's rounds, or between two processes,
# which the judge does not settle.
PAIRED, SEPARATE = "paired", "separate processes"

# (A1 mode, phase) pairs the timing table shows: forward alone (no_grad), and both phases of forward+backward.
TIMED = (("forward", "forward"), ("forward-backward", "forward"), ("forward-backward", "backward"))
BF16_IS = {"higher": "faster", "lower": "slower", WITHIN: WITHIN, NOT_SETTLED: NOT_SETTLED}   # by its speedup


def idle_most(m: dict) -> bool | None:
    """Whether the GPU is idle most of the step: its kernels' busy time under the profiler against the
    step timed without it, two measurements of one process that never took turns, so over both
    ranges: True where even the longest profiled busy time is under ``LAUNCH_BOUND_BUSY`` of the
    fastest timed step, False where even the shortest is at or above it of the slowest, else None."""
    busy, step = m["busy_ms_per_step"], m["step"]["samples"]
    if max(busy) < LAUNCH_BOUND_BUSY * min(step):
        return True
    return False if min(busy) >= LAUNCH_BOUND_BUSY * max(step) else None


def series_name(mode: str, phase: str) -> str:
    """How a (mode, phase) pair is named in the plot and the summary."""
    return "forward only (no_grad)" if mode == "forward" else f"{phase} of forward+backward"


def _column(params: dict) -> str:
    return f"{params['device']} {params['autocast_dtype']}"


def stages(records: list[dict]) -> list[str]:
    """The toy model's stages in the order the records list them (``precision.autocast_dtypes.STAGES``,
    read from the records rather than imported: that module imports torch, ~2 s a report and writeup job)."""
    found: dict[str, None] = {}
    for r in records:
        if r["params"]["part"] == "dtypes" and r["status"] == "ok":
            found.update(dict.fromkeys(r["metrics"]["stages"]))
    return list(found)


def dtype_table(records: list[dict]) -> pd.DataFrame:
    """Rows: stages of the toy model; columns: device and autocast dtype; a cell says the dtype,
    or why there is none (``skipped`` / ``error``, reasons in the summary)."""
    names = stages(records)
    table = {"stage": names}
    for r in records:
        if r["params"]["part"] != "dtypes":
            continue
        if r["status"] == "ok":
            table[_column(r["params"])] = [r["metrics"]["stages"][s] for s in names]
        else:
            table[_column(r["params"])] = [r["status"]] * len(names)
    return pd.DataFrame(table)


def dtype_rules(records: list[dict]) -> list[dict]:
    """Per stage of the toy model, what every column that ran agrees on: "float32" when the stage
    is float32 in all of them, "autocast" when it has each column's autocast dtype, else the
    dtype per column (``cells``), so the prose states the table's pattern instead of repeating it."""
    names = {"fp16": "float16", "bf16": "bfloat16"}
    ran = [r for r in records if r["params"]["part"] == "dtypes" and r["status"] == "ok"]
    out = []
    for stage in stages(records):
        cells = {_column(r["params"]): r["metrics"]["stages"][stage] for r in ran}
        if not cells:
            continue
        if all(v == "float32" for v in cells.values()):
            kind = "float32"
        elif all(r["metrics"]["stages"][stage] == names.get(r["params"]["autocast_dtype"]) for r in ran):
            kind = "autocast"
        else:
            kind = "mixed"
        out.append({"stage": stage, "kind": kind, "cells": cells})
    return out


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


LOW_PRECISION_STATISTICS = "formula, two-pass, in low precision"


# The unit roundoff of each low-precision dtype (half its machine epsilon, round to nearest): the
# most one rounding moves a number, relative to it.
UNIT_ROUNDOFF = {"bf16": 2.0 ** -8, "fp16": 2.0 ** -11}
KERNEL_ON_LOW_PRECISION = "F.layer_norm on a low-precision input"


def kernel_within_one_rounding(focus: dict[str, dict]) -> bool | None:
    """Whether PyTorch's layer norm on a low-precision input is off by no more than one rounding of its
    output (``UNIT_ROUNDOFF``) at every device and dtype of the quoted case; None where none measured it."""
    errors = [(dtype, case[dtype][KERNEL_ON_LOW_PRECISION]["rel_error"]) for case in focus.values()
              for dtype in UNIT_ROUNDOFF if case.get(dtype) and KERNEL_ON_LOW_PRECISION in case[dtype]]
    if not errors:
        return None
    return all(e is not None and e <= UNIT_ROUNDOFF[dtype] for dtype, e in errors)


def bf16_against_fp16(df: pd.DataFrame) -> dict | None:
    """Whether a mean subtraction and a variance computed in bf16 lose more than in fp16: per device
    and input case, the two-pass formula's error with every intermediate in bf16 against fp16's
    (exact operations on one input, no spread). How many cases bf16's error is the larger, of how
    many both dtypes measured, and the cases where it is not, with both errors. A non-finite error
    counts as the larger, unless fp16's is not finite too (fp16's range, not its precision, failed
    there). None where no case has both dtypes."""
    if df.empty:
        return None
    part = df[df["variant"] == LOW_PRECISION_STATISTICS]
    wide = part.pivot_table(index=["device", "offset", "spread"], columns="dtype", values="rel_error",
                            aggfunc="first", sort=False)
    if not {"bf16", "fp16"} <= set(wide.columns):
        return None
    wide = wide.dropna(subset=["bf16", "fp16"], how="all")

    def larger(a: float, b: float) -> bool:
        return math.isfinite(b) and (not math.isfinite(a) or a > b)

    def finite(x: float) -> float | None:
        return float(x) if math.isfinite(x) else None
    no_worse = [{"device": device, "offset": float(offset), "spread": float(spread_),
                 "bf16": finite(row["bf16"]), "fp16": finite(row["fp16"])}
                for (device, offset, spread_), row in wide.iterrows() if not larger(row["bf16"], row["fp16"])]
    return {"cases": len(wide), "worse": len(wide) - len(no_worse), "every": not no_worse,
            "no_worse": no_worse}


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
                recs = {p: by_point.get((size, context, mode, p)) for p in ("fp32", "bf16")}
                if all(r is None for r in recs.values()):
                    continue
                row = {"size": size, "context": context, "mode": mode, "phase": phase}
                for p, r in recs.items():
                    timed = r["metrics"][phase] if r is not None and r["status"] == "ok" else {}
                    row.update({f"{p}_status": r and r["status"], f"{p}_ms": timed.get("mean", math.nan),
                                f"{p}_std_ms": timed.get("std", math.nan),
                                f"{p}_n": timed.get("n") or len(timed.get("samples") or ())})
                fp32, bf16 = row["fp32_ms"], row["bf16_ms"]
                # the judge's verdict on bf16's speedup (fp32's time over bf16's, against 1), per round
                # of the job A1 timed both in (its grid is a job per size, the precisions taking turns)
                both = row["fp32_n"] > 0 and row["bf16_n"] > 0          # both ran, with samples
                v = _paired(recs["fp32"], recs["bf16"], phase) if both else None
                rows.append(row | {
                    "speedup": fp32 / bf16,
                    # First-order spread of the ratio of two independent means' samples.
                    "speedup_std": fp32 / bf16 * math.hypot(row["fp32_std_ms"] / fp32, row["bf16_std_ms"] / bf16),
                    # the judge's interval of the speedup (nan where not settled) and its rounds
                    "speedup_low": v.low if both else math.nan, "speedup_high": v.high if both else math.nan,
                    "rounds": v.rounds if both else 0,
                    # bf16 against fp32 by the judge: "slower", "faster", WITHIN or NOT_SETTLED
                    "bf16_is": BF16_IS[v.verdict] if both else "",
                    "judged": PAIRED if both else ""})
    return pd.DataFrame(rows)


def _paired(fp32: dict, bf16: dict, phase: str):
    """The judge's verdict on the speedup of two A1 records of one point, paired over the rounds of
    the job both took turns in; a ``ValueError`` where their ``metrics.turns`` name two jobs, which
    A1's benchmark never writes (``report.a1.paired_verdict`` refuses the same)."""
    p = fp32["params"]
    require_one_job({"fp32": fp32, "bf16": bf16}, f"A1 records of {p['size']} ctx {p['context']} {p['mode']}")
    return judge(fp32, bf16, phase, ratio=True)


def _mean_std(mean: float, std: float, unit: str = "") -> str:
    return f"{mean:.2f}{unit}" if math.isnan(std) else f"{mean:.2f} ± {std:.2f}{unit}"


def _interval(low: float, high: float) -> str:
    return "" if math.isnan(low) or math.isnan(high) else f"{low:.2f}–{high:.2f}×"


def timing_table(df: pd.DataFrame) -> pd.DataFrame:
    """Means ± standard deviations over the timed steps; the speedup's spread is propagated from them,
    and beside it the judge's interval of the paired speedup (empty where not settled)."""
    def cell(status, mean, std):
        return _mean_std(mean, std) if status == "ok" else (status or "missing").upper()

    return pd.DataFrame({
        "size": df["size"], "context": df["context"], "mode": df["mode"], "phase": df["phase"],
        "fp32 (ms)": [cell(*c) for c in zip(df["fp32_status"], df["fp32_ms"], df["fp32_std_ms"])],
        "bf16 autocast (ms)": [cell(*c) for c in zip(df["bf16_status"], df["bf16_ms"], df["bf16_std_ms"])],
        "speedup fp32/bf16": ["" if math.isnan(v) else _mean_std(v, s, "×") for v, s in zip(df["speedup"], df["speedup_std"])],
        "paired speedup interval": [_interval(lo, hi) for lo, hi in zip(df["speedup_low"], df["speedup_high"])],
        "bf16 is": [f"{v} ({j}{f', {n} rounds' if j == PAIRED else ''})" if v else ""
                    for v, j, n in zip(df["bf16_is"], df["judged"], df["rounds"])],
    })


def plot_speedup(df: pd.DataFrame, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4))
    sizes = list(dict.fromkeys(df["size"]))
    for (context, mode, phase), part in df.groupby(["context", "mode", "phase"], sort=False):
        part = part.set_index("size").reindex(sizes)
        # bars: the judge's interval of the paired speedup, none where it settled nothing
        low, high = (part.get(k, math.nan * part["speedup"]) for k in ("speedup_low", "speedup_high"))
        yerr = [(part["speedup"] - low).clip(lower=0).fillna(0), (high - part["speedup"]).clip(lower=0).fillna(0)]
        ax.errorbar(range(len(sizes)), part["speedup"], yerr=yerr,
                    marker="o", capsize=3, label=f"{series_name(mode, phase)}, context {context}")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(range(len(sizes)), sizes)
    ax.set(xlabel="model size", ylabel="speedup of bf16 autocast (fp32 time / bf16 time)\n"
                                         "bars: the judge's interval, paired rounds only")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    save_figure(fig, path)


def speedup_trends(ok: pd.DataFrame) -> dict[str, dict]:
    """Per series (context, mode, phase) timed at two sizes or more: the speedup at each size. Each
    size's speedup comes from a job of its own, one speedup a size, so how it moves from one size to
    the next compares two jobs with nothing to measure how much a speedup moves between jobs: no
    judge settles it, and the section says so rather than reading a trend off the numbers."""
    return {f"{series_name(mode, phase)}, context {context}": {"sizes": list(part["size"]),
                                                               "speedups": list(part["speedup"])}
            for (context, mode, phase), part in (ok.groupby(["context", "mode", "phase"], sort=False) if len(ok) else [])
            if part["size"].nunique() > 1}


def _rows_where(ok: pd.DataFrame, bf16_is: str) -> list[dict]:
    """The rows where bf16 is ``bf16_is`` ("slower", "faster" or WITHIN), for the prose to name."""
    return [{"size": r["size"], "context": int(r["context"]), "series": series_name(r["mode"], r["phase"]),
             "fp32_ms": r["fp32_ms"], "fp32_std_ms": r["fp32_std_ms"], "bf16_ms": r["bf16_ms"],
             "bf16_std_ms": r["bf16_std_ms"], "speedup": r["speedup"], "judged": r["judged"]}
            for r in (ok.to_dict("records") if len(ok) else []) if r["bf16_is"] == bf16_is]


def backward_vs_forward(records: list[dict]) -> dict[str, list[str]] | None:
    """The points ("small ctx 512") by the judge's verdict on backward's speedup against forward's
    in the same forward+backward steps (None: no such point). Both come from the same rounds, so
    each round gives one ratio of the two speedups (``spread.judge_rounds`` of the derived
    per-round series); where fp32 and bf16 ran in separate jobs there are no such rounds: not settled."""
    by_point = {(r["params"]["size"], r["params"]["context"], r["params"]["precision"]): r for r in records
                if r["params"].get("mode") == "forward-backward" and r["status"] == "ok"}
    order = list(MODEL_SIZES)
    points = sorted({(s, c) for s, c, _ in by_point}, key=lambda k: (order.index(k[0]) if k[0] in order else len(order), k[1]))
    out = {verdict: [] for verdict in ("higher", "lower", WITHIN, NOT_SETTLED)}
    for size, context in points:
        fp32, bf16 = by_point.get((size, context, "fp32")), by_point.get((size, context, "bf16"))
        if fp32 is None or bf16 is None or not {"forward", "backward"} <= set(fp32["metrics"]):
            continue
        verdict = NOT_SETTLED
        if same_job(fp32, bf16):
            per_round = {phase: [[r] for r in round_differences(round_samples(fp32, phase), round_samples(bf16, phase),
                                                                ratio=True)]
                         for phase in ("forward", "backward")}
            verdict = judge_rounds(per_round["backward"], per_round["forward"], ratio=True).verdict
        out[verdict].append(f"{size} ctx {context}")
    return out if any(out.values()) else None


# --- one A1 point's kernels per step, fp32 beside bf16 -----------------------------------------

def kernel_summary(records: list[dict]) -> dict | None:
    """What the prose says about the kernel records (None: this run has none). Per precision: the
    kernels per step by kind, their device time, busy share and the unprofiled step time; between
    the two, the step by the judge (paired over the timing job's rounds) and the GPU's busy time,
    whose two profiles ran one after the other and so are not settled."""
    if not records:
        return None
    first = records[0]
    out = {"point": {k: first["params"].get(k) for k in ("size", "context", "mode", "batch")},
           "device": first["provenance"].get("gpu") or "CPU",
           "not_ok": [f"{r['params']['precision']}: {r['status']} ({r.get('reason') or r.get('message')})"
                      for r in records if r["status"] != "ok"], "precisions": {}}
    for r in records:
        if r["status"] != "ok":
            continue
        m = r["metrics"]
        out["unit"] = m["unit"]
        out["precisions"][r["params"]["precision"]] = {
            "kernels": statistics.fmean(m["count_per_step"]),
            "kinds": m["kinds"], "time_ms": m["time_ms"], "busy_ms": m["busy_ms"], "busy_share": m["busy_share"],
            # the GPU's busy time per profiled step (a GPU profile only)
            "busy_mean_ms": statistics.fmean(m["busy_ms_per_step"]) if m.get("busy_ms_per_step") else None,
            "step_ms": m["step"]["mean"], "step_std_ms": m["step"]["std"]}
    fp32, bf16 = out["precisions"].get("fp32"), out["precisions"].get("bf16")
    if fp32 and bf16:
        on_gpu = fp32["busy_mean_ms"] is not None and bf16["busy_mean_ms"] is not None
        recs = {r["params"]["precision"]: r for r in records if r["status"] == "ok"}
        step = judge(recs["bf16"], recs["fp32"], "step")
        step_is = step.verdict
        # the two profiles ran one after the other, not in turns: one profile a side, which the judge
        # does not settle (no spread measured between profiles)
        busy_is = judge([bf16["busy_mean_ms"]], [fp32["busy_mean_ms"]]).verdict if on_gpu else None
        out["compare"] = {
            "extra_kernels": bf16["kernels"] - fp32["kernels"],
            "extra_casts": bf16["kinds"]["cast"]["count"] - fp32["kinds"]["cast"]["count"],
            # the net count is a sum of kinds that move both ways (more casts, fewer GEMMs): each kind's own
            "kernel_changes": [{"kind": k, "count": bf16["kinds"][k]["count"] - fp32["kinds"][k]["count"]}
                               for k in KINDS if bf16["kinds"][k]["count"] != fp32["kinds"][k]["count"]],
            "more_or_fewer": "more" if bf16["kernels"] >= fp32["kernels"] else "fewer",
            "net_kernels": abs(bf16["kernels"] - fp32["kernels"]),
            "cast_ms": {p: e["kinds"]["cast"]["ms"] for p, e in out["precisions"].items()},
            "gemm_ms": {p: e["kinds"]["GEMM"]["ms"] for p, e in out["precisions"].items()},
            "bf16_step_is": as_time(step_is),
            "step_judged": PAIRED if step.paired else SEPARATE,
            "rounds": step.rounds if step.paired else None,
            # the interval of bf16's step minus fp32's (ms), nan where not settled
            "step_low_ms": step.low, "step_high_ms": step.high,
            "bf16_busy_is": {"higher": "longer", "lower": "shorter"}.get(busy_is, busy_is) if on_gpu else None,
            "launch_bound": {p: idle_most(recs[p]["metrics"]) for p in out["precisions"]} if on_gpu else None,
            # The slowdown is not kernel time when bf16's step is slower beyond the spread while its
            # kernels keep the GPU busy no longer than fp32's: the extra time is the GPU idle, and
            # launches are to blame only if bf16 launches more kernels.
            "slowdown_outside_kernels": (on_gpu and step_is == "higher" and busy_is in ("lower", WITHIN)
                                         and bf16["kernels"] > fp32["kernels"]),
        }
    return out


def kernel_table(summary: dict | None) -> pd.DataFrame:
    """Kinds as rows, fp32 and bf16 kernels per step and device time per step side by side."""
    if summary is None or not summary["precisions"]:
        return pd.DataFrame({"note": ["not measured in this run (rule A4_kernels)"]})
    per = summary["precisions"]
    unit = "kernels" if summary["unit"] == "CUDA kernels" else "ops"
    rows = []
    for k in KINDS:
        rows.append({"kind": k, **{col: f"{per[p]['kinds'][k][key]:{fmt}}" if p in per else ""
                                   for p in ("fp32", "bf16")
                                   for col, key, fmt in ((f"{p} {unit}/step", "count", ".0f"), (f"{p} ms/step", "ms", ".3f"))}})
    rows.append({"kind": "all", **{col: f"{value:{fmt}}" if p in per else "" for p in ("fp32", "bf16")
                                   for col, value, fmt in ((f"{p} {unit}/step", per.get(p, {}).get("kernels", 0), ".0f"),
                                                           (f"{p} ms/step", per.get(p, {}).get("time_ms", 0), ".3f"))}})
    if all(per[p]["busy_ms"] is not None for p in per):
        rows.append({"kind": "GPU busy (union of kernels)", **{f"{p} ms/step": f"{per[p]['busy_ms']:.3f}" for p in per}})
    rows.append({"kind": "step, timed without the profiler",
                 **{f"{p} ms/step": f"{per[p]['step_ms']:.2f} ± {per[p]['step_std_ms']:.2f}" for p in per}})
    return pd.DataFrame(rows).fillna("")


def timing_grid(records: list[dict]) -> dict | None:
    """Which A1 points (c) times: sizes, contexts, modes and precisions, and how many records."""
    if not records:
        return None
    seen = lambda key: {r["params"][key] for r in records}  # noqa: E731
    return {"records": len(records), "sizes": [s for s in MODEL_SIZES if s in seen("size")],
            "contexts": sorted(seen("context")), "modes": sorted(seen("mode")),
            "precisions": [p for p in ("fp32", "bf16") if p in seen("precision")]}


def summarize(dtype_records: list[dict], timing_records: list[dict], ln: pd.DataFrame, timing: pd.DataFrame,
              kernel_records: list[dict] = ()) -> dict:
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
    trend_by_series = speedup_trends(ok)
    # The case the prose quotes: the largest mean offset at spread 1, on each device.
    focus = {}
    for device, part in (ln.groupby("device") if not ln.empty else []):
        unit_spread = part[part["spread"] == 1.0]
        if len(unit_spread):
            offset = float(unit_spread["offset"].max())
            # offset squared: what a one-pass variance's x² reaches there
            focus[device] = {"offset": offset, "offset_squared": offset ** 2,
                             **layernorm[device][f"offset {offset:g}, spread 1"]}
    by_phase = {}
    for r in ok.to_dict("records") if len(ok) else []:
        by_phase.setdefault(series_name(r["mode"], r["phase"]), []).append(r["speedup"])
    median = {phase: float(pd.Series(v).median()) for phase, v in by_phase.items()}
    skipped = [f"{d} {t}: {e['status']} ({e['reason']})" for d, per in dtypes.items() for t, e in per.items()
               if e["status"] != "ok"]
    rules = dtype_rules(dtype_records)
    # the parts of the question this run answers, in the answer's order: layer norm where its first
    # device measured bf16, autocast's dtypes, bf16's speedup
    answered = [part for part, measured in (("layernorm", focus and next(iter(focus.values())).get("bf16")),
                                            ("dtypes", rules), ("speedup", trend_by_series)) if measured]
    return {
        "provenance": run_provenance(dtype_records + timing_records + list(kernel_records)),
        "timing_provenance": run_provenance(timing_records) if timing_records else None,
        "dtypes": dtypes,
        "dtypes_not_ok": skipped,
        "layernorm": layernorm,
        "layernorm_focus": focus,
        "layernorm_kernel_within_one_rounding": kernel_within_one_rounding(focus),
        "unit_roundoff": UNIT_ROUNDOFF,
        # a list of at most one, so that a run without layer-norm records words nothing of it
        "layernorm_bf16_against_fp16": [c for c in (bf16_against_fp16(ln),) if c],
        "dtype_rules": rules,
        "answered": answered,
        "timing_grid": timing_grid(timing_records),
        "layernorm_autocast_output": [f"{device} {dtype}: {e['stages']['LayerNorm output']}" for device, per in dtypes.items()
                                      for dtype, e in per.items() if e["status"] == "ok"],
        "speedups": speedups,
        "speedup_trend": trend_by_series,
        # Claims the prose makes only when the records bear them out, each by report.spread's test.
        "bf16_slower": _rows_where(ok, "slower"),
        "bf16_within_spread": _rows_where(ok, WITHIN),
        "bf16_not_settled": _rows_where(ok, NOT_SETTLED),
        "timing_none_settled": bool(len(ok)) and bool((ok["bf16_is"] == NOT_SETTLED).all()),
        "median_speedup_by_phase": median,
        "backward_vs_forward": backward_vs_forward(timing_records),
        "timing_not_ok": list(dict.fromkeys(
            f"{r['size']} ctx {r['context']} {r['mode']}: fp32 {r['fp32_status']}, bf16 {r['bf16_status']}"
            for r in timing.to_dict("records") if "ok" != r["fp32_status"] or "ok" != r["bf16_status"])),
        "layernorm_shape": next(([r["params"]["rows"], r["params"]["width"]] for r in dtype_records
                                 if r["params"]["part"] == "layernorm" and r["status"] == "ok"), None),
        "timing_batch": int(timing_records[0]["params"]["batch"]) if timing_records else None,
        "timing_steps": timing_records[0]["params"].get("steps") if timing_records else None,
        "timing_rounds": timing_records[0]["params"].get("rounds") if timing_records else None,
        # rows whose fp32 and bf16 both ran and were judged over the rounds of their job
        "timing_paired": int((ok["judged"] == PAIRED).sum()) if len(ok) else 0,
        "kernels": kernel_summary(list(kernel_records)),
        "launch_bound_busy": LAUNCH_BOUND_BUSY,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.report.a4", description=__doc__.split("\n\n")[0])
    p.add_argument("--dtypes", required=True, help="the JSON list of records the toy-model job wrote")
    p.add_argument("--timing-records", nargs="*", default=[], help="A1 records, fp32 and bf16")
    p.add_argument("--kernel-records", nargs="*", default=[],
                   help="step_kernels records of one A1 point, fp32 and bf16 (none: not measured in this run)")
    p.add_argument("--out-dir", required=True, type=Path)
    args = p.parse_args(argv)
    try:
        dtype_records = load_record_lists([args.dtypes])
        timing_records = load_records(args.timing_records)
        kernel_records = load_records(args.kernel_records)
    except (OSError, ValueError) as exc:
        p.error(str(exc))
    ln = layernorm_frame(dtype_records)
    try:
        timing = timing_frame(timing_records)
    except ValueError as exc:
        p.error(str(exc))
    write_table(dtype_table(dtype_records), args.out_dir)
    write_table(layernorm_table(ln), args.out_dir, "layernorm")
    write_table(timing_table(timing) if not timing.empty else pd.DataFrame({"note": ["no A1 records given"]}),
                args.out_dir, "timing")
    plot_speedup(timing if not timing.empty else pd.DataFrame(columns=["size", "context", "mode", "phase", "speedup"]),
                 args.out_dir / "speedup.png")
    summary = summarize(dtype_records, timing_records, ln, timing, kernel_records)
    write_table(kernel_table(summary["kernels"]), args.out_dir, "kernels")
    contract.write(args.out_dir / "summary.json", contract.fill(A4Summary, summary, "A4's summary"))
    print(f"A4 report: {len(dtype_records)} toy-model records, {len(timing_records)} A1 records -> {args.out_dir}",
          file=sys.stderr)
    return 0


# What the section's words read of this report's summary (report.contract), filled from the mapping
# ``summarize`` assembles.
@dataclass(frozen=True, kw_only=True)
class FormulaError:
    """One layer-norm formula's relative error against float64 (and autocast's output dtype)."""
    rel_error: float | None
    output_dtype: str | None = None


@dataclass(frozen=True, kw_only=True)
class Focus:
    """Layer norm at one offset of its input's mean: each formula's error in fp16 and bf16."""
    offset: float
    offset_squared: float
    fp16: dict[str, FormulaError]
    bf16: dict[str, FormulaError] | None = None


@dataclass(frozen=True, kw_only=True)
class DtypeRule:
    stage: str
    kind: str
    cells: dict[str, str]


@dataclass(frozen=True, kw_only=True)
class TimingGrid:
    sizes: list[str]
    contexts: list[int]
    modes: list[str]
    precisions: list[str]
    records: int


@dataclass(frozen=True, kw_only=True)
class Where:
    """A timing row the prose names: its size, context and series (mode and phase)."""
    size: str
    context: int
    series: str


@dataclass(frozen=True, kw_only=True)
class Slower(Where):
    """A row where bf16 is slower than fp32, with both times and how the pair was judged."""
    fp32_ms: float
    fp32_std_ms: float
    bf16_ms: float
    bf16_std_ms: float
    speedup: float
    judged: str


@dataclass(frozen=True, kw_only=True)
class Trend:
    """One series' bf16 speed-up at each model size (each size a job of its own: ``speedup_trends``)."""
    sizes: list[str]
    speedups: list[float]


@dataclass(frozen=True, kw_only=True)
class KernelPoint:
    size: str
    context: int
    batch: int
    mode: str


@dataclass(frozen=True, kw_only=True)
class PrecisionStep:
    step_ms: float
    step_std_ms: float
    busy_share: float | None


@dataclass(frozen=True, kw_only=True)
class KernelChange:
    kind: str
    count: float


@dataclass(frozen=True, kw_only=True)
class KernelCompare:
    """bf16's step against fp32's at the kernel point, and the kernels that changed."""
    step_judged: str
    step_low_ms: float
    step_high_ms: float
    rounds: int | None
    bf16_step_is: str
    bf16_busy_is: str | None
    gemm_ms: dict[str, float]
    cast_ms: dict[str, float]
    extra_casts: float
    extra_kernels: float
    net_kernels: float
    more_or_fewer: str
    kernel_changes: list[KernelChange]
    launch_bound: dict[str, bool | None] | None
    slowdown_outside_kernels: bool | None


@dataclass(frozen=True, kw_only=True)
class NoWorse:
    """An input case where bf16's two-pass statistics lose no more than fp16's: both errors."""
    device: str
    offset: float
    spread: float
    bf16: float | None          # None: not finite
    fp16: float | None


@dataclass(frozen=True, kw_only=True)
class Bf16AgainstFp16:
    cases: int
    worse: int
    every: bool
    no_worse: list[NoWorse]


@dataclass(frozen=True, kw_only=True)
class Kernels:
    device: str
    unit: str
    point: KernelPoint
    precisions: dict[str, PrecisionStep] | None
    compare: KernelCompare | None
    not_ok: list[Any] | None


@dataclass(frozen=True, kw_only=True)
class Gpus:
    gpus: list[str]


@dataclass(frozen=True, kw_only=True)
class A4Summary(Summary):
    dtypes: Unread[dict[str, Any]]          # device -> dtype -> what the toy model's stages ran in (the table's)
    dtypes_not_ok: list[str] | None
    dtype_rules: list[DtypeRule] | None
    answered: list[str]           # "layernorm", "dtypes", "speedup": the parts measured, in the answer's order
    layernorm_shape: list[int] | None
    layernorm_focus: dict[str, Focus | None] | None
    # whether bf16's statistics lose more than fp16's, case by case (``bf16_against_fp16``)
    layernorm_bf16_against_fp16: list[Bf16AgainstFp16]
    layernorm_kernel_within_one_rounding: bool | None
    unit_roundoff: dict[str, float]
    layernorm_autocast_output: list[str] | None
    timing_provenance: Gpus | None
    timing_grid: TimingGrid | None
    timing_batch: int | None
    timing_steps: int | None
    timing_rounds: int | None
    timing_not_ok: list[str] | None
    timing_paired: int | None
    timing_none_settled: bool
    speedups: Unread[dict[str, float]]      # series -> fp32 over bf16 (the timing table's)
    median_speedup_by_phase: dict[str, float] | None
    speedup_trend: dict[str, Trend] | None
    bf16_slower: list[Slower] | None
    bf16_within_spread: list[Where] | None
    bf16_not_settled: list[Where]
    backward_vs_forward: dict[str, list[str]] | None      # verdict -> the points that have it
    kernels: Kernels | None


CONTRACTS = {"A4": A4Summary}


if __name__ == "__main__":
    sys.exit(main())
