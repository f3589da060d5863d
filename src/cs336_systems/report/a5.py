"""A5 report: peak-memory tables (fp32 and bf16), the residual-stream size, the largest forward
allocations with the code that made them, the phases of each step, each step's active-memory
timeline, and the writeup's numbers.

    python -m cs336_systems.report.a5 --records r1.json ... --out-dir DIR

Reads the JSON records of ``cs336_systems.memory.snapshot`` (never the snapshot pickles, which stay
out of git) and draws each record's timeline from the bands it keeps into ``DIR/timelines/<record
name>.png``, which the section embeds by that path below DIR.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from cs336_systems.models import get_size
from cs336_systems.models import MODES as MODE_ORDER
from cs336_systems.report.a5_timeline import draw, draw_placeholder
from cs336_systems.report import contract
from cs336_systems.report.common import load_records, run_provenance, write_table
from cs336_systems.report.contract import Summary

MODE_TITLES = {"forward": "forward", "forward-backward": "forward + backward", "train-step": "full train step"}
MIB = 2**20


def _mib(value: int | float | None) -> float | None:
    return None if value is None else value / MIB


def peak_table(records: list[dict], precision: str) -> pd.DataFrame:
    """One row per context, one column per mode: the peak of live tensors (MiB), or the status."""
    chosen = {}
    for r in records:
        if r["params"]["precision"] == precision:
            chosen.setdefault((r["params"]["context"], r["params"]["mode"]), r)
    modes = [m for m in MODE_ORDER if any(mode == m for _, mode in chosen)]
    rows = []
    for context in sorted({context for context, _ in chosen}):
        row = {"context": context}
        for mode in modes:
            r = chosen.get((context, mode), {"status": ""})
            row[f"{MODE_TITLES[mode]} peak (MiB)"] = (f"{_mib(r['metrics']['peak']['bytes']):,.1f}" if r["status"] == "ok"
                                                      else r["status"].upper())
        train = chosen.get((context, "train-step"))
        if train and train["status"] == "ok":
            row["train step: live before it (MiB)"] = f"{_mib(train['metrics']['initial_bytes']):,.1f}"
        rows.append(row)
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Residual:
    context: int
    batch: int
    d_model: int
    mib: float


def residual_activation(records: list[dict]) -> list[Residual]:
    """(d): bytes of one fp32 residual-stream activation, batch x context x d_model x 4 bytes."""
    out = {}
    for r in records:
        p = r["params"]
        d_model = get_size(p["size"]).d_model
        out[p["context"]] = Residual(p["context"], p["batch"], d_model, p["batch"] * p["context"] * d_model * 4 / MIB)
    return [out[c] for c in sorted(out)]


def top_allocations(records: list[dict], k: int = 10) -> tuple[pd.DataFrame, dict | None]:
    """(e): the largest allocations of the forward snapshot (fp32, the longest context that ran)."""
    forward = [r for r in records if r["status"] == "ok" and r["params"]["mode"] == "forward"
               and r["params"]["precision"] == "fp32"] or \
              [r for r in records if r["status"] == "ok" and r["params"]["mode"] == "forward"]
    if not forward:
        return pd.DataFrame(), None
    chosen = max(forward, key=lambda r: r["params"]["context"])
    rows = []
    for a in chosen["metrics"]["top_allocations"][:k]:
        rows.append({"size (MiB)": f"{_mib(a['size_bytes']):,.2f}", "count": a["count"],
                     "code (first frame in our packages)": a["frame"] or "(none: no frame of ours)",
                     "op": a["op"] or "", "autograd node": a["node"] or ""})
    return pd.DataFrame(rows), chosen


@dataclass(frozen=True)
class Phase:
    name: str
    start_mib: float
    end_mib: float
    peak_mib: float
    host_ms: float
    gpu_ms: float | None


# What a step holds at its peak above what was live before it, by the phase that put it there
# (``Part.what``): what forward kept for backward, the gradients forward and backward left for the
# optimizer, anything else earlier phases left live, and the peak's own phase's rise.
KEPT, GRADIENTS, LEFT, ADDED = "kept by forward", "gradients", "left", "added"
GRADIENTS_MATCH = 0.01      # what backward leaves within 1 % of one fp32 copy of the parameters is the gradients


def _matches(mib: float, copies_mib: float) -> bool:
    """``mib`` is ``copies_mib`` (fp32 copies of the parameters) to ``GRADIENTS_MATCH``."""
    return abs(mib - copies_mib) <= GRADIENTS_MATCH * copies_mib


@dataclass(frozen=True)
class Part:
    what: str
    mib: float


@dataclass(frozen=True)
class Step:
    """One recorded step's live memory and its phases."""
    context: int
    mode: str
    precision: str
    initial_mib: float
    peak_mib: float
    peak_phase: str | None
    phases: list[Phase]
    # what the peak holds above what was live before the step, largest first (``peak_parts``)
    peak_parts: list[Part]


def gradient_mib(size: str) -> float:
    """One fp32 copy of the model's parameters: the gradients a backward leaves (closed form)."""
    return get_size(size).parameter_count() * 4 / MIB


def peak_parts(initial_mib: float, peak_phase: str | None, phases: list[Phase], gradients_mib: float) -> list[Part]:
    """What a step holds at its peak above what was live before it, from its phases' marks, largest
    first: what the phases before the peak's phase left live (that phase's start minus the step's),
    and what the peak's phase added on top (its highest minus its start). What earlier phases left is
    named by what the records show it is: in backward, what forward kept for it; in the optimizer
    step, the gradients where it is one fp32 copy of the parameters (to ``GRADIENTS_MATCH``)."""
    at = {p.name: p for p in phases}
    if peak_phase not in at:
        return []
    phase = at[peak_phase]
    left = phase.start_mib - initial_mib
    what = (KEPT if peak_phase == "backward" else
            GRADIENTS if peak_phase == "optimizer" and _matches(left, gradients_mib) else LEFT)
    parts = [Part(ADDED, phase.peak_mib - phase.start_mib)]
    if phase is not phases[0]:          # the first phase starts from what was live before the step
        parts.append(Part(what, left))
    return sorted(parts, key=lambda p: -p.mib)


def phase_rows(records: list[dict]) -> list[Step]:
    """(a): per recorded step, each phase's live memory at start, end and peak (MiB), and what its peak holds."""
    out = []
    for r in sorted(records, key=lambda r: (r["params"]["precision"], MODE_ORDER.index(r["params"]["mode"]),
                                            r["params"]["context"])):
        if r["status"] != "ok":
            continue
        m = r["metrics"]
        gpu_ms = m.get("phase_gpu_ms") or {}      # absent on the CPU and in records made before it was measured
        phases = [Phase(p["name"], _mib(p["bytes_at_start"]), _mib(p["bytes_at_end"]), _mib(p["peak_bytes"]),
                        p["end_ms"] - p["start_ms"], gpu_ms.get(p["name"])) for p in m["phases"]]
        out.append(Step(
            r["params"]["context"], r["params"]["mode"], r["params"]["precision"], _mib(m["initial_bytes"]),
            _mib(m["peak"]["bytes"]), m["peak"]["phase"], phases,
            peak_parts(_mib(m["initial_bytes"]), m["peak"]["phase"], phases, gradient_mib(r["params"]["size"]))))
    return out


@dataclass(frozen=True)
class Side:
    """One fp32 training step: the activations forward kept for backward against what forward and
    backward left for the optimizer step, and the rise of the phase it peaked in."""
    context: int
    kept_mib: float
    left_mib: float
    rise_mib: float     # the phase the step peaked in: its highest minus its start


@dataclass(frozen=True)
class TrainPeaks:
    """Which of the two a training step's peak sits on. ``left_is_gradients``: at every step what
    backward left is one fp32 copy of the parameters (``gradient_mib``). A step peaks on the larger
    of the two when it peaks in the optimizer step exactly where what backward left is larger (else
    in forward or backward); ``on_smaller``: the contexts where it does not, which the phases' own
    rises on top decided."""
    steps: list[Side]
    gradient_mib: float
    left_is_gradients: bool
    on_smaller: list[int]


def train_peaks(steps: list[Step], size: str) -> TrainPeaks | None:
    """Over the fp32 steps that ran forward, backward and an optimizer step."""
    sides, on_smaller = [], []
    for s in steps:
        at = {p.name: p for p in s.phases}
        if s.precision == "fp32" and {"forward", "backward", "optimizer"} <= set(at):
            peak = at.get(s.peak_phase)
            side = Side(s.context, at["forward"].end_mib - at["forward"].start_mib,
                        at["backward"].end_mib - s.initial_mib, peak.peak_mib - peak.start_mib if peak else 0.0)
            sides.append(side)
            if (s.peak_phase == "optimizer") != (side.left_mib > side.kept_mib):
                on_smaller.append(s.context)
    if not sides:
        return None
    grads = gradient_mib(size)
    return TrainPeaks(sides, grads, all(_matches(s.left_mib, grads) for s in sides), on_smaller)


@dataclass(frozen=True)
class AllocatorCheck:
    points: int
    max_relative_difference: float
    max_reserved_over_allocated_mib: float | None


def allocator_check(records: list[dict]) -> AllocatorCheck | None:
    """On CUDA: the trace's peak against ``torch.cuda.max_memory_allocated`` over the same step."""
    pairs = [(r["metrics"]["peak"]["bytes"], r["metrics"]["max_allocated_bytes"]) for r in records
             if r["status"] == "ok" and r["metrics"].get("max_allocated_bytes")]
    if not pairs:
        return None
    worst = max(abs(a - b) / b for a, b in pairs)
    reserved = [r["metrics"]["max_reserved_bytes"] - r["metrics"]["max_allocated_bytes"] for r in records
                if r["status"] == "ok" and r["metrics"].get("max_reserved_bytes")]
    return AllocatorCheck(len(pairs), worst, _mib(max(reserved)) if reserved else None)


@dataclass(frozen=True)
class Timeline:
    path: str
    context: int
    mode: str
    precision: str
    status: str


def timeline_figures(records: list[dict], stems: list[str], out_dir: Path) -> list[Timeline]:
    """Draw each record's timeline PNG as ``out_dir/timelines/<stem>.png`` (``stems``: the record
    files' names, in the same order), or a note saying why there is none; return their paths
    relative to ``out_dir`` (what the template embeds)."""
    out = []
    for r, stem in zip(records, stems, strict=True):
        p = r["params"]
        title = (f"A5 active memory: {p['size']}, context {p['context']}, batch {p['batch']}, {p['mode']}, "
                 f"{p['precision']}")
        path = out_dir / "timelines" / f"{stem}.png"
        if r.get("timeline"):
            draw(r["timeline"], path, title + (" (out of memory)" if r["status"] == "oom" else ""),
                 r.get("metrics", {}).get("top_allocations") or [])
        else:                       # nothing was recorded: the step failed before it began
            why = r.get("message") or r.get("reason") or "no allocation was recorded"
            draw_placeholder(path, title, f"{r['status'].upper()}: {why}")
        out.append(Timeline(os.path.relpath(path, out_dir), p["context"], p["mode"], p["precision"], r["status"]))
    out.sort(key=lambda f: (f.precision != "fp32", f.precision, MODE_ORDER.index(f.mode), f.context))
    return out


@dataclass(frozen=True)
class Ratio:
    mode: str
    context: int
    ratio: float
    # of fp32's peak, the part above what was live before the step: the only part autocast can shrink
    step_share: float


# Memory peaks repeat to the byte, so no spread decides whether bf16's is above fp32's; the words
# print ratios to two decimals, so "above" starts where they can show it.
ABOVE = 0.01


def precision_ratios(records: list[dict]) -> list[Ratio]:
    """(c) against (b): bf16 peak over fp32 peak, per mode and context where both ran."""
    ran = {(r["params"]["mode"], r["params"]["context"], r["params"]["precision"]): r["metrics"]
           for r in records if r["status"] == "ok"}
    order = lambda point: (MODE_ORDER.index(point[0][0]), point[0][1])
    return [Ratio(mode, context, ran[(mode, context, "bf16")]["peak"]["bytes"] / m["peak"]["bytes"],
                  1 - m["initial_bytes"] / m["peak"]["bytes"])
            for (mode, context, precision), m in sorted(ran.items(), key=order)
            if precision == "fp32" and (mode, context, "bf16") in ran]


@dataclass(frozen=True)
class RatiosRead:
    """What the ratios show, for the words after the mechanism: the lowest ratio, whether it is where
    the step's own part of fp32's peak is largest (``follows``: the one place autocast can save is
    largest there), and the points where bf16's peak is above fp32's by more than ``ABOVE``."""
    lowest: Ratio
    follows: bool
    above: list[Ratio]


def ratios_read(ratios: list[Ratio]) -> RatiosRead | None:
    if not ratios:
        return None
    lowest = min(ratios, key=lambda r: r.ratio)
    return RatiosRead(lowest, lowest.step_share == max(r.step_share for r in ratios),
                      [r for r in ratios if r.ratio > 1 + ABOVE])


@dataclass(frozen=True)
class Answer:
    contexts: list[int]
    train_peak_gib: list[float] | None
    forward_peak_gib: list[float] | None
    live_before_gib: float | None
    # what was live before the step in fp32 copies of the parameters, and whether that is the
    # parameters and AdamW's two moments (three copies, to ``GRADIENTS_MATCH``), as the words say
    live_before_copies: float | None
    live_before_is_state: bool
    bf16_ratio: list[float] | None


def answer(phases: list[Step], ratios: list[Ratio], copy_mib: float | None = None) -> Answer | None:
    """What the section opens with, from the rows it tabulates: fp32's peaks over the contexts (the full
    training step, what was live before it, in ``copy_mib``'s — one fp32 copy of the parameters — where
    given, the forward pass), and bf16's peak against fp32's at the same points."""
    fp32 = [p for p in phases if p.precision == "fp32"]
    if not fp32:
        return None
    gib = lambda mib: mib / 1024
    by_mode = {mode: [p for p in fp32 if p.mode == mode] for mode in ("forward", "train-step")}
    span = lambda rows: [gib(min(r.peak_mib for r in rows)), gib(max(r.peak_mib for r in rows))] if rows else None
    train = by_mode["train-step"]
    before = statistics.median(r.initial_mib for r in train) if train else None
    copies = before / copy_mib if before is not None and copy_mib else None
    return Answer(sorted({p.context for p in fp32}), span(train), span(by_mode["forward"]),
                  gib(before) if before is not None else None, copies,
                  copies is not None and _matches(copies, 3),
                  [min(r.ratio for r in ratios), max(r.ratio for r in ratios)] if ratios else None)


@dataclass(frozen=True)
class Largest:
    """The largest size among the top allocations (the first, as they come sorted): how many blocks of
    it, and the operations that made them. The answer and part (e) both word it."""
    mib: float
    blocks: int
    made_by: list[str]


def largest(top: list[dict]) -> Largest | None:
    if not top:
        return None
    size = max(a["size_bytes"] for a in top)
    same = [a for a in top if a["size_bytes"] == size]
    return Largest(size / MIB, sum(a["count"] for a in same),
                   list(dict.fromkeys(a["op"] or a["node"] or a["frame"] or "unknown" for a in same)))


@dataclass(frozen=True)
class Allocation:
    count: int
    frame: str | None
    op: str | None
    node: str | None


@dataclass(frozen=True)
class A5Summary(Summary):
    size: str
    d_model: int
    num_layers: int
    batch: int
    warmup: int
    device: str
    contexts: list[int]
    precisions: list[str]
    sources: list[str]
    phase_sources: list[str]
    snapshots: list[str]
    points: int
    ok: int
    not_ok: list[str]
    residual: list[Residual]
    phases: list[Step]
    # some phase was timed on the GPU as well (CUDA events at the same marks)
    gpu_timed: bool
    top_context: int | None
    top_precision: str | None
    top_allocations: list[Allocation]
    largest: Largest | None
    allocator_check: AllocatorCheck | None
    bf16_vs_fp32: list[Ratio]
    bf16_read: RatiosRead | None
    timelines: list[Timeline]
    answer: Answer | None
    train_peaks: TrainPeaks | None


CONTRACTS = {"A5": A5Summary}


def summarize(records: list[dict], timelines: list[Timeline], top_record: dict | None) -> A5Summary:
    ok = [r for r in records if r["status"] == "ok"]
    first = records[0]["params"]
    phases = phase_rows(records)
    top = (top_record["metrics"]["top_allocations"] or []) if top_record else []
    ratios = precision_ratios(records)
    return A5Summary(
        provenance=run_provenance(records),
        size=first["size"], d_model=first["d_model"], num_layers=first["num_layers"],
        batch=first["batch"], warmup=first["warmup"], device=first["device"],
        contexts=sorted({r["params"]["context"] for r in records}),
        precisions=[p for p in ("fp32", "bf16") if any(r["params"]["precision"] == p for r in records)],
        sources=sorted({r["metrics"]["source"] for r in ok}),
        phase_sources=sorted({r["metrics"]["phase_source"] for r in ok}),
        snapshots=sorted(r["artifacts"]["snapshot"] for r in records if r.get("artifacts", {}).get("snapshot")),
        points=len(records), ok=len(ok),
        not_ok=[f"context {r['params']['context']} {r['params']['mode']} {r['params']['precision']}: "
                f"{r['status']}" + (f" ({r['message']})" if r.get("message") else "")
                for r in records if r["status"] != "ok"],
        residual=residual_activation(records),
        phases=phases,
        gpu_timed=any(p.gpu_ms is not None for row in phases for p in row.phases),
        top_context=top_record["params"]["context"] if top_record else None,
        top_precision=top_record["params"]["precision"] if top_record else None,
        top_allocations=[Allocation(a["count"], a["frame"], a["op"], a["node"]) for a in top],
        largest=largest(top),
        allocator_check=allocator_check(records),
        bf16_vs_fp32=ratios,
        bf16_read=ratios_read(ratios),
        timelines=timelines,
        answer=answer(phases, ratios, gradient_mib(first["size"])),
        train_peaks=train_peaks(phases, first["size"]),
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.report.a5", description=__doc__.split("\n\n")[0])
    p.add_argument("--records", nargs="+", required=True, help="A5 records (JSON)")
    p.add_argument("--out-dir", required=True, type=Path)
    args = p.parse_args(argv)
    try:
        records = load_records(args.records)
        bad = [r["id"] for r in records if r["id"] != "A5"]
        if bad:
            raise ValueError(f"not A5 records: ids {sorted(set(bad))}")
    except (OSError, ValueError, KeyError) as exc:
        p.error(str(exc))
    timelines = timeline_figures(records, [Path(path).stem for path in args.records], args.out_dir)
    for precision in ("fp32", "bf16"):
        write_table(peak_table(records, precision), args.out_dir, f"peak_{precision}")
    top, top_record = top_allocations(records)
    write_table(top, args.out_dir, "top_allocations")
    contract.write(args.out_dir / "summary.json", summarize(records, timelines, top_record))
    print(f"A5 report: {len(records)} records -> {args.out_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
