"""B2 report. (a) The B1 attention grid compiled against eager, from B1's records: a side-by-side
table of times and memory with the speed-ups, and their spread. (b), the whole model, comes from the
one-GPU profiling work and is not in this report yet.

    python -m cs336_systems.report.b2 --rows eager_d16.json compiled_d16.json ... --out-dir DIR
"""
from __future__ import annotations

import sys

import pandas as pd

from cs336_systems.report.b1 import frame
from cs336_systems.report.common import rows_report_args, run_provenance, write_summary, write_table

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
        row["eager_MiB"] = None if e is None else e["measured_before_backward_MiB"]
        row["compiled_MiB"] = None if c is None else c["measured_before_backward_MiB"]
        rows.append(row)
    return pd.DataFrame(rows)


def spread(values: pd.Series) -> dict | None:
    values = values.dropna().astype(float)
    if not len(values):
        return None
    return {"median": float(values.median()), "min": float(values.min()), "max": float(values.max())}


def summarize(table: pd.DataFrame, records: list[dict]) -> dict:
    longest_both = table.dropna(subset=["forward_speedup"]).sort_values(["seq", "d"]).tail(1)
    only_compiled = table[(table["eager_status"] == "oom") & (table["compiled_status"] == "ok")]
    return {
        "provenance": run_provenance(records),
        "speedup": {phase[:-3]: spread(table[f"{phase[:-3]}_speedup"]) for phase in PHASES},
        "at_longest": None if longest_both.empty else {
            k: (float(v) if isinstance(v, float) else int(v)) for k, v in longest_both.iloc[0].items()
            if k in ("d", "seq", "forward_speedup", "backward_speedup", "eager_MiB", "compiled_MiB")},
        "fits_only_compiled": [{"d": int(r.d), "seq": int(r.seq)} for r in only_compiled.itertuples()],
    }


def main(argv=None) -> int:
    records, out_dir = rows_report_args("cs336_systems.report.b2", __doc__, argv, rows_help="B1 record lists, eager and compiled")
    table = side_by_side(frame(records))
    write_table(table.round(3), out_dir)
    write_summary(out_dir / "summary.json", summarize(table, records))
    print(f"B2 report: {len(table)} (d, seq) points -> {out_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
