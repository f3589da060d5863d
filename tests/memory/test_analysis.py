"""The analysis on an excerpt of a real CUDA snapshot (small model, one bf16 train step, H100)."""
import gzip
import json
from pathlib import Path

from cs336_systems.memory.analysis import analyse, top_allocations
from cs336_systems.memory.events import live_series, trace_from_snapshot

FIXTURE = Path(__file__).parent / "data" / "cuda_snapshot_excerpt.json.gz"


def load():
    with gzip.open(FIXTURE, "rt") as f:
        return json.load(f)


def test_every_allocation_names_its_innermost_frame_in_our_packages():
    snapshot = load()
    raw = [e for e in snapshot["device_traces"][0] if e["action"] == "alloc"]
    events = [e for e in trace_from_snapshot(snapshot).events if e.kind == "alloc"]
    assert len(raw) == len(events) > 100
    for r, e in zip(raw, events):
        ours = [f for f in r["frames"] if "/cs336_basics/" in f["filename"] or "/cs336_systems/" in f["filename"]]
        if ours:
            path = ours[0]["filename"].split("/cs336-basics/")[-1].split("/src/")[-1]
            assert e.frame == f"{path}:{ours[0]['line']} {ours[0]['name']}"
        else:
            assert e.frame is None
    assert sum(e.frame is not None and e.frame.startswith("cs336_basics/model.py") for e in events) > 50


def test_top_allocations_are_the_largest_sizes_with_their_counts():
    snapshot = load()
    raw = [e for e in snapshot["device_traces"][0] if e["action"] == "alloc"]
    rows = top_allocations(trace_from_snapshot(snapshot), phase=None, k=5)
    largest = max(e["size"] for e in raw)
    assert rows[0]["size_bytes"] == largest
    assert sum(r["count"] for r in rows if r["size_bytes"] == largest) == sum(e["size"] == largest for e in raw)
    assert [r["size_bytes"] for r in rows] == sorted((r["size_bytes"] for r in rows), reverse=True)
    assert any(r["frame"] and r["frame"].startswith("cs336_basics/") for r in rows)


def test_initial_memory_is_what_the_snapshot_holds_untouched():
    snapshot = load()
    touched = {e["addr"] for e in snapshot["device_traces"][0]}
    kept = sum(b["size"] for seg in snapshot["segments"] for b in seg["blocks"]
               if b["state"] == "active_allocated" and b["address"] not in touched)
    trace = trace_from_snapshot(snapshot)
    assert trace.initial_bytes == kept > 0
    result = analyse(trace, top_phase=None)
    assert result["peak"]["bytes"] == max(live_series(trace)[1])
    assert result["source"] == "torch.cuda.memory._record_memory_history"
