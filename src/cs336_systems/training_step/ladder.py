"""E1: one rung of the training-step ladder at one point (size x context), one record.

    python -m cs336_systems.training_step.ladder --size xl --context 512 --rung bf16 --out rec.json
    python -m cs336_systems.training_step.ladder --size xl --context 2048 --rung checkpointed \\
        --previous fused-adamw.json --out rec.json

A seeded model and batch (``--seed``; the same for every rung), one AdamW training step
(``workload``: forward and loss, backward, optimizer, each phase timed between two device
synchronisations). The first of the ``--warmup`` untimed steps gives the loss, computed before any
update, that the report sets against fp32 eager's; then ``--steps`` timed steps. The record holds
the step's median and spread, tokens/s, peak memory and the first loss; MFU is the report's (A1's
closed form against the card's peak).

A rung that needs CUDA on a CPU is recorded as ``skipped`` with why. The ``checkpointed`` rung reads
the record of the rung before it (``--previous``): where that one fits, checkpointing would only add
recomputation, and the record says "not needed" instead of measuring. An allocation failure is a
result (``oom``).
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import asdict

import torch

from cs336_systems.cli import parse_device
from cs336_systems.models import MODEL_SIZES, VOCAB_SIZE, get_size
from cs336_systems.records import DamagedRecord, log, make_record, read_record, write_json_atomic
from cs336_systems.timing import attempt, free_device_memory
from cs336_systems.training_step import rungs
from cs336_systems.training_step.step import build_step, kernel_context
from cs336_systems.workload import COMPILE_BACKENDS, COMPILE_MODES, time_steps

COMPILED = tuple(m for m in COMPILE_MODES if m != "none")     # how a compiled rung compiles


def parse_args(argv=None, prog: str = "python -m cs336_systems.training_step.ladder", doc: str = __doc__
               ) -> argparse.Namespace:
    """The point, the rung and how to time it (``training_step.profile`` takes the same arguments)."""
    p = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--size", choices=list(MODEL_SIZES), required=True)
    p.add_argument("--context", type=int, required=True)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--rung", choices=list(rungs.BY_NAME), required=True,
                   help="a rung of the ladder or an anchor (cs336_systems.training_step.rungs)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps; the first gives the loss")
    p.add_argument("--steps", type=int, default=8, help="timed steps")
    p.add_argument("--seed", type=int, default=0, help="seeds the model's init and the batch")
    p.add_argument("--compile-mode", choices=COMPILED, default="model",
                   help="compiled rungs: the whole model, or each block (regional compiling)")
    p.add_argument("--backend", choices=COMPILE_BACKENDS, default="inductor", help="torch.compile back end")
    p.add_argument("--checkpoint-group", type=int, default=4, help="blocks a checkpointed group holds")
    p.add_argument("--previous", help="the record of the rung before (the checkpointed rung runs only where it ran out of memory)")
    p.add_argument("--vocab-size", type=int, default=VOCAB_SIZE)
    p.add_argument("--device", help="torch device (default: cuda where available, else cpu)")
    p.add_argument("--out", required=True, help="where the JSON record goes")
    args = p.parse_args(argv)
    for name, least in (("context", 1), ("batch", 1), ("steps", 1), ("warmup", 1), ("checkpoint_group", 1),
                        ("vocab_size", 1)):
        if getattr(args, name) < least:
            p.error(f"--{name.replace('_', '-')} must be at least {least}"
                    + (" (the first warm-up step gives the loss)" if name == "warmup" else ""))
    if args.previous and args.rung != rungs.ONLY_WHEN_PREVIOUS_OOMS:
        p.error(f"--previous is for the {rungs.ONLY_WHEN_PREVIOUS_OOMS} rung only")
    args.previous_record = _previous_record(p, args.previous) if args.previous else None
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    parse_device(p, args.device)
    return args


def _previous_record(p: argparse.ArgumentParser, path: str) -> dict:
    """The rung before's record, read before anything is built: a path that is not there or not a
    record is the user's mistake, said in one line."""
    try:
        return read_record(path)
    except DamagedRecord as error:
        p.error(f"--previous {error}")
    except OSError as error:
        p.error(f"--previous {path}: {error.strerror or error}")


def params_of(args: argparse.Namespace, device: str) -> dict:
    """What the record says was asked for: the point, the rung and exactly what its step runs."""
    rung = rungs.get(args.rung)
    setup = rung.setup
    return {"size": args.size, **asdict(get_size(args.size)), "vocab_size": args.vocab_size, "context": args.context,
            "batch": args.batch, "mode": "train-step", "rung": rung.name, "anchor": rung.anchor, "adds": rung.adds,
            "previous_rung": rungs.previous(rung.name), **asdict(setup), "optimizer": setup.optimizer,
            "compile_mode": args.compile_mode if setup.compiled else None,
            "compile_backend": args.backend if setup.compiled else None,
            "checkpoint_group": args.checkpoint_group if setup.checkpointed else None,
            "warmup": args.warmup, "steps": args.steps, "seed": args.seed, "device": device,
            # what fp32 matmuls run in, for the MFU's peak (profiling.mfu)
            "float32_matmul_precision": torch.get_float32_matmul_precision()}


def skip_reason(args: argparse.Namespace, device: str) -> str | None:
    """Why this point is not measured, or None."""
    if device.startswith("cpu") and rungs.needs_cuda(args.rung):
        return rungs.needs_cuda(args.rung)
    if args.previous_record is not None:
        before = args.previous_record
        name = before["params"].get("rung", "the rung before")
        if before["status"] == "ok":
            return f"not needed: the previous rung ({name}) fits"
        if before["status"] != "oom":
            why = before.get("reason") or before.get("message") or ""
            return (f"the previous rung ({name}) did not run ({before['status']}{': ' + why if why else ''}); "
                    "checkpointing saves memory and cannot change that")
    return None


def build(args: argparse.Namespace, device: str):
    """The rung's setup and its step, built from the command line's point and seed."""
    setup = rungs.get(args.rung).setup
    return setup, build_step(setup, get_size(args.size), context=args.context, batch=args.batch,
                             device=torch.device(device), seed=args.seed, compile_mode=args.compile_mode,
                             backend=args.backend, checkpoint_group=args.checkpoint_group,
                             vocab_size=args.vocab_size)


def measure(args: argparse.Namespace, device: str) -> dict:
    setup, workload = build(args, device)
    with kernel_context(setup):
        loss = float(workload.step())           # the first warm-up step; its loss precedes any update
        log(f"  first step's loss {loss:.6f}")
        metrics = time_steps(workload, warmup=args.warmup - 1, steps=args.steps)
    median_s = metrics["step"]["median"] / 1e3
    metrics |= {"loss": loss, "tokens_per_s": args.batch * args.context / median_s,
                "parameters": sum(p.numel() for p in workload.model.parameters())}
    return metrics


def run_point(args: argparse.Namespace, measure_point, summarize, label: str = "E1", **extra_params) -> int:
    """One E1 record for the command line's point: skipped with why, or ``measure_point(args, device)``
    under ``timing.attempt`` (an allocation failure is an ``oom`` record); ``summarize(metrics)`` is
    the log line of a point that ran."""
    device = args.device
    if device.startswith("cpu") and rungs.get(args.rung).setup.attention == "flash":
        os.environ.setdefault("TRITON_INTERPRET", "1")    # before the kernels are first imported
    params = {**params_of(args, device), **extra_params}
    log(f"{label} {args.size} ctx {args.context} rung {args.rung}: {params['adds']}")
    reason = skip_reason(args, device)
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
    return run_point(parse_args(argv), measure,
                     lambda m: f"step median {m['step']['median']:.2f} ms, loss {m['loss']:.4f}")


if __name__ == "__main__":
    sys.exit(main())
