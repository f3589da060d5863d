"""E1: the rungs and anchors of one point (size x context) in one job, taking turns; one record each.

    python -m cs336_systems.training_step.ladder --size xl --context 512 \\
        --rungs fp32 bf16 flash compiled fused-adamw triton-adamw bf16-weights checkpointed \\
            anchor-sdpa-flash anchor-sdpa-cudnn \\
        --out fp32.json bf16.json ... --warmup 3 --rounds 4 --steps 2

One seeded model, batch and set of AdamW moments (``step.SharedPoint``) that every rung steps with
its own step function: one AdamW training step (``workload``: forward and loss, backward, optimizer,
each phase timed between two device synchronisations). The rungs take turns
(``rounds.take_turns``): each is built and warmed up in the order given (``--warmup`` untimed steps;
the initial weights and optimizer state are restored before its first), then ``--rounds`` rounds in
rotating order of ``--steps`` timed steps a turn. What a rung computes is kept for the report to set
against fp32 eager's (``training_step.check``): the loss of each warm-up step (the first before any
update, each later one after one more) and, for every rung after fp32 eager, its first step's
gradients' error per parameter group against fp32 eager's. Each record keeps every round's samples
and ``turns`` (the job), so the report judges a rung against the rung before it, and ours against
an anchor, by the paired difference per round.
Its peak memory is the most its timed steps held (the warm-up's, which include compiling, apart).

A rung named twice is an A/A pair: the second entry is the same configuration built and timed
again as an entrant of its own (``<rung>#2``, its record's params ``again: true``), the control that
shows how often the judge calls one configuration different from itself (lab/paired/aa.py).

A rung that needs CUDA on a CPU is recorded as ``skipped`` with why. The ``checkpointed`` rung runs
only where the rung before it (bf16-weights, warmed up earlier in the same job) ran out of memory:
where that one fits, checkpointing would only add recomputation, and the record says "not needed".
An allocation failure is a result (``oom``) and the other rungs go on.
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import asdict

import torch

from cs336_systems.cli import parse_device
from cs336_systems.models import MODEL_SIZES, VOCAB_SIZE, get_size
from cs336_systems.records import log, make_record, write_json_atomic
from cs336_systems.rounds import AGAIN, MIN_ROUNDS, Entrant, Skipped, configuration, entries, take_turns
from cs336_systems.timing import attempt, exception_line, free_device_memory, is_out_of_memory
from cs336_systems.training_step import rungs
from cs336_systems.training_step.check import GradientReference
from cs336_systems.training_step.step import SharedPoint, build_step
from cs336_systems.workload import COMPILE_BACKENDS, COMPILE_MODES

COMPILED = tuple(m for m in COMPILE_MODES if m != "none")     # how a compiled rung compiles


def add_point_arguments(p: argparse.ArgumentParser) -> None:
    """The point and how its steps are built (the ladder's job and ``training_step.profile``)."""
    p.add_argument("--size", choices=list(MODEL_SIZES), required=True)
    p.add_argument("--context", type=int, required=True)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--warmup", type=int, default=3, help="untimed steps; their losses are checked, the first before any update")
    p.add_argument("--seed", type=int, default=0, help="seeds the model's init and the batch")
    p.add_argument("--compile-mode", choices=COMPILED, default="model",
                   help="compiled rungs: the whole model, or each block (regional compiling)")
    p.add_argument("--backend", choices=COMPILE_BACKENDS, default="inductor", help="torch.compile back end")
    p.add_argument("--checkpoint-group", type=int, default=4, help="blocks a checkpointed group holds")
    p.add_argument("--vocab-size", type=int, default=VOCAB_SIZE)
    p.add_argument("--device", help="torch device (default: cuda where available, else cpu)")


def check_point_arguments(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    for name, least in (("context", 1), ("batch", 1), ("steps", 1), ("warmup", 1), ("checkpoint_group", 1),
                        ("vocab_size", 1)):
        if getattr(args, name) < least:
            p.error(f"--{name.replace('_', '-')} must be at least {least}"
                    + (" (the first warm-up step gives the loss)" if name == "warmup" else ""))
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    parse_device(p, args.device)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.training_step.ladder", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_point_arguments(p)
    p.add_argument("--rungs", nargs="+", choices=list(rungs.BY_NAME), required=True,
                   help="rungs of the ladder and anchors (cs336_systems.training_step.rungs), built in this order")
    p.add_argument("--out", nargs="+", required=True, help="where each rung's JSON record goes, in --rungs' order")
    p.add_argument("--rounds", type=int, default=4, help=f"rounds in which every rung takes a turn (at least {MIN_ROUNDS})")
    p.add_argument("--steps", type=int, default=2, help="timed steps per turn")
    args = p.parse_args(argv)
    check_point_arguments(p, args)
    if args.rounds < MIN_ROUNDS:
        p.error(f"--rounds must be at least {MIN_ROUNDS} (a verdict needs a spread across rounds)")
    try:
        entries(args.rungs)
    except ValueError as exc:
        p.error(f"--rungs: {exc}")
    if rungs.ONLY_WHEN_PREVIOUS_OOMS in args.rungs and args.rungs.count(rungs.ONLY_WHEN_PREVIOUS_OOMS) > 1:
        p.error(f"--rungs: {rungs.ONLY_WHEN_PREVIOUS_OOMS} runs only where the rung before it ran out of memory; "
                "it cannot be an A/A pair")
    if len(args.out) != len(args.rungs):
        p.error(f"--out needs one path per rung: {len(args.rungs)} rungs, {len(args.out)} paths")
    gated = rungs.ONLY_WHEN_PREVIOUS_OOMS
    if gated in args.rungs:
        before = rungs.previous(gated)
        if before not in args.rungs[:args.rungs.index(gated)]:
            p.error(f"--rungs: {gated} runs only where {before} ran out of memory, so {before} must come before it")
    return args


def params_of(args: argparse.Namespace, name: str, device: str) -> dict:
    """What a record says was asked for: the point, the rung and exactly what its step runs (and
    ``again: true`` for a rung's second entry)."""
    again = name.endswith(AGAIN)
    name = configuration(name)
    rung = rungs.get(name)
    setup = rung.setup
    return {"size": args.size, **asdict(get_size(args.size)), "vocab_size": args.vocab_size, "context": args.context,
            "batch": args.batch, "mode": "train-step", "rung": rung.name, "anchor": rung.anchor, "adds": rung.adds,
            "previous_rung": rungs.previous(rung.name), **asdict(setup), "optimizer": setup.optimizer,
            "compile_mode": args.compile_mode if setup.compiled else None,
            "compile_backend": args.backend if setup.compiled else None,
            "checkpoint_group": args.checkpoint_group if setup.checkpointed else None,
            "warmup": args.warmup, "steps": args.steps, "rounds": getattr(args, "rounds", None),
            "seed": args.seed, "device": device,
            # what fp32 matmuls run in, for the MFU's peak (profiling.mfu)
            "float32_matmul_precision": torch.get_float32_matmul_precision()} | ({"again": True} if again else {})


def unavailable(name: str, device: str) -> str | None:
    """Why rung ``name`` cannot run on ``device``, or None: a CUDA-only kernel on a CPU, or Liger-Kernel
    (an optional extra) not installed."""
    if device.startswith("cpu") and (why := rungs.needs_cuda(name)):
        return why
    if rungs.get(name).setup.liger:
        from cs336_systems.training_step.liger import missing

        return missing()
    return None


def gated_skip(before: str, outcome: tuple[str, str | None] | None) -> str | None:
    """Why the checkpointed rung is not measured, from how the rung before it fared in this job's
    warm-up (``outcome``: its status and message, None where it ran): None where it ran out of memory."""
    if outcome is None:
        return f"not needed: the previous rung ({before}) fits"
    status, why = outcome
    if status == "oom":
        return None
    return (f"the previous rung ({before}) did not run ({status}{': ' + why if why else ''}); "
            "checkpointing saves memory and cannot change that")


def timed_peak(replayed: int | None, captured: int | None) -> int | None:
    """The most a rung's timed steps held: the allocator's peak over them, or, for a rung that replays
    CUDA graphs, its capture's peak where larger (a replay allocates nothing, its activations live in
    the graphs' pool: ``training_step.cuda_graphs``)."""
    if captured is None or replayed is None:
        return replayed if captured is None else captured
    return max(replayed, captured)


def run_job(args: argparse.Namespace, point_factory=SharedPoint) -> dict[str, dict]:
    """Every rung of the command line's point in one job; returns the records by rung (also written)."""
    device = args.device
    if device.startswith("cpu") and any(rungs.runs_triton(n) for n in args.rungs):
        os.environ.setdefault("TRITON_INTERPRET", "1")    # before the kernels are first imported
    log(f"E1 {args.size} ctx {args.context}: {', '.join(args.rungs)} in turns, {args.rounds} rounds x {args.steps} steps")
    status, point, message = attempt(lambda: point_factory(
        get_size(args.size), context=args.context, batch=args.batch, device=device, seed=args.seed,
        compile_mode=args.compile_mode, backend=args.backend, checkpoint_group=args.checkpoint_group,
        vocab_size=args.vocab_size))
    records = {}
    if status != "ok":              # the shared model itself does not fit: every rung says so
        for name, out in zip(entries(args.rungs), args.out):
            records[name] = make_record("E1", params_of(args, name, device), status, reason=message)
            write_json_atomic(out, records[name])
        log(f"E1 {status} building the point: {message}")
        return records

    losses: dict[str, list[float]] = {}             # rung -> the loss of each warm-up step
    gradient_errors: dict[str, dict[str, float]] = {}
    reference: GradientReference | None = None     # fp32 eager's first gradients, once taken

    def check_gradients(name: str) -> None:
        nonlocal reference
        if name == rungs.REFERENCE:
            reference = GradientReference(point.names, point.gradient_holders())
        elif reference is not None:
            gradient_errors[name] = reference.relative_errors(point.gradient_holders())

    failed: dict[str, tuple[str, str | None]] = {}     # rung -> (status, message) of what stopped it

    def entrant(name: str) -> Entrant:
        setup = rungs.get(configuration(name)).setup

        def make():
            reason = unavailable(configuration(name), device)
            if reason is None and name == rungs.ONLY_WHEN_PREVIOUS_OOMS:
                before = rungs.previous(name)
                reason = gated_skip(before, failed.get(before))
            if reason is not None:
                failed[name] = ("skipped", reason)
                raise Skipped(reason)
            point.restore()             # every rung's first steps from the seeded weights and fresh moments
            step = point.step(setup, watched=args.warmup, on_loss=lambda loss: losses.setdefault(name, []).append(loss),
                              on_gradients=lambda: check_gradients(name))

            def tracked(phase):
                try:
                    step(phase)
                except Exception as exc:    # noqa: BLE001 - noted for the gated rung, then take_turns' outcome
                    failed[name] = ("oom" if is_out_of_memory(exc) else "error", exception_line(exc))
                    raise
            return tracked

        return Entrant(name, make, cleanup=point.clear)

    names = entries(args.rungs)
    job, outcomes = take_turns([entrant(n) for n in names], device=device, warmup=args.warmup,
                               rounds=args.rounds, steps=args.steps)
    parameters = sum(p.numel() for p in point.parameters)
    capture_peaks = dict(point.capture_peaks)
    del point, reference
    free_device_memory(device)
    for name, out in zip(names, args.out):
        outcome = outcomes[name]
        params = params_of(args, name, device)
        captured = capture_peaks.get(rungs.get(configuration(name)).setup)     # None but for a rung that replays graphs
        if outcome.status == "ok":
            metrics = outcome.metrics(job)
            # the first step (its loss; a compiled rung's compiling) apart from the other warm-up steps
            first_step, *warmup_steps = metrics["warmup_step_samples"]
            metrics |= {"loss": losses[name][0], "losses": losses[name],
                        "gradient_rel_error": gradient_errors.get(name), "parameters": parameters,
                        "first_step_ms": first_step, "warmup_step_samples": warmup_steps,
                        "tokens_per_s": args.batch * args.context / (metrics["step"]["median"] / 1e3),
                        # the timed steps' peak; the warm-up's (compiling included) beside it
                        "warmup_peak_memory_bytes": metrics["peak_memory_bytes"],
                        "peak_memory_bytes": timed_peak(outcome.timed_peak_memory_bytes, captured),
                        "graph_capture_peak_bytes": captured}
        else:
            metrics = {"turns": job.as_dict()}
        records[name] = make_record("E1", params, outcome.status, metrics, reason=outcome.message)
        write_json_atomic(out, records[name])
        log(f"E1 {name} {outcome.status}: " + (f"step median {metrics['step']['median']:.2f} ms, losses {', '.join(f'{v:.4f}' for v in losses[name])}"
                                                if outcome.status == "ok" else str(outcome.message)) + f" -> {out}")
    return records


# --- one rung alone (training_step.profile) ---------------------------------------------------

def build(args: argparse.Namespace, device: str):
    """One rung's step on a point of its own (``step.RungStep``), built from the command line's point and seed."""
    return build_step(rungs.get(args.rung).setup, get_size(args.size), context=args.context, batch=args.batch,
                      device=torch.device(device), seed=args.seed, compile_mode=args.compile_mode,
                      backend=args.backend, checkpoint_group=args.checkpoint_group, vocab_size=args.vocab_size)


def run_point(args: argparse.Namespace, measure_point, summarize, label: str = "E1", **extra_params) -> int:
    """One E1 record for the command line's one rung: skipped with why, or ``measure_point(args, device)``
    under ``timing.attempt`` (an allocation failure is an ``oom`` record); ``summarize(metrics)`` is
    the log line of a point that ran."""
    device = args.device
    if device.startswith("cpu") and rungs.runs_triton(args.rung):
        os.environ.setdefault("TRITON_INTERPRET", "1")    # before the kernels are first imported
    params = {**params_of(args, args.rung, device), **extra_params}
    log(f"{label} {args.size} ctx {args.context} rung {args.rung}: {params['adds']}")
    reason = unavailable(args.rung, device)
    if reason is not None:
        write_json_atomic(args.out, make_record("E1", params, "skipped", reason=reason))
        log(f"{label} skipped: {reason} -> {args.out}")
        return 0
    status, metrics, message = attempt(lambda: measure_point(args, device))
    free_device_memory(device)
    write_json_atomic(args.out, make_record("E1", params, status, metrics, reason=message))
    log(f"{label} {status}: {summarize(metrics) if status == 'ok' else message} -> {args.out}")
    return 0


def main(argv=None) -> int:
    run_job(parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
