"""B1 / B2(a): plain PyTorch attention over head dimension × sequence length, eager or compiled.

    python -m cs336_systems.attention.sweep --d 64 --seqs 256 1024 4096 --extend-to 131072 --out row.json

Batch 8, one head (q, k, v of shape (batch, seq, d)), no mask. For each sequence length: warm up,
time ``--iters`` forward passes, read the memory in use just before backward (what the forward
saved for it) and the peaks of one forward and one backward (CUDA only), then time ``--iters``
backward passes, synchronising around each timed loop. With
``--extend-to`` the sequence keeps doubling past the listed lengths until it runs out of memory
(or reaches that length), so the first out-of-memory point is always measured. One process per
row (one d, eager or compiled); every point is its own record in the row's JSON list, and an
out-of-memory point is recorded as ``oom`` with the memory the accounting below predicts for it
(any other failure as ``error``, with its message; the extension stops at either).
"""
from __future__ import annotations

import argparse
import sys

import torch

from cs336_systems.attention.reference import plain_attention
from cs336_systems.records import log, make_record, write_json_atomic
from cs336_systems.timing import attempt, free_device_memory, loop_ms, synchronize

FP32 = 4


def attention_memory(batch: int, seq: int, d: int, element_bytes: int = FP32) -> dict[str, int]:
    """Bytes that plain attention needs, by closed form.

    - ``saved``: what autograd keeps for backward — q, k, v (matmul inputs), the softmax output P
      (needed by softmax's and by P·V's backward) and the output O: ``4·B·N·d + B·N²`` elements.
    - ``forward_peak``: ``saved`` plus the scaled scores, alive while softmax makes P (``B·N²``).
    - ``backward_peak``: ``saved`` plus the gradients dP and dS of two N × N matrices.
    """
    vectors, square = 4 * batch * seq * d, batch * seq * seq
    saved = (vectors + square) * element_bytes
    return {"saved": saved, "forward_peak": saved + square * element_bytes,
            "backward_peak": saved + 2 * square * element_bytes}


def measure_point(fn, batch: int, seq: int, d: int, iters: int, device: torch.device,
                  where: dict | None = None) -> dict:
    """One point's times and memory. ``where["phase"]`` follows the pass under way, so a failure
    can say whether forward or backward ran out of memory (the error message does not)."""
    where = {} if where is None else where
    q, k, v = (torch.randn(batch, seq, d, device=device, requires_grad=True) for _ in range(3))
    grad = torch.randn(batch, seq, d, device=device)
    # Warm-up (and compilation, if compiled) runs exactly what is timed below, gradient accumulation
    # into existing .grad tensors included: a first backward that allocates grads and loads kernels
    # once cost ~1.7 s at sequence 256 when the warm-up differed.
    for _ in range(2):
        where["phase"] = "forward"
        warm = fn(q, k, v)
        where["phase"] = "backward"
        for _ in range(2):
            warm.backward(grad, retain_graph=True)
    del warm
    q.grad = k.grad = v.grad = None                       # so the memory reading holds only what forward saves
    where["phase"] = "forward"
    forward_ms = loop_ms(lambda: fn(q, k, v), iters, device)

    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    out = fn(q, k, v)
    synchronize(device)
    before_backward = torch.cuda.memory_allocated(device) if cuda else None
    forward_peak = torch.cuda.max_memory_allocated(device) if cuda else None
    # The backward's own peak: what it adds on top of the saved tensors (its N × N gradients) is
    # where eager and compiled attention can differ even when the memory before backward agrees.
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    where["phase"] = "backward"
    out.backward(grad, retain_graph=True)
    synchronize(device)
    backward_peak = torch.cuda.max_memory_allocated(device) if cuda else None
    q.grad = k.grad = v.grad = None
    backward_ms = loop_ms(lambda: out.backward(grad, retain_graph=True), iters, device)
    return {"forward_ms": forward_ms, "backward_ms": backward_ms, "memory_before_backward_bytes": before_backward,
            "forward_peak_bytes": forward_peak, "backward_peak_bytes": backward_peak}


def sequence_lengths(listed: list[int], extend_to: int | None):
    """The listed lengths, then doublings of the largest up to ``extend_to``."""
    yield from sorted(listed)
    seq = max(listed) * 2
    while extend_to is not None and seq <= extend_to:
        yield seq
        seq *= 2


def sweep(d: int, seqs: list[int], *, batch: int, iters: int, compiled: bool, device: str,
          extend_to: int | None, backend: str = "inductor") -> list[dict]:
    device = torch.device(device)
    if compiled:
        # Backward is timed by calling it repeatedly on one graph (retain_graph=True), which a
        # compiled backward allows only without donated buffers (PyTorch's error message says so).
        import torch._functorch.config as functorch_config
        functorch_config.donated_buffer = False
    fn = torch.compile(plain_attention, backend=backend) if compiled else plain_attention
    records = []
    for seq in sequence_lengths(seqs, extend_to):
        params = {"d": d, "seq": seq, "batch": batch, "iters": iters, "compiled": compiled, "device": str(device),
                  "extended": seq not in seqs, **({"backend": backend} if compiled else {})}
        accounting = attention_memory(batch, seq, d)
        # An allocation failure is the result we look for; the prediction is set beside it.
        where: dict = {}
        status, metrics, message = attempt(lambda: measure_point(fn, batch, seq, d, iters, device, where))
        free_device_memory(device)
        if status != "ok":
            metrics["failed_during"] = where.get("phase")
        records.append(make_record("B1", params, status, metrics | {"accounting_bytes": accounting}, reason=message))
        if status == "ok":
            log(f"B1 d={d} seq={seq} compiled={compiled}: forward {metrics['forward_ms']:.3f} ms, "
                f"backward {metrics['backward_ms']:.3f} ms")
        else:
            log(f"B1 d={d} seq={seq} compiled={compiled}: {status}")
            if params["extended"]:
                break                                    # the extension's job is done
    return records


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.attention.sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("--d", type=int, required=True, help="head dimension")
    p.add_argument("--seqs", type=int, nargs="+", required=True, help="sequence lengths")
    p.add_argument("--extend-to", type=int, help="keep doubling the sequence past the list until OOM or this length")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--iters", type=int, default=100, help="timed forward (and backward) passes per point")
    p.add_argument("--compile", action="store_true", help="torch.compile the attention function (B2a)")
    p.add_argument("--backend", choices=["inductor", "aot_eager"], default="inductor",
                   help="torch.compile back end with --compile (aot_eager: traced, not code-generated; smoke runs)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    if min(args.seqs + [args.d, args.batch, args.iters]) < 1:
        p.error("--d, --seqs, --batch and --iters must be positive")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error("--device cuda: CUDA is not available on this machine")
    records = sweep(args.d, args.seqs, batch=args.batch, iters=args.iters, compiled=args.compile,
                    device=args.device, extend_to=args.extend_to, backend=args.backend)
    write_json_atomic(args.out, records)
    log(f"wrote {len(records)} records -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
