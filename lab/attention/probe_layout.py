"""Does the layout of q, k and v set what attention costs in E1's step? Times forward + backward of
our FlashAttention and SDPA's cuDNN kernel at E1's attention shape (2.7B: batch 4, 32 heads, context
1024, d 80, bf16, causal) on two layouts: contiguous (B, H, N, d), and the model's, a (B, H, N, d)
view of a (B, N, H·d) projection (``unflatten(-1, (H, d)).transpose(1, 2)``, as cs336_basics'
attention passes it). Prints one JSON object; needs a CUDA GPU.

    python lab/attention/probe_layout.py [--batch 4 --heads 32 --seq 1024 --d 80 --rep-ms 100]
"""
from __future__ import annotations

import argparse
import json
import sys

import torch
import triton.testing
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention

from cs336_systems.attention.flash_backend import flash_attention
from cs336_systems.records import provenance


def inputs(layout: str, b: int, h: int, n: int, d: int, gen: torch.Generator):
    def one():
        if layout == "contiguous":
            t = torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        else:
            t = torch.randn(b, n, h * d, device="cuda", dtype=torch.bfloat16, generator=gen).unflatten(-1, (h, d)).transpose(1, 2)
        return t.requires_grad_()
    q, k, v = one(), one(), one()
    grad = torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    if layout != "contiguous":      # the gradient arrives as the output's transpose back, the model's way
        grad = grad.transpose(1, 2).contiguous().transpose(1, 2)
    return q, k, v, grad


def cudnn(q, k, v):
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return scaled_dot_product_attention(q, k, v, is_causal=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--d", type=int, default=80)
    p.add_argument("--rep-ms", type=float, default=100.0)
    args = p.parse_args(argv)
    gen = torch.Generator(device="cuda").manual_seed(0)
    out = {"shape": [args.batch, args.heads, args.seq, args.d], "ms": {}}
    for layout in ("contiguous", "model"):
        q, k, v, grad = inputs(layout, args.batch, args.heads, args.seq, args.d, gen)
        for name, fn in (("ours", lambda: flash_attention(q, k, v, True)), ("cudnn", lambda: cudnn(q, k, v))):
            def forward_backward():
                fn().backward(grad)
            for g in (q, k, v):
                g.grad = None
            out["ms"][f"{layout} {name} forward"] = triton.testing.do_bench(fn, rep=args.rep_ms)
            out["ms"][f"{layout} {name} forward+backward"] = triton.testing.do_bench(
                forward_backward, rep=args.rep_ms, grad_to_none=[q, k, v])
    out["argv"] = sys.argv[1:] if argv is None else argv
    out["provenance"] = provenance()
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
