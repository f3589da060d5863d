"""A6: peak memory and step time of one training step with blocks checkpointed in groups of k.

    python -m cs336_systems.memory.checkpoint_bench --size xl --context 2048 --batch 4 --group 2 --out g2.json

Builds the shared workload with its blocks regrouped by ``checkpointing.checkpoint_blocks`` (k = 0 is no
checkpointing), runs ``--warmup`` untimed steps, notes the memory in use (the baseline: weights,
and in ``train-step`` mode AdamW's state; gradients are cleared after every step), resets the
peak counter, then times ``--steps`` steps and reads ``torch.cuda.max_memory_allocated``.

The default mode is ``forward-backward``: the optimizer's state is not activation memory, and
leaving it out keeps the peak about activations and gradients. An allocation failure is a result
(status ``oom``). On the CPU no allocator counts peaks: the record says so and times the step.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from functools import partial

import torch

from cs336_systems.cli import parse_device, require_at_least
from cs336_systems.memory.checkpointing import checkpoint_blocks
from cs336_systems.models import MODEL_SIZES, get_size
from cs336_systems.records import log, make_record, write_json_atomic
from cs336_systems.timing import attempt, free_device_memory, synchronize
from cs336_systems.workload import build_workload, time_steps

MODES = ("forward-backward", "train-step")
CPU_MEMORY_NOTE = "not measured on CPU (no allocator statistics)"


def measure(size_name: str, *, context: int, batch: int, group: int, mode: str, warmup: int, steps: int,
            device: str) -> dict:
    device = torch.device(device)
    workload = build_workload(get_size(size_name), context=context, batch=batch, mode=mode, device=device,
                              wrap_model=partial(checkpoint_blocks, group_size=group))
    def baseline() -> dict:                # what the step starts from: weights (and optimizer state)
        synchronize(device)
        return {"baseline_bytes": torch.cuda.memory_allocated(device) if device.type == "cuda" else None}

    metrics = time_steps(workload, warmup=warmup, steps=steps, before_timing=baseline)
    parameters = sum(p.numel() for p in workload.model.parameters())
    metrics |= {
        "memory_note": None if device.type == "cuda" else CPU_MEMORY_NOTE,
        "parameters": parameters,
        "parameter_bytes": sum(p.numel() * p.element_size() for p in workload.model.parameters()),
        "groups": len(workload.model.layers),
    }
    return metrics


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.memory.checkpoint_bench",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--size", choices=list(MODEL_SIZES), required=True)
    p.add_argument("--context", type=int, required=True)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--group", type=int, required=True, help="blocks per checkpointed group; 0 = no checkpointing")
    p.add_argument("--mode", choices=MODES, default="forward-backward")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    require_at_least(p, args, 1, "context", "batch", "steps")
    require_at_least(p, args, 0, "warmup")
    layers = get_size(args.size).num_layers
    if not 0 <= args.group <= layers:
        p.error(f"--group must be between 0 (no checkpointing) and {layers} (the {args.size} model's blocks)")
    parse_device(p, args.device)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    params = {"size": args.size, **asdict(get_size(args.size)), "context": args.context, "batch": args.batch,
              "group": args.group, "mode": args.mode, "warmup": args.warmup, "steps": args.steps,
              "device": args.device, "attention": "naive", "precision": "fp32",
              # the card's size, so the report can draw the line an OOM crossed
              "device_total_bytes": (torch.cuda.get_device_properties(torch.device(args.device)).total_memory
                                     if torch.device(args.device).type == "cuda" else None)}
    log(f"A6 checkpointing: {params}")
    status, metrics, message = attempt(lambda: measure(
        args.size, context=args.context, batch=args.batch, group=args.group, mode=args.mode,
        warmup=args.warmup, steps=args.steps, device=args.device))
    free_device_memory(args.device)
    write_json_atomic(args.out, make_record("A6", params, status, metrics, reason=message))
    log(f"A6 group {args.group} {status}: " + (f"step {metrics['step']['mean']:.1f} ms, peak "
                                               f"{metrics['peak_memory_bytes']}" if status == "ok" else message))
    return 0


if __name__ == "__main__":
    sys.exit(main())
