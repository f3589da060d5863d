"""B2(b): the whole Transformer LM, eager against torch.compile, taking turns in one process.

    python -m cs336_systems.compile_bench --size small --context 512 --mode train-step --out rec.json

One process times both variants of the same work, so they share the GPU, the software and the
clock; and they take turns (``rounds.take_turns``), so a drift of the host or the clocks moves both
alike and the report judges their difference per round (issue 42: two processes of one command, or
one variant timed minutes after the other, differ by more than many of the effects compared). The
two variants are one model: one set of weights, one batch, one optimizer (two 2.7B models with
AdamW state would not fit one 80 GB card together); the compiled variant runs the same modules
through their compiled forms. Each warms up (``--warmup`` untimed steps), then ``--rounds`` rounds
in rotating order, ``--steps`` timed steps per turn, every phase timed between two device
synchronisations, as in the A1 benchmark; the record keeps every round (``rounds.Outcome.metrics``).
A training step changes the shared weights; a step's time does not depend on their values.

``--compile blocks`` (the default) compiles each Transformer block (regional compilation): the
blocks share one compiled graph, so compiling costs about one block's time; the embedding, final
norm, LM head and loss stay eager. Each block's compiled form is made once (``Module.compile``) and
switched on for the compiled variant's steps and off for the eager one's. ``--compile model`` wraps
the whole model in ``torch.compile`` instead, which compiles the unrolled model (measured at 161 s
for the first forward+backward of xl on an H100, against a few seconds per step once compiled).

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
from cs336_systems.rounds import MIN_ROUNDS, Entrant, take_turns
from cs336_systems.timing import PhaseTimer, attempt, free_device_memory, peak_memory_bytes, reset_peak_memory
from cs336_systems.workload import COMPILE_BACKENDS, MODES, Workload, build_workload

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
    p.add_argument("--rounds", type=int, default=5,
                   help=f"rounds in which the variants take turns (at least {MIN_ROUNDS})")
    p.add_argument("--steps", type=int, default=1, help="timed steps per variant in each round")
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
    if args.rounds < MIN_ROUNDS:
        p.error(f"--rounds must be at least {MIN_ROUNDS} (a verdict needs a spread across rounds)")
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


def variant_switch(workload: Workload, compile: str, backend: str):
    """``select(variant)``: make ``workload`` run eager or compiled, one set of weights either way.
    ``blocks``: each block's compiled form is made once and switched on or off (``Module.compile``
    stores it as the block's ``_compiled_call_impl``, which ``Module.__call__`` runs when set);
    ``model``: the step calls ``torch.compile(model)`` or the model itself."""
    model = workload.model
    if compile == "model":
        compiled = torch.compile(model, backend=backend)

        def select(variant: str) -> None:
            workload.runnable = compiled if variant == "compiled" else model
        return select
    for block in model.layers:
        block.compile(backend=backend)
    forms = [block._compiled_call_impl for block in model.layers]

    def select(variant: str) -> None:
        for block, form in zip(model.layers, forms):
            block._compiled_call_impl = form if variant == "compiled" else None
    return select


def first_forward(workload: Workload, device: torch.device) -> dict:
    """The loss at the initial weights and the time of that first forward (which compiles)."""
    timer = PhaseTimer(device)
    with timer.phase("first forward"):
        loss = initial_loss(workload)
    return {"initial_loss": loss, "first_forward_ms": timer.samples["first forward"][0]}


def run_variants(args: argparse.Namespace, device: torch.device) -> dict[str, dict]:
    """Both variants of one grid point in turns: ``{variant: {"status": ok, ...metrics}}``, or oom /
    error with the message for one that failed (building, its first forward, or a step)."""
    torch.manual_seed(args.seed)          # the weights and batch both variants run
    workload = build_workload(get_size(args.size), context=args.context, batch=args.batch, mode=args.mode,
                              compile="none", device=device, backend=args.backend)
    select = variant_switch(workload, args.compile, args.backend)
    variants: dict[str, dict] = {}
    firsts: dict[str, dict] = {}
    for variant in VARIANTS:              # both losses before any step changes the weights
        select(variant)
        log(f"B2 {variant}: first forward")
        status, metrics, message = attempt(lambda: first_forward(workload, device))
        if status == "ok":
            firsts[variant] = metrics
        else:
            variants[variant] = {"status": status, "message": message}
            workload.model.zero_grad(set_to_none=True)
            gc.collect()
            free_device_memory(device)
    timed_peak: dict[str, int] = {}
    calls: dict[str, int] = {}

    def entrant(variant: str) -> Entrant:
        def step(phase):
            select(variant)
            calls[variant] = calls.get(variant, 0) + 1
            if calls[variant] <= args.warmup:      # warm-up: compiling, not what the peak reports
                return workload.step(phase)
            reset_peak_memory(device)
            loss = workload.step(phase)
            peak = peak_memory_bytes(device)
            if peak is not None:
                timed_peak[variant] = max(peak, timed_peak.get(variant, 0))
            return loss
        return Entrant(variant, lambda: step, cleanup=lambda: workload.model.zero_grad(set_to_none=True))

    job, outcomes = take_turns([entrant(v) for v in VARIANTS if v in firsts], device=device, warmup=args.warmup,
                               rounds=args.rounds, steps=args.steps)
    for variant, outcome in outcomes.items():
        if outcome.status != "ok":
            variants[variant] = {"status": outcome.status, "message": outcome.message}
            continue
        metrics = outcome.metrics(job)
        first = firsts[variant]
        # The first forward and the first step compile (forward graph, then backward graph); what
        # they took beyond the same work at steady speed is the compile cost.
        first_calls_ms = first["first_forward_ms"] + outcome.warmup_steps[0]
        metrics.update(first_forward_ms=first["first_forward_ms"], first_calls_seconds=first_calls_ms / 1e3,
                       first_calls_overhead_seconds=(first_calls_ms - metrics["forward"]["mean"]
                                                     - metrics["step"]["mean"]) / 1e3,
                       initial_loss=first["initial_loss"], peak_memory_bytes=timed_peak.get(variant))
        variants[variant] = {"status": "ok", **metrics}
        log(f"B2 {variant} ok: step {metrics['step']['mean']:.2f} ms")
    for variant, result in variants.items():
        if result["status"] != "ok":
            log(f"B2 {variant} {result['status']}: {result['message']}")
    return {v: variants[v] for v in VARIANTS}


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
    """Both variants of one grid point, in turns; returns params, metrics, status, reason."""
    size = get_size(args.size)
    params = {"size": args.size, **asdict(size), "context": args.context, "batch": args.batch, "mode": args.mode,
              "warmup": args.warmup, "steps": args.steps, "rounds": args.rounds, "compile": args.compile,
              "backend": args.backend, "compile_cache": args.compile_cache,
              "precision": "fp32", "attention": "naive", "seed": args.seed, "device": args.device}
    log(f"B2 whole model: {params}")
    device = torch.device(args.device)
    torch._dynamo.reset()                            # compile and count this run's graphs only, whatever
    torch._dynamo.utils.counters.clear()             # an earlier run in this process left cached
    # Caches off: a cold compile in every job, whatever earlier jobs left on disk.
    with torch._inductor.config.patch(force_disable_caches=not args.compile_cache):
        status, variants, message = attempt(lambda: run_variants(args, device))
    if status != "ok":                                # building the shared model failed: both did
        variants = {v: {"status": status, "message": message} for v in VARIANTS}
    gc.collect()
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
