"""E1: where one rung's training step spends its time, by kernel kind (one record).

    python -m cs336_systems.training_step.profile --size 2.7B --context 1024 --rung fused-adamw --out rec.json

The rung's step is built and timed as ``training_step.ladder`` does it (same seed, warm-up and
timed steps, no profiler), then ``--steps`` more steps run under torch.profiler, each in a range that
ends with a device synchronisation (``profiling.step_kernels.profile_steps``, A4(c)'s tables):
kernel time per step by kind (GEMM, attention-softmax, elementwise, optimizer, cast, other), the
kernels' busy time and its share of the unprofiled step. Kept apart from the ladder's timing records
so the profiler never touches a timed step, and so the ladder's jobs do not depend on this code.
"""
from __future__ import annotations

import os
import sys

import torch

from cs336_systems.profiling.step_kernels import profile_steps
from cs336_systems.records import log, make_record, write_json_atomic
from cs336_systems.timing import attempt, free_device_memory
from cs336_systems.training_step import ladder, rungs
from cs336_systems.training_step.step import build_step, kernel_context
from cs336_systems.models import get_size
from cs336_systems.workload import time_steps


def measure(args, device: str) -> dict:
    setup = rungs.get(args.rung).setup
    workload = build_step(setup, get_size(args.size), context=args.context, batch=args.batch,
                          device=torch.device(device), seed=args.seed, compile_mode=args.compile_mode,
                          backend=args.backend, checkpoint_group=args.checkpoint_group, vocab_size=args.vocab_size)
    with kernel_context(setup):
        timed = time_steps(workload, warmup=args.warmup, steps=args.steps)
        profile = profile_steps(workload.step, args.steps, device, timed["step"]["median"])
    return {"step": timed["step"], **{p: timed[p] for p in ("forward", "backward", "optimizer")}, **profile}


def main(argv=None) -> int:
    args = ladder.parse_args(argv, prog="python -m cs336_systems.training_step.profile", doc=__doc__)
    device = args.device
    if device.startswith("cpu") and rungs.get(args.rung).setup.attention == "flash":
        os.environ.setdefault("TRITON_INTERPRET", "1")    # before the kernels are first imported
    params = {**ladder.params_of(args, device), "part": "profile"}
    log(f"E1 profile {args.size} ctx {args.context} rung {args.rung}")
    reason = ladder.skip_reason(args, device)
    if reason is not None:
        write_json_atomic(args.out, make_record("E1", params, "skipped", reason=reason))
        log(f"E1 profile skipped: {reason} -> {args.out}")
        return 0
    status, metrics, message = attempt(lambda: measure(args, device))
    free_device_memory(device)
    write_json_atomic(args.out, make_record("E1", params, status, metrics, reason=message))
    summary = (f"{metrics['time_ms']:.1f} ms of {metrics['unit']} a step" if status == "ok" else message)
    log(f"E1 profile {status}: {summary} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
