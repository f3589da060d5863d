"""A5: a memory snapshot of one step, its analysis and the data of its active-memory timeline.

    python -m cs336_systems.memory.snapshot --size 2.7B --context 128 --mode train-step --precision fp32 \\
        --out rec.json --pickle snapshot.pickle

Builds the workload (``cs336_systems.workload``), runs ``--warmup`` steps, then records one step:

- on CUDA with ``torch.cuda.memory._record_memory_history(max_entries=N)``, dumped with
  ``torch.cuda.memory._dump_snapshot`` (the pickle PyTorch's memory_viz opens), recording stopped;
- on the CPU, where there is no CUDA memory history, with ``torch.profiler`` (``profile_memory``,
  ``with_stack``), whose allocation events carry pointer, size and time just the same.

Each phase (forward, backward, optimizer) runs inside ``record_function("cs336.phase:<name>")``
and between two wall-clock marks, so the phases can be placed on the trace's clock. The same
process then analyses the trace (peak, phases, largest allocations with the line of our code that
made them) into the JSON record, with the timeline's bands (``memory.timeline.timeline_data``) under
``"timeline"``. The job writes data only: the report draws the timelines from the records and
never reads the pickle, so committed records redraw every figure. An allocation failure is a
result: the record says ``oom`` and its timeline holds the step up to the failure.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import pickle
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Iterator

import torch

from cs336_systems.cli import parse_device, require_at_least
from cs336_systems.memory.analysis import analyse
from cs336_systems.memory.events import PHASE_PREFIX, MemoryTrace, Phase, trace_from_profiler, trace_from_snapshot
from cs336_systems.memory.timeline import timeline_data
from cs336_systems.models import MODEL_SIZES, get_size
from cs336_systems.records import log, make_record, write_json_atomic
from cs336_systems.timing import failure_status, oom_during
from cs336_systems.workload import MODES, PRECISIONS, Workload, build_workload


class PhaseMarks:
    """A ``phase`` callable for ``Workload.step``: a ``record_function`` range (lands in the CUDA
    snapshot's annotations and in the profiler's event tree) and wall-clock marks in µs (the
    fallback; the CUDA trace's ``time_us`` is wall-clock time too).

    Those are the host's clock: the allocator hands out a block when an operation is issued, not
    when its kernel runs, so a phase's span there is how long Python took to issue its work. On
    CUDA, events recorded on the stream at the same marks give each phase's GPU time as well."""

    def __init__(self, device: torch.device | None = None):
        self.phases: list[Phase] = []
        self._cuda = device is not None and device.type == "cuda"
        self._events: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []

    def _event(self):
        if not self._cuda:
            return None
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start, gpu_start = time.time_ns() / 1e3, self._event()
        try:
            with torch.profiler.record_function(PHASE_PREFIX + name):
                yield
        finally:
            gpu_end = self._event()
            self.phases.append(Phase(name, start, time.time_ns() / 1e3))
            if gpu_start is not None:
                self._events.append((name, gpu_start, gpu_end))

    def gpu_ms(self) -> dict[str, float]:
        """Each phase's GPU time (ms) between its two stream events; call after a synchronize."""
        return {name: start.elapsed_time(end) for name, start, end in self._events}


def _warm_up(workload: Workload, steps: int) -> str | None:
    """Run the warm-up steps; an allocation failure is returned, anything else raised."""
    def run() -> None:
        for _ in range(steps):
            workload.step()

    return oom_during(run)


def _recover(workload: Workload) -> None:
    """After a failed step: drop its gradients and cached blocks so the next step starts clean."""
    workload.model.zero_grad(set_to_none=True)
    gc.collect()
    if workload.device.type == "cuda":
        torch.cuda.empty_cache()


def capture_cuda(workload: Workload, warmup: int, max_entries: int, pickle_path: Path) -> tuple[MemoryTrace, dict, str | None]:
    """Warm up, record one step's memory history, dump it to ``pickle_path`` and read it back.

    If the warm-up runs out of memory the recorded step is run anyway: it fails at the same
    point, and its timeline shows what filled the card.
    """
    device = workload.device
    oom = _warm_up(workload, warmup)
    if oom:
        _recover(workload)
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    marks = PhaseMarks(device)
    torch.cuda.memory._record_memory_history(max_entries=max_entries)
    try:
        # Running out of memory ends the step early: the recording up to there is the result.
        step_oom = oom_during(lambda: workload.step(marks))
        oom = oom or step_oom                 # the first failure names the point
    finally:
        torch.cuda.synchronize(device)
        pickle_path.parent.mkdir(parents=True, exist_ok=True)
        torch.cuda.memory._dump_snapshot(str(pickle_path))       # memory_viz's own format
        torch.cuda.memory._record_memory_history(enabled=None)
    if oom:
        _recover(workload)
    with open(pickle_path, "rb") as f:     # analyse exactly what was dumped
        snapshot = pickle.load(f)
    index = device.index if device.index is not None else torch.cuda.current_device()
    trace = trace_from_snapshot(snapshot, index, marks.phases)
    entries = len(snapshot["device_traces"][index]) if index < len(snapshot.get("device_traces", [])) else 0
    stats = {
        "allocated_before_step_bytes": before,
        "max_allocated_bytes": torch.cuda.max_memory_allocated(device),
        "max_reserved_bytes": torch.cuda.max_memory_reserved(device),
        "trace_entries": entries,
        "trace_may_be_truncated": entries >= max_entries,
        "phase_gpu_ms": marks.gpu_ms(),
    }
    return trace, stats, oom


def _live_storages(workload: Workload) -> dict[int, int]:
    """Address -> bytes of every tensor alive before the step: parameters, optimizer state, batch."""
    tensors = list(workload.model.parameters()) + [workload.inputs, workload.targets]
    if workload.optimizer is not None:
        tensors += [v for state in workload.optimizer.state.values() for v in state.values()
                    if isinstance(v, torch.Tensor)]
    out = {}
    for t in tensors:
        storage = t.untyped_storage()
        if t.device.type == "cpu" and storage.nbytes():
            out[storage.data_ptr()] = storage.nbytes()
    return out


def capture_cpu(workload: Workload, warmup: int) -> tuple[MemoryTrace, dict, str | None]:
    """Warm up, then profile one step with memory events (the CPU has no CUDA memory history)."""
    oom = _warm_up(workload, warmup)
    if oom:
        _recover(workload)
    initial = _live_storages(workload)
    marks = PhaseMarks()
    # The Kineto profiler that torch.profiler.profile drives, without its wrapper, whose start asks
    # hasattr(torch, "_inductor") and so imports Inductor and Dynamo (~1.5 s of a few-second job).
    with torch.autograd.profiler.profile(use_kineto=True, profile_memory=True, record_shapes=True,
                                         with_stack=True) as prof:
        step_oom = oom_during(lambda: workload.step(marks))
        oom = oom or step_oom
    trace = trace_from_profiler(prof.kineto_results.experimental_event_tree(), initial, marks.phases)
    return trace, {}, oom


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.memory.snapshot", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--size", choices=list(MODEL_SIZES), required=True, help="a row of the size table")
    p.add_argument("--context", type=int, required=True, help="context length (tokens per sequence)")
    p.add_argument("--batch", type=int, default=4, help="sequences per batch")
    p.add_argument("--mode", choices=MODES, default="train-step", help="what one step does")
    p.add_argument("--precision", choices=list(PRECISIONS), default="fp32",
                   help="fp32, or bf16 autocast around forward and loss (fp32 master weights)")
    p.add_argument("--warmup", type=int, default=2, help="steps before the recorded one")
    p.add_argument("--max-entries", type=int, default=1_000_000, help="size of CUDA's allocation history ring")
    p.add_argument("--top", type=int, default=10, help="largest allocations to keep in the record")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cuda, cuda:N or cpu")
    p.add_argument("--out", required=True, type=Path, help="the JSON record")
    p.add_argument("--pickle", type=Path, help="where the CUDA snapshot goes (default: beside --out)")
    args = p.parse_args(argv)
    require_at_least(p, args, 1, "context", "batch", "max_entries", "top")
    require_at_least(p, args, 0, "warmup")
    if parse_device(p, args.device).type not in ("cuda", "cpu"):
        p.error(f"--device {args.device}: only cuda and cpu have a memory recorder here")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    size = get_size(args.size)
    device = torch.device(args.device)
    params = {"size": args.size, **asdict(size), "context": args.context, "batch": args.batch, "mode": args.mode,
              "precision": args.precision, "warmup": args.warmup, "device": args.device,
              "max_entries": args.max_entries if device.type == "cuda" else None}
    log(f"A5 snapshot: {params}")
    pickle_path = args.pickle or args.out.with_suffix(".pickle")
    metrics, status, message, trace = {}, "ok", None, None
    try:
        workload = build_workload(size, context=args.context, batch=args.batch, mode=args.mode,
                                  precision=args.precision, device=device)
        if device.type == "cuda":
            trace, extra, message = capture_cuda(workload, args.warmup, args.max_entries, pickle_path)
        else:
            trace, extra, message = capture_cpu(workload, args.warmup)
        del workload
        metrics = analyse(trace, top_phase="forward", k=args.top) | extra
        status = "oom" if message else "ok"
    except Exception as exc:  # noqa: BLE001 - an allocation failure is a result, anything else an error
        status, message = failure_status(exc)
    record = make_record("A5", params, status, metrics if status == "ok" else {}, reason=message)
    if status != "ok" and metrics:
        record["partial_metrics"] = metrics      # what the failed step did before it failed
    # None where nothing was recorded (a failure before the step): the report draws a note instead.
    record["timeline"] = timeline_data(trace) if trace is not None and trace.events else None
    # On CUDA, the snapshot this run left (memory_viz's pickle; too large for git, so nothing
    # downstream reads it).
    record["artifacts"] = {"snapshot": pickle_path.name if device.type == "cuda" and pickle_path.exists() else None}
    write_json_atomic(args.out, record)
    summary = f"peak {metrics['peak']['bytes'] / 2**20:,.1f} MiB ({metrics['source']})" if status == "ok" else message
    log(f"A5 {status}: {summary} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
