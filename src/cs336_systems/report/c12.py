"""C12: FSDP against replicated data parallelism — what its forward's time is made of as far as the
records settle it, and the memory it saves, predicted (``accounting.data_parallel``) and measured.
``part`` adds C12's summary keys to what ``report.ddp`` builds for every data-parallel section.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from cs336_systems import deliverables
from cs336_systems.accounting.data_parallel import bus_bandwidth, training_state_per_rank
from cs336_systems.accounting.parallelism import all_gather_bytes
from cs336_systems.accounting.transformer import transformer_parameter_tensors
from cs336_systems.distributed import variants
from cs336_systems.models import get_size
from cs336_systems.report import spread
from cs336_systems.report.contract import Summary
from cs336_systems.report.ddp_rows import (GIB, PHASES, Setup, Spread, Step, Versus, WaitingStep, by_variant,
                                           compute_precision, memory_rows, record_difference, trace_label)
from cs336_systems.report.ddp_traces import LONG_GAP_MS, untraced_idle

if TYPE_CHECKING:
    from cs336_systems.report.ddp import Section

# The variants whose memory C11 and C12 read (the registry's).
MEMORY_VARIANTS = deliverables.get("C11").variants

# The variants whose forward communicates nothing (they all-reduce gradients only): each one's
# forward is the same computation as the baseline's, so where the run has no baseline it stands in.
QUIET_FORWARD = (variants.BASELINE, "overlap", "naive", "flat")


def fsdp_forward(rows: dict[str, dict], setup: dict, fit: dict | None,
                 records: dict[tuple[str, str], dict] | None = None) -> list[dict]:
    """C12: what an FSDP forward's time is made of, as far as the records settle it. Per FSDP row:
    its forward against a forward that communicates nothing in the precision its matmuls run in
    (``ddp_rows.compute_precision``: fsdp-bf16 gathers bf16 weights, so bf16): the baseline's, else
    the first of ``QUIET_FORWARD`` the run has (``baseline_variant``), judged (``record_difference``: ``excess``) where ``records``
    gives both records by (variant, precision): not settled where they were not measured in one job
    (fsdp-bf16 against a bf16 run's baseline). And the most the weight transfers can take: every
    Linear and Embedding weight all-gathered once (each rank receives (N − 1)/N of it) at C1's bus
    bandwidth for this back end and world size, plus C1's per-call cost (one call timed alone, the
    most a call costs) per gather as if none overlapped. Those rates are C1's processes', not this
    job's, and two processes of one command differ by up to ``spread.HOST_SWING``: the excess is set
    against either only beyond that. ``excess_reading``, where both are known (``reading``):
    "beyond transfers" (beyond the bound: not the transfers; the text says so, and no more), "beyond
    bytes, within transfers", "beyond bytes" (its place against the bound not settled), "within
    bytes", ``spread.NOT_SETTLED``, or ``EXCESS_OPEN`` where the judge gave the excess no interval.
    ``excess_ms`` is the judge's difference where the records are at hand, so the table's excess
    and the words' are one number."""
    size = get_size(setup["size"])
    gathers = transformer_parameter_tensors(size)["matrices"]      # FSDP gathers each Linear and Embedding weight
    n = setup["world_size"]
    records = records or {}
    # a forward of another batch is another workload: a precision may run its own (config's
    # DDP.global_batch), and then the fp32 run's fsdp-bf16 has no quiet bf16 forward to set against
    batch = {**{p: setup.get("global_batch") for p in rows}, **setup.get("other_batches", {})}
    out = []
    for precision, ran in rows.items():
        for variant in ("fsdp", "fsdp-bf16"):
            row = ran.get(variant)
            if not row:
                continue
            element_bytes = variants.lookup(variant).gradient_bytes
            compute = compute_precision(variant, precision)
            quiet = rows.get(compute, {}) if batch.get(compute) == batch.get(precision) else {}
            base_variant = next((v for v in QUIET_FORWARD if quiet.get(v)), None)
            base = quiet.get(base_variant) if base_variant else None
            # the closed form, not the record's parameter_count: under FSDP that counts this rank's shards
            count = size.parameter_count()
            found = {"variant": variant, "precision": precision, "forward_ms": row["forward_ms"],
                     "baseline_precision": compute, "baseline_variant": base_variant,
                     "baseline_other_batch": batch.get(compute) != batch.get(precision),
                     "baseline_forward_ms": base["forward_ms"] if base else None,
                     "gathers": gathers, "gathered_GB": all_gather_bytes(count * element_bytes, n) / 1e9}
            if fit and fit.get("w_GBps"):
                busbw = bus_bandwidth(fit["w_GBps"], n)             # C1's fit is algorithm bandwidth of an all-reduce
                found["transfer_ms"] = found["gathered_GB"] / busbw * 1e3
                found["call_ms"] = max(fit["o_ms"], 0.0)      # C1's per-call cost o
                found["latency_ms"] = gathers * found["call_ms"]
                found["bound_ms"] = found["transfer_ms"] + found["latency_ms"]
            if base:
                mine, theirs = records.get((variant, precision)), records.get((base_variant, compute))
                excess = record_difference(mine, theirs, "forward_ms") if mine and theirs else None
                # one excess for the table and the words: the judge's where the records are at hand
                found["excess_ms"] = excess["ms"] if excess else row["forward_ms"] - base["forward_ms"]
                if excess:
                    found["excess"] = excess
                if "bound_ms" in found:
                    ends = (excess["low_ms"], excess["high_ms"]) if excess else (found["excess_ms"],) * 2
                    found["excess_reading"] = (EXCESS_OPEN if ends[0] is None
                                               else reading(*ends, found["transfer_ms"], found["bound_ms"]))
                    found["call_needed_ms"] = (found["excess_ms"] - found["transfer_ms"]) / gathers if gathers else None
            out.append(found)
    return out


# the judge left the excess itself open (no interval), so nothing can be set against it
EXCESS_OPEN = "excess not settled"


def reading(low_ms: float, high_ms: float, transfer_ms: float, bound_ms: float, swing: float = spread.HOST_SWING) -> str:
    """Where a forward's excess, the judge's interval ``low_ms`` to ``high_ms``, lies against its
    gathers' bytes at C1's rate (``transfer_ms``) and the most the transfers can take (``bound_ms``).
    Both come from C1's processes, which may run up to ``swing`` times faster or slower than this
    job's, so a side is decided only where the whole interval lies beyond that."""
    def side(x: float) -> str:
        above, below = spread.across_processes(low_ms, x, swing), spread.across_processes(high_ms, x, swing)
        return "higher" if above == "higher" else "lower" if below == "lower" else spread.NOT_SETTLED

    against_bound, against_bytes = side(bound_ms), side(transfer_ms)
    if against_bound == "higher":
        return "beyond transfers"
    if against_bytes == "higher":
        return "beyond bytes, within transfers" if against_bound == "lower" else "beyond bytes"
    return "within bytes" if against_bytes == "lower" else spread.NOT_SETTLED


# How far apart two memory savings (GiB) may lie and still be called one, as a share of the gradients'
# saving: the smallest part of the training state the reading names
TOLERANCE = 0.1


def fsdp_saving(memory: list[dict], predicted: dict) -> dict | None:
    """C12: the memory FSDP saves against DDP (overlap), predicted and measured at each point, and
    whether the peak's saving is the saving without the gradients. The step starts with no gradients
    (they are set to None), so the memory at its start is its peak less the rise above the start;
    where the two variants rise alike the peak saves what the start saves: parameters and optimizer
    state, not the gradients FSDP shards. ``reconciled``: each part of that reading holds within a
    tenth of the gradients' saving (``TOLERANCE``): the start saves the saving before the step less
    the gradients', the two rises match, and so the peak saves it; the peak alone could match with
    the other two off by as much the opposite ways. ``before_matches_prediction``: the saving before
    the step, when every gradient is held, is the predicted saving of the training state within
    that tolerance."""
    rows = {m["variant"]: m for m in memory}
    fs, ov = rows.get("fsdp"), rows.get("overlap")
    if not fs or not ov:
        return None
    start = {v: r["peak_GiB"] - r["activations_peak_GiB"] for v, r in (("fsdp", fs), ("overlap", ov))}
    gradients = ov["gradients_GiB"] - fs["gradients_GiB"]
    before = ov["before_step_GiB"] - fs["before_step_GiB"]
    peak = ov["peak_GiB"] - fs["peak_GiB"]
    saved_at_start = start["overlap"] - start["fsdp"]
    rise_difference = ov["activations_peak_GiB"] - fs["activations_peak_GiB"]
    predicted_saving = predicted["replicated"] - predicted["fsdp"]
    tolerance = TOLERANCE * gradients
    return {"predicted_GiB": predicted_saving, "before_step_GiB": before,
            "start_GiB": saved_at_start, "peak_GiB": peak, "gradients_GiB": gradients,
            "rise_GiB": {"fsdp": fs["activations_peak_GiB"], "overlap": ov["activations_peak_GiB"]},
            "rise_difference_GiB": rise_difference,
            "starts_GiB": start,
            "without_gradients_GiB": before - gradients,
            "reconciled": gradients > 0 and all(abs(x) <= tolerance for x in (
                saved_at_start - (before - gradients), rise_difference, peak - (before - gradients))),
            "before_matches_prediction": gradients > 0 and abs(before - predicted_saving) <= tolerance}


def predicted_state_GiB(setup: dict) -> dict:
    """Training state per rank (fp32 weights, gradients, Adam moments), GiB, with and without FSDP."""
    state = {kind: value / GIB for kind, value in
             training_state_per_rank(get_size(setup["size"]), setup["world_size"]).items()}
    return state | {"saved": state["replicated"] - state["fsdp"]}


@dataclass(frozen=True, kw_only=True)
class FsdpForward:
    """``fsdp_forward``: one FSDP row's forward against one that communicates nothing, and the most
    its gathers can take (null where the run has no such forward, or no C1 fit)."""
    variant: str
    precision: str
    forward_ms: float
    baseline_variant: str | None
    baseline_precision: str
    baseline_forward_ms: float | None
    baseline_other_batch: bool
    gathers: int
    gathered_GB: float
    excess: Spread | None = None
    excess_ms: float | None = None
    transfer_ms: float | None = None
    call_ms: float | None = None        # C1's per-call cost o, which isolated all-reduces measured
    call_needed_ms: float | None = None  # what each gather must cost for the calls to make up the excess beyond the bytes
    bound_ms: float | None = None
    excess_reading: str | None = None   # ``reading``'s ("beyond transfers", ..., "not settled") or EXCESS_OPEN
    host_swing: float = spread.HOST_SWING


@dataclass(frozen=True, kw_only=True)
class Saving:
    """``fsdp_saving``: the memory FSDP saves against DDP (overlap), predicted and measured."""
    predicted_GiB: float
    before_step_GiB: float
    start_GiB: float
    peak_GiB: float
    gradients_GiB: float
    rise_GiB: dict[str, float]
    rise_difference_GiB: float
    starts_GiB: dict[str, float]
    without_gradients_GiB: float
    reconciled: bool | None
    before_matches_prediction: bool


@dataclass(frozen=True, kw_only=True)
class PredictedState:
    fsdp: float
    replicated: float
    saved: float


@dataclass(frozen=True, kw_only=True)
class UntracedIdle:
    """``ddp_traces.untraced_idle``: how much of a traced step's idle compute lane the timed step holds."""
    step_ms: float
    idle_ms: float
    idle_share: float
    idle_slowest_ms: float
    traced_idle_ms: float
    mostly_profiler: bool | None    # over the timed steps' scatter; None: not settled
    transfers_ms: float | None      # the most the fp32 step's transfers can take
    against_transfers: str | None   # the idle time against it, beyond the host's swing; null: no bound
    host_swing: float = spread.HOST_SWING
    reference: str | None           # DDP (overlap)'s idle time: "same compute", "other compute"; null: none ran


@dataclass(frozen=True, kw_only=True)
class MemoryAt:
    """Rank 0's memory around one variant's step (``ddp_rows.memory_rows``), GiB."""
    before_step_GiB: float
    peak_GiB: float


@dataclass(frozen=True, kw_only=True)
class LaunchGaps:
    """``launch_gaps``: the traces' threshold for a wait against a step whose compute waits for no gather."""
    threshold_ms: float
    longest_ms: float | None
    reading: str | None             # "longer", "not longer"; null: no such trace ran


@dataclass(frozen=True, kw_only=True)
class C12Summary(Summary):
    setup: Setup
    first_precision: str                    # the precision of the rows it quotes (fsdp, overlap, memory)
    table_view: list[str]
    fsdp: Step | None
    fsdp_bf16: Step | None
    overlap: Step | None
    torch_ddp: WaitingStep | None
    versus: Versus
    phases_vs_ddp: dict[str, Spread | None] | None
    optimizer_offsets_forward: bool
    optimizer_vs_ddp: str | None            # the judge's verdict on FSDP's optimizer phase against DDP's
    compute_gaps: dict[str, dict[str, float]]
    memory: dict[str, MemoryAt]             # rank 0's memory, the first precision's rows by variant
    predicted_state_GiB: PredictedState
    fsdp_forward: list[FsdpForward]
    saving: Saving | None
    untraced_idle: dict[str, UntracedIdle | None]
    gap_labels: list[str]
    gap_rows: list[str]
    launch_gaps: LaunchGaps


def phases_against(fsdp: dict | None, ddp: dict | None) -> dict:
    """FSDP's record against DDP's phase by phase (``record_difference``, None where either is
    missing), and whether they support the one reading C12 gives: a longer forward paid back by a
    shorter optimizer phase (each judged so), the steps judged the same within the spread."""
    if fsdp is None or ddp is None:
        return {"phases_vs_ddp": None, "optimizer_offsets_forward": False}
    phases = {p: record_difference(fsdp, ddp, p) for p in PHASES}
    step = record_difference(fsdp, ddp)
    forward, optimizer = phases["forward_ms"], phases["optimizer_ms"]
    offsets = bool(step and forward and optimizer and step["verdict"] == spread.WITHIN and forward["sign"] == 1
                   and optimizer["sign"] == -1)
    return {"phases_vs_ddp": phases, "optimizer_offsets_forward": offsets}


def optimizer_vs_ddp(phases: dict | None) -> str | None:
    """The judge's verdict on FSDP's optimizer phase against DDP's (``phases_against``'s), None where
    either lacks it: the words that each rank updates only its shard of the weights say the phase is
    the shorter only where the judge does."""
    optimizer = (phases or {}).get("optimizer_ms")
    return optimizer["verdict"] if optimizer else None


def idle_against_transfers(idle_ms: float, label: str, forward_rows: list[dict]) -> tuple[float | None, str | None]:
    """The most an fp32 FSDP step's transfers can take (ms) and its timed step's idle time against
    it: idle longer than that means the waits are not only for bytes. A step moves each weight three
    times: gathered for forward, again for backward, and its gradient reduce-scattered (the same
    bytes each way). The bound is C1's processes' rates, the idle time this job's, and two processes
    differ by up to ``spread.HOST_SWING``: "higher" or "lower" only beyond that
    (``spread.across_processes``), else ``NOT_SETTLED``; None without a bound."""
    bound = next((3 * f["bound_ms"] for f in forward_rows or ()
                  if f["variant"] == label and f["precision"] == "fp32" and "bound_ms" in f), None)
    return bound, None if bound is None else spread.across_processes(idle_ms, bound)


def launch_gaps(reference: dict | None) -> dict:
    """Whether the traces' threshold for a wait (``LONG_GAP_MS``) is longer than the gaps of a step
    whose compute waits for no gather: DDP (overlap)'s traced step (``reference``, its
    ``compute_gaps``), whose compute lane waits only for its own launches. ``reading``: "longer"
    where its longest gap is below the threshold, "not longer" where it reaches it (a gap over the
    threshold need not be a wait), None where no such trace ran (the threshold is then unchecked)."""
    longest = reference["longest_gap_ms"] if reference else None
    return {"threshold_ms": LONG_GAP_MS, "longest_ms": longest,
            "reading": None if longest is None else "longer" if longest < LONG_GAP_MS else "not longer"}


def part(s: "Section", drawn: list[str], gaps: dict[str, dict | None]) -> dict:
    """C12's summary keys: FSDP's phases against DDP's (``phases_against``), the memory rows
    (``memory``, the first precision's), the state FSDP is predicted to save and what it saves, what
    its forward is made of, how much of each traced step's idle compute lane (``gaps``) the untraced
    step holds, and which traces' gaps the section tabulates: the drawn FSDP ones (``gap_labels``; a
    traced variant that ran out of memory or failed has no trace, so no gaps), and DDP (overlap)'s as
    their reference (``gap_rows``)."""
    rows, setup = s.rows, s.setup
    predicted = predicted_state_GiB(setup)
    memory = [m for m in memory_rows(s.records, MEMORY_VARIANTS) if m["precision"] == s.first]
    ran = by_variant(s.records)
    by_point = {(v, p): r for p, found in ran.items() for v, r in found.items()}
    points = {label: (v, p) for p in rows for v in s.traced if (label := trace_label(v, p)) in s.traces}
    untraced = {label: untraced_idle(gaps.get(label), by_point.get((v, p))) for label, (v, p) in points.items()}
    forward_rows = fsdp_forward(rows, setup, s.fit, by_point)
    for label, idle in untraced.items():
        if idle is None:
            continue
        idle["transfers_ms"], idle["against_transfers"] = idle_against_transfers(idle["idle_ms"], label, forward_rows)
        # DDP (overlap, fp32)'s idle time is a reference only for a step that computes in fp32 too:
        # a bf16 step's kernels are shorter, so less of each transfer hides behind them
        same = compute_precision(*points[label]) == variants.DEFAULT_PRECISION
        idle["reference"] = None if not untraced.get("overlap") else "same compute" if same else "other compute"
    with_gaps = {label for label, found in gaps.items() if found}
    gap_labels = [label for label in drawn if label in with_gaps]
    reference = ["overlap"] if untraced.get("overlap") and "overlap" in with_gaps else []
    first = ran.get(s.first, {})
    phases = phases_against(first.get("fsdp"), first.get("overlap"))
    return phases | {"optimizer_vs_ddp": optimizer_vs_ddp(phases["phases_vs_ddp"]),
        "memory": {m["variant"]: m for m in memory}, "predicted_state_GiB": predicted, "fsdp_forward": forward_rows,
        "saving": fsdp_saving(memory, predicted), "untraced_idle": untraced, "gap_labels": gap_labels,
        "gap_rows": gap_labels + reference, "launch_gaps": launch_gaps(gaps.get("overlap"))}
