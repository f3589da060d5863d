"""The AdamW step alone over a model's parameter shapes: PyTorch's fused kernel against ours, in turns.

    python lab/e1-rungs/probe_adamw.py --size 2.7B --rounds 5 --steps 5 > out.json

Random fp32 weights, gradients and moments of every parameter of ``--size`` (no model, no
activations); both optimizers update their own copy. Each round times ``--steps`` steps of each
(CUDA events around the steps, after a synchronisation), taking turns in rotating order; prints one
JSON object: per optimizer the ms per step of every round, and the bandwidth floor.
"""
from __future__ import annotations

import argparse
import json
import sys

import torch

from cs336_systems.models import MODEL_SIZES, VOCAB_SIZE, get_size
from cs336_systems.training_step.triton_adamw import TritonAdamW

BYTES_PER_PARAMETER = 28      # fp32 weight, gradient, two moments read; weight and moments written


def shapes(size, vocab: int) -> list[tuple[int, ...]]:
    d, f, layers = size.d_model, size.d_ff, size.num_layers
    per_layer = [(d, d)] * 4 + [(d,), (f, d), (d, f), (f, d), (d,)]
    return [(vocab, d)] + per_layer * layers + [(d,), (vocab, d)]


def arguments(doc: str) -> argparse.ArgumentParser:
    """The options both AdamW probes of this folder take: the model size, rounds and steps a round."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--size", choices=list(MODEL_SIZES), default="2.7B")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=5)
    return p


def main(argv=None) -> int:
    args = arguments(__doc__).parse_args(argv)
    g = torch.Generator(device="cuda").manual_seed(0)
    made = {}
    for name, make in (("torch-fused", lambda ps: torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.01, fused=True)),
                       ("triton", lambda ps: TritonAdamW(ps, lr=1e-3, weight_decay=0.01))):
        ps = [torch.nn.Parameter(torch.randn(s, device="cuda", generator=g)) for s in shapes(get_size(args.size), VOCAB_SIZE)]
        for q in ps:
            q.grad = torch.randn(q.shape, device="cuda", generator=g)
        made[name] = make(ps)
        for _ in range(3):
            made[name].step()
    numel = sum(q.numel() for q in made["triton"].param_groups[0]["params"])
    times = {n: [] for n in made}
    names = list(made)
    for r in range(args.rounds):
        for n in names[r % 2:] + names[:r % 2]:
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(args.steps):
                made[n].step()
            end.record()
            torch.cuda.synchronize()
            times[n].append(start.elapsed_time(end) / args.steps)
    print(json.dumps({"size": args.size, "parameters": numel, "device": torch.cuda.get_device_name(),
                      "bytes_per_step": BYTES_PER_PARAMETER * numel, "ms_per_step": times,
                      "tensors": len(made["triton"].param_groups[0]["params"])}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
