"""A1: end-to-end benchmark of the Transformer LM (forward, backward, optimizer step).

    python -m cs336_systems.benchmark --size small --context 256 --mode train-step --out rec.json
    python -m cs336_systems.benchmark --size small --contexts 128 256 --modes forward train-step \
        --precisions fp32 bf16 --warmup 2 --rounds 4 --steps 3 --out-dir records/

One point (``--out``): builds a randomly initialised model (a named size or explicit dimensions),
makes a random batch, runs ``--warmup`` untimed steps, then times ``--steps`` steps; the warm-up
study runs this, since it studies a fresh process's first steps.

A precision listed twice (``--precisions fp32 fp32``) is an A/A pair: the point entered again as an
entrant of its own, its record ``..._again.json`` with ``again: true`` in its params (lab/paired/aa.py).

A group (``--out-dir``): every context x mode x precision of one model, one process, the points
taking turns (``rounds.take_turns``): each warms up ``--warmup`` steps, then ``--rounds`` rounds in
rotating order of ``--steps`` timed steps per turn, so bf16 against fp32 (and one context against
another) is a paired difference per round, not two processes' means. The model is built once (for
the longest context; a shorter batch runs the same operations) and shared. Its points run in heats
of one context and mode each, the precisions taking turns: on one H100 the host-bound steps of the
small model drift by 1.5x within a second, so the compared turns must follow each other closely
(a heat of all of a size's points spaced a pair's turns seconds apart, and two runs agreed on
77-86 % of verdicts); points whose turns ``--min-turn-ms`` lengthened go further and share their
turn step by step (``rounds.take_turns``). Forward and forward-backward heats run first, then the train steps with
one shared AdamW, so the optimizer's state (twice the weights) is resident only while train steps
take turns, and every point's peak memory is what a process of that point alone holds (weights,
its batch, its own step's tensors; train steps also the optimizer state), plus the other
contexts' token batches (kilobytes). A record's ``metrics.turns`` names its heat's job and entrants. One record per point, at
``{size}_ctx{context}_{mode}_{precision}.json``; one that runs out of memory is an ``oom`` record
and the others go on.

Every phase (forward, backward, optimizer) is timed on its own with ``timeit.default_timer`` and a
device synchronisation at both ends, so the record holds per-phase samples as well as their mean
and standard deviation.

Modes: ``forward`` (inference, under ``torch.no_grad``), ``forward-backward`` (loss and
gradients) and ``train-step`` (forward, backward and an AdamW step). ``--precision bf16`` runs the
forward pass and the loss under ``torch.autocast(dtype=torch.bfloat16)``; parameters, gradients
and optimizer state stay fp32. An allocation failure is a result: the record says ``oom``.
"""
from __future__ import annotations

import argparse
import resource
import sys
from dataclasses import asdict
from pathlib import Path

import torch

from cs336_systems.cli import parse_device, require_at_least
from cs336_systems.models import ATTENTION_BACKENDS, MODEL_SIZES, ModelSize, build_model, get_size, random_batch
from cs336_systems.records import log, make_record, write_json_atomic
from cs336_systems.rounds import MIN_ROUNDS, Entrant, configuration, entries, take_turns
from cs336_systems.timing import attempt, free_device_memory
from cs336_systems.workload import LEARNING_RATE, MODES, PRECISIONS, Workload, adamw, build_workload, time_steps

# The heats of a group: the optimizer (and its state) exists only in the second.
HEATS = (("forward", "forward-backward"), ("train-step",))


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.benchmark", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    model = p.add_argument_group("model (a named size, or all four explicit dimensions)")
    model.add_argument("--size", choices=list(MODEL_SIZES), help="a row of the size table")
    model.add_argument("--d-model", type=int, help="model width (with --d-ff, --num-layers, --num-heads)")
    model.add_argument("--d-ff", type=int, help="feed-forward width")
    model.add_argument("--num-layers", type=int, help="number of Transformer blocks")
    model.add_argument("--num-heads", type=int, help="attention heads (must divide --d-model)")
    model.add_argument("--vocab-size", type=int, default=10_000, help="vocabulary size")
    run = p.add_argument_group("what to run")
    run.add_argument("--context", type=int, help="context length (tokens per sequence)")
    run.add_argument("--batch", type=int, default=4, help="sequences per batch")
    run.add_argument("--mode", choices=MODES, default="forward-backward",
                     help="forward only (no_grad), forward+backward, or a full training step with AdamW")
    run.add_argument("--warmup", type=int, default=5, help="untimed steps before timing (a group: per point)")
    run.add_argument("--steps", type=int, default=10, help="timed steps (a group: per point and turn)")
    run.add_argument("--precision", choices=list(PRECISIONS), default="fp32",
                     help="fp32, or bf16 autocast around forward and loss (fp32 master weights)")
    run.add_argument("--compile", action="store_true", help="wrap the model in torch.compile")
    run.add_argument("--attention", choices=list(ATTENTION_BACKENDS), default="naive", help="attention back end")
    run.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                     help="torch device, e.g. cuda, cuda:1, cpu")
    run.add_argument("--memory-limit-gb", type=float,
                     help="cap this process's memory to emulate a smaller device (CUDA: a fraction of "
                          "the card; CPU: the address space grows by at most this much)")
    group = p.add_argument_group("a group of points taking turns in one process (with --out-dir)")
    group.add_argument("--contexts", type=int, nargs="+", help="context lengths (instead of --context)")
    group.add_argument("--modes", choices=MODES, nargs="+", help="modes (instead of --mode)")
    group.add_argument("--precisions", choices=list(PRECISIONS), nargs="+", help="precisions (instead of --precision)")
    group.add_argument("--rounds", type=int, help=f"rounds of turns after the warm-up (at least {MIN_ROUNDS}; default 4)")
    group.add_argument("--min-turn-ms", type=float,
                       help="a cheap point warms up and takes each turn for at least this long (rounds.take_turns; default 0)")
    out = p.add_mutually_exclusive_group(required=True)
    out.add_argument("--out", help="where the JSON record of one point goes")
    out.add_argument("--out-dir", help="a group: the folder for one record per point, {size}_ctx{context}_{mode}_{precision}.json")
    args = p.parse_args(argv)

    dims = [args.d_model, args.d_ff, args.num_layers, args.num_heads]
    if args.size is None and None in dims:
        p.error("give --size, or all of --d-model --d-ff --num-layers --num-heads")
    if args.size is not None and any(d is not None for d in dims):
        p.error("--size and explicit dimensions exclude each other")
    group_flags = [f"--{name.replace('_', '-')}" for name in ("contexts", "modes", "precisions", "rounds", "min_turn_ms") if getattr(args, name) is not None]
    if args.out is not None and group_flags:
        p.error(f"{' '.join(group_flags)} time a group of points: give --out-dir instead of --out")
    if args.out_dir is not None:
        args.contexts = args.contexts or ([args.context] if args.context is not None else None)
        args.modes, args.precisions = args.modes or [args.mode], args.precisions or [args.precision]
        args.rounds = 4 if args.rounds is None else args.rounds
        args.min_turn_ms = 0.0 if args.min_turn_ms is None else args.min_turn_ms
        if args.min_turn_ms < 0:
            p.error(f"--min-turn-ms must be at least 0, got {args.min_turn_ms}")
        if args.contexts is None:
            p.error("give --contexts (or --context) for a group")
        if min(args.contexts) < 1:
            p.error("--contexts must all be at least 1")
        for name in ("contexts", "modes"):
            if len(set(getattr(args, name))) != len(getattr(args, name)):
                p.error(f"--{name} lists a value twice")
        try:
            entries(args.precisions)
        except ValueError as exc:
            p.error(f"--precisions: {exc}")
        if args.rounds < MIN_ROUNDS:
            p.error(f"--rounds must be at least {MIN_ROUNDS}: a paired verdict needs a spread across rounds")
        args.context = max(args.contexts)
    elif args.context is None:
        p.error("the following arguments are required: --context")
    require_at_least(p, args, 1, "context", "batch", "steps", "vocab_size")
    require_at_least(p, args, 0, "warmup")
    if args.memory_limit_gb is not None and not args.memory_limit_gb > 0:
        p.error(f"--memory-limit-gb must be more than 0, got {args.memory_limit_gb}")
    if args.size is None:
        if min(dims) < 1 or args.d_model % args.num_heads:
            p.error("dimensions must be positive and --num-heads must divide --d-model")
    parse_device(p, args.device)
    return args


def model_size(args: argparse.Namespace) -> ModelSize:
    if args.size is not None:
        return get_size(args.size)
    return ModelSize(args.d_model, args.d_ff, args.num_layers, args.num_heads)


def limit_memory(device: torch.device, gigabytes: float) -> None:
    """Make allocations beyond ``gigabytes`` fail, as they would on a smaller device.

    On the CPU this caps the address space; ``lift_memory_limit`` undoes it before the record
    (and its provenance, which starts subprocesses) is written.
    """
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, gigabytes * 2**30 / total), device)
    else:
        with open("/proc/self/statm") as f:
            current = int(f.read().split()[0]) * resource.getpagesize()
        limit = current + int(gigabytes * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))


def lift_memory_limit() -> None:
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    resource.setrlimit(resource.RLIMIT_AS, (hard, hard))


def benchmark(size: ModelSize, *, context: int, batch: int, mode: str, warmup: int, steps: int,
              precision: str = "fp32", compile: bool = False, attention: str = "naive",
              device: str = "cpu", vocab_size: int = 10_000) -> dict:
    """Time ``warmup + steps`` steps; return per-phase summaries and samples (ms)."""
    device = torch.device(device)
    workload = build_workload(size, context=context, batch=batch, mode=mode, precision=precision,
                              compile=compile, attention=attention, device=device, vocab_size=vocab_size)
    metrics = time_steps(workload, warmup=warmup, steps=steps)
    metrics["parameters"] = sum(p.numel() for p in workload.model.parameters())
    return metrics


def group_entrants(size: ModelSize, *, contexts: list[int], modes: list[str], precisions: list[str], batch: int,
                    attention: str = "naive", compile: bool = False, device: str | torch.device = "cpu",
                    vocab_size: int = 10_000) -> tuple[list[list[Entrant]], torch.nn.Module]:
    """The group's entrants, one per context x mode x precision, in heats: one per context and mode,
    its precisions taking turns (the train steps' heats last, ``HEATS``), all sharing one model built
    for the longest context and the train steps one AdamW built by the first of them."""
    device = torch.device(device)
    model = build_model(size, max(contexts), vocab_size=vocab_size, device=device, attention=attention)
    runnable = torch.compile(model) if compile else model
    batches = {c: random_batch(batch, c, vocab_size=vocab_size, device=device) for c in contexts}
    shared: dict[str, torch.optim.Optimizer] = {}

    def optimizer() -> torch.optim.Optimizer:
        if "adamw" not in shared:
            shared["adamw"] = adamw(model.parameters(), lr=LEARNING_RATE)
        return shared["adamw"]

    def entrant(context: int, mode: str, precision: str) -> Entrant:
        def make():
            inputs, targets = batches[context]
            workload = Workload(model, runnable, optimizer() if mode == "train-step" else None, inputs, targets,
                                mode, configuration(precision), device)
            return workload.step

        # a step that failed half-way leaves gradients on the shared model: the next point starts without
        return Entrant(point_name(context, mode, precision), make, cleanup=lambda: model.zero_grad(set_to_none=True))

    heats = [[entrant(c, m, p) for p in entries(precisions)]
             for heat in HEATS for c in contexts for m in modes if m in heat]
    return heats, model


def point_name(context: int, mode: str, precision: str) -> str:
    """An entrant's name; ``precision`` may carry ``rounds.AGAIN`` (a precision listed twice)."""
    return f"ctx{context}_{mode}_{precision}"


def run_group(args: argparse.Namespace, size: ModelSize, base: dict) -> int:
    """Time every point of the group in turns; write one record per point into ``--out-dir``."""
    device = torch.device(args.device)
    points = [(c, m, p) for c in args.contexts for m in args.modes for p in entries(args.precisions)]
    if args.memory_limit_gb is not None:
        limit_memory(device, args.memory_limit_gb)
    def build() -> dict:
        heats, model = group_entrants(size, contexts=args.contexts, modes=args.modes, precisions=args.precisions,
                                      batch=args.batch, attention=args.attention, compile=args.compile,
                                      device=device, vocab_size=args.vocab_size)
        return {"heats": heats, "parameters": sum(p.numel() for p in model.parameters())}

    outcomes, jobs = {}, {}
    status, built, message = attempt(build)
    if status == "ok":
        parameters = built["parameters"]
        while built["heats"]:       # a heat's entrants (and through them the model) go once it is done
            job, result = take_turns(built["heats"].pop(0), device=device, warmup=args.warmup, rounds=args.rounds,
                                     steps=args.steps, min_turn_ms=args.min_turn_ms)
            outcomes.update(result)
            jobs.update({name: job for name in result})
        del built
    free_device_memory(device)
    if args.memory_limit_gb is not None:
        lift_memory_limit()
    for context, mode, precision in points:
        again = precision != configuration(precision)
        params = base | {"context": context, "mode": mode, "precision": configuration(precision), "rounds": args.rounds,
                         "min_turn_ms": args.min_turn_ms} | ({"again": True} if again else {})
        out = Path(args.out_dir) / (f"{base['size']}_ctx{context}_{mode}_{configuration(precision)}"
                                    + ("_again" if again else "") + ".json")
        outcome = outcomes.get(point_name(context, mode, precision))
        if outcome is None:           # building the shared model failed: every point shares its fate
            record = make_record("A1", params, status, {}, reason=message)
        elif outcome.status != "ok":
            record = make_record("A1", params, outcome.status, {"turns": jobs[outcome.name].as_dict()},
                                 reason=outcome.message)
        else:
            metrics = outcome.metrics(jobs[outcome.name]) | {"parameters": parameters}
            record = make_record("A1", params, "ok", metrics)
        write_json_atomic(out, record)
        summary = f"step {record['metrics']['step']['mean']:.2f} ms" if record["status"] == "ok" else record.get("message")
        log(f"A1 {record['status']}: {out.name}: {summary}")
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    size = model_size(args)
    if args.out_dir is not None:
        base = {"size": args.size or "custom", **asdict(size), "vocab_size": args.vocab_size, "batch": args.batch,
                "warmup": args.warmup, "steps": args.steps, "compile": args.compile, "attention": args.attention,
                "device": args.device, "memory_limit_gb": args.memory_limit_gb,
                "float32_matmul_precision": torch.get_float32_matmul_precision()}
        log(f"A1 benchmark group: contexts {args.contexts}, modes {args.modes}, precisions {args.precisions}, "
            f"{args.rounds} rounds x {args.steps} steps after {args.warmup} warm-up: {base}")
        return run_group(args, size, base)
    params = {"size": args.size or "custom", **asdict(size), "vocab_size": args.vocab_size,
              "context": args.context, "batch": args.batch, "mode": args.mode, "warmup": args.warmup,
              "steps": args.steps, "precision": args.precision, "compile": args.compile,
              "attention": args.attention, "device": args.device, "memory_limit_gb": args.memory_limit_gb,
              # what fp32 matmuls run in ("highest": fp32, no TF32), for the MFU's peak (profiling.mfu)
              "float32_matmul_precision": torch.get_float32_matmul_precision()}
    log(f"A1 benchmark: {params}")
    device = torch.device(args.device)
    if args.memory_limit_gb is not None:
        limit_memory(device, args.memory_limit_gb)
    status, metrics, message = attempt(lambda: benchmark(
        size, context=args.context, batch=args.batch, mode=args.mode, warmup=args.warmup,
        steps=args.steps, precision=args.precision, compile=args.compile, attention=args.attention,
        device=args.device, vocab_size=args.vocab_size))
    free_device_memory(device)
    if args.memory_limit_gb is not None:
        lift_memory_limit()
    write_json_atomic(args.out, make_record("A1", params, status, metrics, reason=message))
    summary = f"step {metrics['step']['mean']:.2f} ms" if status == "ok" else message
    log(f"A1 {status}: {summary} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
