"""B2(b) from the compile-bench records: the whole model eager against compiled, per size and mode.

Each record (``python -m cs336_systems.compile_bench``) holds both variants of one grid point, taking
turns in one job (``metrics.turns``) where both ran; this module turns them into the table people
read, the speed-up figure and the numbers the writeup quotes. ``whole_model_part`` in
``cs336_systems.report.b2`` calls it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from cs336_systems.models import MODEL_SIZES
from cs336_systems.models import MODES as MODE_ORDER
from cs336_systems.report.common import cell, save_figure
from cs336_systems.report.spread import NOT_SETTLED, WITHIN, Verdict, judge, require_one_job

PHASES = ("forward", "backward", "optimizer", "step")
DISPLAY_COLUMNS = ["size", "mode", "eager step (ms)", "compiled step (ms)", "step ×", "forward ×", "backward ×",
                   "optimizer ×", "compile (s)", "eager peak (GiB)", "compiled peak (GiB)", "loss |Δ|"]


def check_records(records: list[dict]) -> None:
    """Stop with one line on a record that is not a compile-bench record, or whose variants both ran
    but not in one job's turns: compile_bench times every variant that ran in one ``take_turns`` job,
    so such a pair is no record it writes, and the judge could not pair it."""
    for r in records:
        if r["id"] != "B2" or "variants" not in r["metrics"]:
            raise ValueError(f"not a B2 whole-model record (id {r['id']!r}, params {r['params']})")
        missing = {"size", "mode", "compile", "context", "batch"} - set(r["params"])
        if missing:
            raise ValueError(f"B2 whole-model record lacks params {sorted(missing)}")
        variants = r["metrics"]["variants"]
        ran = [variants.get(v) or {} for v in ("eager", "compiled")]
        if all(v.get("status") == "ok" for v in ran):
            require_one_job({name: {"metrics": v} for name, v in zip(("eager", "compiled"), ran)},
                            f"B2 whole-model record of {r['params']['size']} {r['params']['mode']}: eager and compiled")


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
                timed = v.get(phase, {})
                row[f"{name}_{phase}_ms"] = timed.get("mean", math.nan)
                row[f"{name}_{phase}_std_ms"] = timed.get("std", math.nan)
            row[f"{name}_peak_GiB"] = (v.get("peak_memory_bytes") or math.nan) / 2**30
            row[f"{name}_metrics"] = v          # its rounds and turns, for the paired verdicts
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



def display_table(df: pd.DataFrame) -> pd.DataFrame:
    """The table people read: step times (mean ± std ms), speed-ups (eager ÷ compiled), compile
    time, peak memory and the loss difference; a variant that did not run says why (OOM, ERROR)."""
    out = pd.DataFrame({"size": df["size"].astype(str), "mode": df["mode"].astype(str)})
    out["eager step (ms)"] = [_time(row, "eager") for _, row in df.iterrows()]
    out["compiled step (ms)"] = [_time(row, "compiled") for _, row in df.iterrows()]
    for phase, label in (("step", "step ×"), ("forward", "forward ×"), ("backward", "backward ×"),
                         ("optimizer", "optimizer ×")):
        out[label] = [cell(v) for v in df[f"{phase}_speedup"]]
    out["compile (s)"] = [cell(v, ".1f") for v in df["compile_s"]]
    out["eager peak (GiB)"] = [cell(v) for v in df["eager_peak_GiB"]]
    out["compiled peak (GiB)"] = [cell(v) for v in df["compiled_peak_GiB"]]
    out["loss |Δ|"] = ["" if math.isnan(v) else f"{v:.1e}" for v in df["loss_abs_diff"]]
    return out[DISPLAY_COLUMNS]


def empty_table() -> pd.DataFrame:
    return pd.DataFrame(columns=DISPLAY_COLUMNS)


PLACEHOLDER = ("Placeholder, not a plot.\n"
               "B2(b) was not measured in this run: it has no whole-model records, so there is no speed-up\n"
               "or compile time to plot. The report writes this file only because B2 declares it; the figure\n"
               "is in the run that measured B2(b) (python -m cs336_systems.compile_bench).")


def plot_placeholder(path: Path) -> None:
    """The declared figure of a run without whole-model records: no axes, only what is missing, so
    it cannot be read as an empty plot."""
    fig = plt.figure(figsize=(8, 1.6))
    fig.text(0.5, 0.5, PLACEHOLDER, ha="center", va="center", fontsize=10)
    save_figure(fig, path)


def plot(df: pd.DataFrame | None, path: Path) -> None:
    """Left: step speed-up per size, one bar per mode (x where a variant did not run). Right: compile
    time. Without records, a placeholder that says what is missing (the rule's output exists either way)."""
    if df is None or df.empty:
        plot_placeholder(path)
        return
    fig, (speed, comp) = plt.subplots(1, 2, figsize=(11, 4))
    sizes = list(df["size"].cat.categories)
    modes = list(df["mode"].cat.categories)
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
    speed.legend(fontsize=8, title="mode (x: a variant did not run)", title_fontsize=8)
    save_figure(fig, path)


@dataclass(frozen=True)
class Range:
    median: float
    min: float
    max: float


def spread(values: pd.Series) -> Range | None:
    values = values.dropna().astype(float)
    if not len(values):
        return None
    return Range(float(values.median()), float(values.min()), float(values.max()))


@dataclass(frozen=True)
class Point:
    size: str
    mode: str


def _point(row: pd.Series) -> Point:
    return Point(str(row["size"]), str(row["mode"]))


def _both_ok(df: pd.DataFrame) -> pd.DataFrame:
    return df[(df["eager_status"] == "ok") & (df["compiled_status"] == "ok")]


@dataclass(frozen=True)
class LargestPeak:
    size: str
    eager_GiB: float
    compiled_GiB: float


SAME = 0.01     # memory readings within 1 % of each other count as the same


@dataclass(frozen=True)
class Compared:
    """Compiled ÷ eager memory over the points both ran: the range the words quote, at how many points
    compiled's is lower or higher (beyond ``SAME``), and what that comes to (``outcome``): "lower" at
    every one, "same" at every one, else "mixed". Memory readings repeat exactly from run to run, so one
    reading a side settles which is lower."""
    min: float
    max: float
    points: int
    lower: int
    higher: int
    outcome: str


def compared(ratio: pd.Series, quoted: pd.Series | None = None) -> Compared:
    """``ratio`` (compiled ÷ eager) judged against ``SAME``; the range is ``quoted``'s (default: the ratio's)."""
    quoted = ratio if quoted is None else quoted
    lower, higher = int((ratio < 1 - SAME).sum()), int((ratio > 1 + SAME).sum())
    outcome = "lower" if lower == len(ratio) else "same" if not lower and not higher else "mixed"
    return Compared(float(quoted.min()), float(quoted.max()), int(len(ratio)), lower, higher, outcome)


@dataclass(frozen=True)
class ModePeak(Compared):
    """One mode's peaks over the sizes, quoted as ``1 − compiled ÷ eager``, with the largest model's."""
    largest: LargestPeak


@dataclass(frozen=True)
class PeakMemory:
    by_mode: dict[str, ModePeak]
    only_with_backward: bool


def peak_memory(df: pd.DataFrame) -> PeakMemory | None:
    """Per mode, how much lower the compiled variant's peak is (``1 − compiled ÷ eager``) over the
    sizes where both ran, with the largest model's peaks; and whether the saving comes only with a
    backward: every mode that runs one cuts more, at its smallest, than forward (under no_grad) at
    its largest."""
    both = _both_ok(df).dropna(subset=["eager_peak_GiB", "compiled_peak_GiB"])
    by_mode = {}
    for mode, part in both.groupby("mode", observed=True):
        ratio = part["compiled_peak_GiB"] / part["eager_peak_GiB"]
        largest = part.loc[part["eager_peak_GiB"].idxmax()]
        by_mode[str(mode)] = ModePeak(**vars(compared(ratio, 1 - ratio)), largest=LargestPeak(
            str(largest["size"]), float(largest["eager_peak_GiB"]), float(largest["compiled_peak_GiB"])))
    if not by_mode:
        return None
    with_backward = [m for m in by_mode if m != "forward"]
    only = "forward" in by_mode and bool(with_backward) and all(
        by_mode[m].min > by_mode["forward"].max for m in with_backward)
    return PeakMemory(by_mode, only)


def verdict(row: pd.Series, phase: str) -> Verdict:
    """Eager against compiled in ``phase`` by ``spread.judge``, paired over the rounds of the job both
    took turns in (``check_records`` refuses a pair from two jobs): "higher" where eager is slower,
    "lower" where faster, ``WITHIN`` neither; ``NOT_SETTLED`` where they took fewer rounds than the
    judge needs or the host could turn it around."""
    return judge({"metrics": row["eager_metrics"]}, {"metrics": row["compiled_metrics"]}, phase)


def faster_everywhere(df: pd.DataFrame, phases: tuple[str, ...]) -> bool:
    """Whether compiled is faster than eager beyond the spread (``verdict`` "higher": eager slower)
    in each of ``phases`` at every point where both ran and that times the phase (False without one)."""
    rows = _both_ok(df)
    found = [verdict(r, phase).verdict for phase in phases for _, r in rows.iterrows()
             if not math.isnan(r[f"eager_{phase}_ms"]) and not math.isnan(r[f"compiled_{phase}_ms"])]
    return bool(found) and all(v == "higher" for v in found)


@dataclass(frozen=True)
class Optimizer:
    """Eager ÷ compiled in the optimizer step, the sizes by the judge's verdict, and its share of eager's step."""
    ratio: Range
    compiled_faster: list[str]
    compiled_slower: list[str]
    within: list[str]
    not_settled: list[str]
    share_of_step: Range


def optimizer_phase(df: pd.DataFrame) -> Optimizer | None:
    """The optimizer step is not compiled: the same AdamW runs in both variants. Its eager ÷ compiled
    ratio, the sizes where the two differ beyond the spread of the per-round differences (``verdict``),
    where they do not, and where the records do not settle it; and the optimizer's share of the
    eager step."""
    rows = _both_ok(df).dropna(subset=["optimizer_speedup"])
    if rows.empty:
        return None
    verdicts = {"higher": [], "lower": [], WITHIN: [], NOT_SETTLED: []}
    for _, r in rows.iterrows():
        verdicts[verdict(r, "optimizer").verdict].append(str(r["size"]))
    return Optimizer(spread(rows["optimizer_speedup"]), verdicts["higher"], verdicts["lower"], verdicts[WITHIN],
                     verdicts[NOT_SETTLED], spread(rows["eager_optimizer_ms"] / rows["eager_step_ms"]))


@dataclass(frozen=True)
class AtSize:
    size: str
    speedup: float


@dataclass(frozen=True)
class SizeTrend:
    """A mode's step speed-up at its smallest and its largest model (``size_trend``)."""
    first: AtSize
    last: AtSize


def size_trend(df: pd.DataFrame) -> dict[str, SizeTrend]:
    """Per mode, the step speed-up at the smallest model and at the largest. Each size is its own
    job, one speed-up a size: nothing measures how far two processes' speed-ups differ by chance, so
    no judge can settle how the speed-up moves with size, and the section says so rather than
    reading a trend off the two numbers."""
    found = {}
    for mode, part in _both_ok(df).groupby("mode", observed=True):
        part = part.sort_values("size")
        if len(part) > 1:
            found[str(mode)] = SizeTrend(*(AtSize(str(part.iloc[i]["size"]), float(part.iloc[i]["step_speedup"]))
                                           for i in (0, -1)))
    return found


@dataclass(frozen=True)
class LossChecks:
    checked: int
    passed: int
    max_abs_diff: float | None
    rtol: float | None
    failed: list[str]


@dataclass(frozen=True)
class WholeModel:
    """The numbers the B2(b) part of the section quotes."""
    compile: list[str]
    context: int
    batch: int
    points: int
    both_ok: int
    rounds: list[int]
    step_speedup: Range | None
    compiled_graphs: list[int]
    phase_speedup: dict[str, Range | None]
    # compiled forward and backward each faster, by the judge, at every point that times them
    forward_and_backward_faster: bool
    peak_memory: PeakMemory | None
    optimizer: Optimizer | None
    size_trend: dict[str, SizeTrend]
    best: Point | None
    worst: Point | None
    compile_seconds: Range | None
    loss_checks: LossChecks
    not_ok: list[str]
    fits_only_compiled: list[str]


def summarize(df: pd.DataFrame) -> WholeModel:
    ok = df.dropna(subset=["step_speedup"])
    checked = df[df["loss_passed"].notna()]
    first = df.iloc[0]
    return WholeModel(
        compile=sorted(set(df["compile"])), context=int(first["context"]), batch=int(first["batch"]),
        points=len(df), both_ok=len(ok),
        rounds=sorted({len(r.get("rounds") or []) for r in df["eager_metrics"] if isinstance(r, dict) and r.get("turns")}),
        step_speedup=spread(ok["step_speedup"]),
        compiled_graphs=sorted({int(g) for g in df["compiled_graphs"].dropna()}),
        phase_speedup={phase: spread(ok[f"{phase}_speedup"]) for phase in PHASES},
        forward_and_backward_faster=faster_everywhere(df, ("forward", "backward")),
        peak_memory=peak_memory(df), optimizer=optimizer_phase(df), size_trend=size_trend(df),
        best=_point(ok.loc[ok["step_speedup"].idxmax()]) if len(ok) else None,
        worst=_point(ok.loc[ok["step_speedup"].idxmin()]) if len(ok) else None,
        compile_seconds=spread(df["compile_s"]),
        loss_checks=LossChecks(len(checked), int(checked["loss_passed"].astype(bool).sum()),
                               float(checked["loss_abs_diff"].max()) if len(checked) else None,
                               float(checked["loss_rtol"].max()) if len(checked) else None,
                               [f"{r['size']} {r['mode']}" for _, r in checked.iterrows() if not r["loss_passed"]]),
        not_ok=[f"{r['size']} {r['mode']}: " + ", ".join(
                    f"{v} {r[f'{v}_status']}" + (f" ({r[f'{v}_message']})" if r[f"{v}_message"] else "")
                    for v in ("eager", "compiled") if r[f"{v}_status"] != "ok")
                for _, r in df.iterrows() if r["eager_status"] != "ok" or r["compiled_status"] != "ok"],
        fits_only_compiled=[f"{r['size']} {r['mode']}" for _, r in df.iterrows()
                            if r["eager_status"] == "oom" and r["compiled_status"] == "ok"])
