"""Tune the Triton FlashAttention kernels' tiles, warps and stages for one shape; commit the winners.

    python -m cs336_systems.attention.tune --shape 16 16384 64 --dtype bf16 --causal \\
        --out tuning.json --write-config

Each kernel (forward, dK/dV, dQ) is tuned on its own, the others untouched: every candidate launch
is first checked against float32 attention on the same random inputs (a launch that computes
something else is recorded as wrong and never wins), then timed with ``triton.testing.do_bench``
(median). A candidate the GPU cannot host (too much shared memory) is recorded as skipped.
``--write-config`` puts the winners into ``tuned_tiles.py`` under "<dtype>_d<head dim>", which
``flash_triton.choose_tiles`` reads, so runs never re-tune.
"""
from __future__ import annotations

import argparse
import itertools
import pprint
import sys
from pathlib import Path

import torch

from cs336_systems.attention import flash_triton as ft
from cs336_systems.attention.inputs import HEAD_DIMS, HEAD_DIMS_TEXT
from cs336_systems.cli import parse_device
from cs336_systems.records import log, make_record, write_json_atomic

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
KERNELS = ("forward", "dkdv", "dq")
WARPS, STAGES = (4, 8), (2, 3, 4)
# Relative error against float32 attention above which a launch is wrong, per input dtype (bf16
# rounding of P and dS gives about 1e-2 at most here; a wrong launch gives order 1).
TOLERANCE = {"bf16": 5e-2, "fp16": 2e-2, "fp32": 1e-3}


def candidates(kernel: str) -> list[ft.KernelTiles]:
    """Launches to try. Forward and dQ walk keys up to their diagonal (block_q a multiple of
    block_k); dK/dV walks queries from its own (block_k a multiple of block_q)."""
    if kernel == "dkdv":
        shapes = [(q, k) for k in (64, 128) for q in (16, 32, 64) if k % q == 0]
    else:
        shapes = [(q, k) for q in (64, 128) for k in (16, 32, 64, 128) if q % k == 0 and k >= (32 if kernel == "forward" else 16)]
    return [ft.KernelTiles(q, k, w, s) for (q, k), w, s in itertools.product(shapes, WARPS, STAGES)]


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    if not torch.isfinite(got).all():
        return float("inf")
    return float((got.float() - want).norm() / want.norm())


class Problem:
    """Random inputs of one shape, the float32 reference, and each kernel's launch on demand."""

    def __init__(self, shape, dtype: torch.dtype, causal: bool, device: torch.device, seed: int = 0):
        gen = torch.Generator(device=device).manual_seed(seed)
        batch, n, d = shape
        self.q, self.k, self.v, self.grad = (torch.randn(batch, n, d, generator=gen, device=device, dtype=dtype)
                                             for _ in range(4))
        self.causal, self.default = causal, ft.default_tiles(d, dtype)
        ref = [t.detach().float().requires_grad_() for t in (self.q, self.k, self.v)]
        out = torch.nn.functional.scaled_dot_product_attention(*(t.unsqueeze(1) for t in ref), is_causal=causal)
        out = out.squeeze(1)
        out.backward(self.grad.float())
        self.ref = {"o": out.detach(), "dq": ref[0].grad, "dk": ref[1].grad, "dv": ref[2].grad}
        self.out, self.lse = ft.flash_forward_triton(self.q, self.k, self.v, causal, self.default)
        self.delta = ft.backward_delta(self.out, self.grad)
        self.buffers = {name: torch.empty_like(self.q) for name in ("dq", "dk", "dv")}

    def run(self, kernel: str, tiles: ft.KernelTiles):
        """Launch one kernel with ``tiles``; returns a function that launches it again (for timing)
        and the relative error of what it wrote."""
        if kernel == "forward":
            launch = lambda: ft.flash_forward_triton(self.q, self.k, self.v, self.causal,  # noqa: E731
                                                      ft.Tiles(tiles, self.default.dkdv, self.default.dq))
            return launch, {"o": relative_error(launch()[0], self.ref["o"])}
        for buffer in self.buffers.values():
            buffer.fill_(float("nan"))             # poison: an element left unwritten is an error
        if kernel == "dkdv":
            launch = lambda: ft.launch_dkdv(self.q, self.k, self.v, self.grad, self.lse, self.delta,  # noqa: E731
                                            self.buffers["dk"], self.buffers["dv"], self.causal, tiles)
            launch()
            return launch, {n: relative_error(self.buffers[n], self.ref[n]) for n in ("dk", "dv")}
        launch = lambda: ft.launch_dq(self.q, self.k, self.v, self.grad, self.lse, self.delta,  # noqa: E731
                                      self.buffers["dq"], self.causal, tiles)
        launch()
        return launch, {"dq": relative_error(self.buffers["dq"], self.ref["dq"])}


def tune_kernel(problem: Problem, kernel: str, tolerance: float, warmup_ms: float, rep_ms: float) -> list[dict]:
    from triton.testing import do_bench

    rows = []
    for i, tiles in enumerate(candidates(kernel)):
        row = {"kernel": kernel, **{k: v for k, v in vars(tiles).items()}}
        try:
            launch, errors = problem.run(kernel, tiles)
            row["errors"] = errors
            if max(errors.values()) > tolerance:
                row["status"] = "wrong"
            else:
                row["ms"] = do_bench(launch, warmup=warmup_ms, rep=rep_ms, return_mode="median")
                row["status"] = "ok"
        except Exception as exc:  # noqa: BLE001 - a launch the GPU cannot host is a result
            if "OutOfResources" not in type(exc).__name__ and "out of resource" not in str(exc).lower():
                raise
            row.update(status="skipped", reason=f"{type(exc).__name__}: {str(exc)[:200]}")
        log(f"  {kernel} {i + 1}: {tiles} -> {row['status']} {row.get('ms', '')}")
        rows.append(row)
    return rows


def best(rows: list[dict]) -> dict:
    ok = [r for r in rows if r["status"] == "ok"]
    if not ok:
        raise RuntimeError(f"no {rows[0]['kernel']} launch was both right and runnable")
    return min(ok, key=lambda r: r["ms"])


def write_config(key: str, tiles: ft.Tiles, measured: dict, path: Path = Path(ft.__file__).with_name("tuned_tiles.py")):
    """Add or replace ``key`` in the generated module, keeping the other entries."""
    namespace: dict = {}
    if path.exists():
        exec(path.read_text(), namespace)  # noqa: S102 - our own generated file
    table = dict(namespace.get("TUNED", {}))
    table[key] = {"tiles": tiles.to_json(), "measured": measured}
    header = '"""Tile settings chosen by ``python -m cs336_systems.attention.tune`` (generated; do not edit).\n\n' \
             'Keyed "<dtype>_d<head dim>"; shapes without an entry use ``flash_triton.default_tiles``.\n"""\n'
    path.write_text(header + "TUNED: dict = " + pprint.pformat(table, width=100, sort_dicts=True) + "\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.attention.tune", description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", nargs=3, type=int, default=[16, 16384, 64], metavar=("BATCH", "SEQ", "D"))
    p.add_argument("--dtype", choices=list(DTYPES), default="bf16")
    p.add_argument("--causal", action="store_true")
    p.add_argument("--device", default="cuda")
    p.add_argument("--warmup-ms", type=float, default=25.0)
    p.add_argument("--rep-ms", type=float, default=200.0)
    p.add_argument("--out", required=True, help="the JSON record of every candidate")
    p.add_argument("--write-config", action="store_true", help="write the winners into tuned_tiles.py")
    args = p.parse_args(argv)
    if min(args.shape) < 1 or args.shape[2] not in HEAD_DIMS:
        p.error(f"--shape: positive sizes, and a head dimension our kernels take ({HEAD_DIMS_TEXT})")
    device = parse_device(p, args.device)
    if device.type != "cuda":
        p.error("--device: tuning times GPU kernels; give a CUDA device")
    dtype, tolerance = DTYPES[args.dtype], TOLERANCE[args.dtype]
    problem = Problem(args.shape, dtype, args.causal, device)
    rows, winners = [], {}
    for kernel in KERNELS:
        log(f"tuning {kernel} ({len(candidates(kernel))} launches)")
        kernel_rows = tune_kernel(problem, kernel, tolerance, args.warmup_ms, args.rep_ms)
        rows += kernel_rows
        winners[kernel] = best(kernel_rows)
    default = {kernel: next((r for r in rows if r["kernel"] == kernel and r["status"] == "ok"
                             and all(r[f] == v for f, v in vars(getattr(problem.default, kernel)).items())), None)
               for kernel in ("forward", "dkdv", "dq")}
    chosen = lambda k: ft.KernelTiles(*(winners[k][f] for f in ("block_q", "block_k", "num_warps", "num_stages")))  # noqa: E731
    tiles = ft.Tiles(chosen("forward"), chosen("dkdv"), chosen("dq"))
    key = f"{args.dtype}_d{args.shape[2]}"
    measured = {"shape": args.shape, "causal": args.causal, "gpu": torch.cuda.get_device_name(device),
                "ms": {k: round(winners[k]["ms"], 4) for k in winners},
                "default_ms": {k: (round(r["ms"], 4) if r else None) for k, r in default.items()}}
    params = {"shape": args.shape, "dtype": args.dtype, "causal": args.causal, "warmup_ms": args.warmup_ms,
              "rep_ms": args.rep_ms, "tolerance": tolerance, "default_tiles": problem.default.to_json()}
    write_json_atomic(args.out, make_record("B5-tuning", params, "ok",
                                            {"candidates": rows, "winners": tiles.to_json(), "measured": measured}))
    if args.write_config:
        write_config(key, tiles, measured)
    for k in KERNELS:
        was = f"; default {default[k]['ms']:.3f} ms" if default.get(k) else ""
        log(f"{k}: best {winners[k]['ms']:.3f} ms {chosen(k)}{was}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
