"""B2(b): the whole Transformer LM, eager against torch.compile, side by side in one process.

    python -m cs336_systems.compile_bench --size small --context 512 --mode train-step --out rec.json

One process times both variants of the same work, so they share the GPU, the software and the
clock: first the eager model (``--warmup`` untimed steps, then ``--steps`` timed ones, every phase
timed between two device synchronisations, as in the A1 benchmark), then, after freeing it, the
same model rebuilt from the same seed (identical weights and batch) and compiled.

``--compile blocks`` (the default) compiles each Transformer block in place (regional
compilation): the blocks share one compiled graph, so compiling costs about one block's time; the
embedding, final norm, LM head and loss stay eager. ``--compile model`` wraps the whole model in
``torch.compile`` instead, which compiles the unrolled model (measured at 161 s for the first
forward+backward of xl on an H100, against a few seconds per step once compiled).

The first calls of a compiled model compile it. They are timed apart from the warm-up and timed
steps: ``first_calls_seconds`` is the first forward (the loss check below) plus the first warm-up
step, and ``compile_seconds`` is that minus the same work at the steady-state speed. Inductor's
on-disk caches are off unless ``--compile-cache`` is given, so every job pays the cold compile.

Correctness: before any step, each variant computes the loss of the batch at the initial weights;
the record holds both losses and their difference, and whether it is within fp32 tolerance.
An allocation failure in one variant is a result (``oom``) and does not stop the other.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import sys
from dataclasses import asdict

import torch

from cs336_systems.cli import parse_device, require_at_least
from cs336_systems.models import MODEL_SIZES, get_size
from cs336_systems.records import log, make_record, write_json_atomic
from cs336_systems.timing import PhaseTimer, attempt, free_device_memory
from cs336_systems.workload import COMPILE_BACKENDS, MODES, Workload, build_workload, time_steps

COMPILE_CHOICES = ("blocks", "model")
VARIANTS = ("eager", "compiled")
# fp32 losses of the same weights and batch, computed by differently fused kernels (reductions in a
# different order), agree to a few ulps per operation; over tens of blocks that stays well below 1e-4.
LOSS_RTOL = 1e-4


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.compile_bench", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--size", required=True, choices=list(MODEL_SIZES), help="a row of the size table")
    p.add_argument("--context", type=int, required=True, help="context length (tokens per sequence)")
    p.add_argument("--batch", type=int, default=4, help="sequences per batch")
    p.add_argument("--mode", choices=MODES, required=True,
                   help="forward only (no_grad), forward+backward, or a full training step with AdamW")
    p.add_argument("--warmup", type=int, default=3,
                   help="untimed steps before timing (at least 1: the first step of a compiled model compiles)")
    p.add_argument("--steps", type=int, default=10, help="timed steps per variant")
    p.add_argument("--compile", choices=COMPILE_CHOICES, default="blocks",
                   help="blocks: each Transformer block compiled in place; model: torch.compile of the whole model")
    p.add_argument("--backend", choices=COMPILE_BACKENDS, default="inductor",
                   help="torch.compile back end (aot_eager: traced, not code-generated; for smoke runs)")
    p.add_argument("--compile-cache", action="store_true",
                   help="let Inductor reuse its on-disk caches (compile_seconds is then not a cold compile)")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and batch (the same for both variants)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                   help="torch device, e.g. cuda, cuda:1, cpu")
    p.add_argument("--out", required=True, help="where the JSON record goes")
    args = p.parse_args(argv)
    require_at_least(p, args, 1, "context", "batch", "steps")
    if args.warmup < 1:
        p.error("--warmup must be at least 1 (the compiled model's first step compiles; it must not be timed)")
    parse_device(p, args.device)
    return args


def initial_loss(workload: Workload) -> float:
    """The loss of the batch at the current weights, in the grad mode the steps use (so a compiled
    model compiles here the same graph its steps run)."""
    from cs336_basics.nn_utils import cross_entropy

    grad_mode = torch.no_grad() if workload.mode == "forward" else contextlib.nullcontext()
    with grad_mode:
        loss = cross_entropy(workload.runnable(workload.inputs), workload.targets)
    return float(loss.detach())


def time_variant(size_name: str, *, compile: str, context: int, batch: int, mode: str, warmup: int,
                 steps: int, device: torch.device, seed: int, backend: str = "inductor") -> dict:
    """Build (from ``seed``), check the loss, warm up and time one variant; metrics in ms."""
    torch.manual_seed(seed)          # same weights and batch in both variants
    workload = build_workload(get_size(size_name), context=context, batch=batch, mode=mode,
                              compile=compile, device=device, backend=backend)
    timer = PhaseTimer(device)
    with timer.phase("first forward"):
        loss = initial_loss(workload)
    first_forward_ms = timer.samples["first forward"][0]

    metrics = time_steps(workload, warmup=warmup, steps=steps)
    warmup_steps = metrics["warmup_step_samples"]
    metrics["first_forward_ms"] = first_forward_ms
    # The first forward and the first step compile (forward graph, then backward graph); what they
    # took beyond the same work at steady speed is the compile cost.
    first_calls_ms = first_forward_ms + warmup_steps[0]
    metrics["first_calls_seconds"] = first_calls_ms / 1e3
    metrics["first_calls_overhead_seconds"] = (first_calls_ms - metrics["forward"]["mean"] - metrics["step"]["mean"]) / 1e3
    metrics["initial_loss"] = loss
    return metrics


def run_variant(variant: str, fn) -> dict:
    """Run one variant: ``{"status": ok, ...metrics}``, or oom / error with the message."""
    log(f"B2 {variant}:")
    status, metrics, message = attempt(fn)
    result = {"status": status, **metrics}
    if message:
        result["message"] = message
    log(f"B2 {variant} {status}: " + (f"step {metrics['step']['mean']:.2f} ms" if status == "ok" else message))
    return result


def loss_check(eager: dict, compiled: dict, rtol: float = LOSS_RTOL) -> dict | None:
    """Both initial losses, their difference, and whether it is within ``rtol`` of the eager loss."""
    if "initial_loss" not in eager or "initial_loss" not in compiled:
        return None
    a, b = eager["initial_loss"], compiled["initial_loss"]
    diff = abs(a - b)
    return {"eager": a, "compiled": b, "abs_diff": diff, "rel_diff": diff / abs(a) if a else None,
            "rtol": rtol, "passed": bool(diff <= rtol * abs(a))}


def speedups(eager: dict, compiled: dict) -> dict | None:
    """Eager mean ÷ compiled mean, per phase and for the whole step."""
    if eager["status"] != "ok" or compiled["status"] != "ok":
        return None
    return {phase: eager[phase]["mean"] / compiled[phase]["mean"]
            for phase in ("forward", "backward", "optimizer", "step") if phase in eager and phase in compiled}


def overall_status(variants: dict[str, dict]) -> str:
    statuses = {v["status"] for v in variants.values()}
    if statuses == {"ok"}:
        return "ok"
    return "error" if "error" in statuses else "oom"


def run(args: argparse.Namespace) -> tuple[dict, dict, str, str | None]:
    """Both variants of one grid point, one after the other; returns params, metrics, status, reason."""
    size = get_size(args.size)
    params = {"size": args.size, **asdict(size), "context": args.context, "batch": args.batch, "mode": args.mode,
              "warmup": args.warmup, "steps": args.steps, "compile": args.compile, "backend": args.backend,
              "compile_cache": args.compile_cache,
              "precision": "fp32", "attention": "naive", "seed": args.seed, "device": args.device}
    log(f"B2 whole model: {params}")
    device = torch.device(args.device)
    torch._dynamo.utils.counters.clear()             # count this run's graphs only
    variants = {}
    # Caches off: a cold compile in every job, whatever earlier jobs left on disk.
    with torch._inductor.config.patch(force_disable_caches=not args.compile_cache):
        for variant in VARIANTS:
            compile = "none" if variant == "eager" else args.compile
            variants[variant] = run_variant(variant, lambda: time_variant(
                args.size, compile=compile, context=args.context, batch=args.batch, mode=args.mode,
                warmup=args.warmup, steps=args.steps, device=device, seed=args.seed, backend=args.backend))
            gc.collect()                # the variant's model, gradients and optimizer state go first
            free_device_memory(device)
    metrics = {"variants": variants, "loss_check": loss_check(variants["eager"], variants["compiled"]),
               "speedup": speedups(variants["eager"], variants["compiled"]),
               # What the compiled model's first calls took beyond steady speed (the eager model's
               # own first-call overhead, cuBLAS and allocator start-up, is in its variant for scale).
               "compile_seconds": variants["compiled"].get("first_calls_overhead_seconds"),
               "parameters": size.parameter_count(),
               "compiled_graphs": int(torch._dynamo.utils.counters["stats"]["unique_graphs"])}
    status = overall_status(variants)
    reason = "; ".join(f"{v}: {r['message']}" for v, r in variants.items() if "message" in r) or None
    return params, metrics, status, reason


def main(argv=None) -> int:
    args = parse_args(argv)
    params, metrics, status, reason = run(args)
    write_json_atomic(args.out, make_record("B2", params, status, metrics, reason=reason))
    check = metrics["loss_check"]
    log(f"B2 {status}: speed-up {metrics['speedup']}, loss check {check} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
