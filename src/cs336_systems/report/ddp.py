"""C2–C8, C10–C12: the data-parallel training variants — one report per deliverable, each writing
its own folder: a table of the variants it discusses (one row per variant and precision), its
figures, and the summary its section quotes.

    python -m cs336_systems.report.ddp C8 --records results/RUN/C3/records/naive_fp32.json ... \
        --traces results/RUN/C3/traces/naive_fp32.json.gz ... --traced naive overlap \
        --c1-summary results/RUN/C1/summary.json --out-dir results/RUN/C8

Which variants each deliverable reads is the registry's (``deliverables``, as ``READS`` below); where their records live is
``cs336_systems.distributed.variants`` (each variant's own deliverable). Every section gets the same
opening (``build``: the setup, the rows it quotes, ``QUOTED``, and the steps it sets against each
other, ``COMPARED``); the rows and their paired comparisons are ``report.ddp_rows``'. A section with
more to say adds its part (``PARTS``): C6's timelines, C8's (``report.c8``), C11's memory and C12's
(``report.c12``). The summary's rows are the first precision's (fp32 where the run has it);
``by_precision`` holds the same rows for each.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from cs336_systems import deliverables
from cs336_systems.distributed import traces as stored_traces
from cs336_systems.distributed import variants
from cs336_systems.report import c8, c12, spread
from cs336_systems.report.common import load_records, run_provenance, write_summary, write_table
from cs336_systems.report.ddp_rows import (backward_waits, by_variant, is_bucket_size, memory_rows, naive_calls, no_rows,
                                           paid_per_call, paired_by_precision, record_difference, row_of, step_table,
                                           step_view, trace_label, versus)
from cs336_systems.report.ddp_traces import compute_gaps, plot_timelines
from cs336_systems.report.ddp_rows import (BY_PRECISION, BY_PRECISION_WITH_BASELINE, DIFFERENCE, ROW, SETUP, SPREAD,
                                           row_schema, versus_schema, waiting_row_schema, waits_schema)
from cs336_systems.report.summary_schemas import BOOL, INT, NUM, PROVENANCE, STR, arr, mapping, null, obj, opt, section

SECTIONS = tuple(deliverables.reported_by("cs336_systems.report.ddp"))
MEMORY_VARIANTS = deliverables.get("C11").variants

# The variants (registry names; bucketed-<MB> is every bucket size) whose records each deliverable's
# report reads, and whether it reads their traces and C1's fit: the registry says. None: every
# variant of the run.
READS: dict[str, tuple[str, ...] | None] = {ident: deliverables.get(ident).variants for ident in SECTIONS}
READS_TRACES = tuple(ident for ident in SECTIONS if deliverables.get(ident).traces)
READS_C1 = tuple(ident for ident in SECTIONS if "C1" in deliverables.get(ident).reads)

reads = deliverables.variants_read


def _named(**keys: str):
    """The rows a section quotes by name: summary key -> variant."""
    return lambda rows: {key: rows.get(variant) for key, variant in keys.items()}


def _c7(s: "Section") -> tuple[pd.DataFrame, dict]:
    """C7: whether the first precision has more than one bucket size to set side by side, and the
    range their waits after backward stay within."""
    waits = [r["comm_wait_ms"] for v, r in s.rows[s.first].items() if is_bucket_size(v) and r]
    return s.table, {"several_sizes": len(waits) > 1, "wait_range_ms": [min(waits), max(waits)] if waits else None}


def _c10(s: "Section") -> tuple[pd.DataFrame, dict]:
    """C10: the sharded step's median less overlap's (the first precision's), and the sharded
    optimizer phase against overlap's as the judge has it (``record_difference``)."""
    sharded, overlap = s.rows[s.first].get("overlap-sharded"), s.rows[s.first].get("overlap")
    if not sharded or not overlap:
        return s.table, {"sharded_minus_overlap": None}
    found = by_variant(s.records)[s.first]
    return s.table, {"sharded_minus_overlap": {
        "step_ms": sharded["step_ms"] - overlap["step_ms"],
        "optimizer": record_difference(found["overlap-sharded"], found["overlap"], "optimizer_ms")}}


# The rows each section quotes, from one precision's rows (variant -> row, None where it did not run).
QUOTED = {
    "C2": _named(naive="naive"),
    "C3": _named(naive="naive", torch_ddp="torch-ddp"),
    "C4": _named(naive="naive", flat="flat"),
    "C5": _named(overlap="overlap"),
    "C6": _named(naive="naive", flat="flat", overlap="overlap", torch_ddp="torch-ddp"),
    "C7": lambda rows: {"bucketed": [r for v, r in rows.items() if is_bucket_size(v) and r]},
    "C8": c8.quoted,
    "C10": _named(overlap="overlap", sharded="overlap-sharded"),
    "C11": _named(),
    "C12": _named(fsdp="fsdp", fsdp_bf16="fsdp-bf16", overlap="overlap", torch_ddp="torch-ddp"),
}

# The columns of the step table each section shows (ddp_rows.step_view); C8's is its variants table,
# C11 shows its memory table whole.
TABLE_VIEW = {"C3": step_view(), "C4": step_view(), "C6": step_view(), "C7": step_view("buckets"),
              "C8": step_view("buckets"), "C10": step_view("peak_GiB"), "C12": step_view("peak_GiB")}

# The steps each section's opening sets against each other: (variant, against), first precision.
COMPARED = {"C3": (("torch-ddp", "naive"),), "C4": (("flat", "naive"),),
            "C6": (("overlap", "naive"), ("overlap", "flat"), ("overlap", "torch-ddp")),
            "C10": (("overlap-sharded", "overlap"),), "C11": (("overlap-sharded", "overlap"),),
            "C12": (("fsdp", "overlap"), ("fsdp-bf16", "overlap"), ("fsdp", "torch-ddp"))}


@dataclass
class Section:
    """What a section's part works from: the records and their table, the rows per precision, the
    setup, C1's summary, the traces (keyed by ``trace_label``) and the summary built so far."""
    ident: str
    records: list[dict]
    table: pd.DataFrame
    rows: dict[str, dict[str, dict | None]]
    precisions: list[str]
    first: str
    setup: dict
    c1: dict | None
    per_call: dict[str, dict]
    traces: dict[str, list[dict]]
    traced: list[str]
    out: Path
    summary: dict


def _timelines(s: Section, fsdp: bool) -> dict:
    """C6 draws the variants it discusses, C12 the FSDP ones; the compute lane's gaps of each drawn
    trace (C12: of every trace it read)."""
    drawn = [trace_label(v, p) for p in s.precisions for v in s.traced if trace_label(v, p) in s.traces
             and (v.startswith("fsdp") if fsdp else variants.lookup(v).name in READS["C6"])]
    plot_timelines({v: s.traces[v] for v in drawn}, s.out / "timeline.png")
    return {"traced": drawn, "compute_gaps": {v: compute_gaps(s.traces[v]) for v in (drawn if not fsdp else s.traces)}}


def _c6(s: Section) -> tuple[pd.DataFrame, dict]:
    """The timelines, and overlap against naive phase by phase in the first precision: its backward
    (longer where the all-reduces share the GPU) and the wait it saves, each with its spread."""
    found = by_variant(s.records).get(s.first, {})
    naive, overlap = found.get("naive"), found.get("overlap")
    both = naive is not None and overlap is not None
    drawn = _timelines(s, fsdp=False)
    gaps = drawn["compute_gaps"]
    na, ov = gaps.get("naive"), gaps.get("overlap")
    return s.table, drawn | {
        "backward_vs_naive": record_difference(overlap, naive, "backward_ms") if both else None,
        "wait_saved": record_difference(naive, overlap, "comm_wait_ms") if both else None,
        # the traces show what overlapping is for: naive's compute stream idle longer, with a long gap
        "traces_show_naive_waiting": (na["idle_ms"] > ov["idle_ms"] and na["longest_gap_ms"] > 0.5
                                      and ov["longest_gap_ms"] < na["longest_gap_ms"]) if na and ov else None}


# Memory readings equal to this (GiB) are equal: a MiB.
SAME_MEMORY_GIB = 1 / 1024
# PyTorch DDP's extra memory is "the gradients' size" within this share of it.
GRADIENTS_MATCH = 0.02


def memory_readings(memory: list[dict]) -> dict:
    """C11's readings of rank 0's memory rows: the variants whose memory after the step differs from
    before it by more than a MiB (``checked``: some row has both readings), and PyTorch DDP's memory
    before the step beyond ours (overlap), with whether it is the gradients' size."""
    both = [m for m in memory if m.get("after_step_GiB") is not None]
    moved = [m["variant"] for m in both if abs(m["after_step_GiB"] - m["before_step_GiB"]) > SAME_MEMORY_GIB]
    rows = {m["variant"]: m for m in memory}
    torch_ddp, ours = rows.get("torch-ddp"), rows.get("overlap")
    extra = None
    if torch_ddp and ours and torch_ddp["before_step_GiB"] > ours["before_step_GiB"]:
        gib = torch_ddp["before_step_GiB"] - ours["before_step_GiB"]
        extra = {"GiB": gib, "is_gradients": abs(gib / ours["gradients_GiB"] - 1) < GRADIENTS_MATCH}
    sharded = rows.get("overlap-sharded")
    return {"memory_checked": bool(both), "moved_after_step": moved, "torch_ddp_extra": extra,
            # the sharded step less the unsharded (overlap) one, as the rows' medians stand
            "sharded_minus_overlap_ms": sharded["step_ms"] - ours["step_ms"] if sharded and ours else None}


def _c11(s: Section) -> tuple[pd.DataFrame, dict]:
    """The table every precision's memory rows; the summary (which the section reads by variant) the first's."""
    memory = memory_rows(s.records, MEMORY_VARIANTS)
    table = pd.DataFrame(memory) if memory else no_rows("no variant recorded its memory")
    first = [m for m in memory if m["precision"] == s.first]
    return table, {"memory": first} | memory_readings(first)


# FSDP's step against DDP's (overlap), phase by phase.
C12_PHASES = ("forward_ms", "backward_ms", "comm_wait_ms", "optimizer_ms")


def phases_against(fsdp: dict | None, ddp: dict | None) -> dict:
    """C12: FSDP's record against DDP's phase by phase (``record_difference``, None where either is
    missing), and whether they support the one reading C12 gives: a longer forward paid back by a
    shorter optimizer phase (each judged so), the steps judged the same within the spread."""
    if fsdp is None or ddp is None:
        return {"phases_vs_ddp": None, "optimizer_offsets_forward": False}
    phases = {p: record_difference(fsdp, ddp, p) for p in C12_PHASES}
    step = record_difference(fsdp, ddp)
    forward, optimizer = phases["forward_ms"], phases["optimizer_ms"]
    offsets = bool(step and forward and optimizer and step["verdict"] == spread.WITHIN and forward["sign"] == 1
                   and optimizer["sign"] == -1)
    return {"phases_vs_ddp": phases, "optimizer_offsets_forward": offsets}


def _c12(s: Section) -> tuple[pd.DataFrame, dict]:
    drawn = _timelines(s, fsdp=True)
    memory = [m for m in memory_rows(s.records, MEMORY_VARIANTS) if m["precision"] == s.first]
    found = by_variant(s.records).get(s.first, {})
    return s.table, drawn | phases_against(found.get("fsdp"), found.get("overlap")) | c12.part(
        s.records, s.rows, s.setup, s.c1, s.traces, s.traced, drawn["traced"], drawn["compute_gaps"], memory)


def _c8(s: Section) -> tuple[pd.DataFrame, dict]:
    return c8.part(s.records, s.table, s.precisions, s.first, s.setup, s.c1, s.per_call, s.traces, s.traced, s.out)


# What a section adds to the opening every section has: its table (the opening's, or its own) and
# more summary keys.
PARTS = {"C6": _c6, "C7": _c7, "C8": _c8, "C10": _c10, "C11": _c11, "C12": _c12}


def build(ident: str, records: list[dict], traces: dict[str, list[dict]], traced: list[str],
          c1: dict | None, out: Path) -> dict:
    """Write deliverable ``ident``'s table and figures into ``out``; return its summary. ``traces``
    is keyed by ``trace_label``."""
    if ident not in SECTIONS:
        raise ValueError(f"report.ddp writes {', '.join(SECTIONS)}, not {ident!r}")
    table = step_table(records)
    precisions = list(dict.fromkeys(table["precision"]))
    first = variants.DEFAULT_PRECISION if variants.DEFAULT_PRECISION in precisions else precisions[0]
    rows = {p: {v: row_of(table, v, p) for v in dict.fromkeys(table["variant"])} for p in precisions}
    paired = paired_by_precision(records)
    for p, found in rows.items():           # the writeup says what each overhead was set against
        for row in found.values():
            if row:
                row["overhead_paired"] = paired.get(p, False)
    # Every row that waits inside backward carries what its backward and step are against the others'.
    for p, found in backward_waits(records).items():
        for v, waits in found.items():
            if rows[p].get(v):
                rows[p][v]["inside_backward"] = waits
    params = records[0]["params"]
    setup = {k: params[k] for k in ("size", "context", "global_batch", "world_size", "backend", "warmup", "steps")}
    setup["rounds"] = params.get("rounds")          # None: one process per variant, before the rounds
    # whether the judge can settle anything from these rounds (it decides nothing from fewer)
    setup["min_rounds"] = spread.MIN_ROUNDS
    setup["judged"] = bool(setup["rounds"]) and setup["rounds"] >= spread.MIN_ROUNDS
    # A precision may run its own batch (config.yaml's DDP.global_batch says why): the setup line names it.
    setup["other_batches"] = {variants.precision_of(r): r["params"]["global_batch"] for r in records
                              if r["params"]["global_batch"] != setup["global_batch"]}
    fit = (c1 or {}).get("fits", {}).get(f"{setup['backend']}_x{setup['world_size']}")
    per_call = paid_per_call(records, fit)
    by_precision = {p: {"baseline": rows[p].get(variants.BASELINE)} | QUOTED[ident](rows[p]) for p in precisions}
    calls = naive_calls(setup["size"])
    summary = {"provenance": run_provenance(records), "setup": setup, "precisions": precisions,
               "first_precision": first, "only_fp32": precisions == ["fp32"], "paired": paired, "every_precision_paired": bool(paired) and all(paired.values()),
               **by_precision[first],
               "by_precision": {p: by_precision[p] for p in precisions if p != first},
               "naive_calls": calls, "per_call": per_call.get(first),
               # naive sends one all-reduce per gradient tensor after one call that agrees which exist
               "gradient_tensors": calls - 1,
               "warmup_and_steps": setup["warmup"] + setup["steps"],
               "versus": versus(records, COMPARED.get(ident, ()), first)}
    if ident in TABLE_VIEW:
        summary["table_view"] = TABLE_VIEW[ident]
    table_out = table
    if ident in PARTS:
        table_out, more = PARTS[ident](Section(ident, records, table, rows, precisions, first, setup, c1, per_call,
                                               traces, traced, out, summary))
        summary |= more
    write_table(table_out.round(3), out)
    return summary


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.report.ddp", description=__doc__.split("\n\n")[0])
    p.add_argument("deliverable", choices=SECTIONS)
    p.add_argument("--records", nargs="+", required=True)
    p.add_argument("--traces", nargs="*", default=[], help="gzipped Chrome traces written by train_bench")
    p.add_argument("--traced", nargs="*", default=[], help="variants whose trace the timeline shows")
    p.add_argument("--c1-summary", type=Path, help="C1's summary (its fitted o and w), for C8 and C12")
    p.add_argument("--out-dir", required=True, type=Path)
    args = p.parse_args(argv)
    if args.deliverable in READS_C1 and args.c1_summary is None:
        p.error(f"{args.deliverable} needs --c1-summary")
    records = load_records(args.records)
    traces = {}
    for path in args.traces:
        variant, intervals = stored_traces.read(path)
        precision = Path(path).name.removesuffix(".json.gz").rpartition("_")[2]
        if variant in args.traced:
            traces[trace_label(variant, precision if precision in variants.PRECISIONS else variants.DEFAULT_PRECISION)] = intervals
    c1 = json.loads(args.c1_summary.read_text()) if args.c1_summary else None
    args.out_dir.mkdir(parents=True, exist_ok=True)
    summary = build(args.deliverable, records, traces, args.traced, c1, args.out_dir)
    write_summary(args.out_dir / "summary.json", summary)
    print(f"{args.deliverable} report: {len(records)} variants -> {args.out_dir}", file=sys.stderr)
    return 0


# What writeup/templates/sections/<ID>.md.j2 reads of the summary this report writes for each of its
# sections (report.summary_schemas); the blocks they share are ddp_rows'.
SUMMARY_SCHEMAS: dict[str, dict] = {}
_OPENING = dict(first_precision=STR, only_fp32=BOOL, precisions=arr(STR), provenance=PROVENANCE)
_PHASE_DIFF = SPREAD

SUMMARY_SCHEMAS["C2"] = section(
    **_OPENING,
    by_precision=BY_PRECISION,
    naive=null(ROW),
    naive_calls=INT,
    gradient_tensors=INT,
    setup=SETUP,
)

SUMMARY_SCHEMAS["C3"] = section(
    **_OPENING,
    table_view=arr(STR),
    baseline=null(ROW),
    by_precision=BY_PRECISION_WITH_BASELINE,
    naive=null(row_schema(overhead_pct=opt(NUM))),
    naive_calls=INT,
    setup=SETUP,
    torch_ddp=null(row_schema(comm=null(NUM), inside=null(waits_schema()),
                              overhead_pct=opt(NUM))),
    versus=versus_schema("torch-ddp", "naive"),
)

SUMMARY_SCHEMAS["C4"] = section(
    **_OPENING,
    table_view=arr(STR),
    by_precision=BY_PRECISION,
    flat=null(obj(comm_wait_ms=NUM)),
    naive=null(obj(comm_wait_ms=NUM)),
    per_call=opt(null(obj(calls=obj(flat=INT, naive=INT), extra_passes_ms=NUM, grad_GB=NUM,
                          memory_GBps=null(NUM), o_low_ms=null(NUM), o_ms=NUM, waits=DIFFERENCE))),
    versus=versus_schema("flat", "naive"),
)

SUMMARY_SCHEMAS["C5"] = section(
    **_OPENING,
    by_precision=BY_PRECISION_WITH_BASELINE,
    overlap=null(ROW),
)

SUMMARY_SCHEMAS["C6"] = section(
    **_OPENING,
    table_view=arr(STR),
    baseline=null(obj(step_ms=NUM)),
    by_precision=BY_PRECISION_WITH_BASELINE,
    compute_gaps=obj(naive=opt(mapping(NUM)), overlap=opt(mapping(NUM))),
    naive=null(obj(backward_ms=NUM, comm_wait_ms=NUM, overhead_ms=opt(null(NUM)))),
    overlap=null(obj(backward_ms=NUM, comm_wait_ms=NUM, overhead_ms=opt(NUM), overhead_paired=opt(null(BOOL)))),
    torch_ddp=waiting_row_schema(waits_schema(reference=null(STR))),
    traced=null(arr(STR)),
    versus=obj(overlap=opt(mapping(DIFFERENCE))),
    backward_vs_naive=null(obj(high_ms=null(NUM), low_ms=null(NUM), ms=NUM, sign=INT)),
    wait_saved=null(obj(high_ms=null(NUM), low_ms=null(NUM), ms=NUM, sign=INT, verdict=STR,
                        less=obj(ms=NUM))),
    traces_show_naive_waiting=null(BOOL),
)

SUMMARY_SCHEMAS["C7"] = section(
    **_OPENING,
    table_view=arr(STR),
    bucketed=null(arr(obj(buckets=NUM, comm_wait_ms=NUM, step_ms=NUM, variant=STR))),
    several_sizes=BOOL,
    wait_range_ms=null(arr(NUM)),
)

SUMMARY_SCHEMAS["C8"] = section(
    **_OPENING,
    table_view=arr(STR),
    accuracy=null(arr(mapping())),
    accuracy_worst=null(obj(diff_over_update=null(NUM), weights_rel_diff=null(NUM))),
    against_overlap=opt(null(mapping())),
    best_bucket_size=opt(null(mapping())),
    beyond=arr(obj(variant=STR)),
    bucketed=arr(mapping()),
    casts_on_side_stream=opt(null(BOOL)),
    compute_gaps=null(mapping(mapping(NUM))),
    has_overhead_table=null(BOOL),
    kernel_time=opt(null(mapping(mapping(NUM)))),
    ladder=opt(null(arr(obj(below=STR, high_ms=null(NUM), low_ms=null(NUM), ms=NUM, precision=STR,
                            removed_pass_ms=null(NUM), rung=STR, sign=INT, verdict=STR)))),
    model=null(mapping()),
    others=obj({'torch-ddp': waiting_row_schema(waits_schema())}),
    overheads=mapping(obj(anchor_reaches_zero=BOOL, best=null(STR), ratio=null(NUM),
                          rows=mapping(SPREAD), verdict=STR)),
    paired=null(mapping(BOOL)),
    per_call=null(obj(calls=obj(naive=INT), o_high_ms=null(NUM))),
    across_nodes=opt(arr(obj(precision=STR, nodes=INT, hosts=arr(STR), ranks_per_node=null(INT)))),
)

SUMMARY_SCHEMAS["C10"] = section(
    **_OPENING,
    table_view=arr(STR),
    by_precision=BY_PRECISION,
    overlap=null(obj(step_ms=NUM)),
    setup=obj(world_size=INT),
    sharded=null(obj(step_ms=NUM)),
    sharded_minus_overlap=null(obj(optimizer=DIFFERENCE, step_ms=NUM)),
    versus=versus_schema("overlap-sharded", "overlap"),
)

SUMMARY_SCHEMAS["C11"] = section(
    memory=null(arr(obj(variant=STR))),
    memory_checked=BOOL,
    moved_after_step=arr(STR),
    sharded_minus_overlap_ms=null(NUM),
    warmup_and_steps=INT,
    torch_ddp_extra=null(obj(GiB=NUM, is_gradients=BOOL)),
    provenance=PROVENANCE,
    setup=obj(world_size=INT),
    versus=opt(versus_schema("overlap-sharded", "overlap")),
)

SUMMARY_SCHEMAS["C12"] = section(
    table_view=arr(STR),
    phases_vs_ddp=null(mapping(null(_PHASE_DIFF))),
    optimizer_offsets_forward=BOOL,
    compute_gaps=mapping(mapping(NUM)),
    fsdp=null(obj(step_ms=NUM)),
    fsdp_bf16=null(obj(step_ms=NUM)),
    fsdp_forward=opt(null(arr(obj(
        baseline_forward_ms=null(NUM),
        baseline_other_batch=opt(BOOL),
        baseline_precision=STR,
        baseline_variant=null(STR),
        beyond_bytes=opt(null(BOOL)),
        beyond_transfers=opt(null(BOOL)),
        bound_ms=opt(NUM),
        excess=opt(SPREAD),
        excess_ms=opt(NUM),
        forward_ms=NUM,
        gathered_GB=NUM,
        gathers=INT,
        precision=STR,
        step_bound_ms=opt(null(NUM)),
        transfer_ms=opt(NUM),
        variant=STR)))),
    memory=arr(obj(variant=STR)),
    overlap=null(obj(step_ms=NUM)),
    predicted_state_GiB=obj(fsdp=NUM, replicated=NUM, saved=NUM),
    provenance=PROVENANCE,
    saving=opt(null(obj(before_step_GiB=NUM, gradients_GiB=NUM, peak_GiB=NUM, predicted_GiB=NUM,
                        reconciled=null(BOOL), rise_GiB=obj(fsdp=NUM, overlap=NUM), rise_difference_GiB=NUM,
                        start_GiB=NUM, starts_GiB=obj(fsdp=NUM, overlap=NUM),
                        without_gradients_GiB=NUM))),
    setup=SETUP,
    torch_ddp=waiting_row_schema(waits_schema()),
    gap_labels=arr(STR),
    gap_rows=arr(STR),
    untraced_idle=opt(mapping(null(obj(beyond_transfers=BOOL, idle_ms=NUM, idle_share=NUM, mostly_profiler=null(BOOL),
                                       step_ms=NUM,
                                       traced_idle_ms=NUM)))),
    versus=versus_schema("fsdp", "overlap"),
)

if __name__ == "__main__":
    sys.exit(main())
