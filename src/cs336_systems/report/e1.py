"""E1 report: the training-step ladder per size x context, what each rung bought, the anchors beside
it, each rung's first loss against fp32 eager's, and whether the goal point meets the issue's goal.

    python -m cs336_systems.report.e1 --records rec1.json ... --goal-size 2.7B --goal-context 1024 \
        --goal-mfu 0.55 --out-dir DIR

Step times are the median of the timed steps (the spread: standard deviation, min and max); a step
whose timed steps fall in two clusters (``report.two_modes``) is quoted by both clusters' medians,
since its median lies between them or hides one of them, and every verdict it enters says so.

**Profiles** (``training_step.profile``): kernel time a step by kind, as ``step_kernels.kind`` classified
it in every profile (a cast by its launching op, any other kernel by its name); where the profiler tied
a profile's kernels to no op (a CUDA graph's replay) its casts are not attributable (``kinds_ms``), and
set against another profile, the kinds that may hold them are compared as one (``comparable``). The
kernels' busy time under the profiler and the step timed without it are two measurements: the section
sets them side by side and never divides one by the other. Two profiles are two processes, which
nothing pairs: ours against an anchor's, a kind's kernel time, the busy time or the step is longer or
shorter only beyond ``spread.HOST_SWING`` (``spread.across_processes``), and else set side by side.

**Scope.** The goal point holds the whole ladder; the grid's other points the rungs E1 measures
there (``--elsewhere``: the top rung and the one it is set against) and every anchor. The report
reads whatever records exist: each rung against the rung before it wherever both ran, and at every
point the *top rung* — the highest rung of the ladder that ran and computes what fp32 eager
computes (``checkpointed`` counted just above the rung it builds on) — against each ``--elsewhere``
rung and each anchor there.

**Verdicts** all come from the one judge, ``spread.judge``: both records were measured in one job
(the rungs and anchors of a point take turns in rounds, ``training_step.ladder``; the report refuses a
point whose steps span jobs, ``apart``), so it takes the paired difference per round, the farthest
quarter of rounds set aside, "faster"/"slower" only where its interval lies wholly on one side of no
difference; fewer than ``spread.MIN_ROUNDS`` rounds are *not settled*. A rung against the rung before
it is judged in ms; the top rung against another entrant by the ratio of their steps, per round.

**The goal** (the issue's, at the goal point): the top rung's step at most ``--goal-ratio`` times the
best anchor's (``judge(..., ratio=True)``: the median of per-round ratios and its interval), or at
least ``--goal-mfu`` MFU (its per-round steps against the step that MFU allows, ``judge_rounds``).
Either part *holds* only where its interval's far end is on the goal's side, is *missed* where the
whole interval misses, and is otherwise not settled; the goal holds where a part holds, is missed
where every part that could be judged is missed, and is not settled by these records otherwise.
The best anchor is the anchor with the lowest median step there (a choice, not a verdict). MFU is
A1's: the step's matrix-product FLOPs in closed form (``profiling.flops.model_step_flops``, which
counts the full context x context attention products whatever the kernel skips) over the median
step, against the card's peak for the arithmetic the products ran in (``profiling.mfu.peak``: bf16
tensor cores for the bf16 rungs and anchors, fp32 or TF32 for fp32 by the matmul precision).

**What a rung computes** (``training_step.check``). Every rung and anchor starts from the same seeded
weights, batch and fresh AdamW moments; its record holds the loss of each warm-up step (the first
before any update, each later one after one more) and its first step's gradients' error per
parameter group against fp32 eager's. A rung whose losses or gradients leave the tolerances is
flagged and not ranked; where fp32 eager did not run at a point, its steps are not checked, and the
section says how many.

- Losses, ``LOSS_RTOL`` relative to fp32 eager's at each step. A randomly initialised model's loss
  sits near ln 10 000 = 9.21 whatever it computes, so the tolerance must be tight: on the CPU, bf16
  autocast moved the first loss by 1e-5 to 5e-5 relative (tiny to 2.7B), and on an H200 every bf16
  rung's losses after two updates by at most 2.8e-5 (xl ctx 512, 2.7B ctx 1024; lab/e1-checks),
  while attention that ignores the causal mask moved the first loss by 9e-4 (tiny) to 6e-3 (large,
  2.7B). 5e-4 sits ten times above the first and below the second.
- Gradients, ``GRAD_RTOL``: ``||g - g_fp32|| / ||g_fp32||`` of every group. On an H200 the bf16 rungs'
  worst group (the query projection) is 1.4 to 1.5 % at both points; on the CPU attention without its
  mask puts every group at 48 to 120 % (tiny, small). 10 % sits between them.

``tests/training_step`` holds the tiny model to both sides of both tolerances.
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from cs336_systems.accounting.hardware import BY_DEVICE_NAME
from cs336_systems.accounting.memory_traffic import ADAMW_BYTES_PER_PARAMETER, adamw_floor_ms
from cs336_systems.models import MODEL_SIZES, VOCAB_SIZE, ModelSize
from cs336_systems.profiling.flops import model_step_flops, model_step_flops_parts
from cs336_systems.profiling.mfu import peak, utilisation
from cs336_systems.report import contract
from cs336_systems.report.common import cell, load_records, run_provenance, save_figure, write_table
from cs336_systems.report.contract import Summary, Unread
from cs336_systems.report.spread import (HOST_SWING, MIN_ROUNDS, NOT_SETTLED, WITHIN, across_processes, as_time, judge,
                                         judge_rounds, ranges_apart, round_samples)
from cs336_systems.report.two_modes import RULE, Rule, TwoModes, two_modes
from cs336_systems.training_step import rungs

# The tolerances of a rung's losses and first gradients against fp32 eager's, and what set them (the
# module's doc): bf16 rounding's largest error (on the CPU, on an H200), attention without its mask's range.
LOSS_RTOL = 5e-4
LOSS_BF16_CPU_MAX = 5e-5
LOSS_BF16_GPU_MAX = 2.8e-5
LOSS_UNMASKED = (9e-4, 6e-3)
GRAD_RTOL = 0.1
GRAD_BF16_GPU_MAX = 0.015
GRAD_UNMASKED = (0.48, 1.2)
# What the judge's interval holds: spread.MULTIPLIER keeps an A/A pair inside it in 95 % of jobs.
INTERVAL_LEVEL = 0.95
# The goal's parts and its outcome (goal_check)
HOLDS, MISSED, NOT_MEASURED = "holds", "missed", "not measured"
# A backward pass does two matrix products for each of the forward's.
MATMUL_BACKWARD_OVER_FORWARD = 2
REFERENCE = rungs.REFERENCE
ORDER = list(rungs.RUNG_NAMES + rungs.ANCHOR_NAMES)
GIB = 2**30
PHASES = ("forward", "backward", "optimizer")


def _nan(value) -> float:
    return math.nan if value is None else float(value)


def records_frame(records: list[dict]) -> pd.DataFrame:
    """One row per record: the point, the rung, its status, step median and spread (ms), phases,
    tokens/s, FLOPs, MFU, peak memory and first loss; then the loss against fp32 eager's and each
    rung's difference from the rung before it. A record that did not run has NaN in every measure."""
    rows = []
    for index, r in enumerate(records):
        p, ok = r["params"], r["status"] == "ok"
        m = r["metrics"] if ok else {}
        step = m.get("step", {})
        size = ModelSize(p["d_model"], p["d_ff"], p["num_layers"], p["num_heads"])
        flops = model_step_flops(size, batch=p["batch"], context=p["context"], mode="train-step",
                                 vocab_size=p.get("vocab_size", VOCAB_SIZE))
        # One denominator for every row, fp32 eager's too: the card's bf16 peak, the arithmetic the ladder
        # climbs towards, so the column ranks rungs (fp32 against its own 67 TFLOP/s would read higher).
        card = peak(r["provenance"].get("gpu"), "bf16")
        median = _nan(step.get("median"))
        rows.append({
            "size": p["size"], "context": int(p["context"]), "label": f"{p['size']} ctx {int(p['context'])}",
            "batch": int(p["batch"]), "rung": p["rung"],
            "anchor": bool(p["anchor"]), "status": r["status"], "note": r.get("reason") or r.get("message") or "",
            "median_ms": median, "std_ms": _nan(step.get("std")),
            "min_ms": _nan(step.get("min")), "max_ms": _nan(step.get("max")), "n": int(step.get("n") or 0),
            # a step alternating between two times: its median stands for neither alone (report.two_modes)
            "modes": two_modes(step.get("samples") or [], step.get("median")) if ok else None,
            **{f"{phase}_ms": _nan(m.get(phase, {}).get("median")) for phase in PHASES},
            "tokens_per_s": _nan(m.get("tokens_per_s")),
            "flops": flops, "mfu": _nan(utilisation(flops, median / 1e3, card.flops) if ok else None),
            "peak_basis": card.basis, "peak_flops": card.flops,
            "peak_gib": _nan(m.get("peak_memory_bytes")) / GIB, "loss": _nan(m.get("loss")),
            "losses": m["losses"] if ok else [],      # of each warm-up step (training_step.check)
            "gradient_rel_error": m.get("gradient_rel_error"), "job": (m.get("turns") or {}).get("job"),
            "record": index,
        })
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    df["size"] = pd.Categorical(df["size"], [s for s in MODEL_SIZES if s in set(df["size"])], ordered=True)
    df["rung"] = pd.Categorical(df["rung"], [n for n in ORDER if n in set(df["rung"])], ordered=True)
    df = df.sort_values(["size", "context", "rung"]).reset_index(drop=True)
    by_point = {(str(r["size"]), r["context"], str(r["rung"])): r for _, r in df.iterrows()}

    def ran(point: tuple, rung: str | None) -> pd.Series | None:
        row = by_point.get((*point, rung))
        return row if row is not None and row["status"] == "ok" else None

    checked = []
    for _, row in df.iterrows():
        point, ok = (str(row["size"]), row["context"]), row["status"] == "ok"
        checked.append(_checked(row, ran(point, REFERENCE) if ok else None,
                                ran(point, rungs.previous(str(row["rung"]))) if ok else None, records))
    return pd.concat([df, pd.DataFrame(checked, index=df.index)], axis=1)


def _checked(row: pd.Series, ref: pd.Series | None, prev: pd.Series | None, records: list[dict]) -> dict:
    """``row`` (a step that ran, or None's) against fp32 eager's at its point (``ref``: its losses at
    every step both kept, its first gradients' worst group) and against the rung before it (``prev``:
    the step and peak memory, judged beyond the spread or not); NaN or None where either did not run."""
    out = {"loss_rel_diff": math.nan, "loss_ok": None, "loss_steps": 0, "grad_rel_error": math.nan,
           "grad_group": None, "grad_ok": None, "delta_ms": math.nan, "delta_pct": math.nan,
           "delta_peak_gib": math.nan, "delta_spread": None, "delta_low_ms": math.nan, "delta_high_ms": math.nan,
           "delta_alternates": False}
    if ref is not None:
        # every step both kept: the first alone where either record holds no more
        pairs = list(zip(row["losses"], ref["losses"]))
        diff = max(abs(a - b) / abs(b) for a, b in pairs)
        out |= {"loss_rel_diff": diff, "loss_ok": bool(diff <= LOSS_RTOL), "loss_steps": len(pairs)}
    if errors := row["gradient_rel_error"]:     # none for the reference itself
        worst = max(errors, key=errors.get)
        out |= {"grad_rel_error": float(errors[worst]), "grad_group": worst,
                "grad_ok": bool(errors[worst] <= GRAD_RTOL)}
    if prev is not None:
        judged = judge(records[int(row["record"])], records[int(prev["record"])])   # beyond the spread?
        out |= {"delta_ms": row["median_ms"] - prev["median_ms"],
                "delta_pct": row["median_ms"] / prev["median_ms"] - 1,
                "delta_peak_gib": row["peak_gib"] - prev["peak_gib"], "delta_spread": judged.verdict,
                "delta_low_ms": judged.low, "delta_high_ms": judged.high,
                # the verdict involves a step that alternates between two times
                "delta_alternates": row["modes"] is not None or prev["modes"] is not None}
    # a rung that computes something else is flagged and not ranked; None: nothing could be checked
    lo, go = out["loss_ok"], out["grad_ok"]
    out["computes_ok"] = None if lo is None and go is None else (lo is not False and go is not False)
    return out


def _finite(value: float) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


@dataclass(frozen=True)
class Against:
    """The top rung of a point against another entrant there (an anchor, or an ``--elsewhere`` rung):
    the judge's ratio of their steps per round of their job (``spread.judge``), its interval (None
    where none was measured), its verdict, the rounds and those set aside; ``modes``: the two times
    the other's step alternates between, where it does."""
    rung: str
    anchor: bool
    ms: float
    modes: TwoModes | None
    difference: float | None
    low: float | None
    high: float | None
    verdict: str
    rounds: int
    set_aside: int


def against(top, other, records: list[dict]) -> Against:
    """``top``'s step over ``other``'s (two rows of the frame), judged."""
    v = judge(records[int(top["record"])], records[int(other["record"])], ratio=True)
    return Against(str(other["rung"]), bool(other["anchor"]), float(other["median_ms"]), other["modes"],
                   _finite(v.difference),
                   _finite(v.low), _finite(v.high), v.verdict, v.rounds, v.set_aside)


@dataclass(frozen=True)
class Speedup:
    """fp32 eager's step over the top rung's, per round of their job (``spread.judge``): how many
    times faster the top rung is, with the interval and verdict ("higher": fp32 eager slower beyond
    the spread, so the top rung faster; a ratio of medians would claim a speed-up no judge had seen)."""
    times: float | None
    low: Unread[float | None]       # the interval and rounds behind the verdict, for tests
    high: Unread[float | None]
    verdict: str
    rounds: Unread[int]


def speedup(top, reference, records: list[dict]) -> Speedup:
    v = judge(records[int(reference["record"])], records[int(top["record"])], ratio=True)
    return Speedup(_finite(v.difference), _finite(v.low), _finite(v.high), v.verdict, v.rounds)


def _step_cell(r) -> str:
    if r["status"] != "ok":
        return r["status"].upper()
    if (modes := r["modes"]) is not None:       # the median lies between the two times or hides one: both are given
        return f"alternates {modes.low_ms:.2f} / {modes.high_ms:.2f} (median {r['median_ms']:.2f})"
    return f"{r['median_ms']:.2f} ± {r['std_ms']:.2f}"


def _at_each_mode(r, at_median: float, of_ms, fmt: str) -> str:
    """A rate of the step: ``at_median``, or for a step that alternates between two times, its value
    at each (``of_ms``: the rate at a step of so many ms); empty where there is none (no peak, no step)."""
    if math.isnan(at_median):
        return ""
    if (modes := r["modes"]) is not None:
        return f"{format(of_ms(modes.low_ms), fmt)} / {format(of_ms(modes.high_ms), fmt)}"
    return cell(at_median, fmt)


def display_table(df: pd.DataFrame) -> pd.DataFrame:
    """The ladder people read: one row per size, context and rung (anchors last), failures spelled out."""
    out = pd.DataFrame({
        "size": df["size"].astype(str), "context": df["context"], "rung": df["rung"].astype(str),
        "step (ms)": [_step_cell(r) for _, r in df.iterrows()],
        "min–max (ms)": [f"{r['min_ms']:.2f}–{r['max_ms']:.2f}" if r["status"] == "ok" else "" for _, r in df.iterrows()],
        "Δ vs rung before (ms)": [cell(v, "+.2f") for v in df["delta_ms"]],
        "Δ (%)": [cell(100 * v, "+.1f") for v in df["delta_pct"]],
        "Δ interval (ms)": [f"{lo:+.2f} to {hi:+.2f}" if not math.isnan(lo) else "" for lo, hi in
                            zip(df["delta_low_ms"], df["delta_high_ms"])],
        "Δ verdict": [as_time(v) + (" (a step alternates between two times)" if alternates else "")
                      if isinstance(v, str) else "" for v, alternates in zip(df["delta_spread"], df["delta_alternates"])],
        "tokens/s": [_at_each_mode(r, r["tokens_per_s"], lambda ms, r=r: r["batch"] * r["context"] / (ms / 1e3), ",.0f")
                     for _, r in df.iterrows()],
        "MFU": [_at_each_mode(r, 100 * r["mfu"], lambda ms, r=r: 100 * utilisation(r["flops"], ms / 1e3, r["peak_flops"]),
                              ".1f") + (" %" if not math.isnan(r["mfu"]) else "") for _, r in df.iterrows()],
        "peak (GiB)": [cell(v, ".2f") for v in df["peak_gib"]],
        "Δ peak (GiB)": [cell(v, "+.2f") for v in df["delta_peak_gib"]],
        "first loss": [cell(v, ".4f") for v in df["loss"]],
        "vs fp32 losses": [cell(100 * v, ".4f") + (" %" if not math.isnan(v) else "") + (" (out)" if ok is False else "")
                           + (f" ({n} steps)" if n > 1 else "") for v, ok, n in zip(df["loss_rel_diff"], df["loss_ok"], df["loss_steps"])],
        # a row with no gradient check (fp32 itself, a rung that did not run) has no group: NaN in the frame
        "vs fp32 gradients": [cell(100 * v, ".2f") + (f" % ({group})" if isinstance(group, str) and group else "")
                              + (" (out)" if ok is False else "")
                              for v, group, ok in zip(df["grad_rel_error"], df["grad_group"], df["grad_ok"])],
        "note": [n if len(n) <= 120 else n[:117] + "..." for n in df["note"]],
    })
    return out


def plot_ladder(df: pd.DataFrame, path: Path) -> None:
    """One panel per size x context: a bar per rung (median, whiskers min to max), anchors beside in
    another colour, a step that alternates between two times marked at both (x); a rung that did not
    run is named on the axis with its status."""
    points = list(dict.fromkeys((str(r["size"]), int(r["context"])) for _, r in df.iterrows()))
    cols = max(1, len({c for _, c in points}))
    rows = max(1, math.ceil(len(points) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.6 * rows), squeeze=False)
    for ax in axes.flat[len(points):]:
        ax.axis("off")
    for ax, (size, context) in zip(axes.flat, points):
        part = df[df["label"] == f"{size} ctx {context}"]
        # a record that did not run has no time (NaN): no bar, no whiskers, its status on the axis
        labels = [rung if status == "ok" else f"{rung}\n({status})"
                  for rung, status in zip(part["rung"], part["status"])]
        heights = list(part["median_ms"])
        low = list((part["median_ms"] - part["min_ms"]).fillna(0.0))
        high = list((part["max_ms"] - part["median_ms"]).fillna(0.0))
        modes = [(i, ms) for i, m in enumerate(part["modes"]) if m is not None for ms in (m.low_ms, m.high_ms)]
        x = range(len(labels))
        bars = ax.bar(x, heights, color=["C1" if a else "C0" for a in part["anchor"]], yerr=[low, high], capsize=2)
        if modes:
            ax.scatter(*zip(*modes), marker="x", color="black", s=14, zorder=3)
        # Log time: fp32 eager's step is ~10x the others', and a linear axis flattens the few-percent
        # differences between the fast rungs and the anchors into one height; each bar carries its median.
        ax.set_yscale("log")
        ax.bar_label(bars, labels=[f"{h:.0f}" if h == h else "" for h in heights], fontsize=6, padding=2)
        ax.set_xticks(list(x), labels, rotation=60, ha="right", fontsize=7)
        ax.set(title=f"{size}, context {context}", ylabel="time per step (ms, median, log scale)")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("E1: one AdamW step per rung (blue: our ladder, each rung adds one technique; orange: anchors)",
                 fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)


@dataclass(frozen=True)
class Step:
    """One entrant's step at a point, as the section quotes it; its phases feed the gap (``gap``).
    ``modes``: the two times a step that alternates between them takes (its median stands for neither alone)."""
    rung: str
    ms: float
    mfu: float | None
    phases_ms: dict[str, float | None]
    modes: TwoModes | None


def _step(r) -> Step:
    return Step(str(r["rung"]), float(r["median_ms"]), _finite(r["mfu"]),
                {phase: _finite(r[f"{phase}_ms"]) for phase in PHASES}, r["modes"])


def _rankable(part: pd.DataFrame) -> pd.DataFrame:
    """Rows that ran and compute what fp32 eager computes (unchecked where fp32 eager did not run)."""
    return part[(part["status"] == "ok") & (part["computes_ok"] != False)]     # noqa: E712 - None: not checked


def height(name: str) -> float:
    """A rung's place up the ladder: its index, ``checkpointed`` just above the rung it builds on
    (it stands in for that rung where that one does not fit)."""
    if name == rungs.ONLY_WHEN_PREVIOUS_OOMS:
        return rungs.RUNG_NAMES.index(rungs.previous(name)) + 0.5
    return float(rungs.RUNG_NAMES.index(name))


def _top(part: pd.DataFrame) -> pd.Series | None:
    """The point's top rung: the highest rung of the ladder that ran and computes what fp32 eager computes."""
    ours = _rankable(part[~part["anchor"]])
    if not len(ours):
        return None
    return ours.loc[max(ours.index, key=lambda i: height(str(ours.at[i, "rung"])))]


@dataclass(frozen=True)
class NotRun:
    rung: str
    status: str
    note: str


@dataclass(frozen=True)
class Point:
    """One size x context: the top rung, the best anchor (the lowest median step: a choice, not a
    verdict), the top rung's speed-up over fp32 eager, the top rung against each ``--elsewhere`` rung
    and each anchor that ran there (``against``), the best anchor's entry there by its index
    (``top_vs_anchor``: ``vs_anchor``)."""
    size: Unread[str]
    context: Unread[int]
    label: str
    batch: int
    measured: Unread[list[str]]         # what the point measured: a skipped rung was not (an OOM was)
    top_rung: Step | None
    best_anchor: Step | None
    speedup_over_fp32: Speedup | None
    against: list[Against]
    top_vs_anchor: int | None
    not_ok: Unread[list[NotRun]]

    def vs_anchor(self) -> Against | None:
        """The top rung against the best anchor."""
        return None if self.top_vs_anchor is None else self.against[self.top_vs_anchor]


def points_summary(df: pd.DataFrame, records: list[dict], elsewhere: tuple[str, ...] = ()) -> list[Point]:
    """Per size x context, its ``Point``."""
    out = []
    for (size, context), part in df.groupby(["size", "context"], observed=True, sort=True):
        top = _top(part)
        anchors = _rankable(part[part["anchor"]])
        anchor = anchors.loc[anchors["median_ms"].idxmin()] if len(anchors) else None
        ref = part[(part["rung"] == REFERENCE) & (part["status"] == "ok")]
        others = [] if top is None else [
            against(top, r, records) for _, r in _rankable(part).iterrows()
            if str(r["rung"]) != str(top["rung"]) and (r["anchor"] or str(r["rung"]) in elsewhere)]
        best = next((i for i, a in enumerate(others) if anchor is not None and a.rung == str(anchor["rung"])), None)
        out.append(Point(
            str(size), int(context), part["label"].iloc[0], int(part["batch"].iloc[0]),
            [str(r["rung"]) for _, r in part.iterrows() if r["status"] != "skipped"],
            _step(top) if top is not None else None, _step(anchor) if anchor is not None else None,
            speedup(top, ref.iloc[0], records) if len(ref) and top is not None and top["rung"] != REFERENCE else None,
            others, best,
            [NotRun(str(r["rung"]), r["status"], r["note"]) for _, r in part[part["status"] != "ok"].iterrows()]))
    return out


@dataclass(frozen=True)
class Alternating:
    """A step whose timed steps fall in two clusters (``two_modes``): where, whose, its median and its
    timed steps."""
    label: str
    rung: str
    median_ms: float
    steps: int
    modes: TwoModes


def alternating(df: pd.DataFrame) -> list[Alternating]:
    ran = df[(df["status"] == "ok") & df["modes"].notna()]
    return [Alternating(r["label"], str(r["rung"]), float(r["median_ms"]), int(r["n"]), r["modes"])
            for _, r in ran.iterrows()]


@dataclass(frozen=True)
class Points:
    """Some points, and the rungs of the ladder they have (``scope``)."""
    points: list[str]
    rungs: list[str]


def scope(points: list[Point], goal_size: str, goal_context: int) -> list[Points]:
    """The points other than the goal's that lack a rung of the ladder the goal point has, grouped by
    the rungs they have: where each rung against the rung before it could not be judged."""
    goal = next((p for p in points if (p.size, p.context) == (goal_size, goal_context)), None)
    ladder = {n for n in (goal.measured if goal else []) if n in rungs.RUNG_NAMES}
    groups: dict[tuple, list[str]] = {}
    for p in points:
        have = tuple(n for n in p.measured if n in rungs.RUNG_NAMES)
        if p is not goal and not ladder <= set(have):
            groups.setdefault(have, []).append(p.label)
    return [Points(labels, list(have)) for have, labels in groups.items()]


@dataclass(frozen=True)
class Bought:
    """What one rung bought over the rung before it: medians over the points where both ran, at how
    many points the judge calls it faster, slower, within the spread or not settled, and at how many
    of those either step alternates between two times."""
    rung: str
    points: int
    median_delta_ms: float | None
    median_delta_pct: float | None
    faster_at: int
    slower_at: int
    within_spread_at: int
    not_settled_at: int
    median_delta_peak_gib: float | None
    alternating_at: int


def _median(values: pd.Series) -> float | None:
    return float(values.median()) if len(values) else None


def bought(df: pd.DataFrame) -> list[Bought]:
    """Per rung after the first, its ``Bought``."""
    out = []
    for name in rungs.RUNG_NAMES[1:]:
        part = df[(df["rung"] == name) & df["delta_ms"].notna()] if name in set(df["rung"].astype(str)) else df.iloc[:0]
        said = part["delta_spread"]
        out.append(Bought(name, int(len(part)), _median(part["delta_ms"]), _median(part["delta_pct"]),
                          int((said == "lower").sum()), int((said == "higher").sum()), int((said == WITHIN).sum()),
                          int((said == NOT_SETTLED).sum()), _median(part["delta_peak_gib"].dropna()),
                          int(part["delta_alternates"].sum())))
    return out


# The verdicts against the rung before, in the order the answer names the rungs that got them, each
# with the ``Bought`` field that counts it.
BOUGHT_AT = {"lower": "faster_at", WITHIN: "within_spread_at", "higher": "slower_at", NOT_SETTLED: "not_settled_at"}


def bought_verdicts(rows: list[Bought]) -> list[str]:
    """The verdicts of ``BOUGHT_AT`` some rung got at some point, in its order."""
    return [v for v, at in BOUGHT_AT.items() if any(getattr(b, at) for b in rows)]


def _part(low: float | None, high: float | None, target: float) -> str:
    """A goal's part from a judged ratio that must be at most ``target``: ``HOLDS`` where the whole
    interval is, ``MISSED`` where none of it is, else ``NOT_SETTLED`` (also where no interval was measured)."""
    if low is None or high is None:
        return NOT_SETTLED
    return HOLDS if high <= target else MISSED if low > target else NOT_SETTLED


@dataclass(frozen=True)
class MfuJudged:
    """The top rung's MFU against the goal's, judged per round: each round's step over the step the
    goal's MFU allows (``goal_ms``), by ``spread.judge_rounds`` (a ratio at most 1 is an MFU at least
    the goal's); the MFU and its interval follow from that ratio's."""
    goal_ms: float
    low: float | None
    high: Unread[float | None]
    rounds: int
    set_aside: Unread[int]
    mfu: float | None
    mfu_low: float | None
    mfu_high: float | None


def mfu_judged(record: dict, flops: float, peak_flops: float | None, target: float) -> MfuJudged | None:
    """The top rung's ``MfuJudged``; None where the card has no peak."""
    if not peak_flops:
        return None
    goal_ms = flops / (target * peak_flops) * 1e3
    per_round = round_samples(record)
    judged = judge_rounds(per_round, [[goal_ms]] * len(per_round), ratio=True)
    low, high = _finite(judged.low), _finite(judged.high)
    return MfuJudged(goal_ms, low, high, judged.rounds, judged.set_aside,
                     None if math.isnan(judged.difference) else target / judged.difference,
                     target / high if high else None, target / low if low else None)


@dataclass(frozen=True)
class Goal:
    """The issue's goal at one point: the top rung's step against the best anchor's (``ratio``: at
    most ``ratio_target``) and its MFU (``mfu``: at least ``mfu_target``). Each part ``HOLDS``, is
    ``MISSED`` or ``NOT_SETTLED`` (``_part``; None where it cannot be judged: no anchor, no peak).
    ``outcome``: ``HOLDS`` where a part holds, ``MISSED`` where every judged part is missed,
    ``NOT_MEASURED`` where no part can be judged, else ``NOT_SETTLED``."""
    size: str
    context: int
    ratio_target: float
    mfu_target: float
    point: int | None               # the goal point's index in the summary's ``points``
    ratio_part: str | None          # of the point's ``top_vs_anchor``
    mfu: MfuJudged | None
    mfu_part: str | None
    outcome: str


def goal_check(df: pd.DataFrame, records: list[dict], points: list[Point], size: str, context: int,
               ratio_target: float, mfu_target: float) -> Goal:
    point = next((p for p in points if p.size == size and p.context == context), None)
    ratio = ratio_part = mfu = mfu_part = None
    if point is not None and point.top_rung is not None:
        ratio = point.vs_anchor()
        ratio_part = _part(ratio.low, ratio.high, ratio_target) if ratio else None
        row = df[(df["size"].astype(str) == size) & (df["context"] == context)
                 & (df["rung"].astype(str) == point.top_rung.rung)].iloc[0]
        mfu = mfu_judged(records[int(row["record"])], row["flops"], row["peak_flops"], mfu_target)
        # a ratio at most 1: a step at most the one the goal's MFU allows
        mfu_part = _part(mfu.low, mfu.high, 1.0) if mfu else None
    parts = [p for p in (ratio_part, mfu_part) if p is not None]
    outcome = (NOT_MEASURED if not parts else HOLDS if HOLDS in parts
               else MISSED if all(p == MISSED for p in parts) else NOT_SETTLED)
    return Goal(size, context, ratio_target, mfu_target, None if point is None else points.index(point), ratio_part,
                mfu, mfu_part, outcome)


@dataclass(frozen=True)
class Gap:
    """Where the top rung's step goes at the goal point, by phase (the optimizer's elementwise work is
    time MFU does not count): its shares of the step; the step, its phases and MFU are the point's
    ``top_rung``'s."""
    rung: Unread[str]
    size: Unread[str]
    context: Unread[int]
    optimizer_ms: Unread[float]
    updates_in_backward: bool       # its updates ran inside the backward phase (training_step.adamw_in_backward)
    shares: dict[str, float]
    backward_over_forward: float | None
    matmul_backward_over_forward: int
    # backward against MATMUL_BACKWARD_OVER_FORWARD times the forward, per round (backward_vs_matmul)
    backward_vs_matmul: str = NOT_SETTLED


def backward_vs_matmul(record: dict | None) -> str:
    """The step's backward against ``MATMUL_BACKWARD_OVER_FORWARD`` times its forward, the judge's
    verdict on their ratio one round at a time (both phases of the same timed steps: paired);
    ``NOT_SETTLED`` where the record keeps no phases per round, or too few rounds."""
    if record is None:
        return NOT_SETTLED
    forward, backward = round_samples(record, "forward"), round_samples(record, "backward")
    times = [[MATMUL_BACKWARD_OVER_FORWARD * f for f in turn] for turn in forward]
    return judge_rounds(backward, times, ratio=True).verdict


def gap(point: Point | None, records: list[dict] = ()) -> Gap | None:
    if point is None or point.top_rung is None:
        return None
    best = point.top_rung
    phases = best.phases_ms
    if any(v is None for v in phases.values()):
        return None
    total = sum(phases.values())
    rung = rungs.BY_NAME.get(best.rung)
    record = next((r for r in records if r["status"] == "ok" and (r["params"].get("size"), r["params"].get("context"),
                                                                   r["params"].get("rung")) == (point.size, point.context, best.rung)), None)
    return Gap(best.rung, point.size, point.context, phases["optimizer"], bool(rung and rung.setup.adamw_in_backward),
               {k: v / total for k, v in phases.items()},
               phases["backward"] / phases["forward"] if phases["forward"] else None, MATMUL_BACKWARD_OVER_FORWARD,
               backward_vs_matmul(record))


# The optimizers that make one pass over those bytes (records' ``optimizer``); cs336_basics' AdamW
# makes several, so a floor of one pass would not be its limit.
ONE_PASS_ADAMWS = (rungs.FUSED_ADAMW, rungs.TRITON_ADAMW)


@dataclass(frozen=True)
class OptimizerFloor:
    """The time the gap's AdamW bytes take at the card's memory bandwidth, and its optimizer phase
    against it (``over_floor``). Where the updates ran inside backward (``in_backward``) they move the
    same bytes, but the optimizer phase holds none of them: ``over_floor`` is None, and the floor is
    time spent inside backward's."""
    billions: float
    gigabytes: float
    card: str
    bandwidth_tb_s: float
    floor_ms: float
    over_floor: float | None
    in_backward: bool = False


def optimizer_floor(gap_: Gap | None, records: list[dict]) -> OptimizerFloor | None:
    """How far from its own limit the part MFU does not count runs (datasheet bandwidth). None where
    the rung's AdamW is not one pass over its bytes. Where its updates ran inside backward they move
    the same bytes, so the floor stands, but the optimizer phase is empty and what the updates cost
    is hidden in backward's time: no phase to set against it."""
    if gap_ is None:
        return None
    for r in records:
        p = r["params"]
        if (p.get("size"), p.get("context"), p.get("rung")) == (gap_.size, gap_.context, gap_.rung):
            if not str(p.get("optimizer", "")).startswith(ONE_PASS_ADAMWS):
                return None
            card = BY_DEVICE_NAME.get(r["provenance"].get("gpu") or "")
            parameters = r["metrics"].get("parameters")
            if card is None or card.hbm_bandwidth is None or not parameters:
                return None
            floor_ms = adamw_floor_ms(parameters, card)
            return OptimizerFloor(parameters / 1e9, ADAMW_BYTES_PER_PARAMETER * parameters / 1e9, card.name,
                                  card.hbm_bandwidth / 1e12, floor_ms,
                                  None if gap_.updates_in_backward else gap_.optimizer_ms / floor_ms,
                                  gap_.updates_in_backward)
    return None


# What the compiled rung compiled, by the records' compile_mode (training_step.step: each block, or the model)
COMPILED_AS = {"blocks": "torch.compile of each transformer block", "model": "torch.compile of the whole model"}


def adds_as_run(rung: rungs.Rung, records: list[dict]) -> str:
    """What ``rung`` adds, in the words of this run: the compiled rung says what its records compiled."""
    if rung.name != "compiled":
        return rung.adds
    modes = {r["params"].get("compile_mode") for r in records if r["params"].get("rung") == rung.name}
    return COMPILED_AS.get(modes.pop(), rung.adds) if len(modes) == 1 else rung.adds


@dataclass(frozen=True)
class Adds:
    rung: str
    adds: str


@dataclass(frozen=True)
class OutOfTolerance:
    """A step whose losses or first gradients leave the tolerances: it computes something else."""
    size: str
    context: int
    rung: str
    rel_diff: float
    loss_out: bool
    grad_error: float | None
    grad_group: str | None
    grad_out: bool


@dataclass(frozen=True)
class WorstGradient:
    rel_error: float
    group: str
    rung: str
    size: str
    context: int


@dataclass(frozen=True)
class Checks:
    """What the steps compute against fp32 eager's (``training_step.check``), and the tolerances'
    grounds (the module's doc)."""
    loss_rtol: float
    loss_bf16_cpu_max: float
    loss_bf16_gpu_max: float
    loss_unmasked: list[float]
    loss_checked: int
    loss_unchecked: int
    loss_out_of_tolerance: list[OutOfTolerance]
    loss_max_rel_diff: float | None
    loss_steps_compared: int            # the first before any update, each later one after one more
    grad_rtol: float
    grad_bf16_gpu_max: float
    grad_unmasked: list[float]
    grad_checked: Unread[int]
    grad_max: WorstGradient | None


def checks(df: pd.DataFrame) -> Checks:
    ok = df[df["status"] == "ok"]
    checked = ok[ok["loss_ok"].notna() & (ok["rung"] != REFERENCE)]     # fp32 eager is the reference itself
    grads = checked[checked["grad_ok"].notna()]
    worst = grads.loc[grads["grad_rel_error"].idxmax()] if len(grads) else None
    steps = int(checked["loss_steps"].max()) if len(checked) else 0
    return Checks(
        LOSS_RTOL, LOSS_BF16_CPU_MAX, LOSS_BF16_GPU_MAX, list(LOSS_UNMASKED), int(len(checked)),
        int(ok["loss_ok"].isna().sum()),
        [OutOfTolerance(str(r["size"]), int(r["context"]), str(r["rung"]), float(r["loss_rel_diff"]),
                        r["loss_ok"] is False, None if r["grad_ok"] is None else float(r["grad_rel_error"]),
                        r["grad_group"], r["grad_ok"] is False)
         for _, r in checked[checked["computes_ok"] == False].iterrows()],     # noqa: E712
        float(checked["loss_rel_diff"].max()) if len(checked) else None, steps,
        GRAD_RTOL, GRAD_BF16_GPU_MAX, list(GRAD_UNMASKED), int(len(grads)),
        None if worst is None else WorstGradient(float(worst["grad_rel_error"]), str(worst["grad_group"]),
                                                 str(worst["rung"]), str(worst["size"]), int(worst["context"])))


@dataclass(frozen=True)
class E1Summary(Summary):
    ladder: list[Adds]
    anchors: list[Adds]
    batch: int | None
    warmup: int | None
    steps: int | None
    rounds: int | None
    jobs: int                           # one job per point, its rungs and anchors taking turns (training_step.ladder)
    min_rounds: int
    interval_level: float
    elsewhere: list[str]
    seed: int | None
    compile: list[str]
    checkpoint_groups: list[int]
    peaks: list[str]
    checks: Checks
    points: list[Point]
    # the steps that alternate between two times, and the rule that finds them (report.two_modes)
    alternating: list[Alternating]
    two_modes_rule: Rule
    partial_points: list[Points]
    bought: list[Bought]
    bought_verdicts: list[str]
    # the top rung against the best anchor, point by point, by the judge's verdict
    compared_points: int
    faster_than_anchor_at: list[str]
    slower_than_anchor_at: list[str]
    within_anchor_at: list[str]
    not_settled_anchor_at: list[str]
    alternating_anchor_at: list[str]    # of those, where either step alternates between two times
    goal: Goal
    gap: Gap | None
    optimizer_floor: OptimizerFloor | None
    missing: Missing
    profiles: list[Profile]
    kernel_comparison: KernelComparison | None


CONTRACTS = {"E1": E1Summary}


def summarize(df: pd.DataFrame, records: list[dict], goal_size: str, goal_context: int, goal_ratio: float,
              goal_mfu: float, elsewhere: tuple[str, ...] = (), planned: tuple[str, ...] = (),
              read: tuple[str, ...] = (), profiles: tuple[dict, ...] = ()) -> E1Summary:
    """The section's summary. ``planned``: every record the config's grid names, ``read``: the files
    ``records`` came from; ``profiles``: records of ``training_step.profile``, ours first, then the anchors."""
    points = points_summary(df, records, elsewhere)
    goal = goal_check(df, records, points, goal_size, goal_context, goal_ratio, goal_mfu)
    first = records[0]["params"] if records else {}
    compared = [p for p in points if p.top_vs_anchor is not None]

    def where(kind: str) -> list[str]:
        return [p.label for p in compared if p.vs_anchor().verdict == kind]

    goal_point = None if goal.point is None else points[goal.point]
    gap_ = gap(goal_point, records)
    floor = optimizer_floor(gap_, records)
    best_anchor = goal_point.best_anchor.rung if goal_point and goal_point.best_anchor else None
    judged = goal_point.vs_anchor() if goal_point else None
    unsettled = ((goal_size, goal_context, goal_point.top_rung.rung, judged.rung)
                 if judged and judged.verdict in (WITHIN, NOT_SETTLED) else None)
    comparison = kernel_comparison(list(profiles), gap_, floor, goal_mfu, best_anchor, unsettled)
    rows = bought(df)
    return E1Summary(
        provenance=run_provenance(records),
        ladder=[Adds(r.name, adds_as_run(r, records)) for r in rungs.LADDER],
        anchors=[Adds(r.name, r.adds) for r in rungs.ANCHORS],
        batch=first.get("batch"), warmup=first.get("warmup"), steps=first.get("steps"), rounds=first.get("rounds"),
        jobs=len({r["metrics"]["turns"]["job"] for r in records if (r["metrics"].get("turns") or {}).get("job")}),
        min_rounds=MIN_ROUNDS, interval_level=INTERVAL_LEVEL, elsewhere=list(elsewhere), seed=first.get("seed"),
        compile=sorted({f"{p['params']['compile_mode']} ({p['params']['compile_backend']})"
                        for p in records if p["params"].get("compiled")}),
        checkpoint_groups=sorted({p["params"]["checkpoint_group"] for p in records
                                  if p["params"].get("checkpointed") and p["status"] == "ok"}),
        peaks=sorted(set(df[df["status"] == "ok"]["peak_basis"])),
        checks=checks(df), points=points, alternating=alternating(df), two_modes_rule=RULE,
        partial_points=scope(points, goal_size, goal_context), bought=rows, bought_verdicts=bought_verdicts(rows),
        compared_points=len(compared), faster_than_anchor_at=where("lower"), slower_than_anchor_at=where("higher"),
        within_anchor_at=where(WITHIN), not_settled_anchor_at=where(NOT_SETTLED),
        alternating_anchor_at=[p.label for p in compared if p.top_rung.modes or p.best_anchor.modes],
        goal=goal, gap=gap_, optimizer_floor=floor,
        missing=missing(list(planned), list(read)), profiles=profile_summary(list(profiles)),
        kernel_comparison=comparison)


# A profile tells casts (kernels a cast op, ``aten::_to_copy``, launched: ``step_kernels.kind``) apart
# only where the profiler tied its kernels to the ops that launched them. The anchors' profiles on an
# H200 leave 0.2 to 0.5 % of their kernels tied to no op; a step replayed from CUDA graphs leaves all
# of them (the replay hides the ops), and its casts then count under the kind their names give. Above
# this share of its kernels tied to no op, a profile's casts are not attributable.
UNATTRIBUTED_MAX = 0.01
CAST = "cast"


def kernels_per_step(m: dict) -> float:
    return sum(m["count_per_step"]) / len(m["count_per_step"])


def kinds_ms(m: dict) -> dict[str, float | None]:
    """A profile's kernel time a step by kind, as ``step_kernels.kind`` classifies every row (a cast by
    its launching op, every other kernel by its name); the casts None where they are not attributable."""
    attributable = m["unattributed_per_step"] <= UNATTRIBUTED_MAX * kernels_per_step(m)
    return {k: None if k == CAST and not attributable else v["ms"] for k, v in m["kinds"].items()}


def profile_table(profiles: list[dict]) -> pd.DataFrame:
    """Kernel time per step by kind for each profiled rung (``training_step.profile``), its share of
    the kernels' time, and the kernels' busy time under the profiler beside the step timed without it
    (CUDA only: two measurements, so no share of one in the other); one row saying why where no
    profile ran."""
    def row(p: dict, kind: str, per_step: str, ms, share: str) -> dict:
        return {"point": f"{p['size']} ctx {p['context']}", "rung": p["rung"], "kind": kind,
                "per step": per_step, "ms per step": ms, "share of kernel time": share}

    rows = []
    for r in profiles:
        p, m = r["params"], r["metrics"]
        if r["status"] != "ok":
            rows.append(row(p, r["status"].upper(), "", None, r.get("reason") or ""))
            continue
        for kind, ms in kinds_ms(m).items():
            rows.append(row(p, kind, "", "", "not attributable") if ms is None else
                        row(p, kind, f"{m['kinds'][kind]['count']:.0f}", round(ms, 2),
                            f"{100 * ms / m['time_ms']:.1f} %" if m["time_ms"] else ""))
        busy = m.get("busy_ms")
        rows.append(row(p, "all (busy: kernels' union)", f"{kernels_per_step(m):.0f}",
                        round(busy if busy is not None else m["time_ms"], 2),
                        f"busy under the profiler; the step without it {m['step']['median']:.1f} ms"
                        if busy is not None else m["unit"]))
    if not rows:
        return pd.DataFrame({"(no rows)": ["no step of this run was profiled"]})
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class BusyVsStep:
    """A profiled rung's kernels' busy time a step beside its step timed without the profiler, in one
    process but not in turns: ``verdict``, ``ranges_apart``'s on the profiled steps' busy times against
    the timed steps' (``busy``, ``step``: lowest and highest), "higher" or "lower" only where the two
    ranges do not overlap."""
    verdict: str
    busy: list[float]
    step: list[float]


def busy_vs_step(m: dict) -> BusyVsStep | None:
    busy, step = m.get("busy_ms_per_step"), m["step"].get("samples")
    if m.get("busy_ms") is None or not busy or not step:
        return None
    ranges = [min(busy), max(busy)], [min(step), max(step)]
    return BusyVsStep(ranges_apart(*ranges), *ranges)


@dataclass(frozen=True)
class Profile:
    """What the section quotes of one profiled rung: ms per step by kind (``kinds_ms``: the casts None
    where not attributable), its kernels a step and those tied to no op, whether its step was replayed
    from CUDA graphs; the kernels' busy time under the profiler and the step timed without it in the
    same process (CUDA only), two measurements set side by side (``BusyVsStep``), not a share. For a
    profile that did not run, its status alone."""
    rung: str
    size: str
    context: int
    status: str
    graphed: bool
    unit: str | None = None
    kinds_ms: dict[str, float | None] | None = None
    kernels: float | None = None
    unattributed: float | None = None
    busy_ms: float | None = None
    step_ms: float | None = None
    busy_vs_step: BusyVsStep | None = None


def profile_summary(profiles: list[dict]) -> list[Profile]:
    out = []
    for r in profiles:
        p, m = r["params"], r["metrics"]
        which = (p["rung"], p["size"], p["context"], r["status"], bool(p.get("cuda_graphs")))
        if r["status"] != "ok":
            out.append(Profile(*which))
            continue
        busy, step = m.get("busy_ms"), m["step"]["median"]
        out.append(Profile(*which, m["unit"], kinds_ms(m), kernels_per_step(m), m["unattributed_per_step"],
                           busy, step, busy_vs_step(m)))
    return out


@dataclass(frozen=True)
class Across:
    """Ours against theirs where each number is one profiling process's and nothing pairs them: both
    numbers, how far apart, and ``verdict``, ``spread.across_processes``'s: "higher" or "lower" only
    beyond ``spread.HOST_SWING``, else ``NOT_SETTLED``, where the section sets the two side by side."""
    ours_ms: float
    theirs_ms: float
    ms: float
    verdict: str


def across(ours_ms: float, theirs_ms: float) -> Across:
    return Across(ours_ms, theirs_ms, abs(ours_ms - theirs_ms), across_processes(ours_ms, theirs_ms))


@dataclass(frozen=True)
class KernelsApart:
    """Ours against a profiled anchor at the same point, kernel kind by kind (ms per step, ours less
    theirs). Each side is one profiling process, so every direction between them is ``Across``'s: a
    kind's time, the kernels' busy time and the step are ordered only beyond ``swing``, the most two
    processes of one command differ by. The other kinds run the same kernels in both (GEMMs,
    elementwise): what they differ by is the processes' own variation, which the largest must clear
    twice to stand out, and it stands out only where its own direction is settled. Profiles of two
    commits were made in two sittings, maybe on two lent machines: their differences then also hold
    the machines' (``apart``). Where either side's casts are not attributable, the kinds that may hold
    them are compared as one (``casts_merged``, ``comparable``). ``goal_pair_unsettled``: the pair is
    the goal point's top rung and best anchor, whose steps the ladder's own job did not tell apart."""
    rung: str
    casts_merged: bool
    delta_ms: Unread[dict[str, float]]
    largest: str
    largest_by: Across
    others_max_abs_ms: float
    largest_stands_out: bool
    busy: Across | None
    step: Across
    swing: float
    commits: list[str]
    apart: bool
    goal_pair_unsettled: bool


# A profile without its busy time per step (``Bound.cut``): nothing to set against the goal's step.
NOT_KEPT = "not kept"


@dataclass(frozen=True)
class Bound:
    """The step the GEMMs as they run plus the optimizer at its bandwidth floor alone would take, the
    MFU that bounds, and against the step the goal's MFU allows, the room left for every other kernel
    beside what they take now (``rest_now_ms``: the profiled busy time's median less that bound) and
    the share of that which must go. Whether any must go is whether the kernels' busy time a step
    exceeds the goal's step: ``cut``, ``spread.ranges_apart``'s on the profiled steps' busy times
    (``busy``: lowest and highest) against the goal's step, "higher" only where every profiled step
    was busy longer, "lower" only where every one was busy shorter, ``NOT_SETTLED`` where they lie
    on both sides, ``NOT_KEPT`` where the profile kept no busy time per step."""
    ms: float
    mfu: float
    optimizer_floor_ms: float
    goal_mfu: float
    goal_ms: float
    room_ms: float
    rest_now_ms: float | None
    cut_share: float
    no_room: bool
    cut: str
    busy: list[float] | None
    # the updates ran beside backward (OptimizerFloor.in_backward): the bound adds their floor to the
    # GEMMs' time as though the two could not overlap
    in_backward: bool = False


@dataclass(frozen=True)
class KernelComparison:
    """At the profiled point, ours (the gap's rung where it was profiled, else the highest profiled
    rung of the ladder): the GEMM kernels' rate on the projections' closed-form FLOPs against the
    card's peak, the goal's ``Bound`` and ours against an anchor there, kind by kind."""
    rung: str
    gemm_tflops: float | None
    gemm_share_of_peak: float | None
    peak: str
    anchor: KernelsApart | None
    bound: Bound | None


# A kernel a cast op launched is, by its name, a copy: elementwise, or other (a memcpy). Where a
# profile's casts are not attributable they sit in those two kinds, so the three are set against
# the other profile's as one kind: one rule for both sides.
CASTS_BY_NAME = ("elementwise", "other")
MERGED = "elementwise, casts and other"


def comparable(ours: dict[str, float | None], theirs: dict[str, float | None]) -> tuple[dict, dict, bool]:
    """Two profiles' ``kinds_ms`` classified alike, and whether their casts had to be merged."""
    if ours[CAST] is not None and theirs[CAST] is not None:
        return ours, theirs, False

    def merged(kinds: dict[str, float | None]) -> dict[str, float]:
        out = {k: v for k, v in kinds.items() if k not in (CAST, *CASTS_BY_NAME)}
        return out | {MERGED: sum(kinds[k] or 0.0 for k in (CAST, *CASTS_BY_NAME))}
    return merged(ours), merged(theirs), True


def kernels_apart(ours: dict, anchor: dict, goal_pair_unsettled: bool = False) -> KernelsApart:
    m, a = ours["metrics"], anchor["metrics"]
    mine, theirs, casts_merged = comparable(kinds_ms(m), kinds_ms(a))
    delta = {k: mine[k] - theirs[k] for k in mine if k in theirs}
    largest = max(delta, key=lambda k: abs(delta[k]))
    others = max((abs(v) for k, v in delta.items() if k != largest), default=0.0)
    largest_by = across(mine[largest], theirs[largest])
    busy = across(m["busy_ms"], a["busy_ms"]) if m.get("busy_ms") is not None and a.get("busy_ms") is not None else None
    commits = [ours["provenance"].get("commit") or "unknown", anchor["provenance"].get("commit") or "unknown"]
    return KernelsApart(
        anchor["params"]["rung"], casts_merged, delta, largest, largest_by, others,
        largest_by.verdict != NOT_SETTLED and abs(delta[largest]) >= 2 * others, busy,
        across(m["step"]["median"], a["step"]["median"]), HOST_SWING, commits,
        ours["provenance"].get("commit") != anchor["provenance"].get("commit"), goal_pair_unsettled)


def kernel_comparison(profiles: list[dict], gap_: Gap | None, floor: OptimizerFloor | None, goal_mfu: float,
                      best_anchor: str | None = None, unsettled: tuple | None = None) -> KernelComparison | None:
    """The ``KernelComparison``: ours against ``best_anchor``'s profile where it was profiled, else the
    first anchor profiled there. The optimizer's floor (of the gap's rung) is used only where the
    gap is of the profiled rung and point. ``unsettled``: the goal point's (size, context, top rung,
    best anchor) where the ladder's job did not tell the two steps apart."""
    ok = [r for r in profiles if r["status"] == "ok"]
    rungs_profiled = [r for r in ok if not r["params"]["anchor"]]
    ours = next((r for r in rungs_profiled if gap_ is not None and (r["params"]["rung"], r["params"]["size"],
                 r["params"]["context"]) == (gap_.rung, gap_.size, gap_.context)), None) \
        or max(rungs_profiled, key=lambda r: ORDER.index(r["params"]["rung"]), default=None)
    if ours is None:
        return None
    p, m = ours["params"], ours["metrics"]
    size = ModelSize(p["d_model"], p["d_ff"], p["num_layers"], p["num_heads"])
    flops = model_step_flops_parts(size, batch=p["batch"], context=p["context"], mode="train-step",
                                   vocab_size=p.get("vocab_size", VOCAB_SIZE))
    total = sum(flops.values())
    card = peak(ours["provenance"].get("gpu"), p["precision"], p.get("float32_matmul_precision"))
    # The GEMM kernels run the projections alone where attention runs in its own kernels (naive
    # attention's products are GEMMs too); CPU operators have no peak to set them against.
    gemm_ms = m["kinds"]["GEMM"]["ms"] if card.flops and p["attention"] != "naive" else None
    bound = None
    same_point = gap_ is not None and (gap_.rung, gap_.size, gap_.context) == (p["rung"], p["size"], p["context"])
    if same_point and floor is not None and floor.floor_ms and gemm_ms:
        bound_ms = gemm_ms + floor.floor_ms
        goal_ms = total / (goal_mfu * card.flops) * 1e3
        room = goal_ms - bound_ms
        # every kernel but the GEMMs, the optimizer's floor counted as the optimizer's share
        rest = (m["busy_ms"] - bound_ms) if m.get("busy_ms") is not None else None
        # the share of the rest that must go (removed, fused or overlapped) for the goal's step, at the median
        cut = 1 - max(room, 0) / rest if rest and rest > max(room, 0) else 0.0
        # whether any must go: the profiled steps' busy times against the goal's step, a bare median
        # above it being no finding where some profiled steps were busy for less
        samples = m.get("busy_ms_per_step") or []
        busy = [min(samples), max(samples)] if samples else None
        verdict = ranges_apart(busy, [goal_ms, goal_ms]) if busy else NOT_KEPT
        bound = Bound(bound_ms, total / (bound_ms / 1e3) / card.flops, floor.floor_ms, goal_mfu, goal_ms, room,
                      rest, cut, room <= 0, verdict, busy, floor.in_backward)
    anchors = [r for r in ok if r["params"]["anchor"]
               and (r["params"]["size"], r["params"]["context"]) == (p["size"], p["context"])]
    anchor = next((r for r in anchors if r["params"]["rung"] == best_anchor), anchors[0] if anchors else None)
    pair = anchor is not None and unsettled == (p["size"], p["context"], p["rung"], anchor["params"]["rung"])
    return KernelComparison(
        p["rung"], flops["projections"] / (gemm_ms / 1e3) / 1e12 if gemm_ms else None,
        utilisation(flops["projections"], gemm_ms / 1e3, card.flops) if gemm_ms else None, card.basis,
        kernels_apart(ours, anchor, pair) if anchor is not None else None, bound)


def _rung_of(name: str) -> str | None:
    """The rung of a point's name ``<size>_ctx<context>_<rung>`` (None for another name)."""
    parts = name.split("_", 2)
    return parts[2] if len(parts) == 3 and parts[1].startswith("ctx") else None


@dataclass(frozen=True)
class Missing:
    """The points the config's grid names (``planned`` of them) that the run has no record of
    (``count``), named briefly: the rungs it has no point of at all (a rung added after the run),
    then the other points by name."""
    planned: int
    count: int
    points: list[str]
    rungs: list[str]


def missing(planned: list[str], read: list[str]) -> Missing:
    """``planned``: the records the grid names, ``read``: those the run has (``<size>_ctx<context>_<rung>``)."""
    names = [Path(p).stem for p in planned]
    lacking = [n for n in names if n not in {Path(r).stem for r in read}]
    by_rung: dict[str, list[str]] = {}
    for name in names:
        if (rung := _rung_of(name)) is not None:
            by_rung.setdefault(rung, []).append(name)
    whole = [rung for rung, of in by_rung.items() if set(lacking).issuperset(of)]
    return Missing(len(names), len(lacking), [n for n in lacking if _rung_of(n) not in whole], whole)


def apart(df: pd.DataFrame) -> list[str]:
    """The points whose steps that ran come from more than one job, or from none: the section words
    every comparison at a point as its entrants' turns in one job (``training_step.ladder``)."""
    ran = df[df["status"] == "ok"]
    jobs = ran.groupby("label", sort=False)["job"].agg(lambda j: (j.nunique(), j.isna().any()))
    return [label for label, (n, none) in jobs.items() if n > 1 or none]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.report.e1", description=__doc__.split("\n\n")[0])
    p.add_argument("--records", nargs="+", required=True)
    p.add_argument("--goal-size", required=True, choices=list(MODEL_SIZES))
    p.add_argument("--goal-context", required=True, type=int)
    p.add_argument("--goal-ratio", required=True, type=float,
                   help="the most the goal allows the top rung's step over the best anchor's, 0.85 = 0.85x")
    p.add_argument("--goal-mfu", required=True, type=float, help="the MFU the goal asks for, 0.55 = 55 %%")
    p.add_argument("--elsewhere", nargs="*", default=[], choices=list(rungs.RUNG_NAMES), metavar="RUNG",
                   help="the rungs the grid measures away from the goal point: the top rung is set against them "
                        "(and against every anchor) at every point")
    p.add_argument("--out-dir", required=True, type=Path)
    p.add_argument("--profiles", nargs="*", default=[], help="records of training_step.profile")
    p.add_argument("--planned", nargs="*", default=[],
                   help="every record the config's grid names: those absent from --records are listed as "
                        "not measured in this run (a rebuild from a run that was cut off, or predates a point)")
    args = p.parse_args(argv)
    if not 0 < args.goal_mfu <= 1:
        p.error(f"--goal-mfu is a share between 0 and 1, got {args.goal_mfu}")
    if args.goal_ratio <= 0:
        p.error(f"--goal-ratio is a ratio of step times, above 0, got {args.goal_ratio}")
    records = load_records(args.records)
    df = records_frame(records)
    if split := apart(df):
        raise SystemExit(f"E1 report: the steps at {', '.join(split)} were not measured in one job each; "
                         "measure those points again (remove their records) so that their entrants take turns")
    write_table(display_table(df), args.out_dir)
    plot_ladder(df, args.out_dir / "ladder.png")
    # ours first, then the anchors, in the ladder's order, whatever order the files came in
    profiles = sorted(load_records(args.profiles), key=lambda r: ORDER.index(r["params"]["rung"])
                      if r["params"].get("rung") in ORDER else len(ORDER))
    write_table(profile_table(profiles), args.out_dir, "kernels")
    contract.write(args.out_dir / "summary.json", summarize(
        df, records, args.goal_size, args.goal_context, args.goal_ratio, args.goal_mfu, tuple(args.elsewhere),
        tuple(args.planned), tuple(args.records), tuple(profiles)))
    print(f"E1 report: {len(df)} records ({(df['status'] == 'ok').sum()} ok) -> {args.out_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
