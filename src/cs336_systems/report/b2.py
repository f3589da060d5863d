"""B2 report. (a) The B1 attention grid compiled against eager, from B1's records: a side-by-side
table of times and memory with the speed-ups, their range, and the judge's verdict per point
(``spread.judge``). (b) The whole model compiled against
eager, from the compile-bench records: a table per size and mode, a speed-up figure, and the numbers.

    python -m cs336_systems.report.b2 --rows eager_d16.json ... --whole-model small_forward.json ... --out-dir DIR

Either part may be absent (a run that measured only one of them): its table is then empty, and the
summary says so (``attention_points`` 0, ``whole_model`` null), so the writeup renders the other.
Outputs: table.csv/.md and attention.png (a), whole_model.csv/.md and whole_model_speedup.png (b), summary.json.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from cs336_systems.report import b2_whole_model as whole
from cs336_systems.report import contract
from cs336_systems.report.b1 import OutOfMemory, frame, out_of_memory_points
from cs336_systems.report.b2_whole_model import Compared, Range, WholeModel, compared, spread
from cs336_systems.report.common import load_record_lists, load_records, plt, run_provenance, save_figure, write_table
from cs336_systems.report.contract import Summary, Unread
from cs336_systems.report.spread import MIN_ROUNDS, NOT_SETTLED, WITHIN, judge

PHASES = ("forward_ms", "backward_ms")


# each variant's columns in the side-by-side table, from B1's frame
SIDE = {"status": "status", "forward_ms": "forward_ms", "backward_ms": "backward_ms",
        "measured_before_backward_MiB": "MiB", "backward_peak_MiB": "backward_peak_MiB",
        "forward_peak_MiB": "forward_peak_MiB", "failed_during": "failed_during"}


def side_by_side(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (d, seq) measured either way: eager and compiled times, eager ÷ compiled, memory."""
    variants = {name: df[df["compiled"] == compiled].set_index(["d", "seq"])
                for name, compiled in (("eager", False), ("compiled", True))}
    rows = []
    for key in sorted(set(variants["eager"].index) | set(variants["compiled"].index)):
        row = {"d": key[0], "seq": key[1]}
        for name, part in variants.items():
            point = part.loc[key] if key in part.index else None
            row |= {f"{name}_{to}": None if point is None else point[column] for column, to in SIDE.items()}
        both_ok = row["eager_status"] == row["compiled_status"] == "ok"
        for phase in PHASES:
            row[f"{phase[:-3]}_speedup"] = row[f"eager_{phase}"] / row[f"compiled_{phase}"] if both_ok else None
        rows.append(row)
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Memory:
    held_for_backward: Compared | None
    forward_peak: Compared | None
    backward_peak: Compared | None


def memory_findings(both: pd.DataFrame) -> Memory:
    """What the prose may say about memory, from the rows where both ran (``both``): the memory held for
    backward, and the forward and backward peaks (when the records have peaks), compiled ÷ eager."""
    def ratio(column: str) -> Compared | None:
        r = (both[f"compiled_{column}"].astype(float) / both[f"eager_{column}"].astype(float)).dropna()
        return compared(r) if len(r) else None

    return Memory(ratio("MiB"), ratio("forward_peak_MiB"), ratio("backward_peak_MiB"))


@dataclass(frozen=True)
class OnlyCompiled:
    """A point where eager ran out of memory and compiled ran. The pass eager failed in the section
    words through ``only_compiled``'s ``only_compiled_passes`` and ``_pass_known``."""
    d: int
    seq: int
    eager_failed_during: Unread[str | None]
    eager_needed_at_least_MiB: float | None
    compiled_backward_peak_MiB: float | None


def fits_only_compiled(table: pd.DataFrame, ooms: list[OutOfMemory]) -> list[OnlyCompiled]:
    """The points where eager ran out of memory and compiled ran: the pass eager failed in, as its
    record names it, what the failing pass needed at least (what tensors held plus the request), and
    the compiled backward peak where the record has it."""
    eager_oom = {(p.d, p.seq): p for p in ooms if p.variant == "eager"}
    found = []
    for r in table[(table["eager_status"] == "oom") & (table["compiled_status"] == "ok")].itertuples():
        oom = eager_oom.get((r.d, r.seq))
        found.append(OnlyCompiled(
            int(r.d), int(r.seq), oom and oom.failed_during, oom and oom.needed_at_least_MiB,
            None if pd.isna(r.compiled_backward_peak_MiB) else float(r.compiled_backward_peak_MiB)))
    return found


@dataclass(frozen=True)
class ForwardJudged:
    """How the forward verdicts were reached: points both ran, how many paired in one job's turns
    (the rest each from its own process), how many within the spread of their rounds, and how
    many the records do not settle (unpaired, or paired in fewer rounds than the judge needs)."""
    points: int
    paired: int
    unpaired: int
    within: int
    slower: int
    faster: int
    not_settled: int
    few_rounds: int
    min_rounds: int


@dataclass(frozen=True)
class ForwardLosses:
    """Where compiled loses (slower forward): its sequences, and the extra time per call there."""
    seqs: list[int]
    extra_us: list[float]
    all_shorter_than_wins: bool


@dataclass(frozen=True)
class AtLongest:
    d: int
    seq: int
    forward_speedup: float
    backward_speedup: float
    eager_MiB: float
    compiled_MiB: float
    eager_MiB_known: bool


def summarize(table: pd.DataFrame, df: pd.DataFrame, records: list[dict]) -> dict:
    """Part (a)'s fields of the summary. Per point both ran, compiled's forward against eager's by
    ``spread.judge``: "higher" where compiled is slower, "lower" where faster, ``WITHIN`` neither,
    ``NOT_SETTLED`` where the records cannot say (fewer rounds than the judge needs, or each variant
    from its own process: B1's rows from before they took turns)."""
    by_key = {(r["params"]["d"], r["params"]["seq"], r["params"]["compiled"]): r for r in records if r["status"] == "ok"}
    both = table[(table["eager_status"] == "ok") & (table["compiled_status"] == "ok")]
    judged = [judge(by_key[(r.d, r.seq, True)], by_key[(r.d, r.seq, False)], "forward") for r in both.itertuples()]
    said = pd.Series([v.verdict for v in judged], index=both.index, dtype=object)
    paired = pd.Series([v.paired for v in judged], index=both.index, dtype=bool)
    losses, wins, unsettled = both[said == "higher"], both[said == "lower"], said == NOT_SETTLED
    at = both.dropna(subset=["forward_speedup"]).sort_values(["seq", "d"]).tail(1)
    at = None if at.empty else at.iloc[0]
    return {
        "memory": memory_findings(both),
        "forward_judged": ForwardJudged(
            len(both), int(paired.sum()), int(len(both) - paired.sum()), int((said == WITHIN).sum()), len(losses),
            len(wins), int(unsettled.sum()), int((unsettled & paired).sum()), MIN_ROUNDS),
        "forward_losses": ForwardLosses(
            sorted(int(s) for s in losses["seq"].unique()),
            [float(1e3 * (r.compiled_forward_ms - r.eager_forward_ms)) for r in losses.itertuples()],
            bool(len(wins)) and int(losses["seq"].max()) < int(wins["seq"].min()))
        if len(losses) else None,
        "speedup": {phase[:-3]: spread(table[f"{phase[:-3]}_speedup"]) for phase in PHASES},
        "at_longest": None if at is None else AtLongest(
            int(at["d"]), int(at["seq"]), float(at["forward_speedup"]), float(at["backward_speedup"]),
            float(at["eager_MiB"]), float(at["compiled_MiB"]), bool(not pd.isna(at["eager_MiB"]))),
        **only_compiled(fits_only_compiled(table, out_of_memory_points(df, records))),
    }


def only_compiled(points: list[OnlyCompiled]) -> dict:
    """``fits_only_compiled`` and what the section says of them as a whole: compiled's backward peak
    against what eager's failing pass needed at least (``only_compiled_memory``: "lower" at every one,
    "not lower" at some, None where the records lack either number at some), and whether every
    record names the pass eager failed in (``only_compiled_pass_known`` "recorded", the passes named
    each once; None where some record names none)."""
    passes = [p.eager_failed_during for p in points]
    recorded = bool(passes) and None not in passes
    pairs = [(p.compiled_backward_peak_MiB, p.eager_needed_at_least_MiB) for p in points]
    return {"fits_only_compiled": points,
            "only_compiled_memory": (None if not pairs or any(None in pair for pair in pairs) else
                                     "lower" if all(c < e for c, e in pairs) else "not lower"),
            "only_compiled_pass_known": "recorded" if recorded else None,
            "only_compiled_passes": list(dict.fromkeys(passes)) if recorded else []}


@dataclass(frozen=True)
class B2Summary(Summary):
    attention_points: int
    memory: Memory | None
    forward_judged: ForwardJudged | None
    forward_losses: ForwardLosses | None
    speedup: dict[str, Range | None] | None
    at_longest: AtLongest | None
    fits_only_compiled: list[OnlyCompiled]
    only_compiled_memory: str | None
    only_compiled_pass_known: str | None
    only_compiled_passes: list[str]
    whole_model: WholeModel | None


CONTRACTS = {"B2": B2Summary}


A_COLUMNS = ["d", "seq", "eager_status", "compiled_status", "eager_forward_ms", "compiled_forward_ms",
             "forward_speedup", "eager_backward_ms", "compiled_backward_ms", "backward_speedup", "eager_MiB",
             "compiled_MiB", "eager_backward_peak_MiB", "compiled_backward_peak_MiB"]


def parse_args(argv=None):
    """Both record sets, read and checked; a missing or malformed file stops with one line."""
    p = argparse.ArgumentParser(prog="python -m cs336_systems.report.b2", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", nargs="*", default=[], help="B1 record lists, eager and compiled (part a)")
    p.add_argument("--whole-model", nargs="*", default=[], help="compile-bench records, one per size and mode (part b)")
    p.add_argument("--out-dir", required=True, type=Path)
    args = p.parse_args(argv)
    if not args.rows and not args.whole_model:
        p.error("nothing to report: give --rows (B1 record lists), --whole-model (compile-bench records), or both")
    try:
        rows, whole_records = load_record_lists(args.rows), load_records(args.whole_model)
        whole.check_records(whole_records)
    except (OSError, ValueError) as exc:
        p.error(str(exc))
    return rows, whole_records, args.out_dir


def plot_attention(table: pd.DataFrame | None, path: Path) -> None:
    """(a) in one figure, one line per head dimension over the sequence length: eager ÷ compiled time
    forward (solid) and backward (dashed), left; compiled's backward peak ÷ eager's, right. A point
    where either variant did not run has no mark. Without rows, a figure that says so."""
    if table is None or table.empty:
        fig = plt.figure(figsize=(8, 1.6))
        fig.text(0.5, 0.5, "B2(a): no B1 rows in this run", ha="center", va="center", fontsize=10)
        save_figure(fig, path)
        return
    fig, (speed, memory) = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
    for i, (d, part) in enumerate(table.sort_values("seq").groupby("d")):
        speed.plot(part["seq"], part["forward_speedup"], marker="o", color=f"C{i}", label=f"d = {d}, forward")
        speed.plot(part["seq"], part["backward_speedup"], marker="s", ls="--", color=f"C{i}", label=f"d = {d}, backward")
        memory.plot(part["seq"], part["compiled_backward_peak_MiB"] / part["eager_backward_peak_MiB"], marker="o",
                    color=f"C{i}", label=f"d = {d}")
    speed.set(ylabel="eager ÷ compiled time (above 1: compiled faster)", title="time per call")
    memory.set(ylabel="compiled ÷ eager backward peak", title="peak memory during backward")
    for ax in (speed, memory):
        ax.set_xscale("log", base=2)
        ax.axhline(1.0, color="k", lw=0.8, ls="--")
        ax.set_xlabel("sequence length")
        ax.grid(alpha=0.3)
    speed.legend(fontsize=7, ncol=2)
    memory.legend(fontsize=7)
    save_figure(fig, path)


def attention_part(rows: list[dict], out_dir: Path) -> dict:
    """(a): the side-by-side table, its figure, and its numbers (none when the run has no B1 rows)."""
    if not rows:
        write_table(pd.DataFrame(columns=A_COLUMNS), out_dir)
        plot_attention(None, out_dir / "attention.png")
        return {"attention_points": 0, "memory": None, "forward_judged": None, "forward_losses": None,
                "speedup": None, "at_longest": None, **only_compiled([])}
    df = frame(rows)
    table = side_by_side(df)
    write_table(table[A_COLUMNS].round(3), out_dir)
    plot_attention(table, out_dir / "attention.png")
    return {"attention_points": len(table), **summarize(table, df, rows)}


def whole_model_part(records: list[dict], out_dir: Path) -> WholeModel | None:
    """(b): the whole-model table, its figure, and its numbers (None without records)."""
    df = whole.frame(records) if records else None
    write_table(whole.empty_table() if df is None else whole.display_table(df), out_dir, "whole_model")
    whole.plot(df, out_dir / "whole_model_speedup.png")
    return None if df is None else whole.summarize(df)


def main(argv=None) -> int:
    rows, whole_records, out_dir = parse_args(argv)
    summary = B2Summary(provenance=run_provenance(rows + whole_records), **attention_part(rows, out_dir),
                        whole_model=whole_model_part(whole_records, out_dir))
    contract.write(out_dir / "summary.json", summary)
    print(f"B2 report: {summary.attention_points} (d, seq) points, {len(whole_records)} whole-model records"
          f" -> {out_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
