"""Our kernels with the head dimension padded whole against cut in two column chunks, paired.

    python lab/attention/probe_head_chunks.py [--shape 128 1024 80] [--rounds 5] [--rep-ms 100]

At a head dimension that is not a power of two (the 2.7B model's d = 80), the forward, dK/dV and dQ
kernels either pad it to the next power of two (128: 37.5 % of every product over d is padding) or
cut it into two chunks (64 + 16; ``flash_tiles.head_chunks``). This probe times the forward and the
forward + backward of both, and PyTorch SDPA's cuDNN kernel, on the same bf16 causal inputs, taking
turns in rounds (the order rotating) with ``triton.testing.do_bench`` medians in each turn; it first
checks both of ours against SDPA. Prints one JSON object: per variant every round's ms, the median,
and the paired difference of chunked against padded per round, with the command's arguments and
provenance (``probe._print``). Needs a CUDA GPU.
"""
from __future__ import annotations

import argparse
import statistics
import sys

import torch
from probe import _print


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python lab/attention/probe_head_chunks.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", nargs=3, type=int, default=[128, 1024, 80], metavar=("BATCH", "N", "D"))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--rep-ms", type=float, default=100.0)
    args = p.parse_args(argv)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench

    from cs336_systems.attention import flash_plan
    from cs336_systems.attention import flash_triton as ft
    from cs336_systems.attention.flash_tiles import head_chunks, padded_head_dim

    batch, n, d = args.shape
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, grad = (torch.randn(batch, n, d, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(4))
    tiles = ft.choose_tiles(d, q.dtype)
    layouts = {"padded": lambda width: (padded_head_dim(width), 0), "chunked": head_chunks}

    def ours(layout: str, backward: bool):
        def run():
            flash_plan.head_chunks = layouts[layout]
            out, lse = ft.flash_forward_triton(q, k, v, True, tiles)
            if backward:
                return out, ft.flash_backward_triton(q, k, v, out, grad, lse, True, tiles)
            return out, ()
        return run

    def sdpa(backward: bool):
        qs, ks, vs = (t.view(1, batch, n, d).detach().requires_grad_(backward) for t in (q, k, v))

        def run():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                out = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=True)
            if backward:
                return out, torch.autograd.grad(out, (qs, ks, vs), grad.view(1, batch, n, d))
            return out, ()
        return run

    errors = {}
    ref_out, ref_grads = (x for x in sdpa(True)())
    for layout in layouts:
        out, grads = ours(layout, True)()
        errors[layout] = {name: (got.float().view(-1) - want.float().reshape(-1)).abs().max().item()
                          for name, got, want in zip(("O", "dQ", "dK", "dV"), (out, *grads), (ref_out, *ref_grads))}
    flash_plan.head_chunks = head_chunks
    entrants = {f"{who} {what}": fn for what, backward in (("forward", False), ("forward+backward", True))
                for who, fn in (("padded", ours("padded", backward)), ("chunked", ours("chunked", backward)),
                                ("sdpa-cudnn", sdpa(backward)))}
    names = list(entrants)
    for name in names:                   # warm-up: compile, autotune nothing, settle clocks
        do_bench(entrants[name], warmup=25, rep=25)
    rounds = {name: [] for name in names}
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            rounds[name].append(round(do_bench(entrants[name], warmup=10, rep=args.rep_ms, return_mode="median"), 4))
    flash_plan.head_chunks = head_chunks
    paired = {}
    for what in ("forward", "forward+backward"):
        diffs = [c - p for c, p in zip(rounds[f"chunked {what}"], rounds[f"padded {what}"])]
        median = statistics.median(diffs)
        paired[what] = {"chunked_minus_padded_ms": [round(x, 4) for x in diffs], "median_ms": round(median, 4),
                        "spread_ms": round(max(abs(x - median) for x in diffs), 4)}
    return _print({"shape": args.shape, "dtype": "bf16", "causal": True, "head_chunks": head_chunks(d),
                   "padded_width": padded_head_dim(d), "tiles": tiles.to_json(),
                   "max_abs_error_vs_sdpa_cudnn": errors, "rounds_ms": rounds,
                   "median_ms": {k: statistics.median(v) for k, v in rounds.items()}, "paired": paired}, argv)


if __name__ == "__main__":
    sys.exit(main())
