"""Losses over a few updates of the Liger anchor in variants (eager or compiled; which Liger op), from
one seeded point, against the cuDNN anchor's: where does its later loss part from the others?

    python lab/e1-rungs/liger_losses.py --size small --context 256
"""
from __future__ import annotations

import argparse
import dataclasses
import sys

import torch

from cs336_systems.models import MODEL_SIZES, get_size
from cs336_systems.training_step import liger, rungs
from cs336_systems.training_step.step import SharedPoint


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--size", choices=list(MODEL_SIZES), default="small")
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args(argv)
    point = SharedPoint(get_size(args.size), context=args.context, batch=2, device="cuda", seed=0, compile_mode="blocks")
    cudnn = rungs.get("anchor-sdpa-cudnn").setup
    ours = rungs.get("anchor-liger").setup
    variants = {"cudnn compiled": cudnn, "cudnn eager": dataclasses.replace(cudnn, compiled=False),
                "liger compiled": ours, "liger eager": dataclasses.replace(ours, compiled=False)}
    only = {"norm": ("ln1", "ln2", "ln_final"), "swiglu": ("ffn",), "flce": ("lm_head",)}
    for label, setup in variants.items():
        losses = []
        point.restore()
        step = point.step(setup, watched=args.steps, on_loss=losses.append)
        for _ in range(args.steps):
            step()
        print(f"{label:16s}", " ".join(f"{x:.4f}" for x in losses), flush=True)
    # Liger's ops one at a time, eager and compiled: swap only some places
    swap = point.liger()
    for what, names, compiled in [(w, n, c) for c in (False, True) for w, n in only.items()]:
        point.restore()
        eager = dataclasses.replace(cudnn, compiled=compiled)
        losses = []
        loss_fn = swap.loss if what == "flce" else None
        for _ in range(args.steps):
            point.configure(eager)
            for owner, name, own, theirs in swap.places:
                setattr(owner, name, theirs if name in names else own)
            workload = point.workload(eager)
            workload.loss = loss_fn
            losses.append(float(workload.step()))
        swap.hold(False)
        print(f"liger {what:6s} {'compiled' if compiled else 'eager':8s}", " ".join(f"{x:.4f}" for x in losses), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
