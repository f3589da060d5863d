"""C9 report: the XXL model's accounting (a)–(d) and how far each parallelism strategy scales on H100s.

    python -m cs336_systems.report.c9 --record results/RUN/C9/records/accounting.json --out-dir DIR

Formats the record ``accounting.study`` wrote (every number there comes from the closed forms of
``cs336_systems.accounting``): table.csv/.md ((a)–(c)), scaling.csv/.md (one verdict per cluster,
model and strategy), scaling_grid.csv and scaling.png (compute and communication time per step
against device count), and summary.json (what the writeup quotes).
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from cs336_systems.accounting.c9 import Trick
from cs336_systems.accounting.parallelism import STRATEGIES
from cs336_systems.report import contract
from cs336_systems.report.common import load_records, plt, run_provenance, save_figure, write_table
from cs336_systems.report.contract import Summary


def c9_table(ans: dict, fsdp_at_tokens: dict[str, int | None]) -> pd.DataFrame:
    a, c, t = ans["a"], ans["c"], ans["stated_tokens"]
    rows = [
        ("a", "parameters P", "2·L·D·F", ans["model"]["parameters"], "parameters"),
        ("a", "master weights (fp32)", "4·P", a["master_weights_GB"], "GB"),
        ("a", "accumulated gradients (fp32)", "4·P", a["gradients_GB"], "GB"),
        ("a", "Adam state (fp32, 2 moments)", "8·P", a["adam_state_GB"], "GB"),
        ("a", "training state in all", "16·P", a["training_state_GB"], "GB"),
        ("a", "saved for backward, per token (bf16)", "2·L·(D+F)", a["activations_per_token_MB"], "MB"),
        ("a", f"saved for backward, {t} tokens", f"2·L·(D+F)·{t}", a["activations_GB"], "GB"),
        ("a", "80 GB H100s for the training state", "⌈16·P / 80 GB⌉", a["h100s_for_state"], "devices"),
        ("a", f"80 GB H100s for state + {t}-token activations", "⌈(16·P + A) / 80 GB⌉",
         a["h100s_for_state_and_activations"], "devices"),
    ]
    for tokens, n in fsdp_at_tokens.items():
        rows.append(("b", f"N_FSDP to fit 95 GB, T = {tokens}", "⌈(16·P + A/2) / (95 GB − A/2)⌉",
                     "none fits" if n is None else n, "devices"))
    rows += [
        ("c", "α = C / W_ici", "C / W_ici", c["alpha"], "FLOP/byte"),
        ("c", "per-device batch B/N (compute-bound from)", "α / (M_X·Y)", c["per_device_tokens"], "tokens"),
        ("c", "overall batch B", "X·α / M_X", c["overall_tokens"], "tokens"),
        ("c", "tokens per FSDP shard B/X", "α / M_X", c["per_fsdp_shard_tokens"], "tokens"),
        ("c", "largest TP degree that is compute-bound", "M_Y·F / α", c["tp_limit"], "devices"),
        ("c", "per-device batch, comms not overlapped", "(F/(Y·M_X)) / (F/α − Y/M_Y)", c["serial_per_device_tokens"],
         "tokens"),
        ("c", "per-device batch, best TP degree (book)", "α² / (M_X·M_Y·F)", c["best_split_per_device_tokens"], "tokens"),
    ]
    # Value and unit in one text cell: a table renderer would otherwise reparse the numbers and
    # print 2.19849e+11 for the parameter count.
    return pd.DataFrame([(part, quantity, expression, _with_unit(value, unit))
                         for part, quantity, expression, value, unit in rows],
                        columns=["part", "quantity", "expression", "value"])


def _with_unit(value, unit: str) -> str:
    if isinstance(value, str):
        return value
    number = f"{value:,.2f}" if isinstance(value, float) else f"{value:,}"
    return f"{number} {unit}"


def scaling_table(verdicts: list[dict]) -> pd.DataFrame:
    def span(v: dict) -> str:
        if v["fits_from"] is None:
            return "never: state does not fit"
        if not v["usable"]:
            return f"never: comm-bound beyond {v['compute_bound_up_to']}, fits from {v['fits_from']}"
        return f"{v['fits_from']} to {v['compute_bound_up_to']}"
    return pd.DataFrame([{
        "cluster": v["cluster"], "model": v["model"], "strategy": v["strategy"],
        "TP degree": v["tp_degree"] if v["tp_degree"] else "",
        "state fits from N": v["fits_from"] if v["fits_from"] else "never",
        "compute-bound up to N": v["compute_bound_up_to"] if v["compute_bound_up_to"] else "never",
        "tokens/device at that N": round(v["tokens_per_device_at_limit"]) if v["tokens_per_device_at_limit"] else "",
        "usable N": span(v),
    } for v in verdicts])


def panel_title(grid: pd.DataFrame, cluster: str, model: str) -> str:
    """A panel's title: its model and cluster, and the TP degree its FSDP+TP line uses (it differs
    between panels, so the shared legend cannot carry it)."""
    part = grid[(grid["cluster"] == cluster) & (grid["model"] == model) & (grid["strategy"] == "FSDP+TP")]
    degrees = sorted({int(d) for d in part["tp_degree"].dropna()})
    tp = f"\nFSDP+TP at TP {', '.join(map(str, degrees))}" if degrees else ""
    return f"{model} — {cluster}{tp}"


def plot_scaling(grid: pd.DataFrame, path: Path) -> None:
    """Per (cluster, model) panel: the math per step for every strategy and each strategy's
    communication against device count; filled markers where the model state fits 80 GB. The
    legend, drawn once, names strategies only; each panel's title gives its FSDP+TP degree."""
    clusters, models = list(dict.fromkeys(grid["cluster"])), list(dict.fromkeys(grid["model"]))
    fig, axes = plt.subplots(len(clusters), len(models), figsize=(11, 8), sharex=True, sharey=True, squeeze=False)
    colors = dict(zip(STRATEGIES, ["tab:blue", "tab:orange", "tab:green", "tab:red"]))
    for i, cluster in enumerate(clusters):
        for j, model in enumerate(models):
            ax, part = axes[i][j], grid[(grid["cluster"] == cluster) & (grid["model"] == model)]
            dp = part[part["strategy"] == "DP"]
            ax.plot(dp["devices"], dp["compute_s"], color="black", lw=2, label="compute (every strategy)")
            for strategy, rows in part.groupby("strategy", sort=False):
                rows = rows[rows["devices"] > 1]      # one device communicates nothing
                label = strategy + (" (TP degree in each title)" if strategy == "FSDP+TP" else "")
                ax.plot(rows["devices"], rows["comm_s"], color=colors[strategy], label=f"comm {label}")
                fits = rows[rows["fits"]]
                ax.scatter(fits["devices"], fits["comm_s"], color=colors[strategy], s=14)
                spill = rows[~rows["fits"]]
                ax.scatter(spill["devices"], spill["comm_s"], facecolors="none", edgecolors=colors[strategy], s=14)
            ax.set(xscale="log", yscale="log", title=panel_title(grid, cluster, model))
            ax.title.set_fontsize(9)
            ax.grid(alpha=0.3)
            if i == len(clusters) - 1:
                ax.set_xlabel("devices N (global batch fixed)")
            if j == 0:
                ax.set_ylabel("seconds per step")
    axes[0][0].legend(fontsize=7, title="filled: model state fits 80 GB", title_fontsize=7)
    save_figure(fig, path)


@dataclass(frozen=True)
class Card:
    hbm_GB: float
    bf16_TFLOPs: float
    link_GBps: float


@dataclass(frozen=True)
class ScalingModel:
    parameters: int


# One strategy's verdict on one cluster and model, as accounting.parallelism writes it.
Verdict = dict[str, bool | float | str | None]


@dataclass(frozen=True)
class C9Summary(Summary):
    # (a)–(c) as accounting.study wrote them
    model: dict[str, int]
    stated_tokens: int
    a: dict[str, float]
    b: dict[str, float]
    c: dict[str, bool | float]
    fsdp_at_tokens: dict[int, int | None]
    tricks: list[Trick]
    hardware: dict[str, Card]
    ib_GBps: float
    # how many times slower a cross-node collective is over InfiniBand than over NVLink
    ib_slowdown: float
    # the batch at which the saved activations alone fill one H100's memory
    tokens_filling_an_h100: float
    global_batch_tokens: int
    # cluster -> model -> strategy
    scaling: dict[str, dict[str, dict[str, Verdict]]]
    scaling_models: dict[str, ScalingModel]
    clusters: list[str]


CONTRACTS = {"C9": C9Summary}


def build(record: dict, out_dir: Path) -> C9Summary:
    m = record["metrics"]
    ans = m["c9"]
    write_table(c9_table(ans, m["fsdp_at_tokens"]), out_dir)
    write_table(scaling_table(m["scaling"]), out_dir, stem="scaling")
    grid = pd.DataFrame(m["grid"])
    grid.to_csv(out_dir / "scaling_grid.csv", index=False)
    plot_scaling(grid, out_dir / "scaling.png")

    scaling = {c: {model: {} for model in m["scaling_models"]} for c in record["params"]["clusters"]}
    for v in m["scaling"]:
        scaling[v["cluster"]][v["model"]][v["strategy"]] = v
    summary = C9Summary(
        provenance=run_provenance([record]), **ans,
        fsdp_at_tokens=m["fsdp_at_tokens"],
        tricks=[Trick(**t) for t in m["tricks"]],
        hardware={name: Card(card["hbm_GB"], card["bf16_TFLOPs"], card["link_GBps"])
                  for name, card in m["hardware"].items()},
        ib_GBps=m["ib_GBps"],
        ib_slowdown=m["hardware"]["H100 SXM"]["link_GBps"] / m["ib_GBps"],
        tokens_filling_an_h100=ans["a"]["h100_hbm_GB"] * 1e3 / ans["a"]["activations_per_token_MB"],
        global_batch_tokens=record["params"]["global_batch_tokens"],
        scaling=scaling,
        scaling_models={name: ScalingModel(size["parameters"]) for name, size in m["scaling_models"].items()},
        clusters=record["params"]["clusters"])
    contract.write(out_dir / "summary.json", summary)
    return summary


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.report.c9", description=__doc__.split("\n\n")[0])
    p.add_argument("--record", required=True, type=Path, help="the record accounting.study wrote")
    p.add_argument("--out-dir", required=True, type=Path)
    args = p.parse_args(argv)
    if args.out_dir.exists() and not args.out_dir.is_dir():
        sys.exit(f"c9: --out-dir {args.out_dir} exists and is not a folder")
    [record] = load_records([args.record])
    args.out_dir.mkdir(parents=True, exist_ok=True)
    build(record, args.out_dir)
    print(f"C9 report: {args.record} -> {args.out_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
