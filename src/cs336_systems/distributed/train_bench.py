"""C3, C4, C6, C8, C11, C12: one data-parallel training variant on N ranks, each step split into
forward, backward, waiting for gradient communication and the optimizer step; memory at the points
C11 asks about; optionally a trace of one step.

    python -m cs336_systems.distributed.train_bench --variant bucketed-100 --size xl --context 512 \
        --global-batch 8 --world-size 2 --backend nccl --precision bf16 --out record.json \
        [--trace trace.json.gz] [--accuracy-steps 20]

``--precision bf16`` runs each rank's forward pass and loss under ``torch.autocast(bfloat16)``, as
A1's bf16 (backward follows the dtypes autocast chose); weights, gradients and optimizer state stay
fp32, so the variants communicate fp32 gradients unless they cast them (bucketed-bf16-<MB>).

A variant that communicates in bf16 also measures what that costs (``--accuracy-steps N``): from
the same initial weights and batches, N steps of it and N of its fp32-communicating twin (the same
buckets, ``variants.fp32_twin``); the record's ``accuracy`` compares the weights they end with.

The variants, the deliverable each belongs to, and the ``wrap_*`` function below that builds each
are listed in ``cs336_systems.distributed.variants``.

How a step is split. On a GPU the phases are CUDA events recorded on the compute stream: forward,
backward, then ``finish_gradient_synchronization`` — the compute stream waits there for the
communication still in flight, so that interval is the communication *not* hidden behind backward —
then the optimizer. Nothing synchronizes the device inside a step (a device-wide synchronize would
also wait for the communication stream and fold it into "backward"). PyTorch's DDP does its waiting
inside backward, so its "waiting" phase is ~0 and its backward includes it. On the CPU (Gloo) the
phases are wall-clock intervals.

Memory (GPU only): bytes allocated after the model is built, just before and just after the last
step's optimizer step, with parameters, gradients and optimizer state counted from the tensors
themselves, and the peak above the step's starting point during forward + backward (activations and
temporaries).
"""
from __future__ import annotations

import argparse
import contextlib
import re
import statistics
import sys
import timeit

import torch

from cs336_systems.distributed import traces, variants
from cs336_systems.distributed.launcher import device_for, run_on_ranks
from cs336_systems.records import log, make_record, write_json_atomic
from cs336_systems.timing import failure_status
from cs336_systems.workload import PRECISIONS as AUTOCAST_DTYPES

COMMUNICATION = re.compile(r"nccl|all_?reduce|allgather|all_gather|reduce_?scatter|broadcast", re.IGNORECASE)
PHASES = ("forward_ms", "backward_ms", "comm_wait_ms", "optimizer_ms", "step_ms")


class _TorchDDP(torch.nn.parallel.DistributedDataParallel):
    """PyTorch's DDP behind our wrappers' interface: its all-reduces finish inside backward."""

    def finish_gradient_synchronization(self) -> None:
        pass


# The builders the variants table names: (model, device, variant name) -> the wrapped model.

class _NoCommunication(torch.nn.Module):
    """The model as it is, behind our wrappers' interface: the no-communication baseline."""

    def __init__(self, module: torch.nn.Module):
        super().__init__()
        self.module = module

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def finish_gradient_synchronization(self) -> None:
        pass


def wrap_none(model, device, name):
    return _NoCommunication(model)


def wrap_torch_ddp(model, device, name):
    return _TorchDDP(model, device_ids=[device.index] if device.type == "cuda" else None)


def wrap_naive(model, device, name):
    from cs336_systems.distributed.ddp import NaiveDDP
    return NaiveDDP(model)


def wrap_flat(model, device, name):
    from cs336_systems.distributed.ddp import FlatDDP
    return FlatDDP(model)


def wrap_overlap(model, device, name):
    from cs336_systems.distributed.ddp import DDPIndividualParameters
    return DDPIndividualParameters(model)


FIRST_BUCKET_MB = 1.0      # PyTorch's DDP starts with a 1 MiB bucket for the same reason


def bucketed_options(name: str) -> dict:
    """DDPBucketed's keyword arguments for each bucketed family of the registry."""
    ready = {"first_bucket_mb": FIRST_BUCKET_MB, "ready_order": True}
    return {"bucketed-<MB>": {},
            "bucketed-view-<MB>": {"gradient_as_bucket_view": True},
            "bucketed-ready-<MB>": {"gradient_as_bucket_view": True, **ready},
            "bucketed-bf16-<MB>": {"communication_dtype": torch.bfloat16, **ready}}[variants.lookup(name).name]


def wrap_bucketed(model, device, name):
    from cs336_systems.distributed.ddp import DDPBucketed
    return DDPBucketed(model, bucket_size_mb=variants.bucket_size_mb(name), **bucketed_options(name))


def wrap_fsdp(model, device, name):
    from cs336_systems.distributed.fsdp import FSDP
    return FSDP(model, compute_dtype=torch.bfloat16 if name.endswith("-bf16") else None)


def wrap(variant: str, model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    return variants.builder(variant)(model, device, variant)


def make_optimizer(variant: str, params):
    from cs336_basics.optimizer import AdamW

    from cs336_systems.workload import optimizers_without_compiler

    optimizers_without_compiler()       # ~1 s less start-up per rank: nothing here is compiled
    if variants.lookup(variant).sharded_optimizer:
        from cs336_systems.distributed.sharded_optimizer import ShardedOptimizer
        return ShardedOptimizer(params, AdamW, lr=1e-4)
    return AdamW(params, lr=1e-4)


def tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def optimizer_state_bytes(optimizer) -> int:
    inner = getattr(optimizer, "optimizer", optimizer)      # ShardedOptimizer keeps its shard's state inside
    return sum(tensor_bytes(state.values()) for state in inner.state.values())


def memory_by_kind(model: torch.nn.Module, optimizer) -> dict[str, int]:
    """Bytes of this rank's parameters, gradients and optimizer state, counted from the tensors."""
    return {"parameters": tensor_bytes(model.parameters()),
            "gradients": tensor_bytes(p.grad for p in model.parameters()),
            "optimizer_state": optimizer_state_bytes(optimizer)}


class StepClock:
    """Marks between the phases of a step: CUDA events on the compute stream, or wall-clock times."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.marks = []

    def mark(self) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(timeit.default_timer())

    def between_ms(self, pairs: list[tuple[int, int]]) -> list[float]:
        """Milliseconds between the given pairs of marks (by index)."""
        if self.cuda:
            self.marks[-1].synchronize()
            return [self.marks[a].elapsed_time(self.marks[b]) for a, b in pairs]
        return [(self.marks[b] - self.marks[a]) * 1e3 for a, b in pairs]


def _train(rank: int, world_size: int, backend: str, cfg: dict) -> dict:
    from cs336_basics.nn_utils import cross_entropy

    from cs336_systems.models import build_model, get_size, random_batch

    device = device_for(rank, backend)
    torch.manual_seed(0)
    model = build_model(get_size(cfg["size"]), cfg["context"], device=device)
    cuda = device.type == "cuda"
    memory = {}
    if cuda:
        torch.cuda.synchronize(device)
        memory["after_init"] = torch.cuda.memory_allocated(device)
    wrapped = wrap(cfg["variant"], model, device)
    optimizer = make_optimizer(cfg["variant"], wrapped.parameters())
    torch.manual_seed(1 + rank)                         # each rank its own share of the global batch
    x, y = random_batch(cfg["per_rank_batch"], cfg["context"], device=device)
    autocast = autocast_for(cfg["precision"], device)

    steps = []
    for step in range(cfg["warmup"] + cfg["steps"]):
        last = step == cfg["warmup"] + cfg["steps"] - 1
        start_step(wrapped, optimizer)
        if cuda and last:
            torch.cuda.synchronize(device)
            start_bytes = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
        clock = StepClock(device)
        clock.mark()
        with autocast:
            loss = cross_entropy(wrapped(x), y)
        clock.mark()
        loss.backward()
        clock.mark()
        wrapped.finish_gradient_synchronization()
        clock.mark()
        if cuda and last:
            torch.cuda.synchronize(device)
            memory["forward_backward_peak_above_start"] = torch.cuda.max_memory_allocated(device) - start_bytes
            memory["before_step"] = torch.cuda.memory_allocated(device)
            memory["breakdown_before_step"] = memory_by_kind(wrapped, optimizer)
        clock.mark()      # the optimizer's interval starts here, after any memory reading above
        optimizer.step()
        clock.mark()
        if cuda and last:
            torch.cuda.synchronize(device)
            memory["after_step"] = torch.cuda.memory_allocated(device)
            memory["breakdown_after_step"] = memory_by_kind(wrapped, optimizer)
            memory["peak"] = torch.cuda.max_memory_allocated(device)
        if step >= cfg["warmup"]:
            forward, backward, wait, opt = clock.between_ms([(0, 1), (1, 2), (2, 3), (4, 5)])
            steps.append({"forward_ms": forward, "backward_ms": backward, "comm_wait_ms": wait,
                          "optimizer_ms": opt, "step_ms": forward + backward + wait + opt})
    trace = None
    if cfg.get("trace"):
        # Every rank steps (its collectives need all of them); rank 0's intervals are kept.
        trace = _trace_one_step(wrapped, optimizer, x, y, device, autocast)
        trace = trace if rank == 0 else None
    out = {"steps": steps, "memory": memory, "trace": trace,
           "buckets": len(wrapped.buckets) if hasattr(wrapped, "buckets") else None,
           "rebuilt_in_ready_order": getattr(wrapped, "rebuilt", None),
           "parameter_count": sum(p.numel() for p in model.parameters())}
    twin = variants.fp32_twin(cfg["variant"])
    if twin and cfg.get("accuracy_steps"):
        del wrapped, optimizer, model, loss             # room for the two runs on the GPU
        if cuda:
            torch.cuda.empty_cache()
        out["accuracy"] = accuracy_against_twin(rank, cfg, twin, device)
    return out


def autocast_for(precision: str, device: torch.device):
    """bf16: autocast around forward and loss (weights, gradients, optimizer state stay fp32)."""
    dtype = AUTOCAST_DTYPES[precision]
    return torch.autocast(device.type, dtype=dtype) if dtype else contextlib.nullcontext()


def start_step(wrapped, optimizer) -> None:
    """Gradients cleared, then the wrapper told a step begins, in that order: a wrapper whose buckets
    are the gradients' storage points them back at the buckets there, and a ``zero_grad`` after it
    would undo that (set them to None) and cost a copy into the buckets each step."""
    optimizer.zero_grad(set_to_none=True)
    if hasattr(wrapped, "on_train_batch_start"):
        wrapped.on_train_batch_start()


def _train_from_scratch(rank: int, cfg: dict, name: str, device: torch.device, keep_initial: bool = False) -> dict:
    """``accuracy_steps`` steps of variant ``name`` from the seed-0 model on batches that depend only
    on the step and the rank; rank 0 keeps the final weights (and, asked, the initial ones) on the
    CPU, every rank its losses."""
    from cs336_basics.nn_utils import cross_entropy

    from cs336_systems.models import build_model, get_size, random_batch

    torch.manual_seed(0)
    model = build_model(get_size(cfg["size"]), cfg["context"], device=device)
    keep = rank == 0
    initial = {n: p.detach().to("cpu", copy=True) for n, p in model.named_parameters()} if keep and keep_initial else None
    wrapped = wrap(name, model, device)
    optimizer = make_optimizer(name, wrapped.parameters())
    autocast = autocast_for(cfg["precision"], device)
    losses = []
    for step in range(cfg["accuracy_steps"]):
        torch.manual_seed(10_000 + 100 * step + rank)
        x, y = random_batch(cfg["per_rank_batch"], cfg["context"], device=device)
        start_step(wrapped, optimizer)
        with autocast:
            loss = cross_entropy(wrapped(x), y)
        loss.backward()
        wrapped.finish_gradient_synchronization()
        optimizer.step()
        losses.append(loss.item())
    final = {n: p.detach().to("cpu", copy=True) for n, p in model.named_parameters()} if keep else None
    del wrapped, optimizer, model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {"final": final, "initial": initial, "losses": losses}


def accuracy_against_twin(rank: int, cfg: dict, twin: str, device: torch.device) -> dict | None:
    """How far the weights of ``cfg["variant"]`` (bf16 communication) end from its fp32-communicating
    twin's after the same steps: the norm of the difference against the norm of the weights and
    against the norm of what training changed (the reference's final minus initial weights), the
    largest element's difference, and both runs' losses (rank 0's batch). Rank 0 only (None else)."""
    ours = _train_from_scratch(rank, cfg, cfg["variant"], device)
    reference = _train_from_scratch(rank, cfg, twin, device, keep_initial=True)
    if rank != 0:
        return None
    diff_sq = ref_sq = update_sq = max_abs = 0.0
    for name, w in ours["final"].items():        # on the device, one parameter at a time, in float64
        ref = reference["final"][name].to(device, torch.float64)
        diff = w.to(device, torch.float64) - ref
        diff_sq += float(diff.square().sum())
        ref_sq += float(ref.square().sum())
        update_sq += float((ref - reference["initial"][name].to(device, torch.float64)).square().sum())
        max_abs = max(max_abs, float(diff.abs().max()))
    return {"reference": twin, "steps": cfg["accuracy_steps"],
            "weights_rel_diff": (diff_sq / ref_sq) ** 0.5 if ref_sq else None,
            "diff_over_update": (diff_sq / update_sq) ** 0.5 if update_sq else None,
            "max_abs_diff": max_abs, "losses": ours["losses"], "reference_losses": reference["losses"]}


def _trace_one_step(wrapped, optimizer, x, y, device, autocast) -> list[dict]:
    """Kernel (GPU) or operator (CPU) intervals of one training step, as compute / communication
    lanes: enough to draw whether communication overlaps backward."""
    from cs336_basics.nn_utils import cross_entropy
    from torch.profiler import ProfilerActivity, profile

    if device.type == "cuda":
        profiler = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
    else:
        # The same Kineto profiler that torch.profiler.profile drives, without its wrapper, whose
        # start asks hasattr(torch, "_inductor") and so imports Inductor and Dynamo (~1.5 s a rank).
        profiler = torch.autograd.profiler.profile(use_kineto=True)
    with profiler as prof:
        start_step(wrapped, optimizer)
        with torch.profiler.record_function("phase:forward"), autocast:
            loss = cross_entropy(wrapped(x), y)
        with torch.profiler.record_function("phase:backward"):
            loss.backward()
        with torch.profiler.record_function("phase:wait"):
            wrapped.finish_gradient_synchronization()
        with torch.profiler.record_function("phase:optimizer"):
            optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    events = prof.events() if device.type == "cuda" else prof.function_events
    return trace_intervals(events, gpu=device.type == "cuda")


def trace_intervals(events, gpu: bool) -> list[dict]:
    """Reduce profiler events to {lane, name, start_us, end_us}: GPU kernels split by whether they are
    collectives, or on the CPU the matrix products and the collectives; plus the phase markers."""
    out = []
    for e in events:
        name = e.name
        start, end = e.time_range.start, e.time_range.end
        on_gpu = getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA
        if name.startswith("phase:"):
            # The CPU's marker is the phase lane. Its GPU-side copy spans the phase on the device's
            # timeline: not a kernel, and as "compute" it would hide every wait inside it.
            if not on_gpu:
                out.append({"lane": "phase", "name": name[6:], "start_us": start, "end_us": end})
        elif gpu and on_gpu:
            out.append({"lane": "communication" if COMMUNICATION.search(name) else "compute", "name": name[:60],
                        "start_us": start, "end_us": end})
        elif not gpu and COMMUNICATION.search(name):
            out.append({"lane": "communication", "name": name[:60], "start_us": start, "end_us": end})
        elif not gpu and name in ("aten::mm", "aten::addmm", "aten::bmm"):
            out.append({"lane": "compute", "name": name, "start_us": start, "end_us": end})
    t0 = min((i["start_us"] for i in out), default=0)
    return [dict(i, start_us=i["start_us"] - t0, end_us=i["end_us"] - t0) for i in out]


def summarize_ranks(per_rank: list[dict]) -> dict:
    """Medians over steps of rank 0's phases; the step time of a step is its slowest rank's."""
    steps0 = per_rank[0]["steps"]
    metrics = {phase: statistics.median(s[phase] for s in steps0) for phase in PHASES}
    slowest = [max(r["steps"][i]["step_ms"] for r in per_rank) for i in range(len(steps0))]
    metrics["step_ms_slowest_rank"] = statistics.median(slowest)
    metrics["comm_share"] = metrics["comm_wait_ms"] / metrics["step_ms"]
    metrics["steps"] = [{k: round(v, 4) for k, v in s.items()} for s in steps0]
    metrics["memory_per_rank"] = [r["memory"] for r in per_rank]
    metrics["parameter_count"] = per_rank[0]["parameter_count"]
    metrics["buckets"] = per_rank[0]["buckets"]
    if per_rank[0]["rebuilt_in_ready_order"] is not None:
        metrics["rebuilt_in_ready_order"] = per_rank[0]["rebuilt_in_ready_order"]
    if "accuracy" in per_rank[0]:
        metrics["accuracy"] = per_rank[0]["accuracy"]
    return metrics


def run(cfg: dict, world_size: int, backend: str, timeout_s: float) -> tuple[dict, list | None]:
    params = {k: cfg[k] for k in ("variant", "precision", "size", "context", "global_batch", "warmup", "steps")} | {
        "world_size": world_size, "backend": backend}
    if variants.fp32_twin(cfg["variant"]) and cfg.get("accuracy_steps"):
        params["accuracy_steps"] = cfg["accuracy_steps"]
    ident = variants.lookup(cfg["variant"]).deliverable
    # The baseline runs the same step on one rank with one rank's share of the batch.
    ranks = 1 if variants.lookup(cfg["variant"]).single_rank else world_size
    available = torch.cuda.device_count() if backend == "nccl" else ranks
    if available < ranks:
        reason = f"{ranks} ranks need {ranks} GPUs; this machine has {available}"
        return make_record(ident, params, "skipped", reason=reason), None
    if cfg["global_batch"] % world_size:
        raise SystemExit(f"train_bench: global batch {cfg['global_batch']} does not split over {world_size} ranks")
    cfg = cfg | {"per_rank_batch": cfg["global_batch"] // world_size}
    try:
        per_rank = run_on_ranks(_train, ranks, args=(backend, cfg), backend=backend, timeout_s=timeout_s)
    except Exception as exc:  # noqa: BLE001 - an OOM on a rank is a result; so is any other failure
        status, message = failure_status(exc)
        log(f"{ident} {cfg['variant']}: {status}: {message}")
        return make_record(ident, params, status, reason=message), None
    metrics = summarize_ranks(per_rank)
    log(f"{ident} {cfg['variant']} {cfg['precision']}: step {metrics['step_ms']:.2f} ms (forward {metrics['forward_ms']:.2f}, backward "
        f"{metrics['backward_ms']:.2f}, waiting {metrics['comm_wait_ms']:.2f}, optimizer {metrics['optimizer_ms']:.2f})")
    return make_record(ident, params, "ok", metrics), per_rank[0]["trace"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.distributed.train_bench",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--variant", required=True, help=", ".join(variants.names()))
    p.add_argument("--size", required=True)
    p.add_argument("--context", type=int, required=True)
    p.add_argument("--global-batch", type=int, required=True)
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--backend", choices=["gloo", "nccl"], required=True)
    p.add_argument("--precision", choices=list(variants.PRECISIONS), default=variants.DEFAULT_PRECISION,
                   help="fp32, or bf16 autocast around forward and loss (fp32 weights, gradients, optimizer state)")
    p.add_argument("--accuracy-steps", type=int, default=0,
                   help="for a variant that communicates in bf16: train this many steps beside its fp32-"
                        "communicating twin and record how far the weights end apart (0: no)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--timeout-s", type=float, default=540)
    p.add_argument("--out", required=True)
    p.add_argument("--trace", help="also write one step's compute / communication intervals here "
                                   "(a gzipped Chrome trace, .json.gz)")
    args = p.parse_args(argv)
    from cs336_systems.models import MODEL_SIZES

    try:
        variants.lookup(args.variant)
    except ValueError as error:
        p.error(f"--variant: {error}")
    if args.size not in MODEL_SIZES:
        p.error(f"--size {args.size!r}: known sizes are {', '.join(MODEL_SIZES)}")
    if min(args.context, args.global_batch, args.steps, args.world_size) < 1 or min(args.warmup,
                                                                                    args.accuracy_steps) < 0:
        p.error("--context, --global-batch, --steps and --world-size must be positive, --warmup and "
                "--accuracy-steps not negative")
    cfg = {"variant": args.variant, "precision": args.precision, "size": args.size, "context": args.context,
           "global_batch": args.global_batch, "warmup": args.warmup, "steps": args.steps, "trace": bool(args.trace),
           "accuracy_steps": args.accuracy_steps}
    record, trace = run(cfg, args.world_size, args.backend, args.timeout_s)
    write_json_atomic(args.out, record)
    if args.trace:
        traces.write(args.trace, args.variant, trace or [])
    log(f"wrote {record['status']} record -> {args.out}")
    return 0      # an error is a result too: recorded with its message, shown in the report's table


if __name__ == "__main__":
    sys.exit(main())
