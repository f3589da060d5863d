"""The normalised trace and the timeline's bands, on a snapshot dict built by hand and on a long
random trace."""
import json
import random

import numpy as np
import pytest

from cs336_systems.memory.analysis import analyse, peak, top_allocations
from cs336_systems.memory.events import PHASE_PREFIX, MemoryEvent, MemoryTrace, Phase, live_series, trace_from_snapshot
from cs336_systems.memory.timeline import INITIAL_BAND, _thin, stack_bands, timeline_data
from cs336_systems.records import write_json_atomic

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
    snapshot, _ = synthetic_snapshot(random.Random(seed))
    del snapshot["external_annotations"]
    trace = trace_from_snapshot(snapshot, marks=[Phase("forward", 0, 45)])
    assert [p.name for p in trace.phases] == ["forward"] and trace.phase_source == "wall-clock marks"


@pytest.mark.parametrize("k", [1, 8])
def test_bands_stack_to_the_live_series(k, seed):
    snapshot, s = synthetic_snapshot(random.Random(seed))
    trace = trace_from_snapshot(snapshot)
    initial, series = expected_series(s)
    bands = stack_bands(trace, k)
    assert bands.values.sum(axis=0).tolist() == [initial] + series
    assert bands.labels[0] == INITIAL_BAND
    assert bands.values[0].tolist() == [initial] * 5 + [s["kept"]] * 3      # "old" freed at event 5
    assert len([b for b in bands.labels if b != INITIAL_BAND and not b.startswith("other")]) <= k


@pytest.mark.parametrize("k", [1, 8])
def test_timeline_data_of_a_short_trace_is_every_event(k, seed):
    snapshot, s = synthetic_snapshot(random.Random(seed))
    trace = trace_from_snapshot(snapshot)
    initial, series = expected_series(s)
    data = timeline_data(trace, k)
    json.dumps(data)                                          # the record keeps it as it is
    assert data["k"] == k and data["source"] == "torch.cuda.memory._record_memory_history"
    assert data["peak_bytes"] == max([initial] + series)
    # Trace times are µs from the first phase start (5 µs): the initial point, then each event.
    assert data["times_ms"] == [0.0, 0.005, 0.015, 0.025, 0.035, 0.045, 0.055, 0.065]
    assert data["labels"] == stack_bands(trace, k).labels and data["labels"][0] == INITIAL_BAND
    assert len(data["values_mib"]) == len(data["labels"])
    sums = np.sum(data["values_mib"], axis=0)
    assert sums == pytest.approx(np.array([initial] + series) / 2**20, abs=0.005 * len(data["labels"]))
    assert data["phases"] == [{"name": "forward", "start_ms": 0.0, "end_ms": 0.03},
                              {"name": "backward", "start_ms": 0.031, "end_ms": 0.07}]
    assert data["oom_ms"] == []


def long_trace(rng: random.Random, events: int, sites: int = 20) -> MemoryTrace:
    """A step of ``events`` allocations and frees from ``sites`` lines of code, over three phases,
    with GiB-sized blocks live before it and an allocation failure near the end."""
    initial = {10**12 + i: rng.randrange(2**30, 8 * 2**30, 512) for i in range(3)}
    live, out, t = [], [], 0.0
    for i in range(events):
        t += rng.uniform(0.5, 20.0)
        if live and (len(live) > 400 or rng.random() < 0.45):
            addr, size = live.pop(rng.randrange(len(live)))
            out.append(MemoryEvent(t, "free", addr, size))
        else:
            addr, size = i * 2**12, rng.randrange(1, 2**10) * 2**19
            live.append((addr, size))
            site = rng.randrange(sites)
            out.append(MemoryEvent(t, "alloc", addr, size, frame=f"cs336_basics/model.py:{site} f{site}"))
    bounds = [0.0, t / 3, 2 * t / 3, t]
    phases = [Phase(name, bounds[i], bounds[i + 1]) for i, name in enumerate(("forward", "backward", "optimizer"))]
    return MemoryTrace(out, initial, phases, "synthetic", oom_us=[t * 0.99], phase_source="test")


@pytest.mark.parametrize("points", [50, 250])
def test_thinning_keeps_the_peak_and_the_live_bytes_at_every_kept_time(seed, points):
    trace = long_trace(random.Random(seed), 20_000)
    times, live = live_series(trace)
    exact = stack_bands(trace)
    assert exact.times_ms[1:] == pytest.approx((np.array(times) - trace.start_us) / 1e3)
    thinned = _thin(exact, points)
    assert thinned.times_ms.size <= 2 * points + 2 < exact.times_ms.size
    total = thinned.values.sum(axis=0)
    assert total.max() == max(live)                           # the peak survives, to the byte
    assert total[0] == trace.initial_bytes and thinned.times_ms[-1] == exact.times_ms[-1]
    kept = np.searchsorted(exact.times_ms, thinned.times_ms)      # event times increase strictly
    assert total.tolist() == [([trace.initial_bytes] + live)[i] for i in kept]
    data = timeline_data(trace, points=points)
    assert data["peak_bytes"] == max(live)
    assert data["times_ms"] == [round(float(t), 3) for t in thinned.times_ms]
    sums = np.sum(data["values_mib"], axis=0)
    assert sums == pytest.approx(total / 2**20, abs=0.005 * len(data["labels"]))
    assert data["oom_ms"] == [round((trace.oom_us[0] - trace.start_us) / 1e3, 3)]
    assert [p["name"] for p in data["phases"]] == ["forward", "backward", "optimizer"]


def test_a_long_trace_keeps_the_record_small(tmp_path, seed):
    """The bands go into the committed record, whose writer puts every number on its own line: with
    every band busy all the time (the worst case), the bands stay under 100 KB."""
    trace = long_trace(random.Random(seed), 50_000)
    path = write_json_atomic(tmp_path / "record.json", {"timeline": timeline_data(trace)})
    assert len(json.loads(path.read_text())["timeline"]["labels"]) == 1 + 3 + 8     # initial, others, k sites
    assert path.stat().st_size < 100_000


def test_analysis_series_keeps_the_peak(seed):
    snapshot, s = synthetic_snapshot(random.Random(seed))
    result = analyse(trace_from_snapshot(snapshot))
    assert max(v for _, v in result["series"]) == max(expected_series(s)[1])
    assert result["initial_bytes"] == s["kept"] + s["old"]
