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

import sys

from cs336_systems.profiling.step_kernels import profile_steps
from cs336_systems.training_step import ladder
from cs336_systems.training_step.step import kernel_context
from cs336_systems.workload import time_steps


def measure(args, device: str) -> dict:
    setup, workload = ladder.build(args, device)
    with kernel_context(setup):
        timed = time_steps(workload, warmup=args.warmup, steps=args.steps)
        profile = profile_steps(workload.step, args.steps, device, timed["step"]["median"])
    return {"step": timed["step"], **{p: timed[p] for p in ("forward", "backward", "optimizer")}, **profile}


def main(argv=None) -> int:
    args = ladder.parse_args(argv, prog="python -m cs336_systems.training_step.profile", doc=__doc__)
    return ladder.run_point(args, measure, lambda m: f"{m['time_ms']:.1f} ms of {m['unit']} a step",
                            label="E1 profile", part="profile")


if __name__ == "__main__":
    sys.exit(main())
