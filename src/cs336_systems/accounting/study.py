"""C9's numbers: the XXL model's accounting (a)–(d) and how far each parallelism strategy scales on
H100 clusters, computed from the closed forms of this package and written as one record.

    python -m cs336_systems.accounting.study --out results/RUN/C9/records/accounting.json \
        [--tokens 2048] [--global-batch 1048576]

Nothing is measured on a device; this is C9's measuring step all the same (a CPU rule), so that
the report only formats what the record holds, like every other report, and editing the closed
forms re-makes the record while editing the report's tables does not.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path

from cs336_systems.accounting import c9, scaling
from cs336_systems.accounting.hardware import GB, H100_DGX_IB, H100_NVLINK, H100_SXM, H200_SXM, TPU_V5P
from cs336_systems.accounting.parallelism import STRATEGIES, DenseModel
from cs336_systems.accounting.transformer import XXL
from cs336_systems.models import MODEL_SIZES
from cs336_systems.records import log, make_record, write_json_atomic

CLUSTERS = [H100_NVLINK, H100_DGX_IB]
PLOT_DEVICES = [2 ** k for k in range(15)]          # 1 .. 16384
TOKEN_COUNTS = (0, 1024, 2048, 4096, 8192)          # (b) at a few per-device token counts


def scaling_models() -> list[DenseModel]:
    return [DenseModel.from_transformer("xl", MODEL_SIZES["xl"]), DenseModel.from_mlp_stack("XXL", XXL)]


def scaling_grid(models: list[DenseModel], verdicts: list[scaling.Verdict], tokens: int) -> list[dict]:
    """Compute and communication time per step of every strategy at every plotted device count."""
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
    return rows


def study(tokens: int, global_batch: int) -> dict:
    """The C9 record: every number its report and section use."""
    ans = c9.answers(XXL, tokens)
    models = scaling_models()
    verdicts = scaling.verdicts(models, CLUSTERS, global_batch)
    metrics = {
        "c9": ans,
        "fsdp_at_tokens": {str(t): c9.fsdp_devices_to_fit(XXL, t) for t in TOKEN_COUNTS},
        "tricks": [asdict(t) for t in c9.TRICKS],
        "hardware": {h.name: {"hbm_GB": h.hbm_bytes / GB, "bf16_TFLOPs": h.bf16_flops / 1e12,
                              "link_GBps": h.link_bandwidth / GB, "source": h.source}
                     for h in (TPU_V5P, H100_SXM, H200_SXM)},
        "ib_GBps": H100_DGX_IB.inter_node_bandwidth / GB,
        "scaling": [{**asdict(v), "usable": v.usable} for v in verdicts],
        "scaling_models": {m.name: {"parameters": m.parameters, "matmul_parameters": m.matmul_parameters,
                                    "d_model": m.d_model, "num_layers": m.num_layers,
                                    "tp_allreduces_per_layer_forward": m.tp_allreduces_per_layer_forward}
                           for m in models},
        "grid": scaling_grid(models, verdicts, global_batch),
    }
    params = {"model": ans["model"], "stated_tokens": tokens, "global_batch_tokens": global_batch,
              "mesh": asdict(c9.C9_MESH), "clusters": [c.name for c in CLUSTERS]}
    return make_record("C9", params=params, metrics=metrics)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.accounting.study", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path, help="the record (JSON)")
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
    write_json_atomic(args.out, study(args.tokens, args.global_batch))
    log(f"C9 ok: accounting for XXL and {len(CLUSTERS)} clusters -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
