"""B1 / B2(a) report: plain attention time and memory over d × sequence, eager and compiled, and the
memory accounting set beside what the records measured: the memory held before backward, the peaks
(where the records have them) and, for each out-of-memory point, what the allocator's message says.

    python -m cs336_systems.report.b1 --rows eager_d16.json ... --out-dir DIR
"""
from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from cs336_systems.report import contract
from cs336_systems.report.common import rows_report_args, run_provenance, save_figure, write_table
from cs336_systems.report.contract import Summary

MIB = 2**20


def frame(records: list[dict]) -> pd.DataFrame:
    rows = []
    for r in records:
        p, m = r["params"], r["metrics"]
        acc = m.get("accounting_bytes", {})
        rows.append({"d": p["d"], "seq": p["seq"], "compiled": p["compiled"], "status": r["status"],
                     "forward_ms": m.get("forward_ms", math.nan), "backward_ms": m.get("backward_ms", math.nan),
                     "measured_before_backward_MiB": (m.get("memory_before_backward_bytes") or math.nan) / MIB,
                     # peaks of one forward and one backward; absent from records made before they were measured
                     "forward_peak_MiB": (m.get("forward_peak_bytes") or math.nan) / MIB,
                     "backward_peak_MiB": (m.get("backward_peak_bytes") or math.nan) / MIB,
                     "failed_during": m.get("failed_during"),
                     "predicted_saved_MiB": acc.get("saved", math.nan) / MIB,
                     "predicted_forward_peak_MiB": acc.get("forward_peak", math.nan) / MIB,
                     "predicted_backward_peak_MiB": acc.get("backward_peak", math.nan) / MIB})
    return pd.DataFrame(rows).sort_values(["compiled", "d", "seq"]).reset_index(drop=True)


def square_MiB(row) -> float:
    """One N × N fp32 matrix of the batch: the closed form's backward peak exceeds its forward peak by one."""
    return row["predicted_backward_peak_MiB"] - row["predicted_forward_peak_MiB"]


def vector_MiB(row) -> float:
    """One (batch, N, d) tensor: the closed form saves four (q, k, v, O) beside the N × N matrix P."""
    return (row["predicted_saved_MiB"] - square_MiB(row)) / 4


def plot(df: pd.DataFrame, path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    ok = df[df["status"] == "ok"]
    for (d, compiled), part in ok.groupby(["d", "compiled"]):
        style = "--" if compiled else "-"
        axes[0].plot(part["seq"], part["forward_ms"] + part["backward_ms"], style, marker="o",
                     label=f"d={d}{' compiled' if compiled else ''}")
        if not compiled:
            axes[1].plot(part["seq"], part["measured_before_backward_MiB"], marker="o", label=f"d={d} measured")
    eager = df[~df["compiled"]].drop_duplicates("seq")
    axes[1].plot(eager["seq"], eager["predicted_saved_MiB"], "k:", label="predicted (d=16)")
    for ax, label in zip(axes, ("forward + backward (ms)", "memory before backward (MiB)")):
        ax.set(xscale="log", yscale="log", xlabel="sequence length", ylabel=label)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:       # a run where nothing ran has no lines to name
            ax.legend(fontsize=7)
    save_figure(fig, path)


_UNITS = {"bytes": 1 / MIB, "KiB": 1 / 1024, "MiB": 1, "GiB": 1024}
_ALLOCATOR_FIELDS = {
    "capacity_MiB": r"total capacity of ([\d.]+) (\w+)",
    "free_MiB": r"of which ([\d.]+) (\w+) is free",
    "requested_MiB": r"Tried to allocate ([\d.]+) (\w+)",
    "allocated_MiB": r"([\d.]+) (\w+) is allocated by PyTorch",
    # "... is reserved by PyTorch but unallocated": the record cuts the message at 300 characters, in that clause
    "reserved_unallocated_MiB": r"and ([\d.]+) (\w+) is reserved",
}


def allocator_state(message: str | None) -> dict[str, float]:
    """The numbers in PyTorch's CUDA out-of-memory message (card capacity, what was free on it, the
    allocation that failed, what tensors held then, what the caching allocator held unused), so the
    accounting can be set beside what really happened."""
    state = {}
    for key, pattern in _ALLOCATOR_FIELDS.items():
        match = re.search(pattern, message or "")
        if match and match.group(2) in _UNITS:
            state[key] = float(match.group(1)) * _UNITS[match.group(2)]
    return state


def needed_at_least(alloc: dict[str, float]) -> float:
    """What the failing pass needed at least: what tensors held at the failure plus the request that
    failed (NaN where the message lacks either)."""
    return alloc["allocated_MiB"] + alloc["requested_MiB"] if {"allocated_MiB", "requested_MiB"} <= set(alloc) \
        else math.nan


ARITHMETIC = "arithmetic"          # the closed form's peak alone exceeds the card
OVER_CARD = "over the card"        # what tensors held at the failure plus the request exceed the card
NOT_SETTLED = "not settled"        # neither: the records do not show why


def oom_cause(closed_form_peak_MiB: float, alloc: dict[str, float], closed_form_holds: bool = True) -> str:
    """Why a point ran out of memory, as far as its record shows. Blamed on the arithmetic when the
    closed form's peak exceeds the card; on the card's size when what tensors held at the failure plus
    the failed request exceed it (the pass could not fit then, whatever the allocator did); otherwise
    the records do not settle it. No record tests the caching allocator itself (no run sets its
    ``expandable_segments``), so no cause is read off what it held reserved (``free_and_reserved_cover``
    states those numbers). ``closed_form_holds`` False: the closed form (eager's) is not this variant's
    peak — compiled attention's fused backward holds less (B2 measures it) — so it blames nothing."""
    capacity = alloc.get("capacity_MiB")
    if capacity is None:
        return NOT_SETTLED
    if closed_form_holds and closed_form_peak_MiB > capacity:       # False for a NaN closed form
        return ARITHMETIC
    if needed_at_least(alloc) > capacity:          # False for a NaN
        return OVER_CARD
    return NOT_SETTLED


def free_and_reserved_cover(alloc: dict[str, float]) -> bool:
    """The message's numbers: the card's free memory was less than the request, but free memory and
    what the caching allocator held reserved but unallocated together were more. Why the request
    failed all the same the records do not show."""
    free, unused, requested = (alloc.get(k) for k in ("free_MiB", "reserved_unallocated_MiB", "requested_MiB"))
    return None not in (free, unused, requested) and free < requested <= free + unused


def failed_pass(row) -> str | None:
    """The pass a point ran out in, as its record names it; None where the record names none."""
    recorded = row.get("failed_during")
    return recorded if isinstance(recorded, str) else None


UNDERCOUNT = 0.01       # a lower bound 1 % above the closed form and the benchmark's own tensors shows an undercount


@dataclass(frozen=True)
class OutOfMemory:
    variant: str
    d: int
    seq: int
    predicted_backward_peak_MiB: float | None
    # the numbers of the allocator's message, those it holds (allocator_state)
    allocator: dict[str, float]
    needed_at_least_MiB: float | None
    failed_during: str | None
    cause: str
    free_and_reserved_cover: bool
    # whether what it needed at least, and the closed form's peak, fit the card (where the message gives its capacity)
    needed_fits: bool
    closed_form_fits: bool
    undercount: Undercount | None


@dataclass(frozen=True)
class Undercount:
    """What the failing pass needed beyond the closed form's peak of that pass."""
    closed_form_MiB: float
    matrices: float
    needed_over_saved: float


def out_of_memory_points(df: pd.DataFrame, records: list[dict]) -> list[OutOfMemory]:
    """Each out-of-memory point with its allocator state, the pass it failed in, the cause, and what
    the failure proves about the closed form: the failing pass needed at least what tensors held plus
    the request; where that exceeds the closed form's peak of that pass (with the four (batch, N, d)
    gradients the benchmark keeps beside it), the closed form undercounts."""
    messages = {(r["params"]["d"], r["params"]["seq"], r["params"]["compiled"]): r.get("message")
                for r in records if r["status"] == "oom"}
    points = []
    for _, row in df[df["status"] == "oom"].sort_values(["compiled", "seq", "d"]).iterrows():
        alloc = allocator_state(messages.get((row["d"], row["seq"], row["compiled"])))
        during = failed_pass(row)
        closed = row["predicted_forward_peak_MiB" if during == "forward" else "predicted_backward_peak_MiB"]
        needed = needed_at_least(alloc)
        square = square_MiB(row)
        undercounts = needed > (closed + 4 * vector_MiB(row)) * (1 + UNDERCOUNT) and square > 0
        capacity = alloc.get("capacity_MiB", math.nan)         # NaN: neither fits
        points.append(OutOfMemory(
            "compiled" if row["compiled"] else "eager", int(row["d"]), int(row["seq"]),
            _num(row["predicted_backward_peak_MiB"]), alloc, _num(needed),
            during, oom_cause(row["predicted_backward_peak_MiB"], alloc, closed_form_holds=not row["compiled"]),
            free_and_reserved_cover(alloc),
            bool(needed <= capacity), bool(row["predicted_backward_peak_MiB"] <= capacity),
            Undercount(float(closed), float((needed - closed) / square), float(needed / row["predicted_saved_MiB"]))
            if undercounts else None))
    return points


def _num(value: float) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


CONSTANT = 1.0      # MiB: offsets this close together are one constant


@dataclass(frozen=True)
class Longest:
    """The longest point's reading against the closed form."""
    d: int
    seq: int
    measured_MiB: float
    predicted_MiB: float


@dataclass(frozen=True)
class BeforeBackward:
    points: int
    rest_min_MiB: float
    rest_max_MiB: float
    constant: bool
    longest: Longest


def before_backward_check(df: pd.DataFrame) -> BeforeBackward | None:
    """The memory read before backward against the closed form's saved bytes. The benchmark also holds
    the upstream gradient (one (batch, N, d) tensor, not saved by autograd), so the reading should be
    saved + that tensor + whatever does not depend on the shapes: the range of that remainder over the
    points, and whether it is one constant."""
    ok = df[(df["status"] == "ok") & df["measured_before_backward_MiB"].notna()]
    if ok.empty:
        return None
    rest = ok["measured_before_backward_MiB"] - ok["predicted_saved_MiB"] - ok.apply(vector_MiB, axis=1)
    longest = ok.sort_values(["seq", "d"]).iloc[-1]
    return BeforeBackward(int(len(ok)), float(rest.min()), float(rest.max()), bool(rest.max() - rest.min() <= CONSTANT),
                          Longest(int(longest["d"]), int(longest["seq"]), float(longest["measured_before_backward_MiB"]),
                                  float(longest["predicted_saved_MiB"])))


@dataclass(frozen=True)
class LongestPeak(Longest):
    """The longest point's peak: how far from the closed form in N × N matrices (``excess_direction``
    says which way), and its ratio to the saved bytes."""
    excess_matrices: float | None
    excess_direction: str
    over_saved: float


@dataclass(frozen=True)
class PeakCheck:
    """One pass's measured peak ÷ the closed form's, over the points."""
    points: int
    min: float
    max: float
    longest: LongestPeak


def peaks_check(df: pd.DataFrame) -> dict[str, dict[str, PeakCheck]] | None:
    """Where the records hold the peaks of one forward and one backward: each against the closed
    form's peak of that pass, per variant, as measured ÷ closed form, and at the longest length as
    the excess in N × N matrices (what the closed form leaves out there)."""
    found = {}
    for compiled, part in df[df["status"] == "ok"].groupby("compiled"):
        for phase in ("forward", "backward"):
            rows = part.dropna(subset=[f"{phase}_peak_MiB"])
            if rows.empty:
                continue
            ratio = rows[f"{phase}_peak_MiB"] / rows[f"predicted_{phase}_peak_MiB"]
            longest = rows.sort_values(["seq", "d"]).iloc[-1]
            excess = longest[f"{phase}_peak_MiB"] - longest[f"predicted_{phase}_peak_MiB"]
            found.setdefault("compiled" if compiled else "eager", {})[phase] = PeakCheck(
                int(len(rows)), float(ratio.min()), float(ratio.max()), LongestPeak(
                    int(longest["d"]), int(longest["seq"]), float(longest[f"{phase}_peak_MiB"]),
                    float(longest[f"predicted_{phase}_peak_MiB"]),
                    float(abs(excess) / square_MiB(longest)) if square_MiB(longest) > 0 else None,
                    "more" if excess >= 0 else "less",
                    float(longest[f"{phase}_peak_MiB"] / longest["predicted_saved_MiB"])))
    return found or None


@dataclass(frozen=True)
class Limits:
    largest_fit: list[int]
    first_oom: list[int]


def limits(df: pd.DataFrame) -> dict[str, Limits]:
    """Per variant, the longest sequence that ran and the first that ran out, over the head dims."""
    found = {}
    for compiled, part in df.groupby("compiled"):
        fit = part[part["status"] == "ok"].groupby("d")["seq"].max()
        oom = part[part["status"] == "oom"].groupby("d")["seq"].min()
        found["compiled" if compiled else "eager"] = Limits(sorted({int(s) for s in fit}), sorted({int(s) for s in oom}))
    return found


def smallest_oom(eager_ooms: list[OutOfMemory]) -> OutOfMemory | None:
    """The shortest (then narrowest) point where eager ran out."""
    return min(eager_ooms, key=lambda p: (p.seq, p.d), default=None)


@dataclass(frozen=True)
class Undercounts:
    one_matrix: bool
    at_least_MiB: float


def undercounts(ooms: list[OutOfMemory]) -> Undercounts | None:
    """Over the cases where the closed form undercounts what the failing pass needed: whether every
    one is about one N x N matrix (within ``ONE_MATRIX`` of one, on both sides: the words say "at
    least one N x N matrix" and name one more temporary) and the least it needed beyond the closed form."""
    short = [p for p in ooms if p.undercount]
    if not short:
        return None
    return Undercounts(all(abs(p.undercount.matrices - 1) < ONE_MATRIX for p in short),
                       min(p.needed_at_least_MiB - p.undercount.closed_form_MiB for p in short))


# How far from one whole N x N matrix an undercount may be and still be called one: a tenth, well
# beyond the allocator's rounding of one matrix and well short of half of one.
ONE_MATRIX = 0.1


@dataclass(frozen=True)
class B1Summary(Summary):
    statuses: dict[str, int]
    # points measured in a job where eager and compiled took turns, and those jobs' rounds
    in_turns: int
    rounds: list[int]
    limits: dict[str, Limits]
    smallest_oom: OutOfMemory | None
    out_of_memory: list[OutOfMemory]
    undercounts: Undercounts | None
    before_backward: BeforeBackward | None
    peaks: dict[str, dict[str, PeakCheck]] | None
    quadratic_from: dict[str, int]      # by head dimension (JSON keys are strings)


CONTRACTS = {"B1": B1Summary}


def quadratic_from(df: pd.DataFrame) -> dict[int, int]:
    """Per head dimension d measured, the sequence length from which the N x N part of what forward
    saves is the larger: ``attention_memory``'s B·N² against its 4·B·N·d, equal at N = 4d."""
    return {int(d): 4 * int(d) for d in sorted(df["d"].unique())}


def summarize(df: pd.DataFrame, records: list[dict]) -> B1Summary:
    ooms = out_of_memory_points(df, records)
    return B1Summary(
        provenance=run_provenance(records), statuses=df["status"].value_counts().to_dict(),
        in_turns=sum(1 for r in records if (r["metrics"].get("turns") or {}).get("job")),
        rounds=sorted({r["metrics"]["turns"]["rounds"] for r in records if r["metrics"].get("turns")}),
        limits=limits(df), smallest_oom=smallest_oom([p for p in ooms if p.variant == "eager"]),
        out_of_memory=ooms, undercounts=undercounts(ooms), before_backward=before_backward_check(df),
        peaks=peaks_check(df), quadratic_from=quadratic_from(df))


def main(argv=None) -> int:
    records, out_dir = rows_report_args("cs336_systems.report.b1", __doc__, argv)
    df = frame(records)
    shown = df.assign(**{c: df[c].round(3) for c in df.columns if c.endswith(("_ms", "_MiB"))})
    write_table(shown, out_dir)
    plot(df, out_dir / "time_and_memory.png")
    contract.write(out_dir / "summary.json", summarize(df, records))
    print(f"B1 report: {len(df)} points -> {out_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
