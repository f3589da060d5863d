"""B3 / B4: our FlashAttention-2 Functions checked against float64 attention, and the two backward
paths timed side by side.

    python -m cs336_systems.attention.check --shape 2 1000 64 --bench-shape 1 8192 64 --out checks.json

For each Function (PyTorch tiles, Triton, Triton forward with the compiled PyTorch backward), each
dtype and both causal settings: the largest absolute error of O, L, dQ, dK and dV against the same
computation in float64, and beside it the error of plain PyTorch attention run in the same dtype —
the yardstick for what that dtype can do. The default shape's length, 1000, is not a multiple of any
tile, so boundary masks are exercised. Then forward and backward times of each Function at one
larger causal shape for the two Triton-forward Functions (do_bench medians on CUDA; a timer loop on the
CPU) — the comparison B4 asks about. The PyTorch Function is not timed: its forward is a Python loop
over tiles, written to be read, not raced. One record per case, with what ran for it
(``flash_record``: the Triton kernels' path, tiles, splits, product mode, tile order and backward)
and, for the timings, PyTorch's float32 matmul precision, which decides how the compiled PyTorch
backward's fp32 matmuls run.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

from cs336_systems.attention import flash_record
from cs336_systems.attention.backward import use_backend
from cs336_systems.records import log, make_record, write_json_atomic
from cs336_systems.timing import attempt, free_device_memory, median_ms

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
FUNCTIONS = ("pytorch", "triton", "triton-pytorch-backward")
TIMED = ("triton", "triton-pytorch-backward")
QUANTITIES = ("o", "lse", "dq", "dk", "dv")


def function(name: str):
    from cs336_systems.attention.flash_pytorch import FlashAttentionPytorch
    from cs336_systems.attention.flash_triton import FlashAttentionTriton, FlashAttentionTritonPytorchBackward

    return {"pytorch": FlashAttentionPytorch, "triton": FlashAttentionTriton,
            "triton-pytorch-backward": FlashAttentionTritonPytorchBackward}[name]


def _with_grads(fn, q, k, v, grad_out) -> dict[str, torch.Tensor]:
    """O, L and the three input gradients of one attention function (fn returns (o, lse or None))."""
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    o, lse = fn(q, k, v)
    o.backward(grad_out)
    return {"o": o.detach(), "lse": lse, "dq": q.grad, "dk": k.grad, "dv": v.grad}


def _flash(name: str, is_causal: bool):
    def run(q, k, v):
        o = function(name).apply(q, k, v, is_causal)
        # The one tensor the Function saved besides its inputs and output: the log-sum-exp.
        lse = next(t for t in o.grad_fn.saved_tensors if t.dim() == 2)
        return o, lse.detach()
    return run


def _plain(is_causal: bool):
    from cs336_systems.attention.reference import attention_with_logsumexp, plain_attention

    def run(q, k, v):
        with torch.no_grad():
            _, lse = attention_with_logsumexp(q, k, v, is_causal)
        return plain_attention(q, k, v, is_causal), lse
    return run


def max_errors(name: str, dtype: torch.dtype, is_causal: bool, shape: tuple[int, int, int], device: str) -> dict:
    """Largest |x − x_float64| of O, L, dQ, dK, dV for ours and for plain attention in ``dtype``."""
    batch, seq, d = shape
    q, k, v, grad_out = (torch.randn(batch, seq, d, device=device, dtype=torch.float64) for _ in range(4))
    exact = _with_grads(_plain(is_causal), q, k, v, grad_out)
    ours = _with_grads(_flash(name, is_causal), *(t.to(dtype) for t in (q, k, v, grad_out)))
    plain = _with_grads(_plain(is_causal), *(t.to(dtype) for t in (q, k, v, grad_out)))

    def err(got):
        return {key: float((got[key].double() - exact[key]).abs().max()) for key in QUANTITIES}
    return {"ours": err(ours), "plain": err(plain)}


def what_ran(name: str, dtype: torch.dtype, is_causal: bool, shape: tuple[int, int, int], device: str) -> dict:
    """What Function ``name`` runs on inputs of this shape and dtype (``flash_record``)."""
    if name == "pytorch":
        return flash_record.describe_pytorch()
    q, k, v = (torch.empty(*shape, device=device, dtype=dtype) for _ in range(3))
    return flash_record.describe(q, k, v, is_causal, backward=flash_record.BACKWARD_OF[name])


def backward_times(name: str, dtype: torch.dtype, shape: tuple[int, int, int], device: str) -> dict:
    q, k, v, grad = (torch.randn(*shape, device=device, dtype=dtype, requires_grad=i < 3) for i in range(4))
    apply = function(name).apply
    with torch.no_grad():
        forward = median_ms(lambda: apply(q, k, v, True))
    out = apply(q, k, v, True)
    backward = median_ms(lambda: out.backward(grad, retain_graph=True), grad_to_none=[q, k, v])
    return {"forward_ms": forward, "backward_ms": backward,
            "float32_matmul_precision": torch.get_float32_matmul_precision()}


def run_checks(shape, bench_shape, dtypes, functions, device) -> list[dict]:
    records = []
    for name in functions:
        for dtype in dtypes:
            for is_causal in (False, True):
                params = {"kind": "error", "function": name, "dtype": dtype, "causal": is_causal,
                          "shape": list(shape), "device": device}
                records.append(_attempt("B3", params, lambda: {
                    **max_errors(name, DTYPES[dtype], is_causal, tuple(shape), device),
                    "launch": what_ran(name, DTYPES[dtype], is_causal, tuple(shape), device)}))
        for dtype in dtypes if name in TIMED else ():
            params = {"kind": "time", "function": name, "dtype": dtype, "causal": True, "shape": list(bench_shape),
                      "device": device}
            records.append(_attempt("B4", params, lambda: {
                **backward_times(name, DTYPES[dtype], tuple(bench_shape), device),
                "launch": what_ran(name, DTYPES[dtype], True, tuple(bench_shape), device)}))
    return records


def _attempt(ident: str, params: dict, measure) -> dict:
    """One case's record; a failure is a result, recorded with its message."""
    status, metrics, message = attempt(measure)
    free_device_memory(params["device"])
    if status == "ok":
        shown = {key: value for key, value in metrics.items() if key != "launch"}
        log(f"{ident} {params['kind']} {params['function']} {params['dtype']} causal={params['causal']}: {shown}")
    else:
        log(f"{ident} {params['kind']} {params['function']} {params['dtype']}: {status}")
    return make_record(ident, params, status, metrics, reason=message)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.attention.check", description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", type=int, nargs=3, default=[2, 1000, 64], metavar=("BATCH", "SEQ", "D"),
                   help="shape of q, k, v for the error checks")
    p.add_argument("--bench-shape", type=int, nargs=3, default=[1, 8192, 64], metavar=("BATCH", "SEQ", "D"),
                   help="shape for the forward / backward timings")
    p.add_argument("--dtypes", nargs="+", choices=sorted(DTYPES), default=["fp32", "bf16"])
    p.add_argument("--functions", nargs="+", choices=FUNCTIONS, default=list(FUNCTIONS))
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--backend", choices=("inductor", "aot_eager"), default="inductor",
                   help="torch.compile back end of the PyTorch backward (aot_eager: traced, no code built)")
    p.add_argument("--out", required=True, help="where the JSON list of records goes")
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: CUDA is not available on this machine")
    if min(args.shape + args.bench_shape) < 1:
        p.error("shapes must be positive")
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")    # before the kernels are first imported
    use_backend(args.backend)
    records = run_checks(args.shape, args.bench_shape, args.dtypes, args.functions, args.device)
    for record in records:
        record["params"]["compile_backend"] = args.backend
    write_json_atomic(args.out, records)
    log(f"wrote {len(records)} records -> {args.out}")
    return 0 if all(r["status"] != "error" for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
