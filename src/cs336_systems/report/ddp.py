"""C2–C8, C10–C12: the data-parallel training variants — one report per deliverable, each writing
its own folder: a table of the variants it discusses (one row per variant and precision), its
figures, and the summary its section quotes.

    python -m cs336_systems.report.ddp C8 --records results/RUN/C3/records/naive_fp32.json ... \
        --traces results/RUN/C3/traces/naive_fp32.json.gz ... --traced naive overlap \
        --c1-summary results/RUN/C1/summary.json --out-dir results/RUN/C8

Which variants each deliverable reads is the registry's (``deliverables``, as ``READS`` below); where their records live is
``cs336_systems.distributed.variants`` (each variant's own deliverable). The summary's rows are the
first precision's (fp32 where the run has it); ``by_precision`` holds the same rows for each.

Comparisons. Records of one job (``metrics.turns``: every variant of a precision took turns in one
process group, ``train_bench``) are compared per round (``record_difference``: the median per-round
difference, with as spread the largest distance of a round's difference from it,
``report.spread.paired_records``); an overhead is a variant's step against the baseline of its own
job, and a variant beats PyTorch DDP only where that paired verdict says so. Records without a shared
job (one process per variant, as the committed runs before it were measured) are compared by the
range their fastest and slowest steps allow, and the summary says the comparison spans processes
(``paired`` false).
"""
from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from cs336_systems import deliverables
from cs336_systems.accounting.hardware import BY_DEVICE_NAME
from cs336_systems.distributed import traces as stored_traces
from cs336_systems.distributed import variants
from cs336_systems.report import spread as paired_spread
from cs336_systems.report.common import load_records, run_provenance, save_figure, write_summary, write_table

GIB = 2**30
PHASES = ("forward_ms", "backward_ms", "comm_wait_ms", "optimizer_ms")
SECTIONS = tuple(deliverables.reported_by("cs336_systems.report.ddp"))
BUCKETED = deliverables.BUCKET_SIZES
MEMORY_VARIANTS = deliverables.get("C11").variants

# The variants (registry names; bucketed-<MB> is every bucket size) whose records each deliverable's
# report reads, and whether it reads their traces and C1's fit: the registry says. None: every
# variant of the run.
READS: dict[str, tuple[str, ...] | None] = {ident: deliverables.get(ident).variants for ident in SECTIONS}
READS_TRACES = tuple(ident for ident in SECTIONS if deliverables.get(ident).traces)
READS_C1 = tuple(ident for ident in SECTIONS if "C1" in deliverables.get(ident).reads)

# PyTorch's DDP waits for its buckets inside backward (its reducer's hooks finish every all-reduce
# before backward returns), so the phase after backward reads ~0 for it: its communication costs
# show in its backward, never as nothing. Its rows carry no wait; ``backward_waits`` sets their
# backward against one that communicates nothing.
WAITS_IN_BACKWARD = ("torch-ddp",)
# The variants whose backward communicates nothing (they communicate after it, or never): their
# backward is the computation alone, the reference for a backward that waits inside.
QUIET_BACKWARD = (variants.BASELINE, "naive", "flat")
# Variants whose matmuls run in another dtype than their record's precision says (fsdp-bf16 casts
# its weights to bf16): their steps are not the same computation as the others'.
OTHER_COMPUTE = ("fsdp-bf16",)
IN_BACKWARD_NOTE = "waits inside backward (PyTorch's reducer): nothing left to wait for after it"

# Passes over every gradient (each reads and writes all of them) that a variant's
# ``finish_gradient_synchronization`` makes on the compute stream after backward, besides the
# all-reduces: naive and overlap divide each gradient in place; flat flattens them into one
# buffer, divides it and copies the means back; bucketed-<MB> flattens each bucket during backward,
# so after it divides and copies back; with the buckets as the gradients' storage (view, ready)
# only the division is left, and averaging inside the all-reduce (avg) leaves none. The bf16
# buckets and FSDP are left out: their passes are not whole fp32 read-and-write passes.
AFTER_BACKWARD_PASSES = {"naive": 1, "flat": 3, "overlap": 1, "overlap-sharded": 1, BUCKETED: 2,
                         "bucketed-view-<MB>": 1, "bucketed-ready-<MB>": 1, "bucketed-avg-<MB>": 0}


reads = deliverables.variants_read


def step_table(records: list[dict]) -> pd.DataFrame:
    """One row per record. A variant that waits inside backward (``WAITS_IN_BACKWARD``) gets no
    wait and no share of the step waiting, and a note saying where its wait went."""
    rows = []
    for r in records:
        m = r["metrics"]
        memory = (m.get("memory_per_rank") or [{}])[0]
        inside = r["params"]["variant"] in WAITS_IN_BACKWARD
        note = r.get("reason") or r.get("message") or ""
        rows.append({"variant": r["params"]["variant"], "precision": variants.precision_of(r), "status": r["status"],
                     **{phase: m.get(phase) for phase in PHASES},
                     "step_ms": m.get("step_ms"), "step_range_ms": _step_range(m.get("steps") or []),
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
    per-round difference); else the difference of the medians, across processes. Added only where
    the run has an ok baseline (a precision without one gets no number)."""
    base = table[(table["variant"] == variants.BASELINE) & (table["status"] == "ok")]
    if base.empty:
        return table
    base_ms = table["precision"].map(dict(zip(base["precision"], base["step_ms"].astype(float))))
    over = table["step_ms"] - base_ms
    if records is not None:
        bases = {p: r for p, found in _by_variant(records).items() if (r := found.get(variants.BASELINE))}
        for i, r in enumerate(records):
            mine = bases.get(variants.precision_of(r))
            found = record_difference(r, mine) if mine is not None and r["status"] == "ok" else None
            if found is not None and found["paired"]:
                over.iloc[i] = found["ms"]
    out = table.copy()
    out.insert(out.columns.get_loc("step_range_ms") + 1, "overhead_ms", over)
    out.insert(out.columns.get_loc("overhead_ms") + 1, "overhead_pct", 100 * out["overhead_ms"] / base_ms)
    return out


def step_spread(record: dict) -> tuple[float, float, float] | None:
    """(median, fastest, slowest) of rank 0's timed steps, ms; None for a record that is not ok."""
    if record["status"] != "ok":
        return None
    times = [s["step_ms"] for s in record["metrics"].get("steps") or [] if s.get("step_ms") is not None]
    median = record["metrics"]["step_ms"]
    return (median, min(times, default=median), max(times, default=median))


def overhead_range(step: tuple[float, float, float], base: tuple[float, float, float]) -> dict:
    """A variant's overhead against the baseline with the spread both carry: the medians'
    difference, and the least and most it can be given the fastest and slowest steps of each."""
    return {"ms": step[0] - base[0], "low_ms": step[1] - base[2], "high_ms": step[2] - base[1],
            "pct": 100 * (step[0] - base[0]) / base[0]}


def compare_overheads(ours: dict, anchor: dict) -> str:
    """What the numbers support about ``ours`` against ``anchor`` (each from ``overhead_range``):
    "halves" where even our largest overhead is at most half the anchor's smallest; "less" where our
    largest is below the anchor's smallest; "more" the other way round; "unsettled" where the
    ranges overlap or the anchor has no overhead to compare with (its smallest is not above zero)."""
    if anchor["low_ms"] <= 0:
        return "unsettled"
    if ours["high_ms"] <= 0.5 * anchor["low_ms"]:
        return "halves"
    if ours["high_ms"] < anchor["low_ms"]:
        return "less"
    if ours["low_ms"] > anchor["high_ms"]:
        return "more"
    return "unsettled"


def phase_spread(record: dict, phase: str) -> tuple[float, float, float] | None:
    """(median, fastest, slowest) of one phase over rank 0's timed steps, ms; None for a record that
    is not ok or has no such phase."""
    if record["status"] != "ok" or record["metrics"].get(phase) is None:
        return None
    times = [s[phase] for s in record["metrics"].get("steps") or [] if s.get(phase) is not None]
    median = record["metrics"][phase]
    return (median, min(times, default=median), max(times, default=median))


def difference(a: tuple[float, float, float], b: tuple[float, float, float]) -> dict:
    """``a`` less ``b`` (each a (median, fastest, slowest) spread): the medians' difference and the
    least and most it can be given the fastest and slowest of each; ``sign`` is +1 where even the
    least is above zero, -1 where even the most is below, 0 where the spreads overlap."""
    low, high = a[1] - b[2], a[2] - b[1]
    return {"ms": a[0] - b[0], "low_ms": low, "high_ms": high, "sign": 1 if low > 0 else -1 if high < 0 else 0}


# A record's phase (its metrics' name) -> its name in ``metrics.rounds`` (train_bench.ROUND_PHASES).
ROUND_PHASE = {"forward_ms": "forward", "backward_ms": "backward", "comm_wait_ms": "comm_wait",
               "optimizer_ms": "optimizer", "step_ms": "step"}


def record_difference(a: dict, b: dict, phase: str = "step_ms") -> dict | None:
    """``a``'s ``phase`` less ``b``'s, as ``difference`` gives it (``ms``, ``low_ms``, ``high_ms``,
    ``sign``) plus ``paired``. Measured in one job: paired per round (``spread.paired_records``):
    ``ms`` the median per-round difference, ``low_ms``/``high_ms`` it less/plus the spread across
    rounds, ``sign`` the paired verdict. Else (the comparison spans processes) the range the two
    records' fastest and slowest steps allow. None where either has no such phase."""
    found = paired_spread.paired_records(a, b, ROUND_PHASE[phase]) if a["status"] == b["status"] == "ok" else None
    if found is not None and found.rounds:
        return {"ms": found.difference, "low_ms": found.difference - found.spread,
                "high_ms": found.difference + found.spread,
                "sign": {"higher": 1, "lower": -1}.get(found.verdict, 0), "paired": True, "rounds": found.rounds}
    mine, theirs = phase_spread(a, phase), phase_spread(b, phase)
    if not mine or not theirs:
        return None
    return difference(mine, theirs) | {"paired": False}


def _by_variant(records: list[dict]) -> dict[str, dict[str, dict]]:
    """The ok records per precision, by variant."""
    out: dict[str, dict[str, dict]] = {}
    for r in records:
        if r["status"] == "ok":
            out.setdefault(variants.precision_of(r), {})[r["params"]["variant"]] = r
    return out


def backward_waits(records: list[dict]) -> dict[str, dict[str, dict]]:
    """Per precision, for each variant that waits inside backward (``WAITS_IN_BACKWARD``): its
    backward against a backward that communicates nothing, the baseline's where the run has it,
    else the longer of naive's and flat's (the smaller difference), with the range the steps allow
    (``difference``); whether its backward is the longest of the precision's variants beyond the
    steps' spread (its fastest slower than every other's slowest); and its step
    against every other variant's that runs the same computation (``difference``, keyed by variant;
    the baseline's is the overhead, and ``OTHER_COMPUTE`` computes otherwise)."""
    out: dict[str, dict[str, dict]] = {}
    for precision, found in _by_variant(records).items():
        backward = {v: phase_spread(r, "backward_ms") for v, r in found.items()}
        quiet = [v for v in ((variants.BASELINE,) if variants.BASELINE in found else QUIET_BACKWARD)
                 if v in found and backward[v]]
        reference = max(quiet, key=lambda v: backward[v][0], default=None)
        for variant in WAITS_IN_BACKWARD:
            if variant not in found or not backward[variant]:
                continue
            mine = backward[variant]
            out.setdefault(precision, {})[variant] = {
                "backward_ms": mine[0], "reference": reference,
                "reference_backward_ms": backward[reference][0] if reference else None,
                "excess": record_difference(found[variant], found[reference], "backward_ms") if reference else None,
                "longest": all(mine[1] > b[2] for v, b in backward.items() if b and v != variant),
                "steps": {v: d for v, r in found.items() if v not in (variant, variants.BASELINE)
                          and v not in OTHER_COMPUTE and (d := record_difference(found[variant], r)) is not None}}
    return out


def gradient_tensors(size_name: str) -> int:
    """The model's trainable parameter tensors, each one all-reduce for naive DDP."""
    from cs336_systems.accounting.transformer import transformer_parameter_tensors
    from cs336_systems.models import get_size

    return sum(transformer_parameter_tensors(get_size(size_name)).values())


def after_backward_pass_ms(variant: str, grad_bytes: float, memory_Bps: float | None) -> float | None:
    """The least time the variant's passes over the gradients after backward take
    (``AFTER_BACKWARD_PASSES``; each reads and writes every gradient) at the card's datasheet memory
    bandwidth; None where the variant's passes or the card's bandwidth are not known."""
    passes = AFTER_BACKWARD_PASSES.get(variants.lookup(variant).name)
    if passes is None or not memory_Bps:
        return None
    return passes * 2 * grad_bytes / memory_Bps * 1e3


def memory_bandwidth(records: list[dict]) -> float | None:
    """The datasheet memory bandwidth (bytes/s) of the card the records ran on; None for a card
    ``accounting.hardware`` does not list, a CPU run, or records from more than one card."""
    gpus = {r["provenance"].get("gpu") for r in records}
    card = BY_DEVICE_NAME.get(gpus.pop()) if len(gpus) == 1 else None
    return card.hbm_bandwidth if card else None


def paid_per_call(records: list[dict], fit: dict | None) -> dict[str, dict]:
    """Per precision where naive and flat both ran: the cost of one more all-reduce when calls are
    issued back to back after backward, fitted where it is paid. Naive makes one call per gradient
    tensor plus one to agree on which gradients exist; flat makes one for the same bytes but also
    copies every gradient into its buffer and back (two passes naive does not make, at the least
    time the card's memory bandwidth allows). So each extra call costs

        o = (naive's wait − flat's wait + flat's extra passes) / (naive's calls − flat's calls),

    ``o_ms`` from the medians and ``o_low_ms`` from naive's fastest wait against flat's slowest
    (both lower bounds, the passes being counted at peak bandwidth). With C1's fit, ``o_high_ms``:
    the most naive's calls can cost each, its slowest wait less its bytes at C1's bandwidth and its
    own division pass. A CPU run (no memory bandwidth) counts no passes."""
    out = {}
    bandwidth = memory_bandwidth(records)
    for precision, found in _by_variant(records).items():
        naive, flat = found.get("naive"), found.get("flat")
        if not naive or not flat or not naive["metrics"].get("parameter_count"):
            continue
        calls = {"naive": gradient_tensors(naive["params"]["size"]) + 1, "flat": 1}
        grad_bytes = naive["metrics"]["parameter_count"] * variants.lookup("naive").gradient_bytes
        waits = record_difference(naive, flat, "comm_wait_ms")
        passes = {v: after_backward_pass_ms(v, grad_bytes, bandwidth) for v in calls}
        extra = passes["flat"] - passes["naive"] if bandwidth else 0.0
        extra_calls = calls["naive"] - calls["flat"]
        found_here = {"calls": calls, "grad_MB": grad_bytes / 1e6, "waits": waits, "passes_ms": passes,
                      "extra_passes_ms": extra, "memory_GBps": bandwidth / 1e9 if bandwidth else None,
                      "o_ms": (waits["ms"] + extra) / extra_calls, "o_low_ms": (waits["low_ms"] + extra) / extra_calls,
                      "o_high_ms": None, "c1_o_ms": fit["o_ms"] if fit else None}
        if fit and fit.get("w_GBps"):
            slowest = phase_spread(naive, "comm_wait_ms")[2]
            own = passes["naive"] or 0.0
            found_here["o_high_ms"] = (slowest - grad_bytes / (fit["w_GBps"] * 1e9) * 1e3 - own) / calls["naive"]
        out[precision] = found_here
    return out


def bucketed_against_overlap(records: list[dict]) -> dict[str, dict]:
    """Per precision: the bucket sizes' waits after backward against overlap's (``difference``, by
    variant), and what the passes over the gradients after backward (``AFTER_BACKWARD_PASSES``)
    account for: the least time the bucket sizes' extra pass takes at the card's memory bandwidth."""
    out = {}
    bandwidth = memory_bandwidth(records)
    for precision, found in _by_variant(records).items():
        overlap = found.get("overlap")
        sizes = {v: r for v, r in found.items() if is_bucket_size(v)}
        if not overlap or not sizes:
            continue
        mine = phase_spread(overlap, "comm_wait_ms")
        waits = {v: record_difference(r, overlap, "comm_wait_ms") for v, r in sizes.items()}
        grad_bytes = overlap["metrics"].get("parameter_count", 0) * variants.lookup("overlap").gradient_bytes
        extra = None
        if bandwidth and grad_bytes:
            extra = after_backward_pass_ms(next(iter(sizes)), grad_bytes, bandwidth) - after_backward_pass_ms("overlap", grad_bytes, bandwidth)
        low = min(w["low_ms"] for w in waits.values())
        high = max(w["high_ms"] for w in waits.values())
        out[precision] = {
            "overlap_wait_ms": mine[0], "waits": waits,
            "bucketed_wait_range_ms": [min(r["metrics"]["comm_wait_ms"] for r in sizes.values()),
                                       max(r["metrics"]["comm_wait_ms"] for r in sizes.values())],
            "every_size_longer": all(w["sign"] > 0 for w in waits.values()),
            "extra_low_ms": low, "extra_high_ms": high, "extra_pass_ms": extra, "memory_GBps": bandwidth / 1e9 if bandwidth else None,
            # the extra pass can be the whole difference only where it fits in the least of it
            "pass_fits": extra is not None and extra <= low}
    return out


def best_bucket_size(records: list[dict], precision: str) -> dict | None:
    """C8: the bucket size with the shortest median step in ``precision``, and its step against the
    other replicating variants' (``versus``): naive, flat, overlap and PyTorch's DDP."""
    sizes = {v: r for v, r in _by_variant(records).get(precision, {}).items() if is_bucket_size(v)}
    if not sizes:
        return None
    best = min(sizes, key=lambda v: sizes[v]["metrics"]["step_ms"])
    others = ("naive", "flat", "overlap", "torch-ddp")
    return {"variant": best, "step_ms": sizes[best]["metrics"]["step_ms"], "buckets": sizes[best]["metrics"].get("buckets"),
            "versus": versus(records, [(best, o) for o in others], precision).get(best, {})}


# The variants whose overhead stands against PyTorch DDP's: replicas of the whole model with plain
# AdamW, as PyTorch DDP (not the baseline, not optimizer-state sharding or FSDP, which change what
# each rank holds and computes).
CONTENDERS_OF = ("C3", "C4", "C6", "C8")


def overheads(records: list[dict]) -> dict[str, dict]:
    """Per precision: every variant's overhead (``overhead_of``: paired against the baseline of its
    own job, else the range across processes), the best contender (smallest median overhead) and
    what the data says of it against PyTorch DDP's: ``compare_overheads_paired`` where the contender,
    PyTorch DDP and the baseline took turns in one job (``paired``), else ``compare_overheads`` on
    the ranges. Precisions without an ok baseline are left out."""
    out = {}
    for precision, found in _by_variant(records).items():
        base = found.get(variants.BASELINE)
        if base is None:
            continue
        rows = {v: overhead_of(r, base) for v, r in found.items() if v != variants.BASELINE}
        anchor = rows.get("torch-ddp")
        contenders = {v: r for v, r in rows.items() if v != "torch-ddp"
                      and variants.lookup(v).deliverable in CONTENDERS_OF}
        best = min(contenders, key=lambda v: contenders[v]["ms"], default=None)
        paired = bool(best and anchor and contenders[best]["paired"] and anchor["paired"]
                      and paired_spread.same_job(found[best], found["torch-ddp"]))
        verdict = None
        if best and anchor:
            verdict = (compare_overheads_paired(found[best], found["torch-ddp"], base) if paired
                       else compare_overheads(contenders[best], anchor))
        spread = step_spread(base)
        out[precision] = {"baseline_ms": spread[0], "baseline_range_ms": [spread[1], spread[2]], "rows": rows,
                          "best": best, "verdict": verdict, "paired": paired,
                          "ratio": contenders[best]["ms"] / anchor["ms"] if best and anchor and anchor["ms"] > 0 else None}
    return out


def overhead_of(record: dict, base: dict) -> dict:
    """A variant's overhead: its step less the baseline's (``record_difference``: paired per round in
    one job, else the range the steps allow), and the median difference as % of the baseline's step."""
    found = record_difference(record, base)
    return found | {"pct": 100 * found["ms"] / step_spread(base)[0]}


def compare_overheads_paired(ours: dict, anchor: dict, base: dict) -> str:
    """What one job's rounds support about ``ours``'s overhead against ``anchor``'s (records of the
    same job as the baseline ``base``): per round each overhead is its median step less the
    baseline's; "halves" where our overhead less half the anchor's is below zero beyond its spread
    across rounds (and the anchor's overhead above zero beyond its own); "less"/"more" where our
    step is below/above the anchor's beyond theirs (the baseline cancels out of the difference of
    two overheads); else "unsettled" (``spread.paired``'s verdicts)."""
    def per_round(record):
        return [statistics.median(r) for r in paired_spread.round_samples(record)]

    mine, theirs, baseline = per_round(ours), per_round(anchor), per_round(base)
    n = min(len(mine), len(theirs), len(baseline))
    over_ours = [mine[i] - baseline[i] for i in range(n)]
    over_anchor = [theirs[i] - baseline[i] for i in range(n)]
    anchor_costs = paired_spread.paired([[t] for t in over_anchor], [[0.0]] * n).verdict == "higher"
    if anchor_costs and paired_spread.paired([[o] for o in over_ours],
                                             [[0.5 * t] for t in over_anchor]).verdict == "lower":
        return "halves"
    verdict = paired_spread.paired(paired_spread.round_samples(ours), paired_spread.round_samples(anchor)).verdict
    return {"lower": "less", "higher": "more"}.get(verdict, "unsettled")


def overhead_table(records: list[dict], found: dict[str, dict]) -> pd.DataFrame | None:
    """C8: one row per variant, for each precision its step, the baseline, the overhead in ms (with
    its least–most) and as % of the baseline."""
    if not found:
        return None
    rows = {}
    for r in records:
        variant, precision = r["params"]["variant"], variants.precision_of(r)
        if precision not in found or variant == variants.BASELINE:
            continue
        row = rows.setdefault(variant, {"variant": variant})
        spread, over = step_spread(r), found[precision]["rows"].get(variant)
        row[f"{precision}_step_ms"] = spread[0] if spread else None
        row[f"{precision}_baseline_ms"] = found[precision]["baseline_ms"]
        row[f"{precision}_overhead_ms"] = over["ms"] if over else None
        row[f"{precision}_overhead_range_ms"] = f"{over['low_ms']:.1f}–{over['high_ms']:.1f}" if over else ""
        row[f"{precision}_overhead_pct"] = over["pct"] if over else None
    return pd.DataFrame(list(rows.values()))


def plot_overheads(found: dict[str, dict], path: Path) -> None:
    """Overhead per variant and precision as % of that precision's baseline, with the least–most
    range as error bars."""
    fig, ax = plt.subplots(figsize=(9, 0.5 + 0.45 * max(1, len({v for f in found.values() for v in f["rows"]}))))
    names = list(dict.fromkeys(v for f in found.values() for v in f["rows"]))
    height = 0.8 / max(1, len(found))
    for k, (precision, f) in enumerate(found.items()):
        ys = [i + k * height for i, v in enumerate(names) if v in f["rows"]]
        rows = [f["rows"][v] for v in names if v in f["rows"]]
        base = f["baseline_ms"]
        pct = [r["pct"] for r in rows]
        err = [[p - 100 * r["low_ms"] / base for p, r in zip(pct, rows)],
               [100 * r["high_ms"] / base - p for p, r in zip(pct, rows)]]
        ax.barh(ys, pct, height=height, xerr=err, capsize=2, label=f"{precision} (baseline {base:.1f} ms)")
    if not found:
        ax.text(0.5, 0.5, "no no-communication baseline in this run", ha="center", transform=ax.transAxes)
    ax.set_yticks([i + height * (len(found) - 1) / 2 for i in range(len(names))], names)
    ax.axvline(0, color="black", lw=0.8)
    ax.set(xlabel="overhead: step against the no-communication baseline (% of the baseline; bars: least–most)")
    ax.invert_yaxis()
    ax.grid(alpha=0.3, axis="x")
    if found:
        ax.legend(fontsize=8)
    save_figure(fig, path)


def accuracy_rows(records: list[dict]) -> list[dict]:
    """C8: the variants that communicate in bf16, against their fp32-communicating twins."""
    out = []
    for r in records:
        acc = r["metrics"].get("accuracy") if r["status"] == "ok" else None
        if acc:
            out.append({"variant": r["params"]["variant"], "precision": variants.precision_of(r),
                        "reference": acc["reference"], "steps": acc["steps"],
                        "weights_rel_diff": acc["weights_rel_diff"], "diff_over_update": acc["diff_over_update"],
                        "max_abs_diff": acc["max_abs_diff"], "final_loss": acc["losses"][-1],
                        "reference_final_loss": acc["reference_losses"][-1]})
    return out


def _step_range(steps: list[dict]) -> str:
    """Fastest–slowest of rank 0's timed steps (ms): the spread beside their median."""
    times = [s["step_ms"] for s in steps if s.get("step_ms") is not None]
    return f"{min(times):.1f}–{max(times):.1f}" if times else ""


def overhead_model(n_buckets: float, grad_bytes: float, o_s: float, w_Bps: float) -> float:
    """Seconds of communication left after backward with n_b equal buckets, when a bucket's gradients
    take as long to compute as its bytes take to send: each call falls o behind, and the last
    bucket is sent after backward: n_b·o + s / (n_b·w)."""
    return n_buckets * o_s + grad_bytes / (n_buckets * w_Bps)


def optimal_buckets(grad_bytes: float, o_s: float, w_Bps: float) -> dict:
    """d/dn_b (n_b·o + s/(n_b·w)) = 0  →  n_b* = √(s/(w·o)), bucket size s/n_b* = √(s·w·o),
    overhead 2·√(s·o/w)."""
    n = math.sqrt(grad_bytes / (w_Bps * o_s))
    return {"n_buckets": n, "bucket_MB": grad_bytes / n / 1e6, "overhead_ms": 2 * math.sqrt(grad_bytes * o_s / w_Bps) * 1e3}


def fit_overheads(points: list[tuple[int, float]], grad_bytes: float, w_Bps: float) -> dict | None:
    """The overhead model fitted to what each bucket count costs in all (its paired overhead: step
    less the baseline's, which counts what is paid inside backward as well as the wait after it):
    overhead − s/(n_b·w) = c + n_b·o by least squares over ``points`` (n_b, overhead ms). ``c_ms`` is
    what every bucket count pays (the collectives sharing the GPU with backward, passes over the
    gradients), ``o_ms`` what one more bucket costs; with o > 0 the optimum n_b* = √(s/(w·o)).
    None with fewer than three distinct bucket counts (two points fit any line)."""
    if len({n for n, _ in points}) < 3:
        return None
    xs = [float(n) for n, _ in points]
    ys = [ms - grad_bytes / (n * w_Bps) * 1e3 for n, ms in points]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / sum((x - mean_x) ** 2 for x in xs)
    intercept = mean_y - slope * mean_x
    residuals = [y - (intercept + slope * x) for x, y in zip(xs, ys)]
    found = {"c_ms": intercept, "o_ms": slope, "points": len(points), "max_residual_ms": max(abs(r) for r in residuals),
             "overhead_range_ms": [min(ms for _, ms in points), max(ms for _, ms in points)], "optimum": None}
    if slope > 0:
        optimum = optimal_buckets(grad_bytes, slope / 1e3, w_Bps)
        total = optimum["overhead_ms"] + intercept
        found["optimum"] = optimum | {"overhead_ms": total, "fixed_share": intercept / total if total > 0 else None}
    return found


def plot_phases(table: pd.DataFrame, path: Path) -> None:
    """Each ok row's phases stacked. A variant that waits inside backward has no wait bar: its
    label says where the wait is."""
    ok = table[table["status"] == "ok"]
    fig, ax = plt.subplots(figsize=(9, 4))
    labels = [f"{v} ({p})" if p != variants.DEFAULT_PRECISION else v for v, p in zip(ok["variant"], ok["precision"])]
    labels = [f"{label}: waits in backward" if v in WAITS_IN_BACKWARD else label
              for label, v in zip(labels, ok["variant"])]
    bottom = pd.Series(0.0, index=ok.index)
    for phase in PHASES:
        width = ok[phase].astype(float).fillna(0.0)
        ax.barh(labels, width, left=bottom, label=phase[:-3].replace("_", " "))
        bottom = bottom + width
    ax.set(xlabel="ms per training step (rank 0, median)")
    ax.invert_yaxis()
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="x")
    save_figure(fig, path)


def is_kernel(interval: dict) -> bool:
    """A kernel (or, on the CPU, an operator) — not a ``phase:*`` annotation. The profiler also puts
    the ``record_function`` phase markers on the GPU's timeline, as bars spanning the whole phase;
    counted as compute they hid every wait (naive DDP's ~50 ms all-reduce after backward read as
    3.4 µs of idle), so the lanes below hold kernels only. Traces from before train_bench dropped
    them still carry them, hence the filter here."""
    return not interval.get("name", "").startswith("phase:")


def plot_timelines(traces: dict[str, list[dict]], path: Path) -> None:
    """One panel per traced variant, three lanes: when the CPU issued each phase, and the GPU's
    compute and communication kernels (which run later than they are issued)."""
    fig, axes = plt.subplots(len(traces) or 1, 1, figsize=(11, 2.0 * max(1, len(traces)) + 0.6), squeeze=False)
    colors = {"forward": "#9ab8dd", "backward": "#e8b27d", "wait": "#e08a8a", "optimizer": "#8cc98c"}
    for ax, (variant, intervals) in zip(axes[:, 0], traces.items()):
        for i in intervals:
            start, width = i["start_us"] / 1e3, max((i["end_us"] - i["start_us"]) / 1e3, 0.01)
            if i["lane"] == "phase":
                ax.broken_barh([(start, width)], (1.65, 0.7), color=colors.get(i["name"], "#ccc"))
                ax.text(start + width / 2, 2.0, i["name"], fontsize=7, ha="center", va="center")
            elif is_kernel(i):
                y = 1 if i["lane"] == "communication" else 0
                ax.broken_barh([(start, width)], (y - 0.35, 0.7), color="tab:red" if y else "tab:blue")
        ax.set(yticks=[0, 1, 2], yticklabels=["compute", "communication", "issued (CPU)"], ylim=(-0.6, 2.6))
        ax.set_title(variant, fontsize=9)
    axes[-1, 0].set_xlabel("ms since the start of the traced step")
    fig.tight_layout()
    save_figure(fig, path)


def compute_gaps(intervals: list[dict]) -> dict | None:
    """How long the compute lane sat idle between its first and last kernel (ms), and the longest
    single gap: the time compute waited, e.g. for a weight still being gathered."""
    spans = sorted((i["start_us"], i["end_us"]) for i in intervals if i["lane"] == "compute" and is_kernel(i))
    if not spans:
        return None
    idle, longest, long_gaps, reach = 0.0, 0.0, 0, spans[0][1]
    for start, end in spans[1:]:
        if start > reach:
            idle += start - reach
            longest = max(longest, start - reach)
            long_gaps += start - reach > 500      # µs: longer than any launch gap, a real wait
        reach = max(reach, end)
    return {"span_ms": (reach - spans[0][0]) / 1e3, "idle_ms": idle / 1e3, "longest_gap_ms": longest / 1e3,
            "gaps_over_half_ms": long_gaps}


# What a traced kernel does, from its name: NCCL's collectives (the communication lane), matrix
# products (cuBLAS / CUTLASS), copies (casts are copies between dtypes: the bf16 buckets' and
# PyTorch DDP's copies into and out of its buckets); everything else (the model's elementwise work,
# the optimizer, the wrappers' divisions: a name does not tell a gradient's mean from a softmax's
# division) is "other". The profiler also puts annotations on the GPU's
# timeline (nccl:all_reduce beside its kernel, DistributedDataParallel.forward spanning a phase):
# they are not kernels and are left out.
KERNEL_KINDS = (("matmul", re.compile(r"gemm|xmma|cutlass|nvjet|cublas", re.IGNORECASE)),
                ("copy", re.compile(r"copy|Memcpy", re.IGNORECASE)))
# Older traces kept 60 characters of a kernel's name (train_bench.KERNEL_NAME_CHARS now keeps 200):
# an elementwise kernel's name is cut inside its template there, so its kind cannot be read.
OLD_NAME_CHARS = 60
ANNOTATION = re.compile(r"^(nccl:|DistributedDataParallel\.|Optimizer\.|ProfilerStep|FSDP\.)")
# The traced variant whose matmuls are the reference: naive DDP all-reduces after backward, so its
# matrix products never share the GPU with a collective.
QUIET_TRACE = "naive"


def kernel_time(intervals: list[dict]) -> dict[str, float] | None:
    """GPU time (ms) of one traced step's kernels by kind: ``communication`` (the communication
    lane), then ``KERNEL_KINDS`` and ``other`` on the compute lane; kernels that overlap each count
    whole. NCCL's kernel time includes the time it spins waiting for the other rank, so it is an
    upper bound of the transfers. None for a trace without kernels (a CPU run's operators are not
    kernels: ``gpu`` traces only)."""
    found = {"communication": 0.0, **{kind: 0.0 for kind, _ in KERNEL_KINDS}, "other": 0.0}
    kernels = [i for i in intervals if i["lane"] in ("compute", "communication") and is_kernel(i)
               and not ANNOTATION.match(i.get("name", ""))]
    if not kernels or not any(i.get("name", "").startswith(("void ", "nccl", "sm", "Memcpy", "Memset")) for i in kernels):
        return None
    if max(len(i["name"]) for i in kernels) == OLD_NAME_CHARS:
        return None         # names cut before the functor that tells a copy from the rest
    for i in kernels:
        ms = (i["end_us"] - i["start_us"]) / 1e3
        if i["lane"] == "communication":
            found["communication"] += ms
            continue
        kind = next((k for k, pattern in KERNEL_KINDS if pattern.search(i["name"])), "other")
        found[kind] += ms
    return found


def where_time_goes(traces: dict[str, list[dict]], chosen: list[tuple[str, str]]) -> dict[str, dict]:
    """Per traced step of ``chosen`` (variant, precision), keyed by ``trace_label``: its kernel time by kind, and its matmul and
    copy time against naive DDP's traced step of the same precision (``matmul_over_quiet_ms``: what
    sharing the GPU with collectives cost the matrix products, where they are the same products;
    ``copy_over_quiet_ms``: the copies and casts a variant adds). One profiled step each: a look,
    not a measurement with a spread."""
    times = {label: kernel_time(traces[label]) for v, p in [*chosen, *((QUIET_TRACE, p) for _, p in chosen)]
             if (label := trace_label(v, p)) in traces}
    out = {}
    for variant, precision in chosen:
        label = trace_label(variant, precision)
        found = times.get(label)
        if found is None:
            continue
        quiet = times.get(trace_label(QUIET_TRACE, precision))
        out[label] = found | {"matmul_over_quiet_ms": found["matmul"] - quiet["matmul"] if quiet else None,
                              "copy_over_quiet_ms": found["copy"] - quiet["copy"] if quiet else None}
    return out


def _row(table: pd.DataFrame, variant: str, precision: str) -> dict | None:
    hit = table[(table["variant"] == variant) & (table["precision"] == precision) & (table["status"] == "ok")]
    return None if hit.empty else {k: (None if isinstance(v, float) and math.isnan(v) else v)
                                   for k, v in hit.iloc[0].to_dict().items()}


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


def _bucket_model(records: list[dict], table: pd.DataFrame, setup: dict, c1: dict, out: Path,
                  per_call: dict[str, dict], found_overheads: dict[str, dict]):
    """C8: the bucketed rows with the overhead model's prediction, its figure, and its summary (None
    without C1's fit). w is C1's fit for the same backend and world size; s the bytes the bucketed
    variants send (every gradient, in the dtype they communicate); o, where naive and flat ran, the
    per-call cost those records pay (``paid_per_call``, the first precision's), else C1's, which
    times one call alone between synchronisations. ``o_source`` says which; ``predicted_c1_ms``
    is the model with C1's o either way, and ``after_backward_pass_ms`` the least time the rows'
    passes over the gradients after backward take, which the model leaves out. ``overhead_fit`` fits
    the model to the bucket sizes' overheads (``found_overheads``, what ``overheads`` gave)."""
    fit = c1["fits"].get(f"{setup['backend']}_x{setup['world_size']}")
    bucketed = table[(table["status"] == "ok") & table["variant"].map(is_bucket_size)].copy()
    sent = [r for r in records if r["params"]["variant"] in set(bucketed["variant"])]
    model_summary = None
    fig, ax = plt.subplots(figsize=(6.5, 4))
    if fit and fit["w_GBps"] and fit["o_ms"] > 0 and sent and sent[0]["metrics"].get("parameter_count"):
        element_bytes = variants.lookup(sent[0]["params"]["variant"]).gradient_bytes
        grad_bytes = sent[0]["metrics"]["parameter_count"] * element_bytes
        paid = next(iter(per_call.values()), None)
        o_ms, source = (paid["o_ms"], "records") if paid and paid["o_ms"] > 0 else (fit["o_ms"], "C1")
        o_s, c1_o_s, w = o_ms / 1e3, fit["o_ms"] / 1e3, fit["w_GBps"] * 1e9
        bucketed["predicted_ms"] = [overhead_model(n, grad_bytes, o_s, w) * 1e3 for n in bucketed["buckets"]]
        bucketed["predicted_c1_ms"] = [overhead_model(n, grad_bytes, c1_o_s, w) * 1e3 for n in bucketed["buckets"]]
        bandwidth = memory_bandwidth(sent)
        bucketed["after_backward_pass_ms"] = [after_backward_pass_ms(v, grad_bytes, bandwidth) for v in bucketed["variant"]]
        backward = bucketed["backward_ms"].median() if len(bucketed) else None
        waits = bucketed["comm_wait_ms"]
        model_summary = {"o_ms": o_ms, "o_source": source, "c1_o_ms": fit["o_ms"], "w_GBps": fit["w_GBps"],
                         "grad_MB": grad_bytes / 1e6,
                         "gradient_dtype": {4: "fp32", 2: "bf16"}.get(element_bytes, f"{element_bytes}-byte"),
                         "send_all_ms": grad_bytes / w * 1e3, "backward_ms": backward,
                         "optimum": optimal_buckets(grad_bytes, o_s, w),
                         "optimum_c1": optimal_buckets(grad_bytes, c1_o_s, w),
                         "measured_wait_range_ms": [float(waits.min()), float(waits.max())],
                         "predicted_range_ms": [float(bucketed["predicted_ms"].min()), float(bucketed["predicted_ms"].max())],
                         "bucket_counts": [int(bucketed["buckets"].min()), int(bucketed["buckets"].max())],
                         "pass_ms": next((x for x in bucketed["after_backward_pass_ms"] if x is not None), None),
                         "memory_GBps": bandwidth / 1e9 if bandwidth else None}
        # Fitted to the overheads of the first precision, where the run paired them with a baseline.
        precision = variants.precision_of(sent[0])
        rows = found_overheads.get(precision, {}).get("rows", {})
        points = [(int(n), rows[v]["ms"]) for v, n, p in zip(bucketed["variant"], bucketed["buckets"], bucketed["precision"])
                  if p == precision and v in rows]
        model_summary["overhead_fit"] = fit_overheads(points, grad_bytes, w) if points else None
        model_summary["overhead_fit_precision"] = precision
        plot_bucket_model(bucketed, grad_bytes, o_s, w, ax, c1_o_s=c1_o_s, source=source, pass_ms=model_summary["pass_ms"])
    else:
        ax.text(0.5, 0.5, "no C1 fit for this backend and world size", ha="center", transform=ax.transAxes)
    save_figure(fig, out / "overhead_model.png")
    return bucketed, model_summary


def is_bucket_size(variant: str) -> bool:
    """A row of the bucket sizes (bucketed-<MB>), not one of the variants built on them."""
    return variants.lookup(variant).name == BUCKETED


def plot_bucket_model(bucketed: pd.DataFrame, grad_bytes: float, o_s: float, w: float, ax,
                      c1_o_s: float | None = None, source: str = "C1", pass_ms: float | None = None) -> None:
    """The model against the measurements on log-log axes (the model's n_b·o grows into seconds for
    tiny buckets, which on a linear axis flattened the ~10 ms measurements onto zero): the curve
    for equal buckets with the o the table's ``predicted_ms`` uses (``source``: the DDP records or
    C1), with C1's o dashed where that is another, the model at each run's real bucket count (real
    buckets are not equal, a parameter larger than the bucket size gets its own), and the measured
    wait; where ``pass_ms`` is known, the least time of the passes over the gradients after backward,
    which the model leaves out."""
    sizes_mb = [variants.bucket_size_mb(v) for v in bucketed["variant"]]
    low, high = min(sizes_mb) / 4, min(max(sizes_mb) * 4, grad_bytes / 1e6)
    curve = [low * (high / low) ** (k / 200) for k in range(201)]
    where = "paid by naive against flat" if source == "records" else "C1's, one call timed alone"
    curves = [(o_s, "-", f"model, o = {o_s * 1e3:.3f} ms ({where})")]
    if c1_o_s is not None and source != "C1":
        curves.append((c1_o_s, "--", f"model, o = {c1_o_s * 1e3:.3f} ms (C1's, one call timed alone)"))
    for o, style, label in curves:
        ax.plot(curve, [overhead_model(max(1.0, grad_bytes / (mb * 1e6)), grad_bytes, o, w) * 1e3 for mb in curve],
                style, label=label, color="tab:blue")
    ax.plot(sizes_mb, bucketed["predicted_ms"], "s", mfc="none", color="tab:blue", label="model at the real bucket count")
    precisions = bucketed["precision"] if "precision" in bucketed else pd.Series("fp32", index=bucketed.index)
    for (precision, marker), color in zip(zip(dict.fromkeys(precisions), "o^"), ("tab:red", "tab:orange")):
        mine = (precisions == precision).to_numpy()
        ax.plot([s for s, m in zip(sizes_mb, mine) if m], bucketed["comm_wait_ms"][mine], marker, ls="none",
                color=color, label=f"measured wait ({precision})")
    if pass_ms:
        ax.axhline(pass_ms, color="gray", ls=":", label="passes over the gradients after backward, at least")
    ax.set(xscale="log", yscale="log", xlabel="bucket size (MB)", ylabel="wait after backward (ms)",
           title=f"n_b·o + s/(n_b·w), s = {grad_bytes / 1e6:,.0f} MB, w = {w / 1e9:.0f} GB/s (C1)")
    ax.title.set_fontsize(9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)


def _picks(ident: str, rows: dict[str, dict | None], traced: list[str], traces: dict, memory: list[dict]) -> dict:
    """The rows deliverable ``ident``'s section quotes, from one precision's ``rows``."""
    get = rows.get
    if ident == "C2":
        return {"naive": get("naive")}
    if ident == "C3":
        return {"naive": get("naive"), "torch_ddp": get("torch-ddp")}
    if ident == "C4":
        return {"naive": get("naive"), "flat": get("flat")}
    if ident == "C5":
        return {"overlap": get("overlap")}
    if ident == "C6":
        return {"naive": get("naive"), "flat": get("flat"), "overlap": get("overlap"), "torch_ddp": get("torch-ddp")}
    if ident == "C7":
        return {"bucketed": [r for v, r in rows.items() if is_bucket_size(v) and r]}
    if ident == "C8":
        return {"others": {v: get(v) for v in ("naive", "flat", "overlap", "torch-ddp")},
                "beyond": [r for v, r in rows.items() if r and variants.lookup(v).deliverable == "C8"
                           and not is_bucket_size(v)]}
    if ident == "C10":
        return {"overlap": get("overlap"), "sharded": get("overlap-sharded")}
    if ident == "C11":
        return {}
    if ident == "C12":
        return {"fsdp": get("fsdp"), "fsdp_bf16": get("fsdp-bf16"), "overlap": get("overlap"),
                "torch_ddp": get("torch-ddp")}
    raise ValueError(f"report.ddp writes {', '.join(SECTIONS)}, not {ident!r}")


# The steps each section's opening sets against each other: (variant, against), first precision.
COMPARED = {"C3": (("torch-ddp", "naive"),), "C4": (("flat", "naive"),),
            "C6": (("overlap", "naive"), ("overlap", "flat"), ("overlap", "torch-ddp")),
            "C10": (("overlap-sharded", "overlap"),), "C11": (("overlap-sharded", "overlap"),),
            "C12": (("fsdp", "overlap"), ("fsdp-bf16", "overlap"), ("fsdp", "torch-ddp"))}


def versus(records: list[dict], pairs, precision: str) -> dict[str, dict[str, dict]]:
    """``{a: {b: difference of a's step and b's}}`` (``difference``, ms) for the pairs that both ran
    in ``precision``."""
    found = _by_variant(records).get(precision, {})
    out: dict[str, dict[str, dict]] = {}
    for a, b in pairs:
        if a in found and b in found:
            out.setdefault(a, {})[b] = record_difference(found[a], found[b])
    return out


# C8's rungs past PyTorch's DDP, each adding one thing to the one before (variants.VARIANTS).
LADDER = ("bucketed-<MB>", "bucketed-view-<MB>", "bucketed-ready-<MB>", "bucketed-avg-<MB>", "bucketed-bf16-<MB>")


def ladder(records: list[dict]) -> list[dict]:
    """What each rung did: per precision and bucket size, every rung's step against the rung below
    it that ran (``record_difference``: paired per round where they shared a job), in ladder order;
    ``removed_pass_ms``, the least time (datasheet bandwidth) of the passes over the gradients after
    backward that the rung no longer makes (``AFTER_BACKWARD_PASSES``), where both rungs' are known."""
    out = []
    bandwidth = memory_bandwidth(records)
    for precision, found in _by_variant(records).items():
        sizes = sorted({variants.bucket_size_mb(v) for v in found if variants.lookup(v).name in LADDER})
        for mb in sizes:
            size = f"{mb:g}"
            ran = [r.replace(variants.FAMILY, size) for r in LADDER if r.replace(variants.FAMILY, size) in found]
            for below, rung in zip(ran, ran[1:]):
                diff = record_difference(found[rung], found[below])
                if diff is None:
                    continue
                grad_bytes = found[rung]["metrics"].get("parameter_count", 0) * variants.lookup("naive").gradient_bytes
                passes = [after_backward_pass_ms(v, grad_bytes, bandwidth) for v in (below, rung)]
                out.append({"precision": precision, "rung": rung, "below": below,
                            "removed_pass_ms": passes[0] - passes[1] if None not in passes and grad_bytes else None} | diff)
    return out


def trace_label(variant: str, precision: str) -> str:
    """How a trace is named in the summary and its timeline: the variant, with its precision where
    that is not fp32."""
    return variant if precision == variants.DEFAULT_PRECISION else f"{variant} ({precision})"


def paired_by_precision(records: list[dict]) -> dict[str, bool]:
    """Per precision: whether every ok record of it was measured in one job (one process group taking
    turns), so its comparisons are paired per round; False where they span processes."""
    out = {}
    for precision, found in _by_variant(records).items():
        jobs = {(r["metrics"].get("turns") or {}).get("job") for r in found.values()}
        out[precision] = len(jobs) == 1 and None not in jobs
    return out


def _none(why: str) -> pd.DataFrame:
    return pd.DataFrame({"(no rows)": [why]})


def build(ident: str, records: list[dict], traces: dict[str, list[dict]], traced: list[str],
          c1: dict | None, out: Path) -> dict:
    """Write deliverable ``ident``'s table and figures into ``out``; return its summary. ``traces``
    is keyed by ``trace_label``."""
    if ident not in SECTIONS:
        raise ValueError(f"report.ddp writes {', '.join(SECTIONS)}, not {ident!r}")
    table = step_table(records)
    precisions = list(dict.fromkeys(table["precision"]))
    first = variants.DEFAULT_PRECISION if variants.DEFAULT_PRECISION in precisions else precisions[0]
    rows = {p: {v: _row(table, v, p) for v in dict.fromkeys(table["variant"])} for p in precisions}
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
    fit = (c1 or {}).get("fits", {}).get(f"{setup['backend']}_x{setup['world_size']}")
    per_call = paid_per_call(records, fit)
    by_precision = {p: {"baseline": rows[p].get(variants.BASELINE)} | _picks(ident, rows[p], traced, traces, [])
                    for p in precisions}
    summary = {"provenance": run_provenance(records), "setup": setup, "precisions": precisions,
               "first_precision": first, "paired": paired, **by_precision[first],
               "by_precision": {p: by_precision[p] for p in precisions if p != first},
               "naive_calls": gradient_tensors(setup["size"]) + 1, "per_call": per_call.get(first),
               "versus": versus(records, COMPARED.get(ident, ()), first)}
    table_out = table
    if ident in ("C6", "C12"):
        # C6 draws the variants it discusses, C12 the FSDP ones.
        fsdp = ident == "C12"
        drawn = [trace_label(v, p) for p in precisions for v in traced if trace_label(v, p) in traces
                 and (v.startswith("fsdp") if fsdp else variants.lookup(v).name in READS["C6"])]
        plot_timelines({v: traces[v] for v in drawn}, out / "timeline.png")
        summary |= {"traced": drawn, "compute_gaps": {v: compute_gaps(traces[v]) for v in (drawn if not fsdp else traces)}}
    if ident == "C8":
        # Every variant side by side (the bucket sizes "vs the others"), the overhead of each in
        # each precision, then the bucket sizes with the overhead model's prediction as the main table.
        write_table(table.round(3), out, stem="variants")
        plot_phases(table, out / "phases.png")
        found = overheads(records)
        over = overhead_table(records, found)
        # Every table the registry declares is written, one saying why where there are no rows.
        write_table(over.round(3) if over is not None
                    else _none(f"no {variants.BASELINE} step to measure the overheads against"), out, stem="overhead")
        plot_overheads(found, out / "overhead.png")
        accuracy = accuracy_rows(records)
        write_table(pd.DataFrame(accuracy) if accuracy else _none("no variant recorded its bf16 gradients' error"),
                    out, stem="accuracy")
        table_out, model = _bucket_model(records, table, setup, c1, out, per_call, found)
        # What the traces show is left: the compute lane's idle time in one step of each traced
        # variant of C8's and of PyTorch DDP's.
        gaps = {label: compute_gaps(traces[label]) for p in precisions for v in traced
                if (label := trace_label(v, p)) in traces and (variants.lookup(v).deliverable == "C8" or v == "torch-ddp")}
        # Where a traced step's GPU time goes, naive's beside as the reference of the matmuls.
        kinds = where_time_goes(traces, [(v, p) for p in precisions for v in traced
                                         if variants.lookup(v).deliverable == "C8" or v in ("torch-ddp", QUIET_TRACE)])
        summary |= {"bucketed": table_out.to_dict("records"), "model": model, "overheads": found,
                    "has_overhead_table": over is not None, "accuracy": accuracy, "compute_gaps": gaps,
                    "kernel_time": kinds, "ladder": ladder(records),
                    "against_overlap": bucketed_against_overlap(records).get(first),
                    "best_bucket_size": best_bucket_size(records, first)}
    elif ident == "C11":
        # The table every precision's rows; the summary (which the section reads by variant) the first's.
        memory = memory_rows(records, MEMORY_VARIANTS)
        table_out = pd.DataFrame(memory) if memory else _none("no variant recorded its memory")
        summary |= {"memory": [m for m in memory if m["precision"] == first]}
    elif ident == "C12":
        memory = [m for m in memory_rows(records, MEMORY_VARIANTS) if m["precision"] == first]
        predicted = _fsdp_prediction(setup)
        forward = {(v, p): phase_spread(r, "forward_ms") for p, found in _by_variant(records).items()
                   for v, r in found.items()}
        untraced = {label: untraced_idle(summary["compute_gaps"].get(label), rows[p].get(v))
                    for p in precisions for v in traced if (label := trace_label(v, p)) in traces}
        summary |= {"memory": memory, "predicted_state_GiB": predicted,
                    "fsdp_forward": fsdp_forward(rows, setup, c1, forward),
                    "saving": fsdp_saving(memory, predicted), "untraced_idle": untraced}
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


# The variants whose forward communicates nothing (they all-reduce gradients only): each one's
# forward is the same computation as the baseline's, so where the run has no baseline it stands in.
QUIET_FORWARD = (variants.BASELINE, "overlap", "naive", "flat")


def fsdp_forward(rows: dict[str, dict], setup: dict, c1: dict | None,
                 forward: dict[tuple[str, str], tuple[float, float, float]] | None = None) -> list[dict]:
    """C12: what an FSDP forward's time is made of, as far as the records settle it. Per FSDP row:
    its forward against a forward that communicates nothing in the precision its matmuls run in
    (fsdp-bf16 gathers bf16 weights, so bf16): the baseline's, else the first of ``QUIET_FORWARD``
    the run has (``baseline_variant``), with the range the steps allow where ``forward`` gives each
    record's (median, fastest, slowest) forward. And the most the weight transfers can take: every
    Linear and Embedding weight all-gathered once (each rank receives (N − 1)/N of it) at C1's bus
    bandwidth for this back end and world size, plus C1's per-call cost (one call timed alone, the
    most a call costs) per gather as if none overlapped. An excess beyond that bound is not the
    transfers; the text says so, and no more."""
    from cs336_systems.accounting.parallelism import all_gather_bytes
    from cs336_systems.accounting.transformer import transformer_parameter_tensors
    from cs336_systems.models import get_size

    size = get_size(setup["size"])
    gathers = transformer_parameter_tensors(size)["matrices"]      # FSDP gathers each Linear and Embedding weight
    fit = (c1 or {}).get("fits", {}).get(f"{setup['backend']}_x{setup['world_size']}")
    n = setup["world_size"]
    forward = forward or {}
    out = []
    for precision, by_variant in rows.items():
        for variant in ("fsdp", "fsdp-bf16"):
            row = by_variant.get(variant)
            if not row:
                continue
            element_bytes = variants.lookup(variant).gradient_bytes
            compute = "bf16" if element_bytes == 2 or precision == "bf16" else "fp32"
            quiet = rows.get(compute, {})
            base_variant = next((v for v in QUIET_FORWARD if quiet.get(v)), None)
            base = quiet.get(base_variant) if base_variant else None
            # the closed form, not the record's parameter_count: under FSDP that counts this rank's shards
            count = size.parameter_count()
            found = {"variant": variant, "precision": precision, "forward_ms": row["forward_ms"],
                     "baseline_precision": compute, "baseline_variant": base_variant,
                     "baseline_forward_ms": base["forward_ms"] if base else None,
                     "gathers": gathers, "gathered_GB": all_gather_bytes(count * element_bytes, n) / 1e9}
            if fit and fit.get("w_GBps"):
                busbw = fit["w_GBps"] * 2 * (n - 1) / n            # C1's fit is algorithm bandwidth of an all-reduce
                found["transfer_ms"] = found["gathered_GB"] / busbw * 1e3
                found["latency_ms"] = gathers * max(fit["o_ms"], 0.0)
                found["bound_ms"] = found["transfer_ms"] + found["latency_ms"]
                # a step moves each weight three times: gathered for forward, again for backward, and
                # its gradient reduce-scattered (the same bytes each way)
                found["step_bound_ms"] = 3 * found["bound_ms"]
            if base:
                found["excess_ms"] = row["forward_ms"] - base["forward_ms"]
                mine, theirs = forward.get((variant, precision)), forward.get((base_variant, compute))
                if mine and theirs:
                    found["excess"] = difference(mine, theirs)
                if "bound_ms" in found:
                    found["beyond_transfers"] = found["excess_ms"] > found["bound_ms"]
                    found["beyond_bytes"] = found["excess_ms"] > found["transfer_ms"]
            out.append(found)
    return out


def untraced_idle(gaps: dict | None, row: dict | None) -> dict | None:
    """How much of a traced step's idle compute lane the untraced step holds. The kernels kept the
    lane busy for the trace's span less its idle time; if they take as long untraced, the timed step
    (its median) holds its time less that busy time idle (``idle_ms``; more, where the profiler
    slowed the kernels themselves); the rest of the trace's idle time is the profiler's
    (``profiler_ms``). ``mostly_profiler``: the untraced step holds less than half the trace's
    idle time."""
    if not gaps or not row or not gaps.get("span_ms"):
        return None
    busy = gaps["span_ms"] - gaps["idle_ms"]
    idle = max(0.0, row["step_ms"] - busy)
    return {"traced_ms": gaps["span_ms"], "traced_idle_ms": gaps["idle_ms"], "busy_ms": busy,
            "step_ms": row["step_ms"], "idle_ms": idle, "idle_share": idle / row["step_ms"],
            "profiler_ms": gaps["idle_ms"] - idle, "mostly_profiler": idle < gaps["idle_ms"] / 2}


def fsdp_saving(memory: list[dict], predicted: dict) -> dict | None:
    """C12: the memory FSDP saves against DDP (overlap), predicted and measured at each point, and
    whether the peak's saving is the saving without the gradients. The step starts with no gradients
    (they are set to None), so the memory at its start is its peak less the rise above the start;
    where the two variants rise alike the peak saves what the start saves: parameters and optimizer
    state, not the gradients FSDP shards. ``reconciled``: the peak's saving is within a tenth of the
    gradients' saving of the saving before the step less the gradients'."""
    rows = {m["variant"]: m for m in memory}
    fs, ov = rows.get("fsdp"), rows.get("overlap")
    if not fs or not ov:
        return None
    start = {v: r["peak_GiB"] - r["activations_peak_GiB"] for v, r in (("fsdp", fs), ("overlap", ov))}
    gradients = ov["gradients_GiB"] - fs["gradients_GiB"]
    before = ov["before_step_GiB"] - fs["before_step_GiB"]
    peak = ov["peak_GiB"] - fs["peak_GiB"]
    return {"predicted_GiB": predicted["replicated"] - predicted["fsdp"], "before_step_GiB": before,
            "start_GiB": start["overlap"] - start["fsdp"], "peak_GiB": peak, "gradients_GiB": gradients,
            "rise_GiB": {"fsdp": fs["activations_peak_GiB"], "overlap": ov["activations_peak_GiB"]},
            "without_gradients_GiB": before - gradients,
            "reconciled": gradients > 0 and abs(peak - (before - gradients)) <= 0.1 * gradients}


def _fsdp_prediction(setup: dict) -> dict:
    """Training state per device (fp32 weights, gradients, Adam moments) with and without FSDP."""
    from cs336_systems.accounting.parallelism import fsdp_transformer_state_bytes
    from cs336_systems.accounting.transformer import training_state_bytes
    from cs336_systems.models import get_size

    size = get_size(setup["size"])
    full = sum(training_state_bytes(size.parameter_count()).values())
    return {"replicated": full / GIB, "fsdp": fsdp_transformer_state_bytes(size, setup["world_size"]) / GIB}


if __name__ == "__main__":
    sys.exit(main())
