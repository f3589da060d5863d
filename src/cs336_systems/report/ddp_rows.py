"""The rows every data-parallel report (C2–C8, C10–C12) builds on: one row per variant and precision
from its record, each variant's overhead against the no-communication baseline, and the comparisons
of two records' steps or phases.

Comparisons. Every verdict is the judge's (``report.spread.judge``, through ``record_difference``):
records of one job (``metrics.turns``: every variant of a precision took turns in one process group,
``train_bench``) are judged round by round, the difference and its interval from the per-round
differences; an overhead is a variant's step against the baseline of its own job. Records of
different jobs (one process per variant, or two precisions) are not settled: a spread across
processes would be needed, and one process a side has none. The fastest–slowest step ranges
(``step_spread``, ``phase_spread``) describe a record's steps; they decide nothing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from cs336_systems import deliverables
from cs336_systems.accounting import data_parallel
from cs336_systems.accounting.hardware import BY_DEVICE_NAME
from cs336_systems.accounting.parallelism import all_reduce_bytes
from cs336_systems.distributed import variants
from cs336_systems.models import get_size
from cs336_systems.report import spread
from cs336_systems.report.contract import Summary, Unread

GIB = 2**30
PHASES = ("forward_ms", "backward_ms", "comm_wait_ms", "optimizer_ms")
BUCKETED = deliverables.BUCKET_SIZES

# PyTorch's DDP waits for its buckets inside backward (its reducer's hooks finish every all-reduce
# before backward returns), so the phase after backward reads ~0 for it: its communication costs
# show in its backward, never as nothing. Its rows carry no wait; ``backward_waits`` sets their
# backward against one that communicates nothing.
WAITS_IN_BACKWARD = ("torch-ddp",)


# The variants whose backward communicates nothing (they communicate after it, or never): their
# backward is the computation alone, the reference for a backward that waits inside.
QUIET_BACKWARD = (variants.BASELINE, "naive", "flat")


# Variants whose matmuls run in a dtype of their own, whatever their record's precision: fsdp-bf16
# casts its weight shards to bf16 before gathering them. Every other variant computes in its record's
# precision, as that precision's baseline does (bf16: under autocast, whose matmuls run in bf16 too).
COMPUTES_IN = {"fsdp-bf16": "bf16"}


def compute_precision(variant: str, precision: str) -> str:
    """The precision ``variant``'s matmuls run in when its record's precision is ``precision``."""
    return COMPUTES_IN.get(variant, precision)


def same_computation(variant: str, precision: str) -> bool:
    """Whether ``variant`` in ``precision`` computes what that precision's baseline computes, so that
    its step less the baseline's is what communication costs; a variant that computes otherwise has
    no baseline of its computation (fsdp-bf16 in fp32: that difference is bf16 compute)."""
    return compute_precision(variant, precision) == precision


OTHER_COMPUTE_NOTE = "computes in {}: no baseline of its computation, so no overhead"


IN_BACKWARD_NOTE = "waits inside backward (PyTorch's reducer): nothing left to wait for after it"


def step_table(records: list[dict]) -> pd.DataFrame:
    """One row per record. A variant that waits inside backward (``WAITS_IN_BACKWARD``) gets no
    wait and no share of the step waiting, and a note saying where its wait went."""
    rows = []
    for r in records:
        m = r["metrics"]
        memory = (m.get("memory_per_rank") or [{}])[0]
        inside = r["params"]["variant"] in WAITS_IN_BACKWARD
        note = r.get("reason") or r.get("message") or ""
        variant, precision = r["params"]["variant"], variants.precision_of(r)
        if not same_computation(variant, precision):
            note = "; ".join(filter(None, [OTHER_COMPUTE_NOTE.format(compute_precision(variant, precision)), note]))
        rows.append({"variant": variant, "precision": precision, "status": r["status"],
                     **{phase: m.get(phase) for phase in PHASES},
                     "step_ms": m.get("step_ms"), "step_range_ms": _step_range(r),
                     "comm_share": m.get("comm_share"), "buckets": m.get("buckets"),
                     "peak_GiB": memory["peak"] / GIB if "peak" in memory else None,
                     "note": "; ".join(filter(None, [IN_BACKWARD_NOTE if inside else "", note]))})
        if inside:
            rows[-1] |= {"comm_wait_ms": None, "comm_share": None}
    return with_overhead(pd.DataFrame(rows), records)


def with_overhead(table: pd.DataFrame, records: list[dict] | None = None) -> pd.DataFrame:
    """Each row's cost of communication: its step minus the baseline's of the same precision (the
    same ranks and per-rank batch, no communication), in ms and as a share of the baseline.
    "Waiting" alone misses what overlapping costs inside backward (PyTorch DDP waits 0 ms yet runs a
    slower backward); this does not. Where ``records`` (the table's, in its order) and the baseline
    took turns in one job, the overhead is their paired difference (``record_difference``: the median
    of the per-round differences the judge keeps); else the difference of the medians. Added only where
    the run has an ok baseline: a precision without one gets empty cells, never a number against
    nothing (the columns are there in every run, so a writeup's view of the table names them alike), and
    none for a row that computes otherwise than its baseline (``same_computation``: its note says so)."""
    base = table[(table["variant"] == variants.BASELINE) & (table["status"] == "ok")]
    base_ms = table["precision"].map(dict(zip(base["precision"], base["step_ms"].astype(float)))).astype(float)
    base_ms[[not same_computation(v, p) for v, p in zip(table["variant"], table["precision"])]] = math.nan
    over = table["step_ms"].astype(float) - base_ms
    if records is not None:
        bases = {p: r for p, found in by_variant(records).items() if (r := found.get(variants.BASELINE))}
        for i, r in enumerate(records):
            mine = bases.get(variants.precision_of(r))
            found = record_difference(r, mine) if mine is not None and r["status"] == "ok" else None
            if found is not None and found["paired"] and not math.isnan(base_ms.iloc[i]):
                over.iloc[i] = found["ms"]
    out = table.copy()
    out.insert(out.columns.get_loc("step_range_ms") + 1, "overhead_ms", over)
    out.insert(out.columns.get_loc("overhead_ms") + 1, "overhead_pct", 100 * out["overhead_ms"] / base_ms)
    return out


def phase_spread(record: dict, phase: str) -> tuple[float, float, float] | None:
    """(median, fastest, slowest) of one phase over rank 0's timed steps, ms; None for a record that
    is not ok or has no such phase."""
    if record["status"] != "ok" or record["metrics"].get(phase) is None:
        return None
    times = [s[phase] for s in record["metrics"].get("steps") or [] if s.get(phase) is not None]
    median = record["metrics"][phase]
    return (median, min(times, default=median), max(times, default=median))


def step_spread(record: dict) -> tuple[float, float, float] | None:
    """(median, fastest, slowest) of rank 0's timed steps, ms; None for a record that is not ok."""
    return phase_spread(record, "step_ms")


def with_less(d: dict) -> dict:
    """A difference with ``less``: by how much ``a`` is below ``b`` (the difference negated, its
    interval reversed; None where it has none), the numbers a sentence saying "shorter by" quotes."""
    def negated(x):
        return None if x is None else -x
    return d | {"less": {"ms": -d["ms"], "low_ms": negated(d["high_ms"]), "high_ms": negated(d["low_ms"])}}


# A record's phase (its metrics' name) -> its name in ``metrics.rounds`` (train_bench.ROUND_PHASES).
ROUND_PHASE = {"forward_ms": "forward", "backward_ms": "backward", "comm_wait_ms": "comm_wait",
               "optimizer_ms": "optimizer", "step_ms": "step"}


def record_difference(a: dict, b: dict, phase: str = "step_ms") -> dict | None:
    """``a``'s ``phase`` less ``b``'s, as the judge (``report.spread.judge``) has it: ``verdict`` its
    verdict, ``sign`` +1 where higher, -1 where lower, 0 where within the spread or not settled;
    ``ms`` the difference (the judge's, from the rounds, where one job measured both; else the
    medians'), ``low_ms``/``high_ms`` its 95 % interval (None where not settled), ``paired`` (one
    job) and ``rounds``. None where either record is not ok or has no such phase."""
    if a["status"] != "ok" or b["status"] != "ok" or a["metrics"].get(phase) is None or b["metrics"].get(phase) is None:
        return None
    found = spread.judge(a, b, ROUND_PHASE[phase])
    medians = a["metrics"][phase] - b["metrics"][phase]
    settled = found.verdict != spread.NOT_SETTLED
    return with_less({"ms": medians if math.isnan(found.difference) or not found.paired else found.difference,
                      "low_ms": found.low if settled else None, "high_ms": found.high if settled else None,
                      "verdict": found.verdict, "sign": {"higher": 1, "lower": -1}.get(found.verdict, 0),
                      "paired": found.paired, "rounds": found.rounds})


def round_differences(a: dict, b: dict, phase: str = "step_ms") -> list[float]:
    """``a``'s ``phase`` less ``b``'s, one difference a round of the job that measured both (the
    difference of the two turns' medians, as the judge takes them); empty where no job measured both."""
    if not spread.same_job(a, b):
        return []
    return spread.round_differences(spread.round_samples(a, ROUND_PHASE[phase]), spread.round_samples(b, ROUND_PHASE[phase]))


def by_variant(records: list[dict]) -> dict[str, dict[str, dict]]:
    """The ok records per precision, by variant."""
    out: dict[str, dict[str, dict]] = {}
    for r in records:
        if r["status"] == "ok":
            out.setdefault(variants.precision_of(r), {})[r["params"]["variant"]] = r
    return out


def backward_waits(records: list[dict]) -> dict[str, dict[str, dict]]:
    """Per precision, for each variant that waits inside backward (``WAITS_IN_BACKWARD``): its
    backward against a backward that communicates nothing, the baseline's where the run has it,
    else the longer of naive's and flat's (the smaller difference), as the judge has it
    (``record_difference``); whether its backward is the longest of the precision's variants (judged
    longer than every other's); and its step against every other variant's that runs the same
    computation (``record_difference``, keyed by variant; the baseline's is the overhead, and a
    variant that is not ``same_computation`` computes otherwise), with the variants it is judged
    shorter and longer than, and whether against some it is within the spread or not settled;
    ``step_verdict``, what its step sentence leads with: "beyond" the spread (against any), else
    ``spread.NOT_SETTLED`` (against some), else ``spread.WITHIN``; None with no other step.
    ``wait_vs_quiet``: its measured wait after backward against the baseline's, which communicates
    nothing (``record_difference``), one entry where the run has the baseline, none where not: that
    it has nothing left to wait for after backward is what its reducer is built to do, and the judge
    says whether its records show it."""
    out: dict[str, dict[str, dict]] = {}
    for precision, found in by_variant(records).items():
        backward = {v: phase_spread(r, "backward_ms") for v, r in found.items()}
        quiet = [v for v in ((variants.BASELINE,) if variants.BASELINE in found else QUIET_BACKWARD)
                 if v in found and backward[v]]
        reference = max(quiet, key=lambda v: backward[v][0], default=None)
        for variant in WAITS_IN_BACKWARD:
            if variant not in found or not backward[variant]:
                continue
            mine = backward[variant]
            backwards = [record_difference(found[variant], r, "backward_ms") for v, r in found.items()
                         if v != variant and backward[v]]
            steps = {v: d for v, r in found.items() if v not in (variant, variants.BASELINE)
                     and same_computation(v, precision) and (d := record_difference(found[variant], r)) is not None}
            verdicts = {d["verdict"] for d in steps.values()}
            lead = ("beyond" if any(d["sign"] for d in steps.values()) else spread.NOT_SETTLED
                    if spread.NOT_SETTLED in verdicts else spread.WITHIN if spread.WITHIN in verdicts else None)
            base = found.get(variants.BASELINE)
            wait = record_difference(found[variant], base, "comm_wait_ms") if base else None
            out.setdefault(precision, {})[variant] = {
                "wait_vs_quiet": [{"quiet": variants.BASELINE, "wait_ms": found[variant]["metrics"]["comm_wait_ms"],
                                   "versus": wait}] if wait else [],
                "backward_ms": mine[0], "reference": reference,
                "reference_backward_ms": backward[reference][0] if reference else None,
                "excess": record_difference(found[variant], found[reference], "backward_ms") if reference else None,
                "longest": bool(backwards) and all(d["verdict"] == "higher" for d in backwards),
                "steps": steps,
                # its step against the others' as judged, by name (sorted), and whether any is undecided
                "shorter_than": sorted(v for v, d in steps.items() if d["sign"] < 0),
                "longer_than": sorted(v for v, d in steps.items() if d["sign"] > 0),
                "within_some": spread.WITHIN in verdicts, "unsettled_some": spread.NOT_SETTLED in verdicts,
                "step_verdict": lead}
    return out


def naive_calls(size_name: str) -> int:
    """The all-reduces naive DDP issues per step on the named model size (``accounting.data_parallel``)."""
    return data_parallel.naive_calls(get_size(size_name))


def pass_ms(variant: str, grad_bytes: float, memory_Bps: float | None) -> float | None:
    """The least time ``variant``'s passes over the gradients after backward take at ``memory_Bps``
    (``accounting.data_parallel.after_backward_pass_ms`` for its family)."""
    return data_parallel.after_backward_pass_ms(variants.lookup(variant).name, grad_bytes, memory_Bps)


def _card(records: list[dict]):
    """The card the records ran on (``accounting.hardware``); None for a card it does not list, a CPU
    run, or records from more than one card."""
    gpus = {r["provenance"].get("gpu") for r in records}
    return BY_DEVICE_NAME.get(gpus.pop()) if len(gpus) == 1 else None


def memory_bandwidth(records: list[dict]) -> float | None:
    """The datasheet memory bandwidth (bytes/s) of the card the records ran on; None where the card
    is not known (``_card``)."""
    card = _card(records)
    return card.hbm_bandwidth if card else None


def link_bandwidth(records: list[dict]) -> float | None:
    """The datasheet rate (bytes/s, each way) at which the card the records ran on moves a
    collective's bytes to another (``accounting.hardware``'s ``link_bandwidth``: NVLink's); None
    where the card is not known (``_card``)."""
    card = _card(records)
    return card.link_bandwidth if card else None


def least_send_ms(grad_bytes: float, world_size: int, link_Bps: float) -> float:
    """The least time a ring all-reduce of ``grad_bytes`` on ``world_size`` ranks can take: each rank
    moves 2(n − 1)/n of the payload through its link (``parallelism.all_reduce_bytes``), at most at
    the link's datasheet rate."""
    return all_reduce_bytes(grad_bytes, world_size) / link_Bps * 1e3


# The passes over the gradients after backward that flat makes and naive does not (into its buffer
# and back out), and naive's own (its division).
FLAT_EXTRA_PASSES = data_parallel.AFTER_BACKWARD_PASSES["flat"] - data_parallel.AFTER_BACKWARD_PASSES["naive"]
NAIVE_PASSES = data_parallel.AFTER_BACKWARD_PASSES["naive"]


def per_call_cost(waits_ms: float, one_pass_ms: float, calls: dict[str, int]) -> float:
    """o = (naive's wait − flat's wait + flat's extra passes) / (naive's calls − flat's calls), with
    one pass over the gradients taking ``one_pass_ms`` (``paid_per_call``)."""
    return (waits_ms + FLAT_EXTRA_PASSES * one_pass_ms) / (calls["naive"] - calls["flat"])


def per_call_bound(slowest_wait_ms: float, send_ms: float, one_pass_ms: float, calls: dict[str, int]) -> float:
    """The most naive's calls can cost each: its slowest wait less the least time its bytes can take
    (``send_ms``: ``least_send_ms``, at the link's datasheet rate) and its own passes over the
    gradients (``paid_per_call``). Any time the bytes or the passes took beyond their least is
    counted against the calls, so the bound can only be high, never low."""
    return (slowest_wait_ms - send_ms - NAIVE_PASSES * one_pass_ms) / calls["naive"]


def paid_per_call(records: list[dict]) -> dict[str, dict]:
    """Per precision where naive and flat both ran: the cost of one more all-reduce when calls are
    issued back to back after backward, fitted where it is paid. Naive makes one call per gradient
    tensor plus one to agree on which gradients exist; flat makes one for the same bytes but also
    copies every gradient into its buffer and back (two passes naive does not make, at the least
    time the card's memory bandwidth allows). So each extra call costs

        o = (naive's wait − flat's wait + flat's extra passes) / (naive's calls − flat's calls),

    ``o_ms`` from the judge's difference of the waits (``record_difference``) and ``o_low_ms`` from
    the low end of its interval (None where not settled; both lower bounds, the passes being counted
    at peak bandwidth). ``assumed_share``: the share of o's numerator that is those passes at the
    datasheet's rate, not measured (None where no pass is counted or the numerator is not positive);
    ``mostly_assumed`` where that is more than half.
    Where the card is known, ``o_high_ms``: the most naive's calls can cost each, its slowest wait
    less the least time its bytes can take (``send_ms``: a ring all-reduce at the card's datasheet
    link rate, ``link_GBps``; C1's fitted bandwidth is another process's estimate, and a bound
    subtracting it could fall below the true cost) and its own division pass at the datasheet's
    memory rate. A CPU run (no memory bandwidth) counts no passes. ``slowest_wait_ms`` and
    ``send_ms`` let a report recompute o and its bound with a pass measured otherwise
    (``per_call_cost``, ``per_call_bound``)."""
    out = {}
    bandwidth, link = memory_bandwidth(records), link_bandwidth(records)
    for precision, found in by_variant(records).items():
        naive, flat = found.get("naive"), found.get("flat")
        if not naive or not flat or not naive["metrics"].get("parameter_count"):
            continue
        calls = {"naive": naive_calls(naive["params"]["size"]), "flat": 1}
        grad_bytes = naive["metrics"]["parameter_count"] * variants.lookup("naive").gradient_bytes
        waits = record_difference(naive, flat, "comm_wait_ms")
        one = data_parallel.one_pass_ms(grad_bytes, bandwidth) if bandwidth else 0.0
        extra = FLAT_EXTRA_PASSES * one
        numerator = waits["ms"] + extra
        share = extra / numerator if extra > 0 and numerator > 0 else None
        slowest = phase_spread(naive, "comm_wait_ms")[2]
        send = least_send_ms(grad_bytes, naive["params"]["world_size"], link) if link else None
        out[precision] = {"calls": calls, "grad_GB": grad_bytes / 1e6 / 1000, "waits": waits, "extra_passes_ms": extra,
                          "memory_GBps": bandwidth / 1e9 if bandwidth else None,
                          "o_ms": per_call_cost(waits["ms"], one, calls),
                          "o_low_ms": None if waits["low_ms"] is None else per_call_cost(waits["low_ms"], one, calls),
                          # most of o is the passes priced, not measured: the words say o rests on them
                          "assumed_share": share, "mostly_assumed": share is not None and share > 0.5,
                          "o_high_ms": None if send is None else per_call_bound(slowest, send, one, calls),
                          "slowest_wait_ms": slowest, "send_ms": send, "link_GBps": link / 1e9 if link else None}
    return out


def step_times(record: dict | None) -> list[float]:
    """Rank 0's timed steps (ms) of a record, in its turns' order; empty without a record or its steps."""
    steps = (record or {}).get("metrics", {}).get("steps") or ()
    return [s["step_ms"] for s in steps if s.get("step_ms") is not None]


def _step_range(record: dict) -> str:
    """Fastest–slowest of rank 0's timed steps (ms): the spread beside their median."""
    times = step_times(record)
    return f"{min(times):.1f}–{max(times):.1f}" if times else ""


# The step table as a writeup shows it: the step and its spread, its cost over the baseline, where
# the time went, and why a row did not run; the CSV keeps every column (share waiting, buckets, peak
# memory). A section adds what it is about (``step_view``).
STEP_VIEW = ("variant", "precision", "status", "step_ms", "step_range_ms", "overhead_ms", "overhead_pct",
             "forward_ms", "backward_ms", "comm_wait_ms", "optimizer_ms", "note")


def step_view(*extra: str) -> list[str]:
    """``STEP_VIEW`` with a section's own columns before the note."""
    return [*STEP_VIEW[:-1], *extra, STEP_VIEW[-1]]


# A row's overhead against the baseline: left out of a summary's row where the run has no baseline,
# so a template asks whether the row has one (the table keeps the column, empty).
AGAINST_BASELINE = ("overhead_ms", "overhead_pct")


def row_of(table: pd.DataFrame, variant: str, precision: str) -> dict | None:
    hit = table[(table["variant"] == variant) & (table["precision"] == precision) & (table["status"] == "ok")]
    if hit.empty:
        return None
    row = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in hit.iloc[0].to_dict().items()}
    return {k: v for k, v in row.items() if not (k in AGAINST_BASELINE and v is None)}


def memory_rows(records: list[dict], chosen: tuple[str, ...]) -> list[dict]:
    """C11 / C12: rank 0's memory at each point and its breakdown, in GiB."""
    out = []
    for r in records:
        if r["params"]["variant"] not in chosen or r["status"] != "ok":
            continue
        mem = r["metrics"]["memory_per_rank"][0]
        if "after_init" not in mem:
            continue
        row = {"variant": r["params"]["variant"], "precision": variants.precision_of(r)}
        for point in ("after_init", "before_step", "after_step", "peak"):
            row[f"{point}_GiB"] = mem[point] / GIB
        for kind, value in mem["breakdown_before_step"].items():
            row[f"{kind}_GiB"] = value / GIB
        row["activations_peak_GiB"] = mem["forward_backward_peak_above_start"] / GIB
        row["step_ms"] = r["metrics"]["step_ms"]
        out.append(row)
    return out


def is_bucket_size(variant: str) -> bool:
    """A row of the bucket sizes (bucketed-<MB>), not one of the variants built on them."""
    return variants.lookup(variant).name == BUCKETED


def versus(records: list[dict], pairs, precision: str) -> dict[str, dict[str, dict]]:
    """``{a: {b: a's step against b's}}`` (``record_difference``, ms) for the pairs that both ran in
    ``precision``."""
    found = by_variant(records).get(precision, {})
    out: dict[str, dict[str, dict]] = {}
    for a, b in pairs:
        if a in found and b in found:
            out.setdefault(a, {})[b] = record_difference(found[a], found[b])
    return out


def trace_label(variant: str, precision: str) -> str:
    """How a trace is named in the summary and its timeline: the variant, with its precision where
    that is not fp32."""
    return variant if precision == variants.DEFAULT_PRECISION else f"{variant} ({precision})"


def global_batches(records: list[dict]) -> dict[str, int] | None:
    """Each precision's global batch (sequences; its records' params), where the precisions ran
    different ones (config.yaml's ``DDP.global_batch`` says why): then a row of one precision beside
    one of the other compares two batches, its step and memory as much as its precision. None where
    every precision ran the same batch."""
    batches = {variants.precision_of(r): r["params"]["global_batch"] for r in records}
    ordered = {p: batches[p] for p in (*variants.PRECISIONS, *sorted(batches)) if p in batches}     # fp32 first
    return ordered if len(set(batches.values())) > 1 else None


def paired_by_precision(records: list[dict]) -> dict[str, bool]:
    """Per precision: whether every ok record of it was measured in one job (one process group taking
    turns), so its comparisons are judged per round; False where they span jobs (not settled)."""
    out = {}
    for precision, found in by_variant(records).items():
        jobs = {(r["metrics"].get("turns") or {}).get("job") for r in found.values()}
        out[precision] = len(jobs) == 1 and None not in jobs
    return out


def no_rows(why: str) -> pd.DataFrame:
    """A table with no rows, saying why: every table a report declares is written."""
    return pd.DataFrame({"(no rows)": [why]})


# The blocks above as the sections' contracts (report.ddp's CONTRACTS) declare them, written once for
# every section that quotes them; a section's summary is filled from the mappings above (contract.fill).
@dataclass(frozen=True, kw_only=True)
class Spread:
    """A difference and its 95 % interval (null where the judge settled nothing)."""
    ms: float
    low_ms: float | None
    high_ms: float | None


@dataclass(frozen=True, kw_only=True)
class Difference(Spread):
    """``record_difference``: the judge's verdict and its sign, and ``less`` for "shorter by";
    ``paired``: judged per round of one job (a test reads it: every live C record is)."""
    sign: int
    verdict: str
    less: Spread | None = None
    paired: Unread[bool]


@dataclass(frozen=True, kw_only=True)
class QuietWait:
    """``backward_waits``' ``wait_vs_quiet``: a variant's wait after backward against ``quiet``'s."""
    quiet: str
    wait_ms: float
    versus: Difference


@dataclass(frozen=True, kw_only=True)
class Waits:
    """A variant's entry of ``backward_waits``: ``reference`` the quiet backward it is held against."""
    wait_vs_quiet: list[QuietWait]
    backward_ms: float
    reference: str | None
    excess: Difference | None
    longest: bool | None
    shorter_than: list[str]
    longer_than: list[str]
    within_some: bool
    unsettled_some: bool
    step_verdict: str | None        # "beyond", "not settled", "within the spread"


@dataclass(frozen=True, kw_only=True)
class Row:
    """A variant's row of the step table (``row_of``); the overhead where the run has a baseline."""
    variant: str
    step_ms: float
    forward_ms: float
    backward_ms: float
    comm_wait_ms: float | None
    optimizer_ms: float
    comm_share: float | None
    overhead_ms: float | None = None
    overhead_pct: float | None = None
    inside_backward: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class WaitingRow(Row):
    """A row of a variant that waits inside backward (PyTorch DDP's), with what ``backward_waits`` says."""
    inside_backward: Waits | None = None


@dataclass(frozen=True, kw_only=True)
class Step:
    step_ms: float


@dataclass(frozen=True, kw_only=True)
class WaitingStep(Step):
    """A waiting row as far as its step and its waits inside backward."""
    inside_backward: Waits | None = None


@dataclass(frozen=True, kw_only=True)
class Named:
    """A row a section names only (C8's rows beyond PyTorch DDP)."""
    variant: str


@dataclass(frozen=True, kw_only=True)
class Setup:
    """What every variant of the run shared (``ddp.build``'s setup line)."""
    size: str
    context: int
    global_batch: int
    other_batches: dict[str, int]
    world_size: int
    backend: str
    warmup: int
    steps: int
    rounds: int
    min_rounds: int
    judged: bool


@dataclass(frozen=True, kw_only=True)
class Opening(Summary):
    """What every step-table section opens with: the precisions and which one its rows are, each
    precision's global batch where they differ (``global_batches``), and the setup line."""
    precisions: list[str]
    first_precision: str
    only_fp32: bool
    global_batches: dict[str, int] | None
    setup: Setup


# precision -> variant -> row (null where the variant did not run in that precision)
ByPrecision = dict[str, dict[str, Row | None]]
# ``versus``: a -> b -> a's step against b's
Versus = dict[str, dict[str, Difference | None]]
