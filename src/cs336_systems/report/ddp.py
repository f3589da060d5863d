"""C2–C8, C10–C12 report: the data-parallel training variants side by side, the bucket overhead model
fitted from C1, trace timelines, and memory breakdowns; one folder and summary per writeup section.

    python -m cs336_systems.report.ddp --records C3/records/*.json --traces C3/traces/*.json \
        --traced naive overlap --c1-summary C1/summary.json --results results/RUN
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from cs336_systems.report.common import load_records, run_provenance, save_figure, write_summary, write_table

GIB = 2**30
PHASES = ("forward_ms", "backward_ms", "comm_wait_ms", "optimizer_ms")
SECTIONS = ("C2", "C3", "C4", "C5", "C6", "C7", "C8", "C10", "C11", "C12")


def _step_range(steps: list[dict]) -> str:
    """Fastest–slowest of rank 0's timed steps (ms): the spread beside their median."""
    times = [s["step_ms"] for s in steps if s.get("step_ms") is not None]
    return f"{min(times):.1f}–{max(times):.1f}" if times else ""


def step_table(records: list[dict]) -> pd.DataFrame:
    rows = []
    for r in records:
        m = r["metrics"]
        memory = (m.get("memory_per_rank") or [{}])[0]
        rows.append({"variant": r["params"]["variant"], "status": r["status"],
                     **{phase: m.get(phase) for phase in PHASES},
                     "step_ms": m.get("step_ms"), "step_range_ms": _step_range(m.get("steps") or []),
                     "comm_share": m.get("comm_share"), "buckets": m.get("buckets"),
                     "peak_GiB": memory["peak"] / GIB if "peak" in memory else None,
                     "note": r.get("reason") or r.get("message") or ""})
    return pd.DataFrame(rows)


def bucket_size_mb(variant: str) -> float | None:
    return float(variant.split("-", 1)[1]) if variant.startswith("bucketed-") else None


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


def plot_phases(table: pd.DataFrame, path: Path) -> None:
    ok = table[table["status"] == "ok"]
    fig, ax = plt.subplots(figsize=(9, 4))
    bottom = pd.Series(0.0, index=ok.index)
    for phase in PHASES:
        ax.barh(ok["variant"], ok[phase], left=bottom, label=phase[:-3].replace("_", " "))
        bottom = bottom + ok[phase]
    ax.set(xlabel="ms per training step (rank 0, median)")
    ax.invert_yaxis()
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="x")
    save_figure(fig, path)


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
            else:
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
    spans = sorted((i["start_us"], i["end_us"]) for i in intervals if i["lane"] == "compute")
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


def _row(table: pd.DataFrame, variant: str) -> dict | None:
    hit = table[(table["variant"] == variant) & (table["status"] == "ok")]
    return None if hit.empty else {k: (None if isinstance(v, float) and math.isnan(v) else v)
                                   for k, v in hit.iloc[0].to_dict().items()}


def memory_rows(records: list[dict], variants: tuple[str, ...]) -> list[dict]:
    """C11 / C12: rank 0's memory at each point and its breakdown, in GiB."""
    out = []
    for r in records:
        if r["params"]["variant"] not in variants or r["status"] != "ok":
            continue
        mem = r["metrics"]["memory_per_rank"][0]
        if "after_init" not in mem:
            continue
        row = {"variant": r["params"]["variant"]}
        for point in ("after_init", "before_step", "after_step", "peak"):
            row[f"{point}_GiB"] = mem[point] / GIB
        for kind, value in mem["breakdown_before_step"].items():
            row[f"{kind}_GiB"] = value / GIB
        row["activations_peak_GiB"] = mem["forward_backward_peak_above_start"] / GIB
        row["step_ms"] = r["metrics"]["step_ms"]
        out.append(row)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.report.ddp", description=__doc__.split("\n\n")[0])
    p.add_argument("--records", nargs="+", required=True)
    p.add_argument("--traces", nargs="*", default=[])
    p.add_argument("--traced", nargs="*", default=[], help="variants whose trace the timeline shows")
    p.add_argument("--c1-summary", required=True, type=Path)
    p.add_argument("--results", required=True, type=Path, help="the run's results folder (C2/ ... C12/ go there)")
    args = p.parse_args(argv)
    records = load_records(args.records)
    table = step_table(records)
    params = records[0]["params"]
    setup = {k: params[k] for k in ("size", "context", "global_batch", "world_size", "backend", "warmup", "steps")}
    prov = run_provenance(records)
    out = {ident: args.results / ident for ident in SECTIONS}

    write_table(table.round(3), out["C3"])
    plot_phases(table, out["C3"] / "phases.png")
    traces = {}
    for path in args.traces:
        trace = json.loads(Path(path).read_text())
        if trace["variant"] in args.traced:
            traces[trace["variant"]] = trace["intervals"]
    plot_timelines({v: traces[v] for v in args.traced if v in traces and not v.startswith("fsdp")},
                   out["C6"] / "timeline.png")
    plot_timelines({v: traces[v] for v in args.traced if v in traces and v.startswith("fsdp")},
                   out["C12"] / "timeline.png")

    rows = {v: _row(table, v) for v in table["variant"]}
    base = {"provenance": prov, "setup": setup}

    # C8: the overhead model with o and w from C1 (same backend, same world size).
    c1 = json.loads(args.c1_summary.read_text())
    fit = c1["fits"].get(f"{setup['backend']}_x{setup['world_size']}")
    bucketed = table[(table["status"] == "ok") & table["variant"].str.startswith("bucketed-")].copy()
    model_summary = None
    if fit and fit["w_GBps"] and fit["o_ms"] > 0 and records[0]["metrics"].get("parameter_count"):
        grad_bytes = records[0]["metrics"]["parameter_count"] * 4
        o_s, w = fit["o_ms"] / 1e3, fit["w_GBps"] * 1e9
        bucketed["predicted_ms"] = [overhead_model(n, grad_bytes, o_s, w) * 1e3 for n in bucketed["buckets"]]
        backward = bucketed["backward_ms"].median() if len(bucketed) else None
        model_summary = {"o_ms": fit["o_ms"], "w_GBps": fit["w_GBps"], "grad_MB": grad_bytes / 1e6,
                         "send_all_ms": grad_bytes / w * 1e3, "backward_ms": backward,
                         "optimum": optimal_buckets(grad_bytes, o_s, w)}
        fig, ax = plt.subplots(figsize=(6.5, 4))
        sizes = [b / 4 for b in range(1, 4001)]   # 0.25 MB ... 1 GB
        ax.plot(sizes, [overhead_model(max(1.0, grad_bytes / (s * 1e6)), grad_bytes, o_s, w) * 1e3 for s in sizes],
                label="model: n_b·o + s/(n_b·w)")
        ax.plot([bucket_size_mb(v) for v in bucketed["variant"]], bucketed["comm_wait_ms"], "o", label="measured wait")
        ax.set(xscale="log", xlabel="bucket size (MB)", ylabel="communication after backward (ms)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        save_figure(fig, out["C8"] / "overhead_model.png")
    else:
        fig, ax = plt.subplots(figsize=(6.5, 4))
        ax.text(0.5, 0.5, "no C1 fit for this backend and world size", ha="center", transform=ax.transAxes)
        save_figure(fig, out["C8"] / "overhead_model.png")
    write_table(bucketed.round(3), out["C8"])

    memory = memory_rows(records, ("overlap", "overlap-sharded", "torch-ddp", "fsdp", "fsdp-bf16"))
    if memory:
        write_table(pd.DataFrame(memory).round(3), out["C11"])

    summaries = {
        "C2": {"naive": rows.get("naive")},
        "C3": {"naive": rows.get("naive"), "rows": len(table),
               "statuses": table["status"].value_counts().to_dict()},
        "C4": {"naive": rows.get("naive"), "flat": rows.get("flat")},
        "C5": {"overlap": rows.get("overlap")},
        "C6": {"naive": rows.get("naive"), "flat": rows.get("flat"), "overlap": rows.get("overlap"),
               "torch_ddp": rows.get("torch-ddp"), "traced": [v for v in args.traced if v in traces]},
        "C7": {"bucketed": [r for v, r in rows.items() if v.startswith("bucketed-") and r]},
        "C8": {"bucketed": bucketed.to_dict("records"), "model": model_summary, "others": {
            v: rows.get(v) for v in ("naive", "flat", "overlap", "torch-ddp")}},
        "C10": {"overlap": rows.get("overlap"), "sharded": rows.get("overlap-sharded")},
        "C11": {"memory": memory},
        "C12": {"compute_gaps": {v: compute_gaps(traces[v]) for v in traces},
                "fsdp": rows.get("fsdp"), "fsdp_bf16": rows.get("fsdp-bf16"), "overlap": rows.get("overlap"),
                "torch_ddp": rows.get("torch-ddp"), "memory": memory,
                "predicted_state_GiB": _fsdp_prediction(setup)},
    }
    for ident in SECTIONS:
        write_summary(out[ident] / "summary.json", base | summaries[ident])
    print(f"DDP report: {len(table)} variants -> {', '.join(SECTIONS)}", file=sys.stderr)
    return 0


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
