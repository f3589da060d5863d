"""Where the leaderboard step's time goes, kernel by kernel (a probe for NOTES.md, not a record).

    python lab/attention/probe.py [--shape 16 16384 64] [--rep-ms 300] [--gluon]
    python lab/attention/probe.py --splits [--rep-ms 100]
    python lab/attention/probe.py --backward-splits [--rep-ms 100]

Times each of our kernels alone on the leaderboard inputs (bf16, causal) with their chosen tiles,
and PyTorch SDPA's cuDNN forward and backward beside them, with ``triton.testing.do_bench``
(median). ``--gluon`` adds the Hopper Gluon backward where this GPU and Triton have it, after
checking it against ours. ``--splits`` instead times the batch-1 bf16 forward at B5's lengths
with each number of key splits forced (the plan's launches alone), the automatic choice through
``FlashAttentionTriton``, and SDPA's flash forward, all in one process. ``--backward-splits``
does the same for the batch-1 causal backward: each backward kernel with each number of slices
forced (dK/dV and dQ, each with its combine), the whole backward unsplit and as the rule
chooses, and SDPA flash's backward kernel. Prints one JSON object; NOTES.md quotes it.
"""
from __future__ import annotations

import argparse
import json
import sys

import torch


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python lab/attention/probe.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", nargs=3, type=int, default=[16, 16384, 64])
    p.add_argument("--rep-ms", type=float, default=300.0)
    p.add_argument("--gluon", action="store_true")
    p.add_argument("--splits", action="store_true", help="the split-key forward sweep at batch 1")
    p.add_argument("--backward-splits", action="store_true", help="the split backward sweep at batch 1")
    p.add_argument("--seqs", nargs="+", type=int, default=[1024, 2048, 4096, 8192, 16384])
    p.add_argument("--split-counts", nargs="+", type=int, default=[1, 2, 4, 8, 16])
    p.add_argument("--ds", nargs="+", type=int, default=[16, 32, 64, 128])
    p.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--host", action="store_true", help="host time per call at batch 1 (bf16, d = 64, --seqs[0])")
    args = p.parse_args(argv)
    if args.backward_splits:
        return _print(backward_split_sweep(args.rep_ms, args.ds, args.seqs, args.split_counts, args.dtype), argv)
    if args.splits:
        return _print(split_sweep(args.rep_ms, args.ds, args.seqs, args.split_counts, args.dtype), argv)
    if args.host:
        return _print(host_times(args.seqs[0]), argv)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench

    from cs336_systems.attention import flash_triton as ft

    batch, n, d = args.shape
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, grad = (torch.randn(batch, n, d, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(4))
    bench = lambda fn: round(do_bench(fn, warmup=50, rep=args.rep_ms, return_mode="median"), 4)  # noqa: E731
    tiles = ft.choose_tiles(d, q.dtype)
    out, lse = ft.flash_forward_triton(q, k, v, True, tiles)
    delta = ft.backward_delta(out, grad)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    ms = {
        "forward": bench(lambda: ft.flash_forward_triton(q, k, v, True, tiles)),
        "delta": bench(lambda: ft.backward_delta(out, grad)),
        "dkdv": bench(lambda: ft.launch_dkdv(q, k, v, grad, lse, delta, dk, dv, True, tiles.dkdv)),
        "dq": bench(lambda: ft.launch_dq(q, k, v, grad, lse, delta, dq, True, tiles.dq)),
        "backward": bench(lambda: ft.flash_backward_triton(q, k, v, out, grad, lse, True, tiles)),
    }
    qs, ks, vs = (t[:, None].detach().requires_grad_() for t in (q, k, v))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        with torch.no_grad():
            ms["cudnn_forward"] = bench(lambda: torch.nn.functional.scaled_dot_product_attention(qs, ks, vs,
                                                                                                is_causal=True))
        o = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=True)
        # the gradients cleared before each call: accumulating into .grad would add three sums
        # to every backward that ours, which writes fresh gradients, does not do
        ms["cudnn_backward"] = round(do_bench(lambda: o.backward(grad[:, None], retain_graph=True), warmup=50,
                                              rep=args.rep_ms, return_mode="median", grad_to_none=[qs, ks, vs]), 4)
    result = {"shape": args.shape, "gpu": torch.cuda.get_device_name(), "tiles": tiles.to_json(), "ms": ms}
    if args.gluon:
        import flash_gluon as fg      # beside this file: on the path when it runs as a script

        result["gluon"] = fg.probe(q, k, v, out, grad, lse, delta, (dq, dk, dv), bench)
    return _print(result, argv)


def _print(result: dict, argv) -> int:
    """Print the probe's JSON with what made it: the command's arguments and the records'
    provenance (commit, GPU, versions), so a sweep committed under results/ says where it came from."""
    from cs336_systems.records import provenance

    argv = sys.argv[1:] if argv is None else list(argv)
    print(json.dumps({**result, "argv": argv, "provenance": provenance()}), flush=True)
    return 0


def split_sweep(rep_ms: float, ds=(16, 32, 64, 128), seqs=(1024, 2048, 4096, 8192, 16384),
                splits=(1, 2, 4, 8, 16), dtype: str = "bf16") -> dict:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench

    from cs336_systems.attention import flash_plan as fp
    from cs336_systems.attention.flash_triton import FlashAttentionTriton

    bench = lambda fn: round(do_bench(fn, warmup=25, rep=rep_ms, return_mode="median") * 1e3, 1)  # noqa: E731
    rows = []
    for d in ds:
        for n in seqs:
            dt = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
            q, k, v = (torch.randn(1, n, d, device="cuda", dtype=dt) for _ in range(3))
            row = {"dtype": dtype, "d": d, "n": n, "us": {}}
            want = torch.nn.functional.scaled_dot_product_attention(q[:, None].float(), k[:, None].float(),
                                                                    v[:, None].float(), is_causal=True)[:, 0]
            for s in splits:
                plan = fp._Plan(q, k, v, True, splits=s)
                out, lse = torch.empty(**plan.new_out), torch.empty(**plan.new_lse)
                run = lambda: plan.forward(Q=q, K=k, V=v, O=out, L=lse)  # noqa: E731,B023
                run()
                err = float((out.float() - want.float()).abs().max())
                row["us"][f"split{s}"] = bench(run) if err < 5e-2 else f"wrong ({err:.3g})"
            fp._PLANS.clear()
            rows.append(row)
            with torch.no_grad():
                row["us"]["ours_auto"] = bench(lambda: FlashAttentionTriton.apply(q, k, v, True))  # noqa: B023
                row["auto_splits"] = fp._plan(q, k, v, True).splits
                row["tiles"] = fp._plan(q, k, v, True).tiles.forward.__dict__
                if dtype == "fp32":
                    continue
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    row["us"]["sdpa_flash"] = bench(lambda: torch.nn.functional.scaled_dot_product_attention(  # noqa: B023
                        q[:, None], k[:, None], v[:, None], is_causal=True))
            print(json.dumps(row), file=sys.stderr, flush=True)
    return {"gpu": torch.cuda.get_device_name(), "rows": rows}


def backward_split_sweep(rep_ms: float, ds=(16, 32, 64, 128), seqs=(1024, 2048, 4096, 8192, 16384),
                         splits=(1, 2, 4, 8, 16), dtype: str = "bf16") -> dict:
    """The batch-1 causal backward at each (d, N), in µs (do_bench medians): each kernel alone with
    the same number of slices forced on both (``dkdv_split<S>``: dK/dV with its combine;
    ``dq_split<S>``: dQ with its combine; the plan's launches, no autograd), after checking that
    count's gradients against float32 attention (a wrong count is reported, not timed); the whole
    backward (D, dK/dV, dQ) unsplit and with the rule's slices; SDPA flash's backward kernel (aten's
    op, no autograd), bf16 only. The last three also as CUDA-graph replays (``graph_us``), where no
    host time can enter: our whole backward is five launches, and do_bench's L2 flush hides only
    as much host time as the flush takes."""
    from triton.testing import do_bench, do_bench_cudagraph

    from cs336_systems.attention import flash_plan as fp

    bench = lambda fn: round(do_bench(fn, warmup=25, rep=rep_ms, return_mode="median") * 1e3, 1)  # noqa: E731
    graph = lambda fn: round(do_bench_cudagraph(fn, rep=rep_ms, return_mode="median") * 1e3, 1)  # noqa: E731
    dt = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    rows = []
    for d in ds:
        for n in seqs:
            q, k, v, grad = (torch.randn(1, n, d, device="cuda", dtype=dt) for _ in range(4))
            want = _float32_grads(q, k, v, grad)
            row = {"dtype": dtype, "d": d, "n": n, "us": {}, "graph_us": {}}

            def whole(plan):
                out, lse = torch.empty(**plan.new_out), torch.empty(**plan.new_lse)
                plan.forward(Q=q, K=k, V=v, O=out, L=lse)  # noqa: B023
                return out, lse, lambda: plan.backward(q, k, v, out, grad, lse)  # noqa: B023

            for s in splits:
                plan = fp._Plan(q, k, v, True, split_backward=(s, s))
                out, lse, backward = whole(plan)
                err = max(float((got.float() - ref).abs().max() / ref.abs().max()) for got, ref in zip(backward(), want))
                if err > 5e-2:
                    row["us"][f"split{s}"] = f"wrong ({err:.3g})"
                    continue
                delta_launch, dkdv, dq = plan.backwards[grad.stride()]
                delta = torch.empty(**plan.new_lse)
                delta_launch(O=out, DO=grad, DELTA=delta)
                dq_out, dk_out, dv_out = (torch.empty_like(t) for t in (q, k, v))
                row["us"][f"dkdv_split{s}"] = bench(lambda: dkdv(Q=q, K=k, V=v, DO=grad, L=lse, DELTA=delta,  # noqa: B023
                                                                DK=dk_out, DV=dv_out))  # noqa: B023
                row["us"][f"dq_split{s}"] = bench(lambda: dq(Q=q, K=k, V=v, DO=grad, L=lse, DELTA=delta,  # noqa: B023
                                                            DQ=dq_out))  # noqa: B023
            whole_backwards = {}
            for name, forced in (("ours_unsplit", (1, 1)), ("ours_auto", None)):
                plan = fp._Plan(q, k, v, True, split_backward=forced)
                whole_backwards[name] = whole(plan)[2]
            row["auto_splits"] = list(plan.backward_splits)
            row["tiles"] = {"dkdv": plan.tiles.dkdv.__dict__, "dq": plan.tiles.dq.__dict__}
            if dtype == "bf16":
                whole_backwards["sdpa_flash"] = _sdpa_flash_backward(q, k, v, grad)
            for name, fn in whole_backwards.items():
                for key, timer in (("us", bench), ("graph_us", graph)):
                    row[key][name] = _timed(timer, fn)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    return {"gpu": torch.cuda.get_device_name(), "rows": rows}


def _float32_grads(q, k, v, grad):
    """dQ, dK, dV of causal attention in float32 (PyTorch SDPA's own backward)."""
    q32, k32, v32 = (t.float()[:, None].requires_grad_() for t in (q, k, v))
    torch.nn.functional.scaled_dot_product_attention(q32, k32, v32, is_causal=True).backward(grad.float()[:, None])
    return tuple(t.grad[:, 0] for t in (q32, k32, v32))


def _sdpa_flash_backward(q, k, v, grad):
    """SDPA flash's backward kernel alone, as a function of no arguments: aten's op on its
    forward's saved outputs (no autograd, so no host time of the autograd engine); or the error,
    as text, if this torch's op differs."""
    flash_forward = torch.ops.aten._scaled_dot_product_flash_attention
    flash_backward = torch.ops.aten._scaled_dot_product_flash_attention_backward
    qs, ks, vs, gs = (t[:, None] for t in (q, k, v, grad))
    try:
        out, lse, cum_q, cum_k, max_q, max_k, seed, offset = flash_forward(qs, ks, vs, 0.0, True)[:8]
    except (RuntimeError, TypeError) as error:
        return f"error: {error}"[:200]
    return lambda: flash_backward(gs, qs, ks, vs, out, lse, cum_q, cum_k, max_q, max_k, 0.0, True, seed, offset)


def _timed(timer, fn):
    """``timer(fn)``, or the error as text (an op this torch lacks, a launch a graph cannot capture)."""
    if isinstance(fn, str):
        return fn
    try:
        return timer(fn)
    except (RuntimeError, TypeError) as error:
        return f"error: {error}"[:200]


def host_times(n: int, calls: int = 2000) -> dict:
    """Wall time per call of ours and SDPA flash, forward (no grad) and backward (one retained
    graph), in a loop that synchronises only at its end (at small N the host sets the pace), and
    the functions our backward spends its host time in (cProfile, by own time)."""
    import cProfile
    import io
    import pstats
    import time

    from torch.nn.attention import SDPBackend, sdpa_kernel

    from cs336_systems.attention.flash_triton import FlashAttentionTriton

    q, k, v = (torch.randn(1, n, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    grad = torch.randn_like(q)
    sdpa = lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(  # noqa: E731
        q[:, None], k[:, None], v[:, None], is_causal=True)[:, 0]
    ours = lambda q, k, v: FlashAttentionTriton.apply(q, k, v, True)  # noqa: E731

    def per_call(fn) -> float:
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        return round((time.perf_counter() - start) / calls * 1e6, 1)

    from cs336_systems.attention import flash_plan as fp

    result = {"n": n, "us_per_call": {}}
    variants = (("ours", ours, {}), ("sdpa_flash", sdpa, {}),
                # Triton's own launch (compiled[grid]) instead of flash_plan.direct_launcher
                ("ours_triton_launch", ours, {"direct_launcher": lambda compiled, grid: compiled[grid]}),
                # the backward unsplit (3 launches, not 5 at batch 1, N = 1024)
                ("ours_unsplit", ours, {"backward_splits": lambda *args: (1, 1)}))
    for name, fn, patch in variants:
        saved = {attr: getattr(fp, attr) for attr in patch}
        fp._PLANS.clear()           # plans and their launches are made afresh under the patch
        for attr, value in patch.items():
            setattr(fp, attr, value)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            with torch.no_grad():
                result["us_per_call"][f"{name}_forward"] = per_call(lambda: fn(q, k, v))  # noqa: B023
            out = fn(q, k, v)

            def backward():
                q.grad = k.grad = v.grad = None
                out.backward(grad, retain_graph=True)  # noqa: B023
            result["us_per_call"][f"{name}_backward"] = per_call(backward)
            if name == "ours":
                profile = cProfile.Profile()
                profile.enable()
                for _ in range(500):
                    backward()
                profile.disable()
                text = io.StringIO()
                pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(18)
                result["ours_backward_profile"] = text.getvalue()[-4000:]
        for attr, value in saved.items():
            setattr(fp, attr, value)
    fp._PLANS.clear()
    return result


if __name__ == "__main__":
    sys.exit(main())
