"""A1: end-to-end benchmark of the Transformer LM (forward, backward, optimizer step).

    python -m cs336_systems.benchmark --size small --context 256 --mode train-step --out rec.json

Builds a randomly initialised model (a named size or explicit dimensions), makes a random batch,
runs ``--warmup`` untimed steps, then times ``--steps`` steps. Every phase (forward, backward,
optimizer) is timed on its own with ``timeit.default_timer`` and a device synchronisation at both
ends, so the record holds per-phase samples as well as their mean and standard deviation.

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

import torch

from cs336_systems.cli import parse_device, require_at_least
from cs336_systems.models import ATTENTION_BACKENDS, MODEL_SIZES, ModelSize, get_size
from cs336_systems.records import log, make_record, write_json_atomic
from cs336_systems.timing import attempt, free_device_memory
from cs336_systems.workload import MODES, PRECISIONS, build_workload, time_steps



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
    run.add_argument("--context", type=int, required=True, help="context length (tokens per sequence)")
    run.add_argument("--batch", type=int, default=4, help="sequences per batch")
    run.add_argument("--mode", choices=MODES, default="forward-backward",
                     help="forward only (no_grad), forward+backward, or a full training step with AdamW")
    run.add_argument("--warmup", type=int, default=5, help="untimed steps before timing")
    run.add_argument("--steps", type=int, default=10, help="timed steps")
    run.add_argument("--precision", choices=list(PRECISIONS), default="fp32",
                     help="fp32, or bf16 autocast around forward and loss (fp32 master weights)")
    run.add_argument("--compile", action="store_true", help="wrap the model in torch.compile")
    run.add_argument("--attention", choices=list(ATTENTION_BACKENDS), default="naive", help="attention back end")
    run.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                     help="torch device, e.g. cuda, cuda:1, cpu")
    run.add_argument("--memory-limit-gb", type=float,
                     help="cap this process's memory to emulate a smaller device (CUDA: a fraction of "
                          "the card; CPU: the address space grows by at most this much)")
    p.add_argument("--out", required=True, help="where the JSON record goes")
    args = p.parse_args(argv)

    dims = [args.d_model, args.d_ff, args.num_layers, args.num_heads]
    if args.size is None and None in dims:
        p.error("give --size, or all of --d-model --d-ff --num-layers --num-heads")
    if args.size is not None and any(d is not None for d in dims):
        p.error("--size and explicit dimensions exclude each other")
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


def main(argv=None) -> int:
    args = parse_args(argv)
    size = model_size(args)
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
