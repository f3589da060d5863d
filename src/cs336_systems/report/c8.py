"""C8: every data-parallel variant side by side, what communication costs each against the
no-communication baseline, the bucket sizes against the overhead model (``accounting.data_parallel``),
and the rungs past PyTorch's DDP. ``part`` adds C8's tables, figures and summary keys to what
``report.ddp`` builds for every data-parallel section.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib.pyplot as plt
import pandas as pd

from cs336_systems.accounting.data_parallel import AFTER_BACKWARD_PASSES, optimal_buckets, overhead_model
from cs336_systems.distributed import variants
from cs336_systems.report import spread
from cs336_systems.report.common import save_figure, write_table
from cs336_systems.report.ddp_rows import (BUCKETED, OTHER_COMPUTE_NOTE, PHASES, WAITS_IN_BACKWARD, Difference, Named,
                                           Opening, Spread, WaitingStep, by_variant, compute_precision, is_bucket_size,
                                           memory_bandwidth, no_rows, pass_ms, per_call_bound, per_call_cost,
                                           phase_spread, record_difference, round_differences, same_computation,
                                           step_spread, trace_label, versus)
from cs336_systems.report.ddp_traces import QUIET_TRACE, compute_gaps, where_time_goes

if TYPE_CHECKING:
    from cs336_systems.report.ddp import Section

# The overhead model follows the measured waits where every bucket size's wait lies within this
# factor of its prediction; the waits are flat where they span less than this share of their median.
FOLLOWS_WITHIN = 2.0
FLAT_SHARE = 0.10


def model_against_waits(predicted: list[float], measured: list[float],
                        rounds: list[list[float]] | None = None) -> dict:
    """How the overhead model stands against the measured waits after backward (``against_waits``):
    it "follows" them where every bucket size's wait lies within ``FOLLOWS_WITHIN`` of its
    prediction, and misses them where some size's lies beyond it; else the waits are "flat" where
    they stay within ``FLAT_SHARE`` of their median across the sizes, and the model is "off" where
    they are not. Each size's wait is the range of its rounds (``rounds``: per size, the median wait
    of each round; its median alone where none): within or beyond only where the whole range is, and
    "not settled" where some size's range straddles the factor and none lies beyond it. Flat, too,
    is said of every round, not of the medians alone: the lowest and the highest round of any size
    (``wait_rounds_range_ms``) lie within ``FLAT_SHARE`` of the sizes' median wait. ``misses``:
    "flat" or "off"."""
    spans = [(min(r), max(r)) if r else (m, m) for m, r in zip(measured, rounds or [None] * len(measured))]
    pairs = [(p, lo, hi) for p, (lo, hi) in zip(predicted, spans) if p > 0 and lo > 0]
    within = [1 / FOLLOWS_WITHIN <= lo / p and hi / p <= FOLLOWS_WITHIN for p, lo, hi in pairs]
    beyond = [lo / p > FOLLOWS_WITHIN or hi / p < 1 / FOLLOWS_WITHIN for p, lo, hi in pairs]
    follows = bool(pairs) and all(within)
    reach = [min(lo for lo, _ in spans), max(hi for _, hi in spans)] if spans else None
    flat = bool(measured) and reach[1] - reach[0] < FLAT_SHARE * statistics.median(measured)
    change = max(p for p, _, _ in pairs) / min(p for p, _, _ in pairs) if pairs else None
    verdict = "follows" if follows else ("flat" if flat else "off") if any(beyond) else spread.NOT_SETTLED
    return {"against_waits": verdict, "misses": verdict in ("flat", "off"), "wait_rounds_range_ms": reach,
            "follows_within": FOLLOWS_WITHIN, "flat_share": FLAT_SHARE, "predicted_change": change}


def bucketed_against_overlap(records: list[dict]) -> dict[str, dict]:
    """Per precision: the bucket sizes' waits after backward against overlap's (``record_difference``,
    by variant; ``longer``: "every" size's is longer, "not every", or "not settled" where the judge
    did not settle every one), and what the passes over the gradients after backward
    (``AFTER_BACKWARD_PASSES``) account for: the least time the bucket sizes' extra pass takes at the
    card's memory bandwidth, against the least and the most of the extra wait (the ends of the
    intervals, None where not settled). ``extra_pass``: the pass "fits" in the least of the extra
    wait (it can be all of it), lies "within" its interval, "exceeds" it, or is "not settled"; None
    where the card has no datasheet bandwidth to price it."""
    out = {}
    bandwidth = memory_bandwidth(records)
    for precision, found in by_variant(records).items():
        overlap = found.get("overlap")
        sizes = {v: r for v, r in found.items() if is_bucket_size(v)}
        if not overlap or not sizes:
            continue
        mine = phase_spread(overlap, "comm_wait_ms")
        waits = {v: record_difference(r, overlap, "comm_wait_ms") for v, r in sizes.items()}
        grad_bytes = overlap["metrics"].get("parameter_count", 0) * variants.lookup("overlap").gradient_bytes
        extra = None
        if bandwidth and grad_bytes:
            extra = pass_ms(next(iter(sizes)), grad_bytes, bandwidth) - pass_ms("overlap", grad_bytes, bandwidth)
        settled = all(w["verdict"] != spread.NOT_SETTLED for w in waits.values())
        low = min(w["low_ms"] for w in waits.values()) if settled else None
        high = max(w["high_ms"] for w in waits.values()) if settled else None
        longer = ("every" if all(w["sign"] > 0 for w in waits.values()) else "not every" if settled
                  else "not settled")
        # the extra pass can be the whole difference only where it fits in the least of it, and
        # some of it where it fits in the most
        extra_pass = (None if extra is None else "not settled" if not settled else "fits" if extra <= low
                      else "within" if extra <= high else "exceeds")
        out[precision] = {
            "overlap_wait_ms": mine[0], "waits": waits,
            "bucketed_wait_range_ms": [min(r["metrics"]["comm_wait_ms"] for r in sizes.values()),
                                       max(r["metrics"]["comm_wait_ms"] for r in sizes.values())],
            "longer": longer, "extra_low_ms": low, "extra_high_ms": high, "extra_pass_ms": extra,
            "memory_GBps": bandwidth / 1e9 if bandwidth else None, "extra_pass": extra_pass,
            "pass_share_of_extra": extra / high if extra is not None and high else None}
    return out


# The variants that replicate the whole model, which the bucket sizes stand against.
REPLICATING = ("naive", "flat", "overlap", "torch-ddp")


def next_in_line(ranked: list[str], records: dict[str, dict]) -> list[dict]:
    """The second of ``ranked`` (variants by median, least first) and the first's step against its,
    the judge's (``record_difference``): a least median is a choice, not a verdict. Empty with fewer
    than two, or where the two have no difference to judge."""
    if len(ranked) < 2:
        return []
    versus = record_difference(records[ranked[0]], records[ranked[1]])
    return [{"variant": ranked[1], "versus": versus}] if versus else []


def best_bucket_size(records: list[dict], precision: str) -> dict | None:
    """C8: the bucket size with the shortest median step in ``precision``, and its step against the
    other replicating variants' (``versus``): naive, flat, overlap and PyTorch's DDP."""
    sizes = {v: r for v, r in by_variant(records).get(precision, {}).items() if is_bucket_size(v)}
    if not sizes:
        return None
    ranked = sorted(sizes, key=lambda v: sizes[v]["metrics"]["step_ms"])
    best = ranked[0]
    # the shortest median is a choice, not a verdict: its step against the next shortest's, judged
    runner_up = next_in_line(ranked, sizes)
    others = REPLICATING
    against = versus(records, [(best, o) for o in others], precision).get(best, {})
    # the variants the judge has it shorter than, and by how much: the least and the most
    shorter = {o: x for o, x in against.items() if x and x["sign"] < 0}
    saved = [x["less"]["ms"] for x in shorter.values()]
    # the others by the judge's verdict, for the one sentence that says them all
    called = lambda keep: [o for o in others if against.get(o) and keep(against[o])]
    by_verdict = {"shorter": [o for o in others if o in shorter],
                  "same": called(lambda x: x["verdict"] == spread.WITHIN),
                  "longer": called(lambda x: x["sign"] > 0),
                  "not settled": called(lambda x: x["verdict"] == spread.NOT_SETTLED)}
    return {"variant": best, "step_ms": sizes[best]["metrics"]["step_ms"], "buckets": sizes[best]["metrics"].get("buckets"),
            "versus": against, "runner_up": runner_up, "shorter_than": by_verdict["shorter"],
            "by_verdict": [{"verdict": k, "variants": variants} for k, variants in by_verdict.items() if variants],
            "shorter_by_ms": [min(saved), max(saved)] if saved else None,
            "not_shorter_than": {o: x for o, x in against.items() if o not in shorter}}


# The variants whose overhead stands against PyTorch DDP's: replicas of the whole model with plain
# AdamW, as PyTorch DDP (not the baseline, not optimizer-state sharding or FSDP, which change what
# each rank holds and computes).
CONTENDERS_OF = ("C3", "C4", "C6", "C8")


def overheads(records: list[dict]) -> dict[str, dict]:
    """Per precision: every variant's overhead (``overhead_of``: judged against the baseline of its
    own job), the best contender (smallest median overhead), its step against the next smallest's
    (``runner_up``, as the judge has it) and what the data says of it against
    PyTorch DDP's: ``compare_overheads_paired`` where the contender, PyTorch DDP and the baseline took
    turns in one job (``paired``), else not settled; "anchor at zero" in place of within the spread
    where PyTorch DDP's own overhead is not above zero beyond it (no overhead of it to set ours
    against); "no torch-ddp" or "no contender" where one side did not run. A variant that computes
    otherwise than the baseline (``ddp_rows.same_computation``) has no overhead: its step less the
    baseline's is not what communication costs; ``no_baseline`` names those, with the precision they
    compute in.
    Precisions without an ok baseline are left out."""
    out = {}
    for precision, found in by_variant(records).items():
        base = found.get(variants.BASELINE)
        if base is None:
            continue
        rows = {v: overhead_of(r, base) for v, r in found.items() if v != variants.BASELINE
                and same_computation(v, precision)}
        no_baseline = {v: compute_precision(v, precision) for v in found if not same_computation(v, precision)}
        anchor = rows.get("torch-ddp")
        contenders = {v: r for v, r in rows.items() if v != "torch-ddp"
                      and variants.lookup(v).deliverable in CONTENDERS_OF}
        ranked = sorted(contenders, key=lambda v: contenders[v]["ms"])
        best = ranked[0] if ranked else None
        # the smallest median overhead is an order among ours only as far as the judge has it against
        # the next smallest: the two overheads share the baseline, so their difference is the steps'
        runner_up = next_in_line(ranked, found)
        paired = bool(best and anchor and contenders[best]["paired"] and anchor["paired"]
                      and spread.same_job(found[best], found["torch-ddp"]))
        if not anchor or not best:
            verdict = "no torch-ddp" if not anchor else "no contender"
        else:
            verdict = compare_overheads_paired(found[best], found["torch-ddp"], base) if paired else spread.NOT_SETTLED
            if verdict == spread.WITHIN and anchor["verdict"] in (spread.WITHIN, "lower"):
                verdict = "anchor at zero"
        out[precision] = {"baseline_ms": base["metrics"]["step_ms"], "rows": rows, "no_baseline": no_baseline,
                          "best": best, "runner_up": runner_up, "verdict": verdict, "paired": paired,
                          "ratio": contenders[best]["ms"] / anchor["ms"] if best and anchor and anchor["ms"] > 0 else None}
    return out


def overhead_of(record: dict, base: dict) -> dict:
    """A variant's overhead: its step less the baseline's (``record_difference``: judged per round in
    one job, else not settled), and the difference as % of the baseline's step."""
    found = record_difference(record, base)
    return found | {"pct": 100 * found["ms"] / base["metrics"]["step_ms"]}


def compare_overheads_paired(ours: dict, anchor: dict, base: dict) -> str:
    """What one job's rounds support about ``ours``'s overhead against ``anchor``'s (records of the
    same job as the baseline ``base``). Per round each overhead is its median step less the
    baseline's, and the judge (``spread.judge_rounds``, each round's overhead a round of one sample)
    decides: "halves" where the anchor's overhead is above zero and ours is below half of it;
    "less"/"more" where ours is below/above the anchor's (the baseline cancels out of the
    difference of two overheads); else the judge's ``WITHIN`` or ``NOT_SETTLED`` (fewer rounds than
    it needs)."""
    def per_round(record):
        return [statistics.median(r) for r in spread.round_samples(record)]

    mine, theirs, baseline = per_round(ours), per_round(anchor), per_round(base)
    n = min(len(mine), len(theirs), len(baseline))
    over_ours = [[mine[i] - baseline[i]] for i in range(n)]
    over_anchor = [[theirs[i] - baseline[i]] for i in range(n)]
    anchor_costs = spread.judge_rounds(over_anchor, [[0.0]] * n)
    if anchor_costs.verdict == spread.NOT_SETTLED:
        return spread.NOT_SETTLED
    half = spread.judge_rounds(over_ours, [[0.5 * t] for (t,) in over_anchor])
    if anchor_costs.verdict == "higher" and half.verdict == "lower":
        return "halves"
    verdict = spread.judge_rounds(over_ours, over_anchor).verdict
    return {"lower": "less", "higher": "more"}.get(verdict, verdict)


def overhead_table(records: list[dict], found: dict[str, dict]) -> pd.DataFrame | None:
    """C8: one row per variant, for each precision its step, the baseline, the overhead in ms (with
    the judge's interval, empty where not settled) and as % of the baseline; a variant that computes
    otherwise than the baseline (``overheads``' ``no_baseline``) has neither, and a note saying why."""
    if not found:
        return None
    rows = {}
    for r in records:
        variant, precision = r["params"]["variant"], variants.precision_of(r)
        if precision not in found or variant == variants.BASELINE:
            continue
        row = rows.setdefault(variant, {"variant": variant, "note": ""})
        steps, over = step_spread(r), found[precision]["rows"].get(variant)
        other = found[precision]["no_baseline"].get(variant)
        row[f"{precision}_step_ms"] = steps[0] if steps else None
        row[f"{precision}_baseline_ms"] = None if other else found[precision]["baseline_ms"]
        if other:
            row["note"] = "; ".join(filter(None, [row["note"], f"{precision}: {OTHER_COMPUTE_NOTE.format(other)}"]))
        row[f"{precision}_overhead_ms"] = over["ms"] if over else None
        row[f"{precision}_overhead_range_ms"] = (f"{over['low_ms']:.1f}–{over['high_ms']:.1f}"
                                                 if over and over["low_ms"] is not None else "")
        row[f"{precision}_overhead_pct"] = over["pct"] if over else None
    table = pd.DataFrame(list(rows.values()))
    return table[[c for c in table.columns if c != "note"] + ["note"]]


def plot_overheads(found: dict[str, dict], path: Path) -> None:
    """Overhead per variant and precision as % of that precision's baseline, with the judge's
    interval as error bars (none where not settled). A variant without a baseline of its computation
    has no row (``overheads``), so its step's difference does not set the axis for the others."""
    fig, ax = plt.subplots(figsize=(9, 0.5 + 0.45 * max(1, len({v for f in found.values() for v in f["rows"]}))))
    names = list(dict.fromkeys(v for f in found.values() for v in f["rows"]))
    height = 0.8 / max(1, len(found))
    for k, (precision, f) in enumerate(found.items()):
        ys = [i + k * height for i, v in enumerate(names) if v in f["rows"]]
        rows = [f["rows"][v] for v in names if v in f["rows"]]
        base = f["baseline_ms"]
        pct = [r["pct"] for r in rows]
        err = [[0.0 if r["low_ms"] is None else p - 100 * r["low_ms"] / base for p, r in zip(pct, rows)],
               [0.0 if r["high_ms"] is None else 100 * r["high_ms"] / base - p for p, r in zip(pct, rows)]]
        ax.barh(ys, pct, height=height, xerr=err, capsize=2, label=f"{precision} (baseline {base:.1f} ms)")
    if not found:
        ax.text(0.5, 0.5, "no no-communication baseline in this run", ha="center", transform=ax.transAxes)
    ax.set_yticks([i + height * (len(found) - 1) / 2 for i in range(len(names))], names)
    ax.axvline(0, color="black", lw=0.8)
    ax.set(xlabel="overhead: step against the no-communication baseline (% of the baseline; bars: the judge's interval)")
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


def fit_overheads(points: list[dict], grad_bytes: float, w_Bps: float) -> dict | None:
    """The overhead model fitted to what each bucket count costs in all (its paired overhead: step
    less the baseline's, which counts what is paid inside backward as well as the wait after it):
    overhead − s/(n_b·w) = c + n_b·o by least squares over ``points`` (``overhead_points``: each a
    bucket count, its overhead as the judge has it and its per-round differences). ``c_ms`` is what
    every bucket count pays (the collectives sharing the GPU with backward, passes over the
    gradients), ``o_ms`` what one more bucket costs; with o > 0 the optimum n_b* = √(s/(w·o)).

    What the data carry of it: c and o fitted to the points leave ``degrees_of_freedom``; the
    ``residuals_ms`` are set against each point's per-round differences (``within_rounds``: how many
    points' fitted overhead lies within the range of their rounds; ``round_widths_ms``: the narrowest
    and widest range). The optimum is ``located`` only where the judge settled every point the fit
    rests on and the optimum's overhead lies below the whole interval of the best measured one
    (``best``); else the fit does not locate a better bucket count than the measured ones, and
    ``not_located`` says why: "unsettled" (not every point is settled), "lower" (the best measured
    overhead is at or below the optimum's), "within" (neither, so the optimum's overhead lies within
    the best measured one's interval). It is empty where the optimum is located, None where the fit
    has no optimum (o not positive). "lower" and "within" set the optimum's overhead against the best
    measured one's range (``best``'s ``range_ms``: its interval where the judge settled it, else the
    range of its per-round differences, ``range_kind``), never against its median alone: "lower"
    where the whole range lies at or below the optimum's, "within" where the optimum's lies inside it.
    None with fewer than three distinct bucket counts (two points fit any line)."""
    if len({p["buckets"] for p in points}) < 3:
        return None
    xs = [float(p["buckets"]) for p in points]
    ys = [p["ms"] - grad_bytes / (p["buckets"] * w_Bps) * 1e3 for p in points]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / sum((x - mean_x) ** 2 for x in xs)
    intercept = mean_y - slope * mean_x
    residuals = [y - (intercept + slope * x) for x, y in zip(xs, ys)]
    ranges = [(min(p["rounds_ms"]), max(p["rounds_ms"])) if p["rounds_ms"] else None for p in points]
    widths = [b - a for a, b in filter(None, ranges)]
    best = min(points, key=lambda p: p["ms"])
    settled = all(p["verdict"] != spread.NOT_SETTLED for p in points)
    best_range, kind = (([best["low_ms"], best["high_ms"]], "interval") if best["low_ms"] is not None
                        else ([min(best["rounds_ms"]), max(best["rounds_ms"])], "rounds' range") if best["rounds_ms"]
                        else (None, None))
    found = {"c_ms": intercept, "o_ms": slope, "points": len(points), "degrees_of_freedom": len(points) - 2,
             "buckets": [int(p["buckets"]) for p in points], "residuals_ms": residuals,
             # a fitted overhead (the point's less its residual) inside the range of the point's rounds
             "within_rounds": sum(1 for p, r, span in zip(points, residuals, ranges)
                                  if span and span[0] <= p["ms"] - r <= span[1]) if widths else None,
             "round_widths_ms": [min(widths), max(widths)] if widths else None,
             "overhead_range_ms": [min(p["ms"] for p in points), max(p["ms"] for p in points)],
             "best": {"variant": best["variant"], "buckets": int(best["buckets"]), "ms": best["ms"],
                      "low_ms": best["low_ms"], "high_ms": best["high_ms"],
                      "rounds_ms": [min(best["rounds_ms"]), max(best["rounds_ms"])] if best["rounds_ms"] else None,
                      "range_ms": best_range, "range_kind": kind},
             "optimum": None, "not_located": None}
    if slope > 0:
        optimum = optimal_buckets(grad_bytes, slope / 1e3, w_Bps)
        total = optimum["overhead_ms"] + intercept
        share = intercept / total if total > 0 else None
        found["optimum"] = optimum | {"overhead_ms": total, "fixed_share": share,
                                      "mostly_fixed": share is not None and share > 0.5}
        # the best measured overhead against the optimum's by its whole range, not its median
        lower = best_range is not None and best_range[1] <= total
        inside = best_range is not None and best_range[0] <= total < best_range[1]
        located = settled and best["low_ms"] is not None and total < best["low_ms"]
        why = [reason for reason, holds in (("unsettled", not settled), ("lower", lower), ("within", inside)) if holds]
        found["not_located"] = [] if located else why or ["within"]
    return found


def overhead_points(records: list[dict], found: dict, precision: str) -> list[dict]:
    """The bucket sizes' overheads in ``precision`` as ``fit_overheads`` takes them: each one's bucket
    count, its overhead (``found``: ``overheads``' entry for the precision, the judge's difference and
    interval) and the per-round differences of its step less the baseline's (``round_differences``)."""
    ran = by_variant(records).get(precision, {})
    base, rows = ran.get(variants.BASELINE), found.get("rows", {})
    return [{"variant": v, "buckets": r["metrics"]["buckets"], **rows[v],
             "rounds_ms": round_differences(r, base) if base else []}
            for v, r in ran.items() if is_bucket_size(v) and v in rows and r["metrics"].get("buckets")]


def measured_pass(steps: list[dict], precision: str, paid: dict | None) -> dict | None:
    """One pass over the gradients after backward as ``precision``'s records measure it, and the
    per-call cost ``paid`` (``paid_per_call``'s) with it in place of the datasheet's pass. A rung that
    no longer makes some passes (``ladder``'s ``removed_passes``) waits less after backward than the
    rung below it by what they took, so its wait saved per pass removed is a pass, where it is at
    least the least time a pass can take (the datasheet's): a smaller saving is not the pass alone
    (something else the rung changed moved the wait too) and is left out (``below_floor``).
    ``pass_ms``: the least and the most kept, ``settled``: the judge settled every kept saving;
    ``o_ms`` (``per_call_cost``) and ``o_high_ms`` (``per_call_bound``, least first) at those two;
    ``fits_bound``: where o stays within the bound with the same pass ("both" ends, the "low end"
    only, "neither"); ``bucket_passes_ms``: the bucket sizes' passes after backward at those two.
    None where no rung's saving is kept, or without ``paid``."""
    removing = [s for s in steps if s["precision"] == precision and s["removed_passes"] and s["removed_pass_ms"]
                and s["wait"]]
    if not removing or not paid:
        return None
    floor = removing[0]["removed_pass_ms"] / removing[0]["removed_passes"]
    kept = sorted((x, s["wait"]["verdict"]) for s in removing if (x := -s["wait"]["ms"] / s["removed_passes"]) >= floor)
    if not kept:
        return None
    ends = [kept[0][0], kept[-1][0]]
    o = [per_call_cost(paid["waits"]["ms"], x, paid["calls"]) for x in ends]
    bound = ([per_call_bound(paid["slowest_wait_ms"], paid["send_ms"], x, paid["calls"]) for x in ends]
             if paid["send_ms"] is not None else None)
    held = [a <= b for a, b in zip(o, bound)] if bound else None
    return {"pass_ms": ends, "datasheet_pass_ms": floor, "rungs": len(kept), "below_floor": len(removing) - len(kept),
            "settled": all(verdict != spread.NOT_SETTLED for _, verdict in kept), "o_ms": o,
            "o_high_ms": sorted(bound) if bound else None,
            "fits_bound": None if held is None else "both" if all(held) else "low end" if held[0] else "neither",
            "bucket_passes_ms": [AFTER_BACKWARD_PASSES[BUCKETED] * x for x in ends]}


# Backward "far outlasts" the communication where it takes more than this many times as long: beyond
# the most two processes differ by (spread.HOST_SWING), as backward is this job's and the bandwidth C1's.
OUTLASTS = 2.0


def spans_of(model: dict) -> dict:
    """What the section says of the model's spans: each range's top over its bottom (the predicted
    one only where it starts above zero), whether backward takes over ``OUTLASTS`` times what the
    most buckets' communication takes in all, every gradient sent once and every call paid at the
    larger of the two per-call costs (``calls_ms``; then a bucket is done before the next is ready,
    and the calls do not pile up after backward), and what the pass after the last all-reduce is of
    the measured waits, and what it leaves of them."""
    wait, predicted, work = model["measured_wait_range_ms"], model["predicted_range_ms"], model["pass_ms"]
    o = max(model["o_ms"], model["c1_o_ms"])
    calls = max(model["bucket_counts"]) * o
    return {"measured_ratio": wait[1] / wait[0] if wait[0] > 0 else None,
            "predicted_ratio": predicted[1] / predicted[0] if predicted[0] > 0 else None,
            "calls_o_ms": o, "calls_ms": calls,
            "backward_dwarfs_send": bool(model["backward_ms"]
                                         and model["backward_ms"] > OUTLASTS * (model["send_all_ms"] + calls)),
            "pass_share_of_waits": None if work is None else [work / wait[1], work / wait[0]],
            "waits_beyond_pass_ms": None if work is None else [wait[0] - work, wait[1] - work]}


def plot_phases(table: pd.DataFrame, path: Path) -> None:
    """Each ok row's phases stacked, one panel per precision side by side (the same variants in the
    same order, so a variant reads across). A variant that waits inside backward has no wait bar: its
    label says where the wait is. Each phase is its own median over the timed steps, so the stack
    need not add up to the median step (the table's): a black tick marks that. The legend sits above
    the panels, where it hides no bar and is read first."""
    ok = table[table["status"] == "ok"]
    precisions = list(dict.fromkeys(ok["precision"])) or [variants.DEFAULT_PRECISION]
    order = list(dict.fromkeys(ok["variant"]))
    labels = [f"{v}: waits in backward" if v in WAITS_IN_BACKWARD else v for v in order]
    fig, axes = plt.subplots(1, len(precisions), figsize=(5.2 * len(precisions) + 2, 1.4 + 0.3 * max(len(order), 4)),
                             sharey=True, squeeze=False)
    for ax, precision in zip(axes[0], precisions):
        rows = ok[ok["precision"] == precision].set_index("variant").reindex(order)
        bottom = pd.Series(0.0, index=rows.index)
        for phase in PHASES:
            width = rows[phase].astype(float).fillna(0.0)
            ax.barh(labels, width, left=bottom, label=phase[:-3].replace("_", " "))
            bottom = bottom + width
        ax.scatter(rows["step_ms"].astype(float), labels, marker="|", s=220, color="black", zorder=3,
                   label="step (median; the phases are medians each)")
        ax.set(title=precision, xlabel="ms per training step (rank 0, median)")
        ax.grid(alpha=0.3, axis="x")
    axes[0][0].invert_yaxis()
    handles, names = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, names, fontsize=8, loc="upper center", ncol=len(names), frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    save_figure(fig, path)


def bucket_model(s: "Section", found_overheads: dict[str, dict], steps: list[dict]):
    """C8: the bucketed rows with the overhead model's prediction, its figure, and its summary (None
    without C1's fit). w is C1's fit for the same backend and world size; s the bytes the bucketed
    variants send (every gradient, in the dtype they communicate); o, where naive and flat ran, the
    per-call cost those records pay (``paid_per_call``, the first precision's), else C1's, which
    times one call alone between synchronisations. ``o_source`` says which; ``predicted_c1_ms``
    is the model with C1's o either way, and ``after_backward_pass_ms`` the least time the rows'
    passes over the gradients after backward take, which the model leaves out. ``overhead_fit`` fits
    the model to the bucket sizes' overheads (``found_overheads``, what ``overheads`` gave), and
    ``measured_pass`` is the per-call cost with the passes as the rungs (``steps``: ``ladder``'s)
    measure them, where o is the records'.

    One precision, the first: s is the bytes of fp32 gradients, and a bf16 step's backward and waits
    are another workload's (as ``per_call`` is the first precision's)."""
    records, table, first, fit = s.records, s.table, s.first, s.fit
    bucketed = table[(table["status"] == "ok") & table["variant"].map(is_bucket_size)].copy()
    # the model's columns in every run, empty where there is no model (no C1 fit, nothing sent)
    for column in ("predicted_ms", "predicted_c1_ms", "after_backward_pass_ms"):
        bucketed[column] = math.nan
    sent = [r for r in records if r["params"]["variant"] in set(bucketed["variant"])
            and variants.precision_of(r) == first]
    model_summary = None
    fig, ax = plt.subplots(figsize=(6.5, 4))
    if fit and fit["w_GBps"] and fit["o_ms"] > 0 and sent and sent[0]["metrics"].get("parameter_count"):
        element_bytes = variants.lookup(sent[0]["params"]["variant"]).gradient_bytes
        grad_bytes = sent[0]["metrics"]["parameter_count"] * element_bytes
        paid = next(iter(s.per_call.values()), None)
        o_ms, source = (paid["o_ms"], "records") if paid and paid["o_ms"] > 0 else (fit["o_ms"], "C1")
        o_s, c1_o_s, w = o_ms / 1e3, fit["o_ms"] / 1e3, fit["w_GBps"] * 1e9
        bucketed["predicted_ms"] = [overhead_model(n, grad_bytes, o_s, w) * 1e3 for n in bucketed["buckets"]]
        bucketed["predicted_c1_ms"] = [overhead_model(n, grad_bytes, c1_o_s, w) * 1e3 for n in bucketed["buckets"]]
        bandwidth = memory_bandwidth(sent)
        bucketed["after_backward_pass_ms"] = [pass_ms(v, grad_bytes, bandwidth) for v in bucketed["variant"]]
        ones = bucketed[bucketed["precision"] == first]
        backward = ones["backward_ms"].median() if len(ones) else None
        waits = ones["comm_wait_ms"]
        model_summary = {"o_ms": o_ms, "o_source": source, "c1_o_ms": fit["o_ms"], "w_GBps": fit["w_GBps"],
                         "grad_MB": grad_bytes / 1e6,
                         "gradient_dtype": {4: "fp32", 2: "bf16"}.get(element_bytes, f"{element_bytes}-byte"),
                         "send_all_ms": grad_bytes / w * 1e3, "backward_ms": backward,
                         "optimum": optimal_buckets(grad_bytes, o_s, w),
                         "optimum_c1": optimal_buckets(grad_bytes, c1_o_s, w),
                         "measured_wait_range_ms": [float(waits.min()), float(waits.max())],
                         "predicted_range_ms": [float(ones["predicted_ms"].min()), float(ones["predicted_ms"].max())],
                         "bucket_counts": [int(ones["buckets"].min()), int(ones["buckets"].max())],
                         "pass_ms": next((x for x in bucketed["after_backward_pass_ms"] if x is not None), None),
                         "memory_GBps": bandwidth / 1e9 if bandwidth else None}
        model_summary |= spans_of(model_summary)
        # Fitted to the overheads of the first precision, where the run paired them with a baseline.
        points = overhead_points(records, found_overheads.get(first, {}), first)
        by_name = {r["params"]["variant"]: r for r in sent}
        waits_by_round = [[statistics.median(r) for r in spread.round_samples(by_name[v], "comm_wait") if r]
                          if v in by_name else [] for v in ones["variant"]]
        model_summary |= model_against_waits(list(ones["predicted_ms"]), list(ones["comm_wait_ms"]), waits_by_round)
        model_summary["overhead_fit"] = fit_overheads(points, grad_bytes, w) if points else None
        model_summary["overhead_fit_precision"] = first
        measured = measured_pass(steps, first, paid) if source == "records" else None
        if measured:
            # the bucket sizes' passes at the measured pass can reach the shortest of their waits: then
            # the records leave nothing of the waits for the calls
            measured["passes_fill_waits"] = measured["bucket_passes_ms"][1] >= model_summary["measured_wait_range_ms"][0]
        model_summary["measured_pass"] = measured
        plot_bucket_model(ones, grad_bytes, o_s, w, ax, c1_o_s=c1_o_s, source=source, pass_ms=model_summary["pass_ms"])
    else:
        ax.text(0.5, 0.5, "no C1 fit for this backend and world size", ha="center", transform=ax.transAxes)
    save_figure(fig, s.out / "overhead_model.png")
    return bucketed, model_summary


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


# C8's rungs past PyTorch's DDP, each adding one thing to the one before (variants.VARIANTS).
LADDER = ("bucketed-<MB>", "bucketed-view-<MB>", "bucketed-ready-<MB>", "bucketed-avg-<MB>", "bucketed-bf16-<MB>")


def worst_accuracy(rows: list[dict]) -> dict | None:
    """The largest of each accuracy measure over the rows that have it (None where no row has any)."""
    if not rows:
        return None
    return {k: max((r[k] for r in rows if r.get(k) is not None), default=None)
            for k in ("weights_rel_diff", "diff_over_update")}


def ladder(records: list[dict]) -> list[dict]:
    """What each rung did: per precision and bucket size, every rung's step against the rung below
    it that ran (``record_difference``: judged per round where they shared a job), in ladder order;
    ``removed_pass_ms``, the least time (datasheet bandwidth) of the passes over the gradients after
    backward that the rung no longer makes (``AFTER_BACKWARD_PASSES``; ``removed_passes`` counts
    them), where both rungs' are known, and ``wait``, its wait after backward against the rung below's."""
    out = []
    bandwidth = memory_bandwidth(records)
    for precision, found in by_variant(records).items():
        sizes = sorted({variants.bucket_size_mb(v) for v in found if variants.lookup(v).name in LADDER})
        for mb in sizes:
            size = f"{mb:g}"
            ran = [r.replace(variants.FAMILY, size) for r in LADDER if r.replace(variants.FAMILY, size) in found]
            for below, rung in zip(ran, ran[1:]):
                diff = record_difference(found[rung], found[below])
                if diff is None:
                    continue
                grad_bytes = found[rung]["metrics"].get("parameter_count", 0) * variants.lookup("naive").gradient_bytes
                passes = [pass_ms(v, grad_bytes, bandwidth) for v in (below, rung)]
                counts = [AFTER_BACKWARD_PASSES.get(variants.lookup(v).name) for v in (below, rung)]
                out.append({"precision": precision, "rung": rung, "below": below,
                            "removed_pass_ms": passes[0] - passes[1] if None not in passes and grad_bytes else None,
                            "removed_passes": counts[0] - counts[1] if None not in counts else None,
                            "wait": record_difference(found[rung], found[below], "comm_wait_ms")} | diff)
    return out


def quoted(rows: dict[str, dict | None]) -> dict:
    """The rows C8's opening quotes: the replicating variants the bucket sizes stand against, and the
    rungs past PyTorch's DDP that ran."""
    return {"others": {v: rows.get(v) for v in REPLICATING},
            "beyond": [r for v, r in rows.items() if r and variants.lookup(v).deliverable == "C8"
                       and not is_bucket_size(v)]}


# The columns of the bucket sizes' table C8 shows (where it has rows; else its note, whole): their
# steps and waits beside the model's predictions.
BUCKETED_VIEW = ["variant", "precision", "status", "buckets", "comm_wait_ms", "step_ms", "step_range_ms",
                 "overhead_ms", "predicted_ms", "predicted_c1_ms", "after_backward_pass_ms"]


def part(s: "Section") -> tuple[pd.DataFrame, dict]:
    """C8's tables and figures, and its summary keys. Every variant side by side (the bucket sizes "vs
    the others"), the overhead of each in each precision, then the bucket sizes with the overhead
    model's prediction as the main table."""
    records, precisions, traces, traced, out = s.records, s.precisions, s.traces, s.traced, s.out
    write_table(s.table.round(3), out, stem="variants")
    plot_phases(s.table, out / "phases.png")
    found = overheads(records)
    over = overhead_table(records, found)
    # Every table the registry declares is written, one saying why where there are no rows.
    write_table(over.round(3) if over is not None
                else no_rows(f"no {variants.BASELINE} step to measure the overheads against"), out, stem="overhead")
    plot_overheads(found, out / "overhead.png")
    accuracy = accuracy_rows(records)
    write_table(pd.DataFrame(accuracy) if accuracy else no_rows("no variant recorded its bf16 gradients' error"),
                out, stem="accuracy")
    steps = ladder(records)
    bucketed, model = bucket_model(s, found, steps)
    # The traced variants of C8's and PyTorch DDP's: what the traces show is left (the compute lane's
    # idle time in one step of each), and where a traced step's GPU time goes, naive's beside as the
    # reference of the matmuls.
    shown = [v for v in traced if variants.lookup(v).deliverable == "C8" or v == "torch-ddp"]
    gaps = {label: compute_gaps(traces[label]) for p in precisions for v in shown
            if (label := trace_label(v, p)) in traces}
    kinds = where_time_goes(traces, [(v, p) for p in precisions for v in traced if v in shown or v == QUIET_TRACE],
                            by_variant(records))
    return bucketed, {"bucketed_view": BUCKETED_VIEW if len(bucketed) else None, "model": model,
                      "overheads": found, "has_overhead_table": over is not None, "accuracy": accuracy,
                      "accuracy_worst": worst_accuracy(accuracy), "compute_gaps": gaps,
                      "kernel_time": kinds, "ladder": steps,
                      "against_overlap": bucketed_against_overlap(records).get(s.first),
                      "best_bucket_size": best_bucket_size(records, s.first),
                      "casts_on_side_stream": casts_on_side_stream(records), "across_nodes": across_nodes(records)}


@dataclass(frozen=True, kw_only=True)
class RunnerUp:
    """The contender with the next smallest median overhead, and the best's step against its (the judge's)."""
    variant: str
    versus: Difference


@dataclass(frozen=True, kw_only=True)
class Overhead:
    """``overheads``, one precision: every variant's overhead (its rows), the best and the verdict, and
    the variants without a baseline of their computation (variant -> the precision it computes in)."""
    rows: dict[str, Spread]
    no_baseline: dict[str, str]
    best: str | None
    runner_up: list[RunnerUp]   # the next smallest and the best's step against its; empty with one contender
    verdict: str        # compare_overheads_paired's, "anchor at zero", "no torch-ddp", "no contender"
    ratio: float | None


@dataclass(frozen=True, kw_only=True)
class LadderStep:
    """``ladder``: a rung's step against the rung below it, as the judge has it."""
    precision: str
    rung: str
    below: str
    ms: float
    low_ms: float | None
    high_ms: float | None
    sign: int
    verdict: str
    removed_pass_ms: float | None


@dataclass(frozen=True, kw_only=True)
class AccuracyWorst:
    weights_rel_diff: float | None
    diff_over_update: float | None


@dataclass(frozen=True, kw_only=True)
class AcrossNodes:
    precision: str
    nodes: int
    hosts: list[str]
    ranks_per_node: int | None


@dataclass(frozen=True, kw_only=True)
class PerCallBound:
    """What naive's calls can cost at most each (``ddp_rows.paid_per_call``'s ``o_high_ms``, its bytes
    priced at the card's datasheet link rate ``link_GBps``), and how much of o is flat's extra passes
    at the datasheet's rate (``assumed_share``, ``mostly_assumed``)."""
    calls: dict[str, int]
    o_high_ms: float | None
    link_GBps: float | None
    extra_passes_ms: float
    assumed_share: float | None
    mostly_assumed: bool


@dataclass(frozen=True, kw_only=True)
class Optimum:
    """``accounting.data_parallel.optimal_buckets``: the bucket count, size and overhead that minimise
    the model's overhead."""
    n_buckets: float
    bucket_MB: float
    overhead_ms: float


@dataclass(frozen=True, kw_only=True)
class FittedOptimum(Optimum):
    fixed_share: float | None
    mostly_fixed: bool


@dataclass(frozen=True, kw_only=True)
class BestMeasured:
    """``fit_overheads``' ``best``: the bucket count with the least measured overhead, the judge's
    interval (null where not settled) and the range of its per-round differences."""
    variant: str
    buckets: int
    ms: float
    low_ms: float | None
    high_ms: float | None
    rounds_ms: list[float] | None
    range_ms: list[float] | None    # its interval where settled, else its rounds' range
    range_kind: str | None          # "interval", "rounds' range"


@dataclass(frozen=True, kw_only=True)
class OverheadFit:
    """``fit_overheads``: c + n·o fitted to the measured overheads of the bucket sizes, what the data
    carry of it, and whether it locates an optimum."""
    c_ms: float
    o_ms: float
    points: int
    degrees_of_freedom: int
    buckets: list[int]
    residuals_ms: list[float]
    within_rounds: int | None
    round_widths_ms: list[float] | None
    overhead_range_ms: list[float]
    best: BestMeasured
    optimum: FittedOptimum | None
    not_located: list[str] | None   # "unsettled", "lower", "within"; empty: located


@dataclass(frozen=True, kw_only=True)
class MeasuredPass:
    """``measured_pass``: a pass over the gradients as the rungs measure it, and o with it."""
    pass_ms: list[float]
    datasheet_pass_ms: float
    rungs: int
    below_floor: int
    settled: bool
    o_ms: list[float]
    o_high_ms: list[float] | None
    fits_bound: str | None
    bucket_passes_ms: list[float]
    passes_fill_waits: bool


@dataclass(frozen=True, kw_only=True)
class OverheadModel:
    """The bucket sizes against the overhead model n·o + s/(n·w): its parameters and where they come
    from, its optimum, its predictions against the measured waits (``model_against_waits``,
    ``spans_of``) and the fit to the measured overheads."""
    o_ms: float
    o_source: str
    c1_o_ms: float
    w_GBps: float
    grad_MB: float
    gradient_dtype: str
    send_all_ms: float
    backward_ms: float | None
    optimum: Optimum
    optimum_c1: Optimum
    measured_wait_range_ms: list[float]
    predicted_range_ms: list[float]
    bucket_counts: list[int]
    pass_ms: float | None
    memory_GBps: float | None
    measured_ratio: float | None
    predicted_ratio: float | None
    calls_o_ms: float               # the larger per-call cost, the records' or C1's
    calls_ms: float                 # the most buckets' calls at it
    backward_dwarfs_send: bool
    pass_share_of_waits: list[float] | None
    waits_beyond_pass_ms: list[float] | None
    against_waits: str              # "follows", "flat", "off", "not settled"
    misses: bool                    # "flat" or "off": some size's rounds all beyond the factor
    wait_rounds_range_ms: list[float] | None    # the lowest and highest round's wait of any size
    follows_within: float
    flat_share: float
    predicted_change: float | None
    overhead_fit: OverheadFit | None
    overhead_fit_precision: str
    measured_pass: MeasuredPass | None


@dataclass(frozen=True, kw_only=True)
class AgainstOverlap:
    """``bucketed_against_overlap``: every bucket size's wait after backward against overlap's."""
    overlap_wait_ms: float
    bucketed_wait_range_ms: list[float]
    longer: str                     # "every", "not every", "not settled"
    extra_low_ms: float | None
    extra_high_ms: float | None
    extra_pass_ms: float | None
    memory_GBps: float | None
    extra_pass: str | None          # "fits", "within", "exceeds", "not settled"; null: not priced
    pass_share_of_extra: float | None


@dataclass(frozen=True, kw_only=True)
class Verdicted:
    """The variants the judge gives one verdict."""
    verdict: str
    variants: list[str]


@dataclass(frozen=True, kw_only=True)
class BestBucketSize:
    """``best_bucket_size``: the bucket size with the shortest step and its step against the others'."""
    variant: str
    step_ms: float
    buckets: float | None
    runner_up: list[RunnerUp]       # the next shortest bucket size, its step judged; empty with one size
    shorter_than: list[str]
    shorter_by_ms: list[float] | None
    # the other variants by the judge's verdict on the best size's step against theirs ("shorter",
    # "same" (within the spread), "longer", "not settled"), in that order, each verdict some variant got
    by_verdict: list[Verdicted]
    not_shorter_than: dict[str, Difference | None]


@dataclass(frozen=True, kw_only=True)
class C8Summary(Opening):
    table_view: list[str]
    paired: dict[str, bool] | None
    others: dict[str, WaitingStep | None]
    beyond: list[Named]
    per_call: PerCallBound | None
    bucketed_view: list[str] | None
    model: OverheadModel | None
    overheads: dict[str, Overhead]
    has_overhead_table: bool | None
    accuracy: list[dict[str, Any]] | None
    accuracy_worst: AccuracyWorst | None
    compute_gaps: dict[str, dict[str, float]] | None
    # ddp_traces.where_time_goes: per traced step, kernel time by kind (ms), the excess over naive's,
    # the steps' scatter and whether the matmuls' excess is beyond it
    kernel_time: dict[str, dict[str, float | bool | None]]
    ladder: list[LadderStep]
    against_overlap: AgainstOverlap | None
    best_bucket_size: BestBucketSize | None
    casts_on_side_stream: bool | None
    across_nodes: list[AcrossNodes]


def across_nodes(records: list[dict]) -> list[dict]:
    """The data-parallel jobs whose ranks ran on more than one node (their records' ``metrics.launch``),
    one row a precision: nodes, hosts and ranks a node. Their all-reduces cross the network between
    the nodes, so every overhead in the section is paid on that link, not inside one host."""
    rows = {}
    for r in records:
        launch = (r.get("metrics") or {}).get("launch") or {}
        if r.get("status") == "ok" and (launch.get("nodes") or 1) > 1:
            rows.setdefault(variants.precision_of(r), {
                "precision": variants.precision_of(r), "nodes": int(launch["nodes"]),
                "hosts": list(launch.get("hosts") or []), "ranks_per_node": launch.get("ranks_per_node")})
    return [rows[p] for p in sorted(rows)]


def casts_on_side_stream(records: list[dict]) -> bool | None:
    """Whether the bf16-communicating rungs that ran cast and all-reduced on a side stream: True or
    False where their records say so alike, None where none says (records from before the field)."""
    said = {r["metrics"]["casts_on_side_stream"] for r in records
            if variants.fp32_twin(r["params"]["variant"]) and "casts_on_side_stream" in r.get("metrics", {})}
    return said.pop() if len(said) == 1 else None
