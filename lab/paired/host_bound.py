"""Is a compiled rung's forward host-bound? Per step: how long the host takes to issue the forward
(the call returning, nothing synchronised) against how long the forward takes to finish (synchronised
before and after). Where issuing takes about as long as finishing, the GPU waits for the host, and
the host's speed moves the step.

    python lab/paired/host_bound.py --size xl --context 1024 --rung fused-adamw --steps 30
"""
import argparse
import json
import statistics
import time

import torch

from cs336_basics.nn_utils import cross_entropy
from cs336_systems.models import get_size
from cs336_systems.training_step import rungs
from cs336_systems.training_step.step import SharedPoint, kernel_context

p = argparse.ArgumentParser()
p.add_argument("--size", default="xl")
p.add_argument("--context", type=int, default=1024)
p.add_argument("--rung", default="fused-adamw")
p.add_argument("--compile-mode", default="blocks")
p.add_argument("--steps", type=int, default=30)
args = p.parse_args()

setup = rungs.get(args.rung).setup
point = SharedPoint(get_size(args.size), context=args.context, batch=4, device="cuda", seed=0,
                    compile_mode=args.compile_mode)
step = point.step(setup)
for _ in range(3):
    step()
workload = point.workload(setup)
rows = []
with kernel_context(setup):
    for _ in range(args.steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = cross_entropy(workload.runnable(point.inputs), point.targets)
        issued = time.perf_counter()
        torch.cuda.synchronize()
        done = time.perf_counter()
        loss.backward()
        workload.optimizer.step()
        point.model.zero_grad(set_to_none=True)
        rows.append({"issue_ms": (issued - start) * 1e3, "forward_ms": (done - start) * 1e3})
issue = [r["issue_ms"] for r in rows]
fwd = [r["forward_ms"] for r in rows]
print(json.dumps({"size": args.size, "context": args.context, "rung": args.rung, "compile_mode": args.compile_mode,
                  "issue_ms": {"median": statistics.median(issue), "min": min(issue), "max": max(issue)},
                  "forward_ms": {"median": statistics.median(fwd), "min": min(fwd), "max": max(fwd)},
                  "steps": rows}))
