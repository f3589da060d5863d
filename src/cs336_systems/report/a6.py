"""A6 report: measured peak memory per checkpoint group size beside the closed-form prediction.

    python -m cs336_systems.report.a6 --records group0.json group1.json ... --out-dir DIR

The prediction is pure closed form (``cs336_systems.memory.activation_model``): the baseline is
the fp32 weights (plus AdamW's two moments in train-step mode), so it can be compared with the
baseline the run measured, and it exists for points that ran out of memory or ran on the CPU.
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from cs336_systems.memory.activation_model import (block_input_bytes, block_saved_bytes, block_saved_terms,
                                                   checkpoint_memory, continuous_optimum, optimal_group_size,
                                                   predicted_peak)
from cs336_systems.models import VOCAB_SIZE, ModelSize
from cs336_systems.report import contract
from cs336_systems.report.common import cell, load_records, run_provenance, save_figure, write_table
from cs336_systems.report.contract import Summary, Unread
from cs336_systems.report.spread import (FEW_ROUNDS, HOST, HOST_SWING, MIN_ROUNDS, NOT_SETTLED, host_share, judge,
                                         least_drain_ms, require_one_job, trend_of)

GIB = 2**30


def _size(params: dict) -> ModelSize:
    return ModelSize(params["d_model"], params["d_ff"], params["num_layers"], params["num_heads"])


def modelled_baseline(params: dict, vocab_size: int = VOCAB_SIZE) -> int:
    """Memory before a step: fp32 weights, plus AdamW's two fp32 moments in train-step mode."""
    weights = _size(params).parameter_count(vocab_size) * 4
    return weights * (3 if params["mode"] == "train-step" else 1)


def check_same_workload(records: list[dict]) -> dict:
    """All records must describe one size / context / batch / mode; return those params."""
    keys = ("size", "context", "batch", "mode", "d_model", "d_ff", "num_layers", "num_heads")
    points = {tuple(r["params"][k] for k in keys) for r in records}
    if len(points) != 1:
        raise ValueError(f"A6 records mix workloads: {sorted(points)}")
    return dict(zip(keys, points.pop()))


def check_one_job(records: list[dict]) -> None:
    """The group sizes that ran took turns in one job (``metrics.turns``), which pairs each one's step
    with the next one's; records of two jobs are no shape ``memory.checkpoint_bench`` writes."""
    require_one_job({f"k = {r['params']['group']}": r for r in records if r["status"] == "ok"}, "A6 records")


def rows_frame(records: list[dict]) -> pd.DataFrame:
    rows = []
    for r in sorted(records, key=lambda r: r["params"]["group"]):
        p, m = r["params"], r["metrics"]
        size, k = _size(p), p["group"]
        a, A = block_input_bytes(size, p["context"], p["batch"]), block_saved_bytes(size, p["context"], p["batch"])
        predicted = predicted_peak(size, p["context"], p["batch"], k, modelled_baseline(p))
        peak, baseline = m.get("peak_memory_bytes"), m.get("baseline_bytes")
        rows.append(dict(
            k=k, status=r["status"], message=r.get("message", r.get("reason", "")),
            step_ms=m.get("step", {}).get("mean", math.nan), step_std_ms=m.get("step", {}).get("std", math.nan),
            baseline_gib=baseline / GIB if baseline is not None else math.nan,
            # fp32 weights and their fp32 gradients: what any step holds besides activations
            weights_grads_gib=2 * size.parameter_count() * 4 / GIB,
            peak_gib=peak / GIB if peak is not None else math.nan,
            activation_model_gib=checkpoint_memory(size.num_layers, a, A, k) / GIB,
            predicted_peak_gib=predicted["peak"] / GIB,
            device_total_gib=(p.get("device_total_bytes") or math.nan) / GIB))
    return pd.DataFrame(rows)



def display_table(df: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({
        "group size k": [("0 (none)" if k == 0 else str(k)) for k in df["k"]],
        "status": [s.upper() if s != "ok" else "ok" for s in df["status"]],
        "step (ms)": [cell(v, ".1f") + (f" ± {s:.1f}" if cell(v) and not math.isnan(s) else "")
                      for v, s in zip(df["step_ms"], df["step_std_ms"])],
        "before step (GiB)": [cell(v) for v in df["baseline_gib"]],
        "weights + grads (GiB)": [cell(v) for v in df["weights_grads_gib"]],
        "peak (GiB)": [cell(v) for v in df["peak_gib"]],
        "predicted peak (GiB)": [cell(v) for v in df["predicted_peak_gib"]],
        "(N/k)·a + k·A (GiB)": [cell(v) for v in df["activation_model_gib"]],
    })


def plot_peak(df: pd.DataFrame, path: Path, k_opt: int) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4))
    ok, failed = df[df["status"] == "ok"], df[df["status"] != "ok"]
    ax.plot(df["k"], df["predicted_peak_gib"], "--", marker=".", color="C1", label="predicted peak (closed form)")
    if ok["peak_gib"].notna().any():
        ax.plot(ok["k"], ok["peak_gib"], marker="o", color="C0", label="measured peak")
    capacity = df["device_total_gib"].dropna()
    if len(capacity):
        ax.axhline(capacity.iloc[0], color="grey", lw=0.8, ls=":", label="device memory")
    top = max(df["predicted_peak_gib"].max(), (capacity.iloc[0] if len(capacity) else 0))
    if len(failed):
        ax.scatter(failed["k"], [top] * len(failed), marker="x", color="C3", s=60, label="out of memory / error")
    ax.axvline(k_opt, color="C2", lw=0.8, label=f"predicted optimum k = {k_opt}")
    ax.set(xlabel="blocks per checkpointed group k (0 = no checkpointing)", ylabel="peak memory (GiB)", yscale="log")
    ax.set_xticks(list(df["k"]))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save_figure(fig, path)


@dataclass(frozen=True)
class StepChange:
    """One group size's step against the next one's, as the judge called it."""
    from_: int
    to: int
    direction: str


@dataclass(frozen=True)
class Row:
    """One group size's status and measured peak (null where it has none)."""
    k: int
    status: str
    peak_gib: Unread[float | None]


@dataclass(frozen=True)
class Workload:
    size: str
    context: int
    batch: int


@dataclass(frozen=True)
class A6Summary(Summary):
    peak_slope_gib_per_block: float | None
    step_ms_range: list[float] | None
    # how far apart the checkpointed group sizes' steps are, as a share of the fastest
    step_spread_share: float | None
    step_trend: Unread[str | None]
    step_steps: list[StepChange]
    # steps the judge did not settle, and of those, how many for fewer rounds than it needs and how
    # many because another process's host could turn the verdict around
    step_not_settled: int
    step_too_few_rounds: int
    step_host_bound: int
    # the most share of a step on either side of those that passed before the host returned from queueing it
    # (spread.host_share), and how far another process's host speed can move (spread.HOST_SWING)
    step_host_share: float | None
    # of those sides, the least work the GPU still had queued when the host returned (spread.least_drain_ms)
    step_least_drain_ms: float | None
    host_swing: float
    step_rounds: int | None
    min_rounds: int
    fitting_k: list[int]
    workload: Workload
    num_blocks: int
    a_bytes: int
    A_bytes: int
    A_over_a: float
    # every block's input stored, N·a: what no checkpointing beyond the inputs holds
    all_inputs_bytes: int
    A_terms: dict[str, int]
    attention_share: float
    k_star: float
    k_star_below_one: bool
    k_opt: int
    activation_model_at_opt_gib: float
    no_checkpoint_activations_gib: float
    modelled_baseline_gib: float
    measured_peak: bool
    best_measured_k: int | None
    best_is_predicted: bool
    best_measured_peak_gib: float | None
    rows: list[Row]
    not_ok: list[str]
    memory_note: str | None


CONTRACTS = {"A6": A6Summary}


def summarize(df: pd.DataFrame, records: list[dict], workload: dict) -> A6Summary:
    size = _size(workload)
    T, B, N = workload["context"], workload["batch"], size.num_layers
    a, A = block_input_bytes(size, T, B), block_saved_bytes(size, T, B)
    k_opt, k_star = optimal_group_size(N, a, A), continuous_optimum(N, a, A)
    ok = df[(df["status"] == "ok") & df["peak_gib"].notna()]
    best = ok.loc[ok["peak_gib"].idxmin()] if len(ok) else None
    grouped = ok[ok["k"] >= 1]
    slope = None
    if grouped["k"].nunique() >= 2:          # least-squares slope of peak against k
        k, peak = grouped["k"].astype(float), grouped["peak_gib"]
        slope = float(((k - k.mean()) * (peak - peak.mean())).sum() / ((k - k.mean()) ** 2).sum())
    timed = df[(df["status"] == "ok") & (df["k"] >= 1)]["step_ms"].dropna()
    # how the step time moves with k (the recomputed FLOPs do not): each group size's step against the
    # next one's by the judge, paired per round of the one job the group sizes took turns in
    by_k = sorted((r for r in records if r["status"] == "ok" and r["params"]["group"] >= 1),
                  key=lambda r: r["params"]["group"])
    pairs = list(zip(by_k, by_k[1:]))
    verdicts = [judge(b, a, "step") for a, b in pairs]
    step_steps = [StepChange(int(a["params"]["group"]), int(b["params"]["group"]), v.verdict)
                  for (a, b), v in zip(pairs, verdicts)]
    # both sides of every step the host could turn around
    host_sides = [r for pair, v in zip(pairs, verdicts) if v.reason == HOST for r in pair]
    return A6Summary(
        provenance=run_provenance(records),
        peak_slope_gib_per_block=slope,
        step_ms_range=[float(timed.min()), float(timed.max())] if len(timed) else None,
        step_spread_share=float(timed.max() / timed.min() - 1) if len(timed) else None,
        step_trend=trend_of(verdicts) if step_steps else None,
        step_steps=step_steps,
        step_not_settled=sum(x.direction == NOT_SETTLED for x in step_steps),
        step_too_few_rounds=sum(v.reason == FEW_ROUNDS for v in verdicts),
        step_host_bound=sum(v.reason == HOST for v in verdicts),
        step_host_share=max((x for r in host_sides if (x := host_share(r)) is not None), default=None),
        step_least_drain_ms=min((x for r in host_sides if (x := least_drain_ms(r)) is not None), default=None),
        host_swing=HOST_SWING,
        step_rounds=min((v.rounds for v in verdicts), default=None),
        min_rounds=MIN_ROUNDS,
        fitting_k=[int(k) for k in ok["k"]],
        workload=Workload(workload["size"], workload["context"], workload["batch"]),
        num_blocks=N,
        a_bytes=a, A_bytes=A, A_over_a=A / a,
        all_inputs_bytes=N * a,
        A_terms=block_saved_terms(size, T, B),
        attention_share=3 * B * size.num_heads * T * T * 4 / A,
        k_star=k_star,
        k_star_below_one=k_star < 1,
        k_opt=k_opt,
        activation_model_at_opt_gib=checkpoint_memory(N, a, A, k_opt) / GIB,
        no_checkpoint_activations_gib=checkpoint_memory(N, a, A, 0) / GIB,
        modelled_baseline_gib=modelled_baseline(workload) / GIB,
        measured_peak=bool(len(ok)),
        best_measured_k=int(best["k"]) if best is not None else None,
        best_is_predicted=best is not None and int(best["k"]) == k_opt,
        best_measured_peak_gib=float(best["peak_gib"]) if best is not None else None,
        rows=[Row(int(r.k), r.status, None if math.isnan(r.peak_gib) else r.peak_gib) for r in df.itertuples()],
        not_ok=[f"k = {int(r['k'])}: {r['status']} ({r['message']})" for _, r in df[df["status"] != "ok"].iterrows()],
        memory_note=next((r["metrics"].get("memory_note") for r in records if r["metrics"].get("memory_note")), None),
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.report.a6", description=__doc__.split("\n\n")[0])
    p.add_argument("--records", nargs="+", required=True)
    p.add_argument("--out-dir", required=True, type=Path)
    args = p.parse_args(argv)
    try:
        records = load_records(args.records)
        workload = check_same_workload(records)
        check_one_job(records)
    except (OSError, ValueError, KeyError) as exc:
        p.error(str(exc))
    df = rows_frame(records)
    summary = summarize(df, records, workload)
    write_table(display_table(df), args.out_dir)
    plot_peak(df, args.out_dir / "peak_vs_group.png", summary.k_opt)
    contract.write(args.out_dir / "summary.json", summary)
    print(f"A6 report: {len(df)} group sizes ({(df['status'] == 'ok').sum()} ok) -> {args.out_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
