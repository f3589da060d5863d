"""E1: where one rung's training step spends its time, by kernel kind (one record).

    python -m cs336_systems.training_step.profile --size 2.7B --context 1024 --rung fused-adamw --out rec.json

The rung's step is built as ``training_step.ladder`` builds it (same seed and warm-up), on a model
of its own, and ``--steps`` steps are timed back to back (no profiler); then ``--steps`` more steps
run under torch.profiler, each in a range that ends with a device synchronisation
(``profiling.step_kernels.profile_steps``, A4(c)'s tables): kernel time per step by kind (GEMM, attention-softmax, elementwise, optimizer, cast, other), the
kernels' busy time and its share of the unprofiled step. Kept apart from the ladder's jobs
so the profiler never touches a timed step of theirs, and so they do not depend on this code.
"""
from __future__ import annotations

import argparse
import sys

from cs336_systems.profiling.step_kernels import profile_steps
from cs336_systems.training_step import ladder, rungs
from cs336_systems.workload import time_steps


def measure(args, device: str) -> dict:
    rung = ladder.build(args, device)
    timed = time_steps(rung, warmup=args.warmup, steps=args.steps)
    profile = profile_steps(rung.step, args.steps, device, timed["step"]["median"])
    return {"step": timed["step"], **{p: timed[p] for p in ("forward", "backward", "optimizer")}, **profile}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.training_step.profile", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ladder.add_point_arguments(p)
    p.add_argument("--rung", choices=list(rungs.BY_NAME), required=True, help="the rung or anchor profiled")
    p.add_argument("--steps", type=int, default=8, help="timed steps, then as many profiled")
    p.add_argument("--out", required=True, help="where the JSON record goes")
    args = p.parse_args(argv)
    ladder.check_point_arguments(p, args)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    return ladder.run_point(args, measure, lambda m: f"{m['time_ms']:.1f} ms of {m['unit']} a step",
                            label="E1 profile", part="profile")


if __name__ == "__main__":
    sys.exit(main())
