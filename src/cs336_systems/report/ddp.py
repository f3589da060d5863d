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
from cs336_systems.report import c8, c12, contract, spread
from cs336_systems.report.common import load_records, run_provenance, write_table
from cs336_systems.report.contract import Summary
from cs336_systems.report.ddp_rows import (backward_waits, by_variant, global_batches, is_bucket_size, memory_rows,
                                           naive_calls, no_rows, paid_per_call, paired_by_precision, record_difference,
                                           row_of, step_table, step_view, trace_label, versus)
from cs336_systems.report.ddp_traces import LONG_GAP_MS, compute_gaps, plot_timelines
from cs336_systems.report.ddp_rows import (ByPrecision, Difference, Opening, Row, Setup, Versus,
                                           WaitingRow, WaitingStep)

SECTIONS = tuple(deliverables.reported_by("cs336_systems.report.ddp"))

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
    """C7: the first precision's bucket sizes, most buckets first; whether there is more than one to
    set side by side, the range their waits after backward lie in, and the step with the fewest
    buckets against the step with the most, as the judge has it (``record_difference``)."""
    sizes = sorted((r for v, r in s.rows[s.first].items() if is_bucket_size(v) and r),
                   key=lambda r: r["buckets"], reverse=True)
    waits = [r["comm_wait_ms"] for r in sizes]
    found = by_variant(s.records).get(s.first, {})
    ends = (record_difference(found[sizes[-1]["variant"]], found[sizes[0]["variant"]])
            if len(sizes) > 1 else None)
    return s.table, {"bucketed": sizes, "several_sizes": len(sizes) > 1,
                     "wait_range_ms": [min(waits), max(waits)] if waits else None, "fewest_vs_most": ends}


def _c10(s: "Section") -> tuple[pd.DataFrame, dict]:
    """C10: the sharded optimizer phase against overlap's (the first precision's) as the judge has it
    (``record_difference``)."""
    sharded, overlap = s.rows[s.first].get("overlap-sharded"), s.rows[s.first].get("overlap")
    if not sharded or not overlap:
        return s.table, {"sharded_optimizer": None}
    found = by_variant(s.records)[s.first]
    return s.table, {"sharded_optimizer": record_difference(found["overlap-sharded"], found["overlap"], "optimizer_ms")}


# The rows each section quotes, from one precision's rows (variant -> row, None where it did not run).
QUOTED = {
    "C2": _named(naive="naive"),
    "C3": _named(naive="naive", torch_ddp="torch-ddp"),
    "C4": _named(naive="naive", flat="flat"),
    "C5": _named(overlap="overlap"),
    "C6": _named(naive="naive", flat="flat", overlap="overlap", torch_ddp="torch-ddp"),
    "C7": _named(),                 # its bucket sizes, sorted, are its part's (_c7)
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
    setup, C1's fit for this backend and world size, and the traces (keyed by
    ``trace_label``)."""
    records: list[dict]
    table: pd.DataFrame
    rows: dict[str, dict[str, dict | None]]
    precisions: list[str]
    first: str
    setup: dict
    fit: dict | None
    per_call: dict[str, dict]
    traces: dict[str, list[dict]]
    traced: list[str]
    out: Path


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
        "traces_show_naive_waiting": traces_show_naive_waiting(na, ov) if na and ov else None}


def traces_show_naive_waiting(naive: dict, overlap: dict) -> bool:
    """Whether the traces show what overlapping is for: naive's compute stream idle longer than
    overlap's, with a gap over ``LONG_GAP_MS`` and a longer longest gap. Each is one traced step, with
    no spread to judge by, so "longer" holds only beyond what separate processes differ by
    (``spread.across_processes``)."""
    return (spread.across_processes(naive["idle_ms"], overlap["idle_ms"]) == "higher"
            and naive["longest_gap_ms"] > LONG_GAP_MS
            and spread.across_processes(naive["longest_gap_ms"], overlap["longest_gap_ms"]) == "higher")


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
    return {"memory_checked": bool(both), "moved_after_step": moved, "torch_ddp_extra": extra}


def _c11(s: Section) -> tuple[pd.DataFrame, dict]:
    """The table every precision's memory rows; the summary (which the section reads by variant) the first's."""
    memory = memory_rows(s.records, c12.MEMORY_VARIANTS)
    table = pd.DataFrame(memory) if memory else no_rows("no variant recorded its memory")
    first = [m for m in memory if m["precision"] == s.first]
    return table, {"memory": {m["variant"]: m for m in first}} | memory_readings(first)


def _c12(s: Section) -> tuple[pd.DataFrame, dict]:
    drawn = _timelines(s, fsdp=True)
    return s.table, drawn | c12.part(s, drawn["traced"], drawn["compute_gaps"])


# What a section adds to the opening every section has: its table (the opening's, or its own) and
# more summary keys.
PARTS = {"C6": _c6, "C7": _c7, "C8": c8.part, "C10": _c10, "C11": _c11, "C12": _c12}


def build(ident: str, records: list[dict], traces: dict[str, list[dict]], traced: list[str],
          c1: dict | None, out: Path) -> Summary:
    """Write deliverable ``ident``'s table and figures into ``out``; return its summary, the section's
    contract (``CONTRACTS``) filled from what this assembles. ``traces`` is keyed by ``trace_label``."""
    if ident not in SECTIONS:
        raise ValueError(f"report.ddp writes {', '.join(SECTIONS)}, not {ident!r}")
    table = step_table(records)
    precisions = list(dict.fromkeys(table["precision"]))
    first = variants.DEFAULT_PRECISION if variants.DEFAULT_PRECISION in precisions else precisions[0]
    rows = {p: {v: row_of(table, v, p) for v in dict.fromkeys(table["variant"])} for p in precisions}
    # Every row that waits inside backward carries what its backward and step are against the others'.
    for p, found in backward_waits(records).items():
        for v, waits in found.items():
            if rows[p].get(v):
                rows[p][v]["inside_backward"] = waits
    params = records[0]["params"]
    setup = {k: params[k] for k in ("size", "context", "global_batch", "world_size", "backend", "warmup", "steps")}
    setup["rounds"] = params["rounds"]
    # whether the judge can settle anything from these rounds (it decides nothing from fewer)
    setup["min_rounds"] = spread.MIN_ROUNDS
    setup["judged"] = setup["rounds"] >= spread.MIN_ROUNDS
    # A precision may run its own batch (config.yaml's DDP.global_batch says why): the setup line names it.
    setup["other_batches"] = {variants.precision_of(r): r["params"]["global_batch"] for r in records
                              if r["params"]["global_batch"] != setup["global_batch"]}
    fit = (c1 or {}).get("fits", {}).get(f"{setup['backend']}_x{setup['world_size']}")
    per_call = paid_per_call(records)
    by_precision = {p: {"baseline": rows[p].get(variants.BASELINE)} | QUOTED[ident](rows[p]) for p in precisions}
    calls = naive_calls(setup["size"])
    summary = {"provenance": run_provenance(records), "setup": setup, "precisions": precisions,
               "first_precision": first, "only_fp32": precisions == ["fp32"], "paired": paired_by_precision(records),
               "global_batches": global_batches(records),
               **by_precision[first],
               "by_precision": {p: by_precision[p] for p in precisions if p != first},
               "naive_calls": calls, "per_call": per_call.get(first),
               # naive sends one all-reduce per gradient tensor after one call that agrees which exist
               "gradient_tensors": calls - 1,
               "versus": versus(records, COMPARED.get(ident, ()), first)}
    if ident in TABLE_VIEW:
        summary["table_view"] = TABLE_VIEW[ident]
    table_out = table
    if ident in PARTS:
        table_out, more = PARTS[ident](Section(records, table, rows, precisions, first, setup, fit, per_call,
                                               traces, traced, out))
        summary |= more
    write_table(table_out.round(3), out)
    return contract.fill(CONTRACTS[ident], summary, f"{ident}'s summary")


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
    contract.write(args.out_dir / "summary.json", summary)
    print(f"{args.deliverable} report: {len(records)} variants -> {args.out_dir}", file=sys.stderr)
    return 0


# What each section's summary holds (report.contract): every key its template reads, filled from the
# mapping ``build`` assembles; the blocks several sections share are ddp_rows', C8's and C12's their own.
@dataclass(frozen=True, kw_only=True)
class C2Summary(Opening):
    naive: Row | None
    naive_calls: int
    gradient_tensors: int
    by_precision: ByPrecision


@dataclass(frozen=True, kw_only=True)
class C3Summary(Opening):
    table_view: list[str]
    baseline: Row | None
    naive: Row | None
    torch_ddp: WaitingRow | None
    naive_calls: int
    versus: Versus
    by_precision: ByPrecision


@dataclass(frozen=True, kw_only=True)
class PerCall:
    """``ddp_rows.paid_per_call``: what one more all-reduce costs, from naive's and flat's waits."""
    calls: dict[str, int]
    waits: Difference | None
    extra_passes_ms: float
    grad_GB: float
    memory_GBps: float | None
    o_ms: float
    o_low_ms: float | None
    assumed_share: float | None
    mostly_assumed: bool


@dataclass(frozen=True, kw_only=True)
class C4Summary(Opening):
    table_view: list[str]
    naive: Row | None
    flat: Row | None
    per_call: PerCall | None
    versus: Versus
    by_precision: ByPrecision


@dataclass(frozen=True, kw_only=True)
class C5Summary(Opening):
    overlap: Row | None
    by_precision: ByPrecision


@dataclass(frozen=True, kw_only=True)
class C6Summary(Opening):
    table_view: list[str]
    baseline: Row | None
    naive: Row | None
    overlap: Row | None
    torch_ddp: WaitingStep | None
    versus: Versus
    by_precision: ByPrecision
    traced: list[str] | None
    compute_gaps: dict[str, dict[str, float] | None]
    backward_vs_naive: Difference | None
    wait_saved: Difference | None
    traces_show_naive_waiting: bool | None


@dataclass(frozen=True, kw_only=True)
class Bucketed:
    variant: str
    step_ms: float
    comm_wait_ms: float | None
    buckets: float | None


@dataclass(frozen=True, kw_only=True)
class C7Summary(Opening):
    table_view: list[str]
    bucketed: list[Bucketed] | None        # most buckets first
    several_sizes: bool
    wait_range_ms: list[float] | None
    # the step with the fewest buckets less the step with the most
    fewest_vs_most: Difference | None


@dataclass(frozen=True, kw_only=True)
class C10Summary(Opening):
    table_view: list[str]
    overlap: Row | None
    sharded: Row | None
    sharded_optimizer: Difference | None    # its optimizer phase against overlap's
    versus: Versus
    by_precision: ByPrecision


@dataclass(frozen=True, kw_only=True)
class TorchDdpExtra:
    """PyTorch DDP's memory before the step beyond ours, and whether it is the gradients' size."""
    GiB: float
    is_gradients: bool


@dataclass(frozen=True, kw_only=True)
class MemoryRow(c12.MemoryAt):
    """C12's memory at a step, with what C11 says of it besides: after the step, the gradients' and the
    optimizer state's share, and the step's time."""
    after_step_GiB: float
    gradients_GiB: float
    optimizer_state_GiB: float
    step_ms: float


@dataclass(frozen=True, kw_only=True)
class C11Summary(Summary):
    setup: Setup
    first_precision: str                    # the precision of ``memory``'s rows
    global_batches: dict[str, int] | None     # each precision's, where they differ (its table has both)
    memory: dict[str, MemoryRow]            # the first precision's rows, by variant
    memory_checked: bool
    moved_after_step: list[str]
    torch_ddp_extra: TorchDdpExtra | None
    versus: Versus


CONTRACTS = {"C2": C2Summary, "C3": C3Summary, "C4": C4Summary, "C5": C5Summary, "C6": C6Summary,
             "C7": C7Summary, "C8": c8.C8Summary, "C10": C10Summary, "C11": C11Summary, "C12": c12.C12Summary}


if __name__ == "__main__":
    sys.exit(main())
