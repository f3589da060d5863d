"""C9 report: the XXL model's accounting (a)–(d) and how far each parallelism strategy scales on H100s.

    python -m cs336_systems.report.c9 --out-dir DIR [--tokens 2048] [--global-batch 1048576]

Nothing is measured: every number comes from the closed forms of ``cs336_systems.accounting``.
Writes DIR/records/accounting.json (the record), table.csv/.md ((a)–(c)), scaling.csv/.md (one
verdict per cluster, model and strategy), scaling_grid.csv and scaling.png (compute and
communication time per step against device count), and summary.json (what the writeup quotes).
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from cs336_systems.accounting import c9, scaling
from cs336_systems.accounting.hardware import GB, H100_DGX_IB, H100_NVLINK, H100_SXM, H200_SXM, TPU_V5P
from cs336_systems.accounting.parallelism import STRATEGIES, DenseModel
from cs336_systems.accounting.transformer import XXL
from cs336_systems.models import MODEL_SIZES
from cs336_systems.records import make_record, write_json_atomic
from cs336_systems.report.common import run_provenance, save_figure, write_summary, write_table

CLUSTERS = [H100_NVLINK, H100_DGX_IB]
PLOT_DEVICES = [2 ** k for k in range(15)]          # 1 .. 16384
TOKEN_COUNTS = (0, 1024, 2048, 4096, 8192)          # (b) at a few per-device token counts


def scaling_models() -> list[DenseModel]:
    return [DenseModel.from_transformer("xl", MODEL_SIZES["xl"]), DenseModel.from_mlp_stack("XXL", XXL)]


def c9_table(ans: dict) -> pd.DataFrame:
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
    for tokens in TOKEN_COUNTS:
        n = c9.fsdp_devices_to_fit(XXL, tokens)
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


def scaling_table(verdicts: list[scaling.Verdict]) -> pd.DataFrame:
    def span(v: scaling.Verdict) -> str:
        if v.fits_from is None:
            return "never: state does not fit"
        if not v.usable:
            return f"never: comm-bound beyond {v.compute_bound_up_to}, fits from {v.fits_from}"
        return f"{v.fits_from} to {v.compute_bound_up_to}"
    return pd.DataFrame([{
        "cluster": v.cluster, "model": v.model, "strategy": v.strategy,
        "TP degree": v.tp_degree if v.tp_degree else "",
        "state fits from N": v.fits_from if v.fits_from else "never",
        "compute-bound up to N": v.compute_bound_up_to if v.compute_bound_up_to else "never",
        "tokens/device at that N": round(v.tokens_per_device_at_limit) if v.tokens_per_device_at_limit else "",
        "usable N": span(v),
    } for v in verdicts])


def scaling_grid(models: list[DenseModel], verdicts: list[scaling.Verdict], tokens: int) -> pd.DataFrame:
    tp = {(v.cluster, v.model): v.tp_degree for v in verdicts if v.strategy == "FSDP+TP"}
    rows = []
    for cluster in CLUSTERS:
        for model in models:
            for strategy in STRATEGIES:
                y = tp[(cluster.name, model.name)] if strategy == "FSDP+TP" else None
                for n in PLOT_DEVICES:
                    if y and n % y or n > tokens:
                        continue
                    p = scaling.evaluate(strategy, model, n, cluster, tokens, y)
                    rows.append({"cluster": cluster.name, "model": model.name, "strategy": strategy, "devices": n,
                                 "tp_degree": y or "", "tokens_per_device": tokens / n, "compute_s": p.compute_s,
                                 "comm_s": p.comm_s, "state_GB": p.state_GB,
                                 "fits": p.state_GB <= cluster.device.hbm_bytes / GB, "comm_bound": p.comm_bound})
    return pd.DataFrame(rows)


def plot_scaling(grid: pd.DataFrame, path: Path) -> None:
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
                label = strategy + (f" (TP {rows['tp_degree'].iloc[0]})" if strategy == "FSDP+TP" else "")
                ax.plot(rows["devices"], rows["comm_s"], color=colors[strategy], label=f"comm {label}")
                fits = rows[rows["fits"]]
                ax.scatter(fits["devices"], fits["comm_s"], color=colors[strategy], s=14)
                spill = rows[~rows["fits"]]
                ax.scatter(spill["devices"], spill["comm_s"], facecolors="none", edgecolors=colors[strategy], s=14)
            ax.set(xscale="log", yscale="log", title=f"{model} — {cluster}")
            ax.title.set_fontsize(9)
            ax.grid(alpha=0.3)
            if i == len(clusters) - 1:
                ax.set_xlabel("devices N (global batch fixed)")
            if j == 0:
                ax.set_ylabel("seconds per step")
    axes[0][0].legend(fontsize=7, title="filled: model state fits 80 GB", title_fontsize=7)
    save_figure(fig, path)


def build(out_dir: Path, tokens: int, global_batch: int) -> dict:
    ans = c9.answers(XXL, tokens)
    models = scaling_models()
    verdicts = scaling.verdicts(models, CLUSTERS, global_batch)
    scaling_summary = {c.name: {m.name: {} for m in models} for c in CLUSTERS}
    for v in verdicts:
        scaling_summary[v.cluster][v.model][v.strategy] = {**asdict(v), "usable": v.usable}
    record = make_record("C9", params={"model": ans["model"], "stated_tokens": tokens, "global_batch_tokens": global_batch,
                                       "mesh": asdict(c9.C9_MESH), "clusters": [c.name for c in CLUSTERS]},
                         metrics={"c9": ans, "scaling": [asdict(v) for v in verdicts]})
    write_json_atomic(out_dir / "records" / "accounting.json", record)

    write_table(c9_table(ans), out_dir)
    write_table(scaling_table(verdicts), out_dir, stem="scaling")
    grid = scaling_grid(models, verdicts, global_batch)
    grid.to_csv(out_dir / "scaling_grid.csv", index=False)
    plot_scaling(grid, out_dir / "scaling.png")

    summary = {
        "provenance": run_provenance([record]),
        **ans,
        "fsdp_at_tokens": {str(t): c9.fsdp_devices_to_fit(XXL, t) for t in TOKEN_COUNTS},
        "tricks": [asdict(t) for t in c9.TRICKS],
        "hardware": {h.name: {"hbm_GB": h.hbm_bytes / GB, "bf16_TFLOPs": h.bf16_flops / 1e12,
                              "link_GBps": h.link_bandwidth / GB, "source": h.source}
                     for h in (TPU_V5P, H100_SXM, H200_SXM)},
        "ib_GBps": H100_DGX_IB.inter_node_bandwidth / GB,
        "global_batch_tokens": global_batch,
        "scaling": scaling_summary,
        "scaling_models": {m.name: {"parameters": m.parameters, "matmul_parameters": m.matmul_parameters,
                                    "d_model": m.d_model, "num_layers": m.num_layers,
                                    "tp_allreduces_per_layer_forward": m.tp_allreduces_per_layer_forward}
                           for m in models},
        "clusters": [c.name for c in CLUSTERS],
    }
    write_summary(out_dir / "summary.json", summary)
    return summary


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.report.c9", description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", required=True, type=Path)
    p.add_argument("--tokens", type=int, default=c9.STATED_TOKENS,
                   help="tokens whose activations a device holds in (a) and (b) (default %(default)s)")
    p.add_argument("--global-batch", type=int, default=scaling.GLOBAL_BATCH_TOKENS,
                   help="tokens per optimizer step in the scaling study (default %(default)s)")
    args = p.parse_args(argv)
    if args.tokens < 0:
        sys.exit(f"c9: --tokens must be 0 or more, got {args.tokens}")
    if c9.fsdp_devices_to_fit(XXL, args.tokens) is None:
        sys.exit(f"c9: --tokens {args.tokens} leaves no room on a 95 GB device (half the activations alone exceed it;"
                 f" at most {c9.max_tokens_for_any_fsdp()})")
    if args.global_batch < 1:
        sys.exit(f"c9: --global-batch must be 1 or more, got {args.global_batch}")
    if args.out_dir.exists() and not args.out_dir.is_dir():
        sys.exit(f"c9: --out-dir {args.out_dir} exists and is not a folder")
    build(args.out_dir, args.tokens, args.global_batch)
    print(f"C9 report: accounting for XXL and {len(CLUSTERS)} clusters -> {args.out_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
