"""Our AdamW kernel's block size and warps, swept over a model's parameter shapes in turns.

    python lab/e1-rungs/probe_adamw_tiles.py --size 2.7B --rounds 5 --steps 5 > out.json

As the ``bf16-weights`` rung steps: fp32 weights and moments, bf16 gradients read from a bf16 copy
of each matrix, which the kernel writes too (28 bytes a parameter). Each (BLOCK, warps) setting
updates the same tensors; each round times ``--steps`` steps of every setting (CUDA events after a
synchronisation), taking turns in rotating order. Prints one JSON object: per setting every round's
ms per step, its median and the bandwidth it reached.
"""
from __future__ import annotations

import json
import statistics
import sys

import torch

from probe_adamw import BYTES_PER_PARAMETER, arguments, shapes     # this folder's probe: shapes, options

from cs336_systems.models import VOCAB_SIZE, get_size
from cs336_systems.training_step import triton_adamw

SETTINGS = [(block, warps) for block in (1024, 2048, 4096, 8192, 16384) for warps in (4, 8, 16)
            if block // (32 * warps) >= 4]


def main(argv=None) -> int:
    args = arguments(__doc__).parse_args(argv)
    g = torch.Generator(device="cuda").manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, device="cuda", generator=g))
              for s in shapes(get_size(args.size), VOCAB_SIZE)]
    opt = triton_adamw.TritonAdamW(params, lr=1e-3, weight_decay=0.01)
    for q in params:
        if q.dim() == 2:
            copy = torch.nn.Parameter(q.detach().to(torch.bfloat16))
            copy.grad = torch.randn(q.shape, device="cuda", generator=g).to(torch.bfloat16)
            opt.copies[id(q)] = copy
        else:
            q.grad = torch.randn(q.shape, device="cuda", generator=g)
    numel = sum(q.numel() for q in params)

    def step(setting):
        triton_adamw.BLOCK, triton_adamw.NUM_WARPS = setting
        opt.step()

    for setting in SETTINGS:             # compile each
        for _ in range(2):
            step(setting)
    times = {setting: [] for setting in SETTINGS}
    for r in range(args.rounds):
        shift = r % len(SETTINGS)
        for setting in SETTINGS[shift:] + SETTINGS[:shift]:
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(args.steps):
                step(setting)
            end.record()
            torch.cuda.synchronize()
            times[setting].append(round(start.elapsed_time(end) / args.steps, 4))
    bytes_per_step = BYTES_PER_PARAMETER * numel
    out = {f"BLOCK={b} warps={w}": {"ms_per_step": t, "median_ms": statistics.median(t),
                                    "TB_per_s": round(bytes_per_step / statistics.median(t) / 1e9, 3)}
           for (b, w), t in times.items()}
    print(json.dumps({"size": args.size, "parameters": numel, "tensors": len(params), "bytes_per_step": bytes_per_step,
                      "device": torch.cuda.get_device_name(), "triton": __import__("triton").__version__,
                      "settings": out}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
