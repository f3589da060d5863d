"""The normalised trace and the timeline renderer, on a snapshot dict built by hand."""
import random

import numpy as np
import pytest

from cs336_systems.memory.analysis import analyse, peak, top_allocations
from cs336_systems.memory.events import PHASE_PREFIX, live_series, trace_from_snapshot
from cs336_systems.memory.timeline import INITIAL_BAND, render_timeline, stack_bands

OUR_FRAME = {"name": "softmax", "filename": "/somewhere/cs336-basics/cs336_basics/model.py", "line": 90}
OP_FRAME = {"name": "at::_ops::exp::call(at::Tensor const&)", "filename": "??", "line": 0}
INNER_OP = {"name": "at::_ops::empty_strided::call(c10::ArrayRef<long>)", "filename": "??", "line": 0}
NODE_FRAME = {"name": "torch::autograd::generated::MmBackward0::apply(std::vector<at::Tensor>&&)", "filename": "", "line": 0}
TORCH_FRAME = {"name": "forward", "filename": "/site-packages/torch/nn/modules/module.py", "line": 1}


def _entry(action, addr, size, t, frames=()):
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t, "frames": list(frames)}


def synthetic_snapshot(rng: random.Random):
    """Two blocks live before the trace (one never touched, one freed in it), three allocations
    (one address reused), free_requested before free_completed, a segment event to ignore."""
    s = {name: rng.randrange(1, 1000) * 512 for name in ("kept", "old", "a", "b", "c")}
    trace = [
        _entry("segment_alloc", 9000, 2**21, 1),
        _entry("alloc", 3000, s["a"], 10, [INNER_OP, OUR_FRAME, OP_FRAME, TORCH_FRAME]),
        _entry("alloc", 4000, s["b"], 20, [TORCH_FRAME, OP_FRAME]),
        _entry("free_requested", 3000, s["a"], 25),
        _entry("free_completed", 3000, s["a"], 30),
        _entry("alloc", 3000, s["c"], 40, [NODE_FRAME, OP_FRAME]),
        _entry("free_completed", 2000, s["old"], 50),
        _entry("free_completed", 4000, s["b"], 60),
        _entry("free_completed", 3000, s["c"], 70),
    ]
    segments = [{"device": 0, "address": 1000, "total_size": 2**21, "blocks": [
        {"address": 1000, "size": s["kept"], "state": "active_allocated", "frames": []},
        {"address": 1000 + s["kept"], "size": 2**21 - s["kept"], "state": "inactive", "frames": []}]}]
    annotations = [{"stage": "START", "name": PHASE_PREFIX + "forward", "device": 0, "time_us": 5},
                   {"stage": "END", "name": PHASE_PREFIX + "forward", "device": 0, "time_us": 35},
                   {"stage": "START", "name": "Optimizer.step#AdamW.step", "device": 0, "time_us": 36},
                   {"stage": "START", "name": PHASE_PREFIX + "backward", "device": 0, "time_us": 36},
                   {"stage": "END", "name": PHASE_PREFIX + "backward", "device": 0, "time_us": 75}]
    return {"segments": segments, "device_traces": [trace], "external_annotations": annotations}, s


def expected_series(s):
    initial = s["kept"] + s["old"]
    steps = [+s["a"], +s["b"], -s["a"], +s["c"], -s["old"], -s["b"], -s["c"]]
    return initial, list(np.cumsum([initial] + steps)[1:])


def test_live_series_and_peak_match_the_hand_built_sequence(seed):
    rng = random.Random(seed)
    snapshot, s = synthetic_snapshot(rng)
    trace = trace_from_snapshot(snapshot)
    initial, series = expected_series(s)
    assert trace.initial == {1000: s["kept"], 2000: s["old"]}
    times, values = live_series(trace)
    assert values == series
    assert times == [10, 20, 30, 40, 50, 60, 70]
    p = peak(trace)
    assert p["bytes"] == max(series)
    assert p["phase"] == ("forward" if series.index(max(series)) < 3 else "backward")
    assert [ph.name for ph in trace.phases] == ["forward", "backward"]
    assert trace.phase_source.startswith("record_function")


def test_frames_ops_and_autograd_nodes_are_labelled(seed):
    snapshot, s = synthetic_snapshot(random.Random(seed))
    allocs = [e for e in trace_from_snapshot(snapshot).events if e.kind == "alloc"]
    assert allocs[0].frame == "cs336_basics/model.py:90 softmax"
    assert allocs[0].op == "exp"                  # the op called, not the allocation inside it
    assert allocs[1].frame is None and allocs[1].op == "exp"
    assert allocs[2].node == "MmBackward0"
    rows = top_allocations(trace_from_snapshot(snapshot), "forward")
    assert sorted(r["size_bytes"] for r in rows) == sorted([s["a"], s["b"]])


def test_free_requested_is_the_fallback_when_no_free_completes(seed):
    snapshot, s = synthetic_snapshot(random.Random(seed))
    trace_entries = [e for e in snapshot["device_traces"][0] if e["action"] != "free_requested"]
    snapshot["device_traces"][0] = [{**e, "action": "free_requested"} if e["action"] == "free_completed" else e
                                    for e in trace_entries]
    _, series = expected_series(s)
    assert live_series(trace_from_snapshot(snapshot))[1] == series


def test_wall_clock_marks_are_used_without_annotations(seed):
    from cs336_systems.memory.events import Phase

    snapshot, _ = synthetic_snapshot(random.Random(seed))
    del snapshot["external_annotations"]
    trace = trace_from_snapshot(snapshot, marks=[Phase("forward", 0, 45)])
    assert [p.name for p in trace.phases] == ["forward"] and trace.phase_source == "wall-clock marks"


@pytest.mark.parametrize("k", [1, 8])
def test_rendered_bands_stack_to_the_live_series(tmp_path, k, seed):
    snapshot, s = synthetic_snapshot(random.Random(seed))
    trace = trace_from_snapshot(snapshot)
    initial, series = expected_series(s)
    path = tmp_path / "timeline.png"
    bands = render_timeline(trace, path, "synthetic")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert bands.values.sum(axis=0).tolist() == [initial] + series
    assert bands.labels[0] == INITIAL_BAND
    assert bands.values[0].tolist() == [initial] * 5 + [s["kept"]] * 3      # "old" freed at event 5
    small = stack_bands(trace, k)
    assert small.values.sum(axis=0).tolist() == [initial] + series
    assert len([b for b in small.labels if b != INITIAL_BAND and not b.startswith("other")]) <= k


def test_analysis_series_keeps_the_peak(seed):
    snapshot, s = synthetic_snapshot(random.Random(seed))
    result = analyse(trace_from_snapshot(snapshot))
    assert max(v for _, v in result["series"]) == max(expected_series(s)[1])
    assert result["initial_bytes"] == s["kept"] + s["old"]
