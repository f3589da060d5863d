"""B5: FlashAttention benchmark — ours against plain PyTorch attention and PyTorch SDPA's back ends.

    python -m cs336_systems.attention.bench grid --impl ours --dtype bf16 --d 64 --seqs 128 256 --out row.json
    python -m cs336_systems.attention.bench leaderboard --out leaderboard.json

``grid`` times one implementation at one dtype and head dimension over sequence lengths and the
three passes (forward, backward, forward+backward), batch 1, causal, with ``triton.testing.do_bench``
(median of its repetitions), with what ran (ours: ``flash_record.describe``: the path, tiles,
programs, SM count, splits, product mode, tile order and backward) and PyTorch's float32 matmul
precision. One process covers one such row — compiling and warming a kernel per
point would dominate the sweep — and writes a JSON list with one record per (sequence, pass); an
out-of-memory point is recorded as ``oom``, its memory freed, and the row goes on.

``leaderboard`` runs the fixed case: q, k, v (16, 16384, 64) bf16, causal, forward and
``o.sum().backward()``, do_bench warm-up 1000 ms and rep 10 000 ms, ours under ``torch.compile``
and both SDPA anchors, in one process so the numbers are comparable. The same settings then time
the forward alone (no autograd graph) and the backward alone (``backward`` of one retained graph),
so the total can be split.

On a machine without CUDA (the smoke preset) times come from a plain timer loop instead of
do_bench, the Triton kernels run in the interpreter, and the SDPA anchors are recorded as skipped.

**Graph time.** At batch 1 and short sequences do_bench's median carries the host's time: do_bench
flushes the L2 cache with a memset before each call, and when the host takes longer to launch the
call than the GPU takes for that memset, the GPU waits and the wait is measured (lab/attention/NOTES.md,
"Small N is noise"). So ``grid`` also times every point with CUDA graphs and records it beside ``ms`` as
``graph_ms`` (with ``graph_status``; ``graph_reason`` when there is none). ``graph_ms`` is the GPU
time of one call with no host in it: ``calls`` calls of the pass are captured into one
``torch.cuda.CUDAGraph`` (after warm-up calls on the capture stream, as capture requires); the GPU
is put to sleep while the host queues every replay, so no replay waits for the host; each replay is
timed with CUDA events and divided by ``calls``; ``graph_ms`` is the median over replays and
``graph_ms_min`` / ``graph_ms_max`` their range. Unlike do_bench, nothing flushes the L2 cache
between calls (Triton's ``do_bench_cudagraph``, whose design this follows, does not either): an
input that fits in L2 is read from it. The record therefore also carries what
a call finds in memory before it starts (``resident_bytes``: q, k, v, the output gradient, and for
the backward alone the retained forward's output and saved tensors) and the L2 size
(``l2_bytes``), from which the report bounds how much a cold cache can add to do_bench's time.
``torch.compile``d plain attention is not graph-timed: its code is guarded Python that can
recompile on a call, and a recompile (or Inductor's own cudagraph machinery) inside our capture is
not a measurement of the same code; Inductor's ``mode="reduce-overhead"`` is its own way to use
CUDA graphs. A capture that fails is recorded (``graph_status`` error or oom, with the message) and
the row goes on.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
from contextlib import nullcontext

import torch

from cs336_systems.attention import flash_record
from cs336_systems.attention.backends import BENCH_IMPLS, load
from cs336_systems.records import log, make_record, write_json_atomic
from cs336_systems.timing import attempt, failure_status, free_device_memory, is_out_of_memory, median_ms

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


def pass_step(fn, q, k, v, which: str):
    """(prepare, grads to reset) for one pass: ``prepare()`` builds, on the current stream, what
    the pass needs (for the backward alone: the retained forward) and returns the call to time.
    The forward is timed under ``torch.no_grad()`` (``no_grad_for``)."""
    grad = torch.randn_like(q)
    if which == "forward":
        return (lambda: lambda: fn(q, k, v)), []
    if which == "backward":
        def prepare():
            out = fn(q, k, v)
            return lambda: out.backward(grad, retain_graph=True)
        return prepare, [q, k, v]
    return (lambda: lambda: fn(q, k, v).backward(grad)), [q, k, v]


def no_grad_for(which: str):
    return torch.no_grad() if which == "forward" else nullcontext()


def measure(impl: str, q, k, v, which: str, **bench) -> float:
    fn, context = implementation(impl)
    prepare, grads = pass_step(fn, q, k, v, which)
    with context(), no_grad_for(which):
        return median_ms(prepare(), grad_to_none=grads or None, **bench)


# Graph timing (see the module docstring): one replay aims at GRAPH_REPLAY_MS of GPU time, with at
# most GRAPH_MAX_CALLS calls captured (capturing a call costs the host's launch time); replays aim
# at GRAPH_REP_MS in all, at least GRAPH_MIN_REPLAYS (the range needs a few) and at most
# GRAPH_MAX_REPLAYS. do_bench spends about 25 ms warming up and 100 ms repeating per point (at
# least 5 + 1 + 1 calls); this adds up to 4 estimating calls and about GRAPH_REP_MS of replays (at
# least 3 calls at the longest points): on the committed h100 rows' times that is about 35 s more GPU
# time for a grid whose do_bench timing takes about 190 s.
GRAPH_REPLAY_MS, GRAPH_MAX_CALLS = 2.0, 100
GRAPH_REP_MS, GRAPH_MIN_REPLAYS, GRAPH_MAX_REPLAYS = 20.0, 3, 10
# GPU clock cycles of sleep before the timed replays: ~2.5 ms at the H100's 1.98 GHz, longer than the
# host needs to queue GRAPH_MAX_REPLAYS replays and their events.
GRAPH_SLEEP_CYCLES = 5_000_000


def graph_skip_reason(impl: str, device: str) -> str | None:
    if device != "cuda":
        return "CUDA graphs need a CUDA GPU: a CPU run has no graph time"
    if impl == "plain-compiled":
        return ("not graph-timed: torch.compile's guarded code may recompile inside our capture, which would "
                "not time the same code; Inductor's mode='reduce-overhead' is its own way to use CUDA graphs")
    return None


def measure_graph(impl: str, q, k, v, which: str, rep_ms: float = GRAPH_REP_MS) -> dict:
    """The pass's graph time (module docstring): graph_ms (median per call over replays), its
    range, the calls per graph and replays, resident_bytes and l2_bytes."""
    fn, context = implementation(impl)
    prepare, grads = pass_step(fn, q, k, v, which)
    resident = sum(t.nbytes for t in (q, k, v)) + (q.nbytes if which != "forward" else 0)   # + dO
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with context(), no_grad_for(which), torch.cuda.stream(stream):
        before = torch.cuda.memory_allocated()
        step = prepare()                    # the backward alone: its forward runs on this stream,
        resident += torch.cuda.memory_allocated() - before     # so autograd runs its backward here too

        def call():
            for t in grads:
                t.grad = None
            step()

        estimate = _events_ms(call, 1)      # the warm-up call (kernels compiled by do_bench already)
        if estimate < GRAPH_REPLAY_MS:
            estimate = _events_ms(call, 3)
        # An estimate that still holds host time only makes a graph shorter than aimed at.
        calls = max(1, min(GRAPH_MAX_CALLS, math.ceil(GRAPH_REPLAY_MS / estimate)))
        replays = max(GRAPH_MIN_REPLAYS, min(GRAPH_MAX_REPLAYS, round(rep_ms / (calls * estimate))))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(calls):
                call()
        graph.replay()                      # the first replay uploads the graph: untimed
        torch.cuda.synchronize()
        events = [torch.cuda.Event(enable_timing=True) for _ in range(replays + 1)]
        sleep = getattr(torch.cuda, "_sleep", None)     # private, but long-standing; without it the
        if sleep is not None:                           # first replays may wait for the host
            sleep(GRAPH_SLEEP_CYCLES)
        events[0].record()
        for end in events[1:]:
            graph.replay()
            end.record()
        torch.cuda.synchronize()
    per_call = sorted(a.elapsed_time(b) / calls for a, b in zip(events, events[1:]))
    for t in grads:
        t.grad = None
    del graph
    return {"graph_ms": statistics.median(per_call), "graph_ms_min": per_call[0], "graph_ms_max": per_call[-1],
            "graph_calls": calls, "graph_replays": replays, "resident_bytes": int(resident),
            "l2_bytes": getattr(torch.cuda.get_device_properties(q.device), "L2_cache_size", None)}


def _events_ms(call, n: int) -> float:
    """Milliseconds per call of ``n`` back-to-back calls on the current stream, by CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        call()
    end.record()
    end.synchronize()
    return max(start.elapsed_time(end) / n, 1e-3)


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
            log(f"B5 {impl} {dtype} d={d} seq={seq} {which}: " + (_point_line(metrics) if status == "ok" else status))
            free_device_memory(device)       # q, k, v went with the point's frame
    return records


def _point_line(metrics: dict) -> str:
    graph = (f"graph {metrics['graph_ms']:.4f} ms" if metrics.get("graph_status") == "ok"
             else f"graph {metrics.get('graph_status')}")
    return f"{metrics['ms']:.3f} ms, {graph}"


def _grid_point(impl: str, dtype: str, d: int, seq: int, which: str, device: str) -> dict:
    q, k, v = (torch.randn(1, seq, d, dtype=DTYPES[dtype], device=device, requires_grad=True) for _ in range(3))
    ms = measure(impl, q, k, v, which)
    flops = causal_flops(1, seq, d, which)
    return {"ms": ms, "flops": flops, "tflops": flops / ms / 1e9, **launch_metrics(impl, q, k, v),
            **graph_metrics(impl, q, k, v, which, device)}


def graph_metrics(impl: str, q, k, v, which: str, device: str) -> dict:
    """The point's graph time, or why it has none: a capture that fails is recorded, not raised
    (the point keeps its do_bench time and the row goes on)."""
    reason = graph_skip_reason(impl, device)
    if reason:
        return {"graph_status": "skipped", "graph_reason": reason}
    free_device_memory(device)              # do_bench's blocks are cached for the default stream
    try:
        metrics, status, message = measure_graph(impl, q, k, v, which), "ok", None
    except Exception as exc:  # noqa: BLE001 - recorded as the point's graph status
        # An allocation failure inside a capture surfaces as the capture's end failing, with the
        # out-of-memory error as its context: record the cause.
        chain = [exc]
        while chain[-1].__context__ is not None and len(chain) < 8:
            chain.append(chain[-1].__context__)
        status, message = failure_status(next((e for e in chain if is_out_of_memory(e)), exc))
        metrics = {}
    free_device_memory(device)
    return {"graph_status": status, **metrics, **({"graph_reason": message} if message else {})}


def launch_metrics(impl: str, q, k, v, compiled: bool = False) -> dict:
    """What ran, for ours (``flash_record.describe``: the report states nothing about our kernels
    that the record does not say), and PyTorch's float32 matmul precision, which decides whether
    plain attention's fp32 products use TF32."""
    launch = flash_record.describe(q, k, v, True, compiled=compiled) if impl == "ours" else {}
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
    return {"ms": ms, "tflops": flops / ms / 1e9, **launch_metrics(impl, q, k, v, compiled)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.attention.bench", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    g = sub.add_parser("grid", help="one implementation × dtype × head dimension over sequence lengths and passes")
    g.add_argument("--impl", choices=IMPLS, required=True)
    g.add_argument("--dtype", choices=list(DTYPES), required=True)
    g.add_argument("--d", type=int, required=True, help="head dimension: one our kernels take (multiples of 8 to 256)")
    g.add_argument("--seqs", type=int, nargs="+", required=True)
    lb = sub.add_parser("leaderboard", help="the fixed (16, 16384, 64) bf16 causal case, ours vs SDPA")
    lb.add_argument("--shape", type=int, nargs=3, metavar=("BATCH", "SEQ", "D"), help="override (smoke runs)")
    lb.add_argument("--warmup-ms", type=float)
    lb.add_argument("--rep-ms", type=float)
    for parser in (g, lb):
        parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
        parser.add_argument("--out", required=True, help="where the JSON list of records goes")
    args = p.parse_args(argv)
    if args.command == "grid" and args.d not in flash_record.head_dims():
        p.error(f"--d {args.d}: our kernels take head dimensions {flash_record.describe_head_dims()}")
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
