"""One memory trace, whatever recorded it: allocation and free events, what was live before, phases.

Two recorders feed it:

- CUDA: the snapshot dict of ``torch.cuda.memory._snapshot()`` (the pickle PyTorch's memory_viz
  reads). Its ``device_traces`` list every ``alloc`` / ``free_requested`` / ``free_completed`` with
  address, block size, ``time_us`` and a stack of frames (C++ and Python); its ``segments`` hold the
  blocks live when the snapshot was taken, which tells what was live before the recording began.
- CPU: the event tree of ``torch.profiler`` run with ``profile_memory=True, with_stack=True``: every
  allocation event has a pointer, a signed size and a time; its parents are the op and the Python
  frames that made it.

Both become a ``MemoryTrace``; the analysis and the timeline's data (memory.timeline) read only that.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable

PROJECT_PACKAGES = ("cs336_basics", "cs336_systems")
PHASE_PREFIX = "cs336.phase:"        # record_function name of a workload phase (see snapshot.py)

_OP_FRAME = re.compile(r"^at::_ops::(\w+)::call\b")
_AUTOGRAD_FRAME = re.compile(r"torch::autograd::generated::(\w+)::apply\b")


@dataclass(frozen=True)
class MemoryEvent:
    """One allocation (``kind == "alloc"``) or free (``"free"``) of ``size`` bytes at ``addr``."""
    time_us: float
    kind: str
    addr: int
    size: int
    frame: str | None = None     # innermost frame in our packages, "cs336_basics/model.py:90 softmax"
    op: str | None = None        # the ATen op the Python code called, e.g. "matmul"
    node: str | None = None      # the autograd node, for allocations made by the backward pass


@dataclass(frozen=True)
class Phase:
    name: str
    start_us: float
    end_us: float


@dataclass
class MemoryTrace:
    """Events in order, the allocations live before the first event (address -> bytes), phases."""
    events: list[MemoryEvent]
    initial: dict[int, int] = field(default_factory=dict)
    phases: list[Phase] = field(default_factory=list)
    source: str = ""
    oom_us: list[float] = field(default_factory=list)   # times of allocation failures, if any
    phase_source: str = ""                               # where the phase boundaries came from

    @property
    def initial_bytes(self) -> int:
        return sum(self.initial.values())

    @property
    def start_us(self) -> float:
        times = [e.time_us for e in self.events] + [p.start_us for p in self.phases]
        return min(times) if times else 0.0


@dataclass(frozen=True)
class Allocation:
    """An alloc paired with its free: live over events ``[start, end)`` (indices into the trace);
    ``start`` is -1 for memory live before the trace, ``end`` is None if still live at its end."""
    addr: int
    size: int
    start: int
    end: int | None
    event: MemoryEvent | None


def is_project_file(filename: str) -> bool:
    parts = re.split(r"[\\/]", filename)
    return any(p in PROJECT_PACKAGES for p in parts[:-1])


def short_path(filename: str) -> str:
    """``/any/where/cs336-basics/cs336_basics/model.py`` -> ``cs336_basics/model.py``."""
    parts = re.split(r"[\\/]", filename)
    for i, p in enumerate(parts[:-1]):
        if p in PROJECT_PACKAGES:
            return "/".join(parts[i:])
    return filename


# --- CUDA snapshot ---------------------------------------------------------------------------

def _labels_from_frames(frames: list[dict]) -> tuple[str | None, str | None, str | None]:
    """(project frame, op, autograd node) of a stack listed innermost first."""
    project = op = node = None
    for f in frames:
        name, filename = f.get("name", ""), f.get("filename", "")
        if project is None and filename and is_project_file(filename):
            project = f"{short_path(filename)}:{f.get('line', 0)} {name}"
        m = _OP_FRAME.match(name)
        if m:
            op = m.group(1)                     # keep overwriting: the outermost op is the one called
        if node is None:
            m = _AUTOGRAD_FRAME.search(name)
            if m:
                node = m.group(1)
    return project, op, node


def trace_from_snapshot(snapshot: dict[str, Any], device: int = 0,
                        marks: Iterable[Phase] = ()) -> MemoryTrace:
    """A ``MemoryTrace`` from a CUDA snapshot dict (``torch.cuda.memory._snapshot()``).

    A block counts as freed at ``free_completed`` (its memory is reusable; ``free_requested`` can
    come earlier when the block is still in use on another stream); snapshots without
    ``free_completed`` entries fall back to ``free_requested``. Phases come from our
    ``record_function`` annotations when the snapshot has them (same clock as the trace), else
    from ``marks`` (wall-clock microseconds taken around the phases).
    """
    traces = snapshot.get("device_traces") or []
    raw = traces[device] if device < len(traces) else []
    actions = {e["action"] for e in raw}
    free_action = "free_completed" if "free_completed" in actions else "free_requested"
    events: list[MemoryEvent] = []
    oom_us: list[float] = []
    for i, e in enumerate(raw):
        t = float(e.get("time_us", i))          # older snapshots have no times: the index is the clock
        if e["action"] == "alloc":
            project, op, node = _labels_from_frames(e.get("frames") or [])
            events.append(MemoryEvent(t, "alloc", e["addr"], e["size"], project, op, node))
        elif e["action"] == free_action:
            events.append(MemoryEvent(t, "free", e["addr"], e["size"]))
        elif e["action"] == "oom":
            oom_us.append(t)
    # Live at the start: blocks freed before the trace allocated them, and blocks live in the
    # snapshot (taken after the last event) that the trace never touched.
    live: dict[int, int] = {}
    initial: dict[int, int] = {}
    for e in events:
        if e.kind == "alloc":
            live[e.addr] = e.size
        elif live.pop(e.addr, None) is None:
            initial[e.addr] = e.size
    touched = {e.addr for e in events}
    for seg in snapshot.get("segments", []):
        if seg.get("device", device) != device:
            continue
        for block in seg.get("blocks", []):
            if block["state"].startswith("active") and block["address"] not in touched:
                initial[block["address"]] = block["size"]
    phases = _phases_from_annotations(snapshot.get("external_annotations") or [], device)
    phase_source = "record_function annotations in the snapshot"
    if not phases:
        phases, phase_source = list(marks), "wall-clock marks"
    return MemoryTrace(events, initial, phases, "torch.cuda.memory._record_memory_history", oom_us, phase_source)


def _phases_from_annotations(annotations: list[dict], device: int) -> list[Phase]:
    starts: dict[str, float] = {}
    phases = []
    for a in annotations:
        name = a.get("name", "")
        if not name.startswith(PHASE_PREFIX) or a.get("device", device) != device:
            continue
        name = name[len(PHASE_PREFIX):]
        if a["stage"] == "START":
            starts[name] = float(a["time_us"])
        elif name in starts:
            phases.append(Phase(name, starts.pop(name), float(a["time_us"])))
    return sorted(phases, key=lambda p: p.start_us)


# --- CPU profiler ----------------------------------------------------------------------------

def _walk(node):
    yield node
    for child in node.children:
        yield from _walk(child)


def _labels_from_parents(event) -> tuple[str | None, str | None, str | None]:
    """(project frame, op, autograd node) from a profiler allocation event's ancestors."""
    project = op = node = None
    parent = event.parent
    while parent is not None:
        tag = str(parent.tag)
        if tag.endswith("TorchOp"):
            if parent.name.startswith("autograd::engine::evaluate_function: "):
                node = node or parent.name.split(": ", 1)[1]
            elif project is None and not parent.name.startswith(("autograd::", PHASE_PREFIX)):
                op = parent.name.removeprefix("aten::")     # overwritten upwards: outermost op wins
        elif tag.endswith(("PyCall", "PyCCall")) and project is None and node is None:
            # (Inside an autograd node the Python stack only says who called backward(); the
            # node names the allocation better, as on CUDA where backward has no Python frames.)
            fields = parent.extra_fields
            callee = getattr(fields, "callsite", None) if tag.endswith("PyCall") else None
            caller = getattr(fields, "caller", None)
            if callee is not None and is_project_file(callee.file_name):
                # The op ran inside one of our functions without a profiled call of its own (an
                # operator such as ``x - y``): the profiler knows the function, not the line.
                project = f"{short_path(callee.file_name)} {callee.function_name}()"
            elif caller is not None and is_project_file(caller.file_name):
                # ``caller`` is the frame that made this call: the line in our code that ran it.
                project = f"{short_path(caller.file_name)}:{caller.line_number} {caller.function_name}"
        parent = parent.parent
    return project, op, node


def trace_from_profiler(event_tree: list, initial: dict[int, int], marks: Iterable[Phase] = ()) -> MemoryTrace:
    """A ``MemoryTrace`` from ``prof.profiler.kineto_results.experimental_event_tree()``.

    The profiler sees only what happens while it runs, so ``initial`` (address -> bytes of the
    tensors already live: parameters, optimizer state, the batch) is counted by the caller.
    """
    nodes = [n for root in event_tree for n in _walk(root)]
    events = []
    phases = []
    for n in nodes:
        tag = str(n.tag)
        if tag.endswith("Allocation"):
            f = n.extra_fields
            if f.device.type != "cpu" or f.alloc_size == 0:
                continue
            t = n.start_time_ns / 1e3
            if f.alloc_size > 0:
                events.append(MemoryEvent(t, "alloc", f.ptr, f.alloc_size, *_labels_from_parents(n)))
            else:
                events.append(MemoryEvent(t, "free", f.ptr, -f.alloc_size))
        elif tag.endswith("TorchOp") and n.name.startswith(PHASE_PREFIX):
            phases.append(Phase(n.name[len(PHASE_PREFIX):], n.start_time_ns / 1e3, n.end_time_ns / 1e3))
    events.sort(key=lambda e: e.time_us)     # the tree is ordered by nesting, the trace by time
    initial = dict(initial)
    live: set[int] = set()
    for e in events:                          # a free of an address never allocated here: live before
        if e.kind == "alloc":
            live.add(e.addr)
        elif e.addr in live:
            live.discard(e.addr)
        else:
            initial.setdefault(e.addr, e.size)
    phases = sorted(phases, key=lambda p: p.start_us)
    phase_source = "record_function ranges in the profile"
    if not phases:
        phases, phase_source = list(marks), "wall-clock marks"
    return MemoryTrace(events, initial, phases, "torch.profiler (CPU)", phase_source=phase_source)


# --- derived views ---------------------------------------------------------------------------

def live_series(trace: MemoryTrace) -> tuple[list[float], list[int]]:
    """Bytes of live allocations after each event (times in µs); starts with the initial bytes."""
    total = trace.initial_bytes
    live: dict[int, int] = dict(trace.initial)
    times, values = [], []
    for e in trace.events:
        if e.kind == "alloc":
            live[e.addr] = e.size
            total += e.size
        else:
            total -= live.pop(e.addr, 0)
        times.append(e.time_us)
        values.append(total)
    return times, values


def allocations(trace: MemoryTrace) -> list[Allocation]:
    """Every allocation with the interval it was live, initial ones first."""
    out = [Allocation(addr, size, -1, None, None) for addr, size in trace.initial.items()]
    initial_index = {a.addr: i for i, a in enumerate(out)}
    open_: dict[int, int] = {}
    for i, e in enumerate(trace.events):
        if e.kind == "alloc":
            open_[e.addr] = len(out)
            out.append(Allocation(e.addr, e.size, i, None, e))
        elif e.addr in open_:
            j = open_.pop(e.addr)
            a = out[j]
            out[j] = Allocation(a.addr, a.size, a.start, i, a.event)
        elif e.addr in initial_index:
            j = initial_index.pop(e.addr)
            a = out[j]
            out[j] = Allocation(a.addr, a.size, -1, i, None)
    return out


def phase_at(trace: MemoryTrace, time_us: float) -> str | None:
    for p in trace.phases:
        if p.start_us <= time_us <= p.end_us:
            return p.name
    return None
