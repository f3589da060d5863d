"""RoPE forward + backward at E1's attention shape, our kernels against the model's rotation, in turns.

    python lab/e1-rungs/probe_rope.py [--shape 4 1024 32 80] [--rounds 5 --reps 20] > out.json

The input is what the model rotates: the (batch, heads, seq, d) view of a bf16 (batch, seq, heads x d)
projection, positions 0..seq-1. Each entrant's forward rotation, ``--reps`` of them, is captured in a
CUDA graph (so the host's launches do not count); each round replays every entrant's graph once
(CUDA events after a synchronisation), in rotating order:

    ours          training_step.triton_rope as the rung runs it (whole rows, pairs split in registers)
    ours-strided  the kernel it replaced, which loaded the even and the odd columns apart (stride 2)
    compiled      torch.compile of the model's RotaryPositionalEmbedding (what the rungs below run)
    eager         the model's RotaryPositionalEmbedding

The backward is the same kernel rotating the other way. Prints one JSON object: per entrant every
round's us per rotation, its median, the bytes it must move and the bandwidth that makes.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch
import triton
import triton.language as tl
from cs336_basics.model import RotaryPositionalEmbedding

from cs336_systems.training_step import triton_rope
from cs336_systems.training_step.triton_rounding import rounded


@triton.jit
def _strided_kernel(x_ptr, y_ptr, pos_ptr, cos_ptr, sin_ptr, heads, n, half, sx_b, sx_h, sx_n, sx_d, sy_b, sy_h, sy_n,
                    sy_d, BLOCK_N: tl.constexpr, BLOCK_HALF: tl.constexpr):
    entry = tl.program_id(0)
    batch, head = (entry // heads).to(tl.int64), (entry % heads).to(tl.int64)
    rows = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    pairs = tl.arange(0, BLOCK_HALF)
    inside = (rows < n)[:, None] & (pairs < half)[None, :]
    position = tl.load(pos_ptr + rows, mask=rows < n, other=0).to(tl.int64)
    table = position[:, None] * half + pairs[None, :]
    cos = tl.load(cos_ptr + table, mask=inside, other=1.0)
    sin = tl.load(sin_ptr + table, mask=inside, other=0.0)
    x = x_ptr + batch * sx_b + head * sx_h + rows.to(tl.int64)[:, None] * sx_n + (2 * pairs)[None, :] * sx_d
    even = tl.load(x, mask=inside, other=0.0).to(tl.float32)
    odd = tl.load(x + sx_d, mask=inside, other=0.0).to(tl.float32)
    y = y_ptr + batch * sy_b + head * sy_h + rows.to(tl.int64)[:, None] * sy_n + (2 * pairs)[None, :] * sy_d
    tl.store(y, rounded(even * cos - odd * sin, y_ptr.dtype.element_ty), mask=inside)
    tl.store(y + sy_d, rounded(even * sin + odd * cos, y_ptr.dtype.element_ty), mask=inside)


def _strided(x, positions, cos, sin, block_n=32):
    y = torch.empty_like(x)
    batch, heads, n, d = x.shape
    _strided_kernel[(batch * heads, triton.cdiv(n, block_n))](
        x, y, positions, cos, sin, heads, n, d // 2, *x.stride(), *y.stride(), BLOCK_N=block_n,
        BLOCK_HALF=triton.next_power_of_2(d // 2))
    return y


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", type=int, nargs=4, default=[4, 1024, 32, 80], metavar=("BATCH", "SEQ", "HEADS", "D"))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=50, help="rotations a graph replays")
    args = p.parse_args(argv)
    batch, seq, heads, d = args.shape
    g = torch.Generator(device="cuda").manual_seed(0)
    projection = torch.randn(batch, seq, heads * d, device="cuda", generator=g, dtype=torch.bfloat16)
    x = projection.unflatten(-1, (heads, d)).transpose(1, 2)
    rotary = RotaryPositionalEmbedding(10000.0, d, seq, device="cuda")
    positions = torch.arange(seq, device="cuda")
    compiled = torch.compile(rotary)
    entrants = {
        "ours": lambda: triton_rope.rope_forward(x, positions, rotary.cos, rotary.sin),
        "ours-strided": lambda: _strided(x, positions, rotary.cos, rotary.sin),
        "compiled": lambda: compiled(x, positions.unsqueeze(0)),
        "eager": lambda: rotary(x, positions.unsqueeze(0)),
    }
    reference = rotary(x.float(), positions.unsqueeze(0))
    errors, graphs = {}, {}
    for name, rotate in entrants.items():      # compile, check against the model's rotation in fp32, capture
        for _ in range(3):
            y = rotate()
        errors[name] = (y.float() - reference).abs().max().item()
        torch.cuda.synchronize()
        graphs[name] = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graphs[name]):
            for _ in range(args.reps):
                rotate()
    times = {name: [] for name in entrants}
    names = list(entrants)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graphs[name].replay()
            end.record()
            torch.cuda.synchronize()
            times[name].append(1e3 * start.elapsed_time(end) / args.reps)
    moved = 2 * x.numel() * x.element_size()                # read once, written once (tables stay in cache)
    medians = {n: statistics.median(t) for n, t in times.items()}
    json.dump({"shape": args.shape, "device": torch.cuda.get_device_name(), "rounds_us": times, "median_us": medians,
               "bytes": moved, "TB_per_s": {n: moved / (m * 1e-6) / 1e12 for n, m in medians.items()},
               "max_abs_error_vs_fp32": errors}, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
