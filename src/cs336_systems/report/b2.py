"""B2 report. (a) The B1 attention grid compiled against eager, from B1's records: a side-by-side
table of times and memory with the speed-ups, their range, and the judge's verdict per point
(``spread.judge``). (b) The whole model compiled against
eager, from the compile-bench records: a table per size and mode, a speed-up figure, and the numbers.

    python -m cs336_systems.report.b2 --rows eager_d16.json ... --whole-model small_forward.json ... --out-dir DIR

Either part may be absent (a run that measured only one of them): its table is then empty, and the
summary says so (``attention_points`` 0, ``whole_model`` null), so the writeup renders the other.
Outputs: table.csv/.md (a), whole_model.csv/.md and whole_model_speedup.png (b), summary.json.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from cs336_systems.report import b2_whole_model as whole
from cs336_systems.report.b1 import frame, out_of_memory_points
from cs336_systems.report.common import (load_record_lists, load_records, run_provenance, write_summary,
                                         write_table)
from cs336_systems.report.spread import MIN_ROUNDS, NOT_SETTLED, WITHIN, judge
from cs336_systems.report.summary_schemas import BOOL, INT, NUM, PROVENANCE, STR, arr, mapping, null, obj, opt, section

PHASES = ("forward_ms", "backward_ms")


def side_by_side(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (d, seq) measured both ways: eager and compiled times, eager ÷ compiled, memory."""
    eager = df[~df["compiled"]].set_index(["d", "seq"])
    compiled = df[df["compiled"]].set_index(["d", "seq"])
    rows = []
    for key in sorted(set(eager.index) | set(compiled.index)):
        e = eager.loc[key] if key in eager.index else None
        c = compiled.loc[key] if key in compiled.index else None
        row = {"d": key[0], "seq": key[1],
               "eager_status": None if e is None else e["status"], "compiled_status": None if c is None else c["status"]}
        for phase in PHASES:
            row[f"eager_{phase}"] = None if e is None else e[phase]
            row[f"compiled_{phase}"] = None if c is None else c[phase]
            both_ok = e is not None and c is not None and e["status"] == c["status"] == "ok"
            row[f"{phase[:-3]}_speedup"] = e[phase] / c[phase] if both_ok else None
        for name, part in (("eager", e), ("compiled", c)):
            row[f"{name}_MiB"] = None if part is None else part["measured_before_backward_MiB"]
            row[f"{name}_backward_peak_MiB"] = None if part is None else part["backward_peak_MiB"]
            row[f"{name}_forward_peak_MiB"] = None if part is None else part["forward_peak_MiB"]
            row[f"{name}_failed_during"] = None if part is None else part["failed_during"]
        rows.append(row)
    return pd.DataFrame(rows)


def spread(values: pd.Series) -> dict | None:
    values = values.dropna().astype(float)
    if not len(values):
        return None
    return {"median": float(values.median()), "min": float(values.min()), "max": float(values.max())}


SAME = 0.01     # memory readings within 1 % of each other count as the same


def memory_findings(table: pd.DataFrame) -> dict:
    """What the prose may say about memory, from the rows where both ran: whether the memory held
    for backward is the same, and how the forward and backward peaks compare (when the records
    have peaks), each as the compiled ÷ eager range."""
    both = table[(table["eager_status"] == "ok") & (table["compiled_status"] == "ok")]

    def ratio(column: str) -> dict | None:
        r = (both[f"compiled_{column}"].astype(float) / both[f"eager_{column}"].astype(float)).dropna()
        if not len(r):
            return None
        return {"min": float(r.min()), "max": float(r.max()), "points": int(len(r)),
                "same": bool(((r - 1).abs() <= SAME).all()), "lower": bool((r < 1 - SAME).all())}

    return {"held_for_backward": ratio("MiB"), "forward_peak": ratio("forward_peak_MiB"),
            "backward_peak": ratio("backward_peak_MiB")}


def fits_only_compiled(table: pd.DataFrame, records: list[dict]) -> list[dict]:
    """The points where eager ran out of memory and compiled ran: the pass eager failed in, recorded
    or inferred from the allocator's message by B1's rule (``b1.failed_pass``), what tensors held then,
    why it ran out (``b1.oom_cause``: a failure by fragmentation does not show that compiled needs
    less), and the compiled backward peak where the record has it."""
    eager_oom = {(p.d, p.seq): p for p in out_of_memory_points(frame(records), records) if p.variant == "eager"}
    found = []
    for r in table[(table["eager_status"] == "oom") & (table["compiled_status"] == "ok")].itertuples():
        oom = eager_oom.get((r.d, r.seq))
        found.append({"d": int(r.d), "seq": int(r.seq), "eager_failed_during": oom and oom.failed_during,
                      "eager_failed_during_known": oom and oom.failed_during_known,
                      "eager_held_MiB": oom and oom.allocator.get("allocated_MiB"),
                      "eager_cause": oom and oom.cause, "eager_needed_at_least_MiB": oom and oom.needed_at_least_MiB,
                      "predicted_forward_peak_MiB": oom and oom.predicted_forward_peak_MiB,
                      "compiled_backward_peak_MiB": None if pd.isna(r.compiled_backward_peak_MiB)
                      else float(r.compiled_backward_peak_MiB)})
    return found


def verdicts(table: pd.DataFrame, records: list[dict], phase: str = "forward") -> pd.DataFrame:
    """Per point both ran: compiled against eager in ``phase`` by ``spread.judge`` — "higher" where
    compiled is slower, "lower" where faster, ``WITHIN`` neither, ``NOT_SETTLED`` where the records
    cannot say (fewer rounds than the judge needs, or each variant from its own process: B1's rows
    from before they took turns) — and whether the two were ``paired`` in one job's turns."""
    by_key = {(r["params"]["d"], r["params"]["seq"], r["params"]["compiled"]): r for r in records if r["status"] == "ok"}
    rows = []
    for r in table[(table["eager_status"] == "ok") & (table["compiled_status"] == "ok")].itertuples():
        verdict = judge(by_key[(r.d, r.seq, True)], by_key[(r.d, r.seq, False)], phase)
        rows.append({"d": r.d, "seq": r.seq, "verdict": verdict.verdict, "paired": verdict.paired})
    return pd.DataFrame(rows, columns=["d", "seq", "verdict", "paired"])


def summarize(table: pd.DataFrame, records: list[dict]) -> dict:
    longest_both = table.dropna(subset=["forward_speedup"]).sort_values(["seq", "d"]).tail(1)
    judged = table.merge(verdicts(table, records), on=["d", "seq"])
    losses = judged[judged["verdict"] == "higher"]
    wins = judged[judged["verdict"] == "lower"]
    unsettled = judged["verdict"] == NOT_SETTLED
    return {
        "memory": memory_findings(table),
        # how the forward verdicts were reached: points both ran, how many paired in one job's turns
        # (the rest each from its own process), how many within the spread of their rounds, and how
        # many the records do not settle (unpaired, or paired in fewer rounds than the judge needs)
        "forward_judged": {"points": int(len(judged)), "paired": int(judged["paired"].sum()),
                           "unpaired": int(len(judged) - judged["paired"].sum()),
                           "within": int((judged["verdict"] == WITHIN).sum()), "slower": int(len(losses)),
                           "faster": int(len(wins)), "not_settled": int(unsettled.sum()),
                           "few_rounds": int((unsettled & judged["paired"].astype(bool)).sum()),
                           "min_rounds": MIN_ROUNDS},
        # where compiled loses (slower forward): its sequences, and the extra time per call there
        "forward_losses": {"seqs": sorted(int(s) for s in losses["seq"].unique()),
                           "extra_us": [float(1e3 * (r.compiled_forward_ms - r.eager_forward_ms)) for r in losses.itertuples()],
                           "all_shorter_than_wins": bool(len(losses)) and bool(len(wins))
                           and int(losses["seq"].max()) < int(wins["seq"].min())} if len(losses) else None,
        "provenance": run_provenance(records),
        "speedup": {phase[:-3]: spread(table[f"{phase[:-3]}_speedup"]) for phase in PHASES},
        "at_longest": None if longest_both.empty else {
            k: (float(v) if isinstance(v, float) else int(v)) for k, v in longest_both.iloc[0].items()
            if k in ("d", "seq", "forward_speedup", "backward_speedup", "eager_MiB", "compiled_MiB")}
        | {"eager_MiB_known": bool(longest_both.iloc[0]["eager_MiB"] == longest_both.iloc[0]["eager_MiB"])},
        **only_compiled(fits_only_compiled(table, records)),
    }


def only_compiled(points: list[dict]) -> dict:
    """``fits_only_compiled`` and what the section says of them as a whole: whether every eager
    failure was fragmentation, and how the pass it failed in is known (recorded by every record,
    inferred for every one, or some either way: the passes named where known)."""
    known = [p for p in points if p["eager_failed_during_known"] in ("recorded", "inferred")]
    how = {p["eager_failed_during_known"] for p in known}
    return {"fits_only_compiled": points,
            "only_compiled_fragmented": bool(points) and all(p.get("eager_cause") == "fragmentation" for p in points),
            "only_compiled_pass_known": ("recorded" if how == {"recorded"} and len(known) == len(points) else
                                         "inferred" if how == {"inferred"} and len(known) == len(points) else
                                         "some" if known else None),
            # recorded ones first, then inferred, each pass once (the order the section names them in)
            "only_compiled_passes": list(dict.fromkeys(
                p["eager_failed_during"] for kind in ("recorded", "inferred") for p in known
                if p["eager_failed_during_known"] == kind))}


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


def attention_part(rows: list[dict], out_dir: Path) -> dict:
    """(a): the side-by-side table, and its numbers (empty when the run has no B1 rows)."""
    if not rows:
        write_table(pd.DataFrame(columns=A_COLUMNS), out_dir)
        return {"attention_points": 0, "speedup": None, "at_longest": None, **only_compiled([])}
    table = side_by_side(frame(rows))
    write_table(table[A_COLUMNS].round(3), out_dir)
    return {"attention_points": len(table), **summarize(table, rows)}


def whole_model_part(records: list[dict], out_dir: Path) -> dict | None:
    """(b): the whole-model table, its figure, and its numbers (None without records)."""
    df = whole.frame(records) if records else None
    write_table(whole.empty_table() if df is None else whole.display_table(df), out_dir, "whole_model")
    whole.plot(df, out_dir / "whole_model_speedup.png")
    return None if df is None else whole.summarize(df)


def main(argv=None) -> int:
    rows, whole_records, out_dir = parse_args(argv)
    summary = attention_part(rows, out_dir)
    summary["provenance"] = run_provenance(rows + whole_records)
    summary["whole_model"] = whole_model_part(whole_records, out_dir)
    write_summary(out_dir / "summary.json", {"provenance": summary.pop("provenance"), **summary})
    print(f"B2 report: {summary['attention_points']} (d, seq) points, {len(whole_records)} whole-model records"
          f" -> {out_dir}", file=sys.stderr)
    return 0


# What writeup/templates/sections/B2.md.j2 reads of this report's summary (report.summary_schemas).
SUMMARY_SCHEMAS: dict[str, dict] = {}

_RANGE = obj(max=NUM, median=NUM, min=NUM)
_AT_SIZE = obj(size=STR, speedup=NUM)
_PEAK = obj(lower=null(BOOL), max=NUM, min=NUM, same=null(BOOL))
_BACKWARD_PEAK = obj(lower=null(BOOL), max=NUM, min=NUM, points=INT, same=null(BOOL))
SUMMARY_SCHEMAS["B2"] = section(
    at_longest=null(obj(backward_speedup=NUM, compiled_MiB=NUM, d=INT, eager_MiB=NUM, eager_MiB_known=BOOL,
                        forward_speedup=NUM, seq=INT)),
    attention_points=opt(null(INT)),
    fits_only_compiled=opt(null(arr(obj(d=INT, eager_failed_during=null(STR),
                                        eager_failed_during_known=null(STR), eager_held_MiB=null(NUM),
                                        predicted_forward_peak_MiB=null(NUM), seq=INT)))),
    only_compiled_fragmented=BOOL,
    only_compiled_pass_known=null(STR),
    only_compiled_passes=arr(null(STR)),
    forward_judged=opt(null(obj(few_rounds=INT, min_rounds=INT, not_settled=INT, paired=null(INT), points=INT,
                                unpaired=INT, within=INT))),
    forward_losses=opt(null(obj(all_shorter_than_wins=null(BOOL), extra_us=arr(NUM), seqs=arr(INT)))),
    memory=opt(null(obj(backward_peak=null(_BACKWARD_PEAK), forward_peak=null(_PEAK),
                        held_for_backward=null(obj(max=NUM, min=NUM, points=INT, same=null(BOOL)))))),
    provenance=PROVENANCE,
    speedup=null(obj(backward=null(_RANGE), forward=null(_RANGE))),
    whole_model=opt(null(obj(batch=INT, best=obj(mode=STR, size=STR), both_ok=INT, compile=arr(STR),
                             compile_seconds=null(obj(max=NUM, min=NUM)), compiled_graphs=null(arr(INT)), context=INT,
                             fits_only_compiled=null(arr()), forward_and_backward_faster=BOOL,
                             in_turns=opt(null(INT)), not_in_turns=INT,
                             loss_checks=obj(checked=null(INT), failed=null(arr()), max_abs_diff=NUM, passed=INT,
                                             rtol=NUM), not_ok=null(arr()),
                             optimizer=opt(null(obj(compiled_faster=null(arr(STR)),
                                                    compiled_slower=null(arr(STR)), not_settled=arr(STR),
                                                    ratio=obj(max=NUM, min=NUM),
                                                    share_of_step=obj(max=NUM, min=NUM), within=null(arr(STR))))),
                             peak_memory=opt(null(obj(by_mode=mapping(obj(largest=obj(compiled_GiB=NUM, eager_GiB=NUM,
                                                                                      size=STR), max=NUM, min=NUM)),
                                                      only_with_backward=null(BOOL)))),
                             phase_speedup=mapping(_RANGE), points=INT, rounds=arr(INT),
                             size_trend=opt(null(mapping(obj(first=_AT_SIZE, largest_against_smallest=STR,
                                                             last=_AT_SIZE, trend=STR)))),
                             step_speedup=null(_RANGE), worst=obj(mode=STR, size=STR)))),
)


if __name__ == "__main__":
    sys.exit(main())
