"""C3, C4, C6, C8, C11, C12: the data-parallel training variants of one precision on N ranks, measured
as one comparison: one process group runs the no-communication baseline and every variant in
interleaved rounds; each step split into forward, backward, waiting for gradient communication and
the optimizer step; memory at the points C11 asks about; a trace of one step of each traced variant.

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m cs336_systems.distributed.train_bench \
        --variants no-comm naive torch-ddp bucketed-100 --size xl --context 512 --global-batch 8 --world-size 2 \
        --backend nccl --precision bf16 --warmup 2 --rounds 6 --steps 2 --traced naive --accuracy-steps 20 \
        --out-dir results/RUN

writes one record per variant (rank 0 does, where a launcher, torchrun or srun, started the ranks;
without one the job starts its ranks itself on this host, ``launcher.run_on_ranks``), ``<out-dir>/<ID>/records/<variant>_<precision>.json`` (its deliverable's
folder, ``variants.stem``), and ``<out-dir>/<ID>/traces/<variant>_<precision>.json.gz`` for each
``--traced`` one.

Why one process group. Two processes of one command differ by more than the variants do (on one
2×H200 host, xl/512 bf16: the baseline read 243–261 ms and PyTorch DDP 297–355 ms in alternating
processes), so an overhead taken as one process's step less another's baseline says little. Here
every variant takes its turns in the same ranks, rounds in rotating order (``rounds.take_turns``), and
each record keeps every round (``metrics.rounds``) and the job it shared (``metrics.turns``), so a
report judges a variant against the baseline of its own job round by round (``report.spread.judge``).

How a turn is built. Every variant wraps the model differently (our DDP wrappers hook the gradients,
PyTorch's DDP owns a reducer, the sharded optimizer keeps a shard's state, FSDP replaces the
parameters with shards), and on a GPU one copy of xl with its gradients and Adam state is ~24 GB:
copies of every variant side by side do not fit 80 GB. So one variant lives at a time: each turn
builds a fresh copy of the same seeded model (seed 0, the same weights every turn), wraps it, takes
``warmup`` untimed steps (allocator, first-step bucket rebuild, NCCL's first calls) and ``steps``
timed ones, and lets all of it go before the next turn. Every turn thus starts from the memory the
previous variants left (nothing), and each record's memory is what its variant alone holds. FSDP
stays in the same group: it reshards only its own copy, so it is paired with the same baseline and
with the replicating variants C12 sets it against. To ``rounds.take_turns`` each variant is an
entrant that times its own turns (``rounds.SelfTimed``: one turn is all of the above, its phases
timed as below), so the rotation, the failures and the record's rounds are that module's.

The baseline: the same ranks, each with the same per-rank batch as the variants, and no gradient
communication (``wrap_none``); each rank steps on its own (tested: its steps issue no collective).

Lock-step. All ranks take the same turns in the same order; at the end of each turn they exchange
whether it failed (``all_gather_object``, outside the timed steps), and where any rank failed every
rank raises ``rounds.Failed`` with that rank's status and message, so the variant is recorded as such
(``oom``/``error``, naming the rank; an error's traceback is in that rank's log) on every rank and
leaves the rounds together; the others go on. A failure that leaves one rank inside a collective
the other never joins hangs that collective: the process group's collective time limit ends the
job, and every variant's record then holds that failure.

``--precision bf16`` runs each rank's forward pass and loss under ``torch.autocast(bfloat16)``, as
A1's bf16 (backward follows the dtypes autocast chose); weights, gradients and optimizer state stay
fp32, so the variants communicate fp32 gradients unless they cast them (bucketed-bf16-<MB>).

A variant that communicates in bf16 also measures what that costs (``--accuracy-steps N``), after
the rounds: from the same initial weights and batches, N steps of it and N of its fp32-communicating
twin (the same buckets, ``variants.fp32_twin``); the record's ``accuracy`` compares the weights they
end with.

The variants, the deliverable each belongs to, and the ``wrap_*`` function below that builds each
are listed in ``cs336_systems.distributed.variants``.

How a step is split. On a GPU the phases are CUDA events recorded on the compute stream: forward,
backward, then ``finish_gradient_synchronization`` — the compute stream waits there for the
communication still in flight, so that interval is the communication *not* hidden behind backward —
then the optimizer. Nothing synchronizes the device inside a timed step (a device-wide synchronize
would also wait for the communication stream and fold it into "backward"). PyTorch's DDP does its
waiting inside backward, so its "waiting" phase is ~0 and its backward includes it. On the CPU
(Gloo) the phases are wall-clock intervals. Each rank times its own steps; a record keeps rank 0's
phases and, per step, the slowest rank's step.

Memory (GPU only), read in the last warm-up step of a variant's first turn (untimed, as those reads
synchronize): bytes allocated after the model is built, just before and just after the optimizer
step, with parameters, gradients and optimizer state counted from the tensors themselves, and the
peak above the step's starting point during forward + backward (activations and temporaries).
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import re
import statistics
import sys
import timeit
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from cs336_systems.distributed import traces, variants
from cs336_systems.distributed.launcher import device_for, run_on_ranks
from cs336_systems.distributed.ranks import Launch, LaunchError, from_environment, launch_for, leave, run_launched, spawned
from cs336_systems.records import log, make_record, write_json_atomic
from cs336_systems.rounds import MIN_ROUNDS, Entrant, Failed, SelfTimed, take_turns
from cs336_systems.timing import failure_status, free_device_memory
from cs336_systems.workload import PRECISIONS as AUTOCAST_DTYPES

COMMUNICATION = re.compile(r"nccl|all_?reduce|allgather|all_gather|reduce_?scatter|broadcast", re.IGNORECASE)
# Enough of a kernel's name to tell a copy from a cast or a division (an elementwise kernel's functor
# comes after ~60 characters of template), for the report's account of where a step's time goes.
KERNEL_NAME_CHARS = 200
PHASES = ("forward_ms", "backward_ms", "comm_wait_ms", "optimizer_ms", "step_ms")
# The phases a round keeps, by their names in ``metrics.rounds`` (rounds.Outcome's shape: "step" is
# the whole step), and the record's name for each.
ROUND_PHASES = {"forward": "forward_ms", "backward": "backward_ms", "comm_wait": "comm_wait_ms",
                "optimizer": "optimizer_ms", "step": "step_ms"}


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
            "bucketed-avg-<MB>": {"gradient_as_bucket_view": True, "mean_in_all_reduce": True, **ready},
            "bucketed-bf16-<MB>": {"communication_dtype": torch.bfloat16, "mean_in_all_reduce": True,
                                   **ready}}[variants.lookup(name).name]


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


@dataclass
class Built:
    """One variant's turn: a fresh copy of the seeded model, its wrapper and its optimizer."""
    name: str
    model: torch.nn.Module
    wrapped: torch.nn.Module
    optimizer: torch.optim.Optimizer
    after_init: int | None          # bytes allocated once the model was built (GPU), before wrapping


def build(name: str, cfg: dict, device: torch.device) -> Built:
    """Variant ``name`` around a fresh copy of the seed-0 model: the same weights in every turn."""
    from cs336_systems.models import build_model, get_size

    torch.manual_seed(0)
    model = build_model(get_size(cfg["size"]), cfg["context"], device=device)
    after_init = None
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        after_init = torch.cuda.memory_allocated(device)
    wrapped = wrap(name, model, device)
    return Built(name, model, wrapped, make_optimizer(name, wrapped.parameters()), after_init)


def train_step(built: Built, x, y, autocast, device: torch.device, memory: dict | None = None) -> dict:
    """One training step of ``built``; its phases in ms. Given ``memory`` (a dict), also reads the
    memory at C11's points into it: those reads synchronize the device, so such a step is not timed."""
    from cs336_basics.nn_utils import cross_entropy

    wrapped, optimizer = built.wrapped, built.optimizer
    read = memory is not None and device.type == "cuda"
    start_step(wrapped, optimizer)
    if read:
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
    if read:
        torch.cuda.synchronize(device)
        memory["after_init"] = built.after_init
        memory["forward_backward_peak_above_start"] = torch.cuda.max_memory_allocated(device) - start_bytes
        memory["before_step"] = torch.cuda.memory_allocated(device)
        memory["breakdown_before_step"] = memory_by_kind(wrapped, optimizer)
    clock.mark()      # the optimizer's interval starts here, after any memory reading above
    optimizer.step()
    clock.mark()
    if read:
        torch.cuda.synchronize(device)
        memory["after_step"] = torch.cuda.memory_allocated(device)
        memory["breakdown_after_step"] = memory_by_kind(wrapped, optimizer)
        memory["peak"] = torch.cuda.max_memory_allocated(device)
    forward, backward, wait, opt = clock.between_ms([(0, 1), (1, 2), (2, 3), (4, 5)])
    return {"forward_ms": forward, "backward_ms": backward, "comm_wait_ms": wait, "optimizer_ms": opt,
            "step_ms": forward + backward + wait + opt}


def _let_go(device: torch.device) -> None:
    """Release what a finished or failed turn held, so the next turn starts from nothing.

    What survives the collection is long-lived (modules, Dynamo's and the process group's state), so
    it is frozen out of later collections: with torch and Dynamo loaded, a full collection walks
    millions of objects (~125 ms on a CPU core, half the time of a smoke turn), and each turn then
    pays only for the objects it made."""
    gc.collect()
    gc.freeze()
    free_device_memory(device)


def _turn(name: str, cfg: dict, device: torch.device, batch, autocast, found: dict) -> dict[str, list[float]]:
    """One turn of variant ``name``: build, ``warmup`` untimed steps (the last of the variant's first
    turn reads the memory into ``found["memory"]``), ``steps`` timed ones. Returns the turn's samples
    per phase, by their names in ``metrics.rounds`` (``ROUND_PHASES``)."""
    built = build(name, cfg, device)
    for i in range(cfg["warmup"]):
        first = not found["turns"] and i == cfg["warmup"] - 1
        train_step(built, *batch, autocast, device, memory=found["memory"] if first else None)
    steps = [train_step(built, *batch, autocast, device) for _ in range(cfg["steps"])]
    if not found["details"]:
        wrapped = built.wrapped
        found["details"] = {"buckets": len(wrapped.buckets) if hasattr(wrapped, "buckets") else None,
                            "rebuilt_in_ready_order": getattr(wrapped, "rebuilt", None),
                            "casts_on_side_stream": getattr(wrapped, "casts_on_side_stream", None),
                            "parameter_count": sum(p.numel() for p in built.model.parameters())}
    found["turns"] += 1
    return {short: [s[long] for s in steps] for short, long in ROUND_PHASES.items()}


def _agree(status: str, message: str | None) -> tuple[str, str | None]:
    """Every rank's outcome of the turn just taken; the first failure any rank had, else ok. All ranks
    call this after every turn, so they leave a failed variant together."""
    import torch.distributed as dist

    outcomes = [None] * dist.get_world_size()
    dist.all_gather_object(outcomes, (status, message))
    for rank, (s, m) in enumerate(outcomes):
        if s != "ok":
            return s, f"rank {rank}: {m}"
    return "ok", None


def _entrant(name: str, cfg: dict, device: torch.device, batch, autocast, found: dict) -> Entrant:
    """Variant ``name`` as ``rounds.take_turns`` sees it: an entrant that times its own turns, each
    a ``_turn``, whose memory is let go after it and whose outcome every rank agrees on before the
    next (a failure anywhere is raised everywhere, as ``rounds.Failed``)."""
    def take() -> dict[str, list[float]]:
        failure, samples = None, None
        try:
            samples = _turn(name, cfg, device, batch, autocast, found)
        except Exception as exc:  # noqa: BLE001 - an OOM or error is this variant's outcome, agreed below
            failure = failure_status(exc)       # an error's traceback goes to this rank's log
            del exc                 # its traceback holds the turn's tensors
        _let_go(device)
        status, message = _agree(*(failure or ("ok", None)))
        if status != "ok":
            raise Failed(status, message)
        return samples

    return Entrant(name, lambda: SelfTimed(take, cfg["steps"]))


def _group(rank: int, world_size: int, backend: str, cfg: dict) -> dict:
    """This rank's part of the job: the variants' turns in rotating rounds (``rounds.take_turns``),
    then the accuracy twins' runs and one traced step of each traced variant. Returns per variant its
    status, every round's samples (this rank's), the job (``turns``), memory, and what the record
    reports about its wrapper."""
    from cs336_systems.models import random_batch

    device = device_for(rank, backend)
    torch.manual_seed(1 + rank)                         # each rank its own share of the global batch
    batch = random_batch(cfg["per_rank_batch"], cfg["context"], device=device)
    autocast = autocast_for(cfg["precision"], device)
    names = cfg["variants"]
    found = {n: {"memory": {}, "details": {}, "turns": 0} for n in names}
    job, outcomes = take_turns([_entrant(n, cfg, device, batch, autocast, found[n]) for n in names], device=device,
                               warmup=cfg["warmup"], rounds=cfg["rounds"], steps=cfg["steps"], settle=0,
                               job_id=cfg.get("job"), progress=rank == 0)
    out = {n: {"status": o.status, "message": o.message, "rounds": o.rounds, "turns": o.turns(job),
               "memory": found[n]["memory"], "details": found[n]["details"]} for n, o in outcomes.items()}
    for name in names:
        twin = variants.fp32_twin(name)
        if twin and cfg.get("accuracy_steps") and out[name]["status"] == "ok":
            out[name]["accuracy"] = _outside_rounds(
                name, "accuracy", device, lambda: accuracy_against_twin(rank, cfg, name, twin, device))
        if name in cfg.get("traced", ()) and out[name]["status"] == "ok":
            out[name]["trace"] = _outside_rounds(
                name, "trace", device, lambda: _traced_step(rank, name, cfg, device, batch, autocast))
    return out


def _outside_rounds(name: str, what: str, device: torch.device, fn):
    """``fn()`` (the accuracy runs, a traced step), its failure on any rank logged and agreed as a
    turn's is: the variant's timed rounds stand, this measurement is None."""
    failure, value = None, None
    try:
        value = fn()
    except Exception as exc:  # noqa: BLE001 - as a turn's
        failure = failure_status(exc)
        del exc
    _let_go(device)
    status, message = _agree(*(failure or ("ok", None)))
    if status != "ok":
        log(f"  {name}: no {what}: {status} ({message})")
        return None
    return value


def _traced_step(rank: int, name: str, cfg: dict, device: torch.device, batch, autocast) -> list[dict] | None:
    """One profiled step of ``name`` after its warm-up, outside the timed rounds. Every rank steps
    (its collectives need all of them); rank 0's intervals are kept."""
    built = build(name, cfg, device)
    for _ in range(cfg["warmup"]):
        train_step(built, *batch, autocast, device)
    intervals = _trace_one_step(built.wrapped, built.optimizer, *batch, device, autocast)
    return intervals if rank == 0 else None


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


def accuracy_against_twin(rank: int, cfg: dict, name: str, twin: str, device: torch.device) -> dict | None:
    """How far the weights of variant ``name`` (bf16 communication) end from its fp32-communicating
    twin's after the same steps: the norm of the difference against the norm of the weights and
    against the norm of what training changed (the reference's final minus initial weights), the
    largest element's difference, and both runs' losses (rank 0's batch). Rank 0 only (None else)."""
    ours = _train_from_scratch(rank, cfg, name, device)
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
            out.append({"lane": "communication" if COMMUNICATION.search(name) else "compute", "name": name[:KERNEL_NAME_CHARS],
                        "start_us": start, "end_us": end})
        elif not gpu and COMMUNICATION.search(name):
            out.append({"lane": "communication", "name": name[:KERNEL_NAME_CHARS], "start_us": start, "end_us": end})
        elif not gpu and name in ("aten::mm", "aten::addmm", "aten::bmm"):
            out.append({"lane": "compute", "name": name, "start_us": start, "end_us": end})
    t0 = min((i["start_us"] for i in out), default=0)
    return [dict(i, start_us=i["start_us"] - t0, end_us=i["end_us"] - t0) for i in out]


def summarize_ranks(per_rank: list[dict]) -> dict:
    """One variant's metrics from every rank's outcome of it: medians over rank 0's timed steps of each
    phase, per step the slowest rank's step, every round's samples (rank 0's phases and the slowest
    rank's step, ``ROUND_PHASES``' names: ``report.spread.judge`` pairs them) and the job (``turns``)."""
    rounds0 = per_rank[0]["rounds"]
    steps0 = [{long: turn[short][i] for short, long in ROUND_PHASES.items()}
              for turn in rounds0 for i in range(len(turn["step"]))]
    metrics = {phase: statistics.median(s[phase] for s in steps0) for phase in PHASES}
    slowest_by_round = [[max(r["rounds"][k]["step"][i] for r in per_rank) for i in range(len(turn["step"]))]
                        for k, turn in enumerate(rounds0)]
    metrics["step_ms_slowest_rank"] = statistics.median(t for turn in slowest_by_round for t in turn)
    metrics["comm_share"] = metrics["comm_wait_ms"] / metrics["step_ms"]
    metrics["steps"] = [{k: round(v, 4) for k, v in s.items()} for s in steps0]
    metrics["rounds"] = [{short: list(turn[short]) for short in ROUND_PHASES} | {"step_slowest_rank": slowest}
                         for turn, slowest in zip(rounds0, slowest_by_round)]
    metrics["turns"] = per_rank[0]["turns"]
    metrics["memory_per_rank"] = [r["memory"] for r in per_rank]
    details = per_rank[0]["details"]
    metrics["parameter_count"] = details["parameter_count"]
    metrics["buckets"] = details["buckets"]
    for key in ("rebuilt_in_ready_order", "casts_on_side_stream"):
        if details.get(key) is not None:
            metrics[key] = details[key]
    if per_rank[0].get("accuracy"):
        metrics["accuracy"] = per_rank[0]["accuracy"]
    return metrics


def params_of(name: str, cfg: dict, world_size: int, backend: str) -> dict:
    params = {"variant": name} | {k: cfg[k] for k in ("precision", "size", "context", "global_batch", "warmup",
                                                      "rounds", "steps")} | {"world_size": world_size, "backend": backend}
    if variants.fp32_twin(name) and cfg.get("accuracy_steps"):
        params["accuracy_steps"] = cfg["accuracy_steps"]
    return params


def run(cfg: dict, world_size: int, backend: str, timeout_s: float, collective_timeout_s: float = 120,
        launch: Launch | None = None,
        on_failure: Callable[[dict[str, tuple[dict, None]]], None] | None = None) -> dict[str, tuple[dict, list | None]] | None:
    """The job: every variant of ``cfg["variants"]`` in one process group, whose ranks it starts on
    this host, or of which this process is one rank where a launcher started them (``launch``).
    Returns per variant its record and rank 0's traced step (None where not traced or not measured);
    a launched rank other than 0 returns None. Where the group fails, every variant's record says how;
    a launched rank 0 hands them to ``on_failure`` (``ranks.run_launched`` then ends every rank)."""
    names = cfg["variants"]
    params = {n: params_of(n, cfg, world_size, backend) for n in names}
    ident = {n: variants.lookup(n).deliverable for n in names}
    writes = launch is None or launch.rank == 0
    launched = spawned(world_size) if launch is None else launch.where()
    here = launched["ranks_per_node"] or world_size         # the ranks this host runs
    available = torch.cuda.device_count() if backend == "nccl" else here
    if available < here:
        reason = f"{here} ranks need {here} GPUs; this machine has {available}"
        return {n: (make_record(ident[n], params[n], "skipped", reason=reason), None) for n in names} if writes else None
    if cfg["global_batch"] % world_size:
        raise SystemExit(f"train_bench: global batch {cfg['global_batch']} does not split over {world_size} ranks")
    # one job id for every rank's ``take_turns``: the records of this job pair with each other only
    job = uuid.uuid4().hex[:12] if launch is None else hashlib.sha1(launch.job.encode()).hexdigest()[:12]
    cfg = cfg | {"per_rank_batch": cfg["global_batch"] // world_size, "job": job}

    def failed(exc: BaseException) -> dict[str, tuple[dict, None]]:
        status, message = failure_status(exc)
        log(f"the process group failed: {status}: {message}")
        return {n: (make_record(ident[n], params[n], status, reason=message), None) for n in names}

    if launch is None:
        try:
            per_rank = run_on_ranks(_group, world_size, args=(backend, cfg), backend=backend, timeout_s=timeout_s,
                                    collective_timeout_s=collective_timeout_s)
        except Exception as exc:  # noqa: BLE001 - the group failed: every variant's record says how
            return failed(exc)
    else:
        per_rank = run_launched(_group, launch, args=(backend, cfg), backend=backend,
                                collective_timeout_s=collective_timeout_s,
                                on_failure=None if on_failure is None else lambda exc: on_failure(failed(exc)))
        if not writes:
            return None
    out = {}
    for name in names:
        mine = [r[name] for r in per_rank]
        if mine[0]["status"] != "ok":
            out[name] = (make_record(ident[name], params[name], mine[0]["status"], reason=mine[0]["message"]), None)
            continue
        metrics = summarize_ranks(mine) | {"launch": launched}
        log(f"{ident[name]} {name} {cfg['precision']}: step {metrics['step_ms']:.2f} ms (forward {metrics['forward_ms']:.2f}, "
            f"backward {metrics['backward_ms']:.2f}, waiting {metrics['comm_wait_ms']:.2f}, optimizer {metrics['optimizer_ms']:.2f})")
        out[name] = (make_record(ident[name], params[name], "ok", metrics), mine[0].get("trace"))
    return out


def record_path(out_dir: Path, name: str, precision: str, kind: str = "records") -> Path:
    """Where a variant's record (``kind="records"``) or trace (``"traces"``) lives under a run folder."""
    suffix = ".json" if kind == "records" else ".json.gz"
    return Path(out_dir) / variants.lookup(name).deliverable / kind / f"{variants.stem(name, precision)}{suffix}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.distributed.train_bench",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", nargs="+", required=True, help=", ".join(variants.names()))
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
    p.add_argument("--warmup", type=int, default=2, help="untimed steps at the start of every turn (at least 1)")
    p.add_argument("--rounds", type=int, default=6,
                   help=f"rounds of turns (at least {MIN_ROUNDS}; the reports' judge decides nothing from "
                        "fewer than report.spread.MIN_ROUNDS)")
    p.add_argument("--steps", type=int, default=2, help="timed steps per variant and turn")
    p.add_argument("--timeout-s", type=float, default=3600, help="the whole job's limit")
    p.add_argument("--collective-timeout-s", type=float, default=120,
                   help="the limit of one collective: a hung one ends the job after this long")
    p.add_argument("--traced", nargs="*", default=[],
                   help="variants (among --variants) of which one step is also traced, into <out-dir>/<ID>/traces/")
    p.add_argument("--out-dir", required=True, type=Path,
                   help="the run folder: records go to <out-dir>/<ID>/records/<variant>_<precision>.json")
    args = p.parse_args(argv)
    from cs336_systems.models import MODEL_SIZES

    for name in args.variants + args.traced:
        try:
            variants.lookup(name)
        except ValueError as error:
            p.error(f"--variants: {error}")
    if len(set(args.variants)) != len(args.variants):
        p.error(f"--variants: each variant once, got {' '.join(args.variants)}")
    if set(args.traced) - set(args.variants):
        p.error(f"--traced: {', '.join(sorted(set(args.traced) - set(args.variants)))} not among --variants")
    if args.size not in MODEL_SIZES:
        p.error(f"--size {args.size!r}: known sizes are {', '.join(MODEL_SIZES)}")
    if min(args.context, args.global_batch, args.steps, args.world_size, args.warmup) < 1 or args.accuracy_steps < 0:
        p.error("--context, --global-batch, --steps, --world-size and --warmup must be positive (a turn's first step "
                "after its build is not timed), --accuracy-steps not negative")
    if args.rounds < MIN_ROUNDS:
        p.error(f"--rounds {args.rounds}: at least {MIN_ROUNDS}, so each verdict has a spread across rounds")
    cfg = {"variants": args.variants, "precision": args.precision, "size": args.size, "context": args.context,
           "global_batch": args.global_batch, "warmup": args.warmup, "rounds": args.rounds, "steps": args.steps,
           "traced": args.traced, "accuracy_steps": args.accuracy_steps}
    try:
        launch = launch_for(args.world_size)
    except LaunchError as exc:
        p.error(str(exc))

    def write(found: dict[str, tuple[dict, list | None]]) -> None:
        for name, (record, trace) in found.items():
            path = record_path(args.out_dir, name, args.precision)
            write_json_atomic(path, record)
            if name in args.traced:
                traces.write(record_path(args.out_dir, name, args.precision, "traces"), name, trace or [])
            log(f"wrote {record['status']} record -> {path}")

    found = run(cfg, args.world_size, args.backend, args.timeout_s, args.collective_timeout_s, launch, write)
    if found is not None:
        write(found)
    return 0      # an error is a result too: recorded with its message, shown in the report's table


if __name__ == "__main__":
    code = main()
    if from_environment() is not None:
        leave(code)
    sys.exit(code)
