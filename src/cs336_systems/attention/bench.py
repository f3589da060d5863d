"""B5: FlashAttention benchmark — ours against plain PyTorch attention and PyTorch SDPA's back ends.

    python -m cs336_systems.attention.bench grid --impl ours --dtype bf16 --d 64 --seqs 128 256 --out row.json
    python -m cs336_systems.attention.bench leaderboard --out leaderboard.json

``grid`` times one implementation at one dtype and head dimension over sequence lengths and the
three passes (forward, backward, forward+backward), batch 1, causal, with ``triton.testing.do_bench``
(median of its repetitions), with what each implementation says it launched (ours: tiles,
programs, SM count) and PyTorch's float32 matmul precision. One process covers one such row — compiling and warming a kernel per
point would dominate the sweep — and writes a JSON list with one record per (sequence, pass); an
out-of-memory point is recorded as ``oom``, its memory freed, and the row goes on.

``leaderboard`` runs the fixed case: q, k, v (16, 16384, 64) bf16, causal, forward and
``o.sum().backward()``, do_bench warm-up 1000 ms and rep 10 000 ms, ours under ``torch.compile``
and both SDPA anchors, in one process so the numbers are comparable. The same settings then time
the forward alone (no autograd graph) and the backward alone (``backward`` of one retained graph),
so the total can be split.

On a machine without CUDA (the smoke preset) times come from a plain timer loop instead of
do_bench, the Triton kernels run in the interpreter, and the SDPA anchors are recorded as skipped.
"""
from __future__ import annotations

import argparse
import os
import sys
from contextlib import nullcontext

import torch

from cs336_systems.attention.backends import BENCH_IMPLS, load
from cs336_systems.records import log, make_record, write_json_atomic
from cs336_systems.timing import attempt, free_device_memory, median_ms

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
PASSES = ("forward", "backward", "forward-backward")
IMPLS = tuple(BENCH_IMPLS)


def causal_flops(batch: int, seq: int, d: int, which: str) -> float:
    """Matmul FLOPs of causal attention: QKᵀ and PV forward (2 each of 2·N²·d, halved by the mask),
    five such products backward (recomputed S, dV, dP, dQ, dK)."""
    forward = 2 * 2 * batch * seq * seq * d / 2
    return {"forward": forward, "backward": 2.5 * forward, "forward-backward": 3.5 * forward}[which]


def implementation(name: str):
    """(causal function of q, k, v -> o, context manager to run it in) for q, k, v of shape (batch, seq, d).

    The function comes from ``backends.BENCH_IMPLS`` by name (imported only here, so this module's
    source does not include our kernels'); this adds the compiling and SDPA's pinned kernel."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    attention = load(name, BENCH_IMPLS)
    if name.startswith("sdpa-"):
        # PyTorch's flash and cuDNN kernels take (batch, heads, seq, d): one head.
        backend = {"sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION}[name]
        return (lambda q, k, v: attention(q[:, None], k[:, None], v[:, None], True)[:, 0]), (lambda: sdpa_kernel(backend))
    causal = lambda q, k, v: attention(q, k, v, True)  # noqa: E731
    return (torch.compile(causal) if name == "plain-compiled" else causal), nullcontext


def skip_reason(impl: str, device: str, dtype: str = "bf16") -> str | None:
    if impl.startswith("sdpa-") and device != "cuda":
        return "PyTorch's flash and cuDNN attention back ends need a CUDA GPU"
    if impl.startswith("sdpa-") and dtype == "fp32":
        return f"PyTorch's {impl[5:]} attention back end supports only fp16 and bf16"
    return None


def measure(impl: str, q, k, v, which: str, **bench) -> float:
    fn, context = implementation(impl)
    grad = torch.randn_like(q)
    with context():
        if which == "forward":
            with torch.no_grad():
                return median_ms(lambda: fn(q, k, v), **bench)
        if which == "backward":
            out = fn(q, k, v)
            return median_ms(lambda: out.backward(grad, retain_graph=True), grad_to_none=[q, k, v], **bench)
        return median_ms(lambda: fn(q, k, v).backward(grad), grad_to_none=[q, k, v], **bench)


def grid_row(impl: str, dtype: str, d: int, seqs: list[int], device: str) -> list[dict]:
    records = []
    reason = skip_reason(impl, device, dtype)
    for seq in seqs:
        for which in PASSES:
            params = {"impl": impl, "dtype": dtype, "d": d, "seq": seq, "batch": 1, "causal": True, "pass": which,
                      "device": device}
            if reason:
                records.append(make_record("B5", params, "skipped", reason=reason))
                continue
            status, metrics, message = attempt(lambda: _grid_point(impl, dtype, d, seq, which, device))
            records.append(make_record("B5", params, status, metrics, reason=message))
            log(f"B5 {impl} {dtype} d={d} seq={seq} {which}: " + (f"{metrics['ms']:.3f} ms" if status == "ok" else status))
            free_device_memory(device)       # q, k, v went with the point's frame
    return records


def _grid_point(impl: str, dtype: str, d: int, seq: int, which: str, device: str) -> dict:
    q, k, v = (torch.randn(1, seq, d, dtype=DTYPES[dtype], device=device, requires_grad=True) for _ in range(3))
    ms = measure(impl, q, k, v, which)
    flops = causal_flops(1, seq, d, which)
    return {"ms": ms, "flops": flops, "tflops": flops / ms / 1e9, **launch_metrics(impl, q, k, v)}


def launch_metrics(impl: str, q, k, v) -> dict:
    """What the implementation launched, where its module can say (ours: tiles, programs, SMs; the
    report compares the grid with the SM count), and PyTorch's float32 matmul precision, which
    decides whether plain attention's fp32 products use TF32."""
    import importlib

    from cs336_systems.attention.backends import module_of

    describe = getattr(importlib.import_module(module_of(impl, BENCH_IMPLS)), "describe", None)
    launch = describe(q, k, v, True) if describe else {}
    return {"float32_matmul_precision": torch.get_float32_matmul_precision(), **({"launch": launch} if launch else {})}


LEADERBOARD = {"batch": 16, "seq": 16384, "d": 64, "dtype": "bf16", "causal": True, "warmup_ms": 1000, "rep_ms": 10000}


def leaderboard(device: str, shape=None, warmup_ms=None, rep_ms=None) -> list[dict]:
    """The fixed case for ours (compiled) and the SDPA anchors: forward + o.sum().backward(), then
    the forward and the backward alone."""
    case = dict(LEADERBOARD)
    if shape:
        case.update(batch=shape[0], seq=shape[1], d=shape[2])
    case["warmup_ms"] = warmup_ms if warmup_ms is not None else case["warmup_ms"]
    case["rep_ms"] = rep_ms if rep_ms is not None else case["rep_ms"]
    records = []
    for which in LEADERBOARD_PASSES:
        for impl in ("ours", "sdpa-cudnn", "sdpa-flash"):
            records.append(_leaderboard_point(impl, which, case, device))
    return records


# The headline pass first: it is the case's definition; the split follows.
LEADERBOARD_PASSES = ("forward-backward", "forward", "backward")


def _leaderboard_point(impl: str, which: str, case: dict, device: str) -> dict:
    params = {**case, "impl": impl, "pass": which, "device": device}
    reason = skip_reason(impl, device)
    if reason:
        return make_record("B5-leaderboard", params, "skipped", reason=reason)
    if impl == "ours":
        # torch.compile cannot trace into Triton's CPU interpreter, so a smoke run times it eager.
        params["compiled"] = device == "cuda"
    status, metrics, message = attempt(lambda: _leaderboard_time(impl, which, case, device, params.get("compiled", False)))
    if status == "ok":
        log(f"leaderboard {impl} {which}: {metrics['ms']:.3f} ms")
    free_device_memory(device)               # q, k, v went with the timing's frame
    return make_record("B5-leaderboard", params, status, metrics, reason=message)


def _leaderboard_time(impl: str, which: str, case: dict, device: str, compiled: bool) -> dict:
    q, k, v = (torch.randn(case["batch"], case["seq"], case["d"], dtype=DTYPES[case["dtype"]], device=device,
                           requires_grad=True) for _ in range(3))
    fn, context = implementation(impl)
    if compiled:
        fn = torch.compile(fn)
    # A compiled backward donates its saved buffers unless told otherwise, and then refuses the
    # retain_graph=True that timing one graph's backward again and again needs.
    donation = (torch._functorch.config.patch(donated_buffer=False) if compiled and which == "backward"
                else nullcontext())
    with context(), donation:
        if which == "forward-backward":
            step = lambda: fn(q, k, v).sum().backward()  # noqa: E731
        elif which == "forward":
            def step():
                with torch.no_grad():
                    fn(q, k, v)
        else:
            loss = fn(q, k, v).sum()
            step = lambda: loss.backward(retain_graph=True)  # noqa: E731
        ms = median_ms(step, warmup_ms=case["warmup_ms"], rep_ms=case["rep_ms"], grad_to_none=[q, k, v])
    flops = causal_flops(case["batch"], case["seq"], case["d"], which)
    return {"ms": ms, "tflops": flops / ms / 1e9}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.attention.bench", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    g = sub.add_parser("grid", help="one implementation × dtype × head dimension over sequence lengths and passes")
    g.add_argument("--impl", choices=IMPLS, required=True)
    g.add_argument("--dtype", choices=list(DTYPES), required=True)
    g.add_argument("--d", type=int, choices=(16, 32, 64, 128), required=True)
    g.add_argument("--seqs", type=int, nargs="+", required=True)
    lb = sub.add_parser("leaderboard", help="the fixed (16, 16384, 64) bf16 causal case, ours vs SDPA")
    lb.add_argument("--shape", type=int, nargs=3, metavar=("BATCH", "SEQ", "D"), help="override (smoke runs)")
    lb.add_argument("--warmup-ms", type=float)
    lb.add_argument("--rep-ms", type=float)
    for parser in (g, lb):
        parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
        parser.add_argument("--out", required=True, help="where the JSON list of records goes")
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: CUDA is not available on this machine")
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")    # before the kernels are first imported
    if args.command == "grid":
        if min(args.seqs) < 1:
            p.error("--seqs must be positive")
        records = grid_row(args.impl, args.dtype, args.d, args.seqs, args.device)
    else:
        records = leaderboard(args.device, args.shape, args.warmup_ms, args.rep_ms)
    write_json_atomic(args.out, records)
    log(f"wrote {len(records)} records -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
