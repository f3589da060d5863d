"""The A5 report on synthetic records, one of them out of memory, and the timelines it draws."""
from pathlib import Path
import json
import random
import struct

import numpy as np
import pandas as pd
import pytest

from cs336_systems.memory.events import MemoryEvent, MemoryTrace, Phase
from cs336_systems.memory.timeline import INITIAL_BAND, timeline_data
from cs336_systems.report import a5, a5_timeline

TEMPLATES = Path(__file__).resolve().parents[2] / "writeup" / "templates"

PROVENANCE = {"gpu": "test GPU", "host": "h", "commit": "0" * 40, "dirty": False, "torch": "x", "utc": "2026-01-01T00:00:00"}


def synthetic_timeline(rng: random.Random, events: int = 300, oom: bool = False) -> dict:
    """What a record keeps of a step: ``timeline_data`` of a random trace over three phases."""
    live, out = [], []
    for i in range(events):
        if live and rng.random() < 0.45:
            addr, size = live.pop(rng.randrange(len(live)))
            out.append(MemoryEvent(float(i), "free", addr, size))
        else:
            size, site = rng.randrange(1, 64) * 2**20, rng.randrange(12)
            live.append((i, size))
            out.append(MemoryEvent(float(i), "alloc", i, size, frame=f"cs336_basics/model.py:{site} f"))
    phases = [Phase("forward", 0, 100), Phase("backward", 101, 200), Phase("optimizer", 201, events)]
    trace = MemoryTrace(out, {-1: rng.randrange(2, 5) * 2**30}, phases, "synthetic source",
                        oom_us=[events - 1.0] if oom else [])
    return timeline_data(trace)


def record(context, mode, precision, peak=None, status="ok", timeline=None):
    params = {"size": "2.7B", "d_model": 2560, "num_layers": 32, "context": context, "batch": 4, "mode": mode,
              "precision": precision, "warmup": 2, "device": "cuda"}
    metrics = {}
    if status == "ok":
        metrics = {"source": "torch.cuda.memory._record_memory_history", "phase_source": "wall-clock marks",
                   "initial_bytes": 3 * 2**30, "peak": {"bytes": peak, "time_ms": 1.0, "phase": "forward", "event": 3},
                   "phases": [{"name": "forward", "start_ms": 0.0, "end_ms": 2.0, "bytes_at_start": 3 * 2**30,
                               "bytes_at_end": peak, "peak_bytes": peak, "allocated_bytes": 1, "freed_bytes": 0,
                               "events": 2}],
                   "top_allocations": [{"size_bytes": 2**27, "count": 32, "frame": "cs336_basics/model.py:90 softmax",
                                        "op": "exp", "node": None}],
                   "max_allocated_bytes": peak, "max_reserved_bytes": peak + 2**20}
    r = {"id": "A5", "params": params, "metrics": metrics, "status": status, "provenance": PROVENANCE,
         "timeline": timeline, "artifacts": {"snapshot": None}}
    if status == "oom":
        r["message"] = "OutOfMemoryError: CUDA out of memory"
    return r


def write(tmp_path, records):
    """Each record as ``records/<point>.json``, named as the measuring rule names it."""
    paths = []
    (tmp_path / "records").mkdir()
    for r in records:
        p = r["params"]
        path = tmp_path / "records" / f"ctx{p['context']}_{p['mode']}_{p['precision']}.json"
        path.write_text(json.dumps(r))
        paths.append(str(path))
    return paths


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_tables_summary_and_oom(tmp_path, seed):
    rng = random.Random(seed)
    peaks = {(c, m, p): rng.randrange(4 * 2**30, 60 * 2**30) for c in (128, 512) for m in ("forward", "train-step")
             for p in ("fp32", "bf16")}
    records = [record(c, m, p, peak) for (c, m, p), peak in peaks.items() if (c, m, p) != (512, "train-step", "fp32")]
    records.append(record(512, "train-step", "fp32", status="oom"))
    paths = write(tmp_path, records)
    out = tmp_path / "A5"
    assert a5.main(["--records", *paths, "--out-dir", str(out)]) == 0
    fp32 = pd.read_csv(out / "peak_fp32.csv", keep_default_na=False, dtype=str)
    assert fp32["context"].tolist() == ["128", "512"]
    assert fp32.loc[1, "full train step peak (MiB)"] == "OOM"
    assert fp32.loc[0, "forward peak (MiB)"] == f"{peaks[(128, 'forward', 'fp32')] / 2**20:,.1f}"
    bf16 = pd.read_csv(out / "peak_bf16.csv", keep_default_na=False, dtype=str)
    assert bf16.loc[1, "full train step peak (MiB)"] == f"{peaks[(512, 'train-step', 'bf16')] / 2**20:,.1f}"
    summary = json.loads((out / "summary.json").read_text())
    # (d): 4 x 128 x 2560 x 4 bytes is exactly 5 MiB; four times the context, four times the bytes.
    assert [r["mib"] for r in summary["residual"]] == [5.0, 20.0]
    assert summary["not_ok"] == ["context 512 train-step fp32: oom (OutOfMemoryError: CUDA out of memory)"]
    assert summary["timelines"][0]["path"] == "timelines/ctx128_forward_fp32.png"
    assert sorted(t["path"] for t in summary["timelines"]) == sorted(
        f"timelines/{Path(p).stem}.png" for p in paths)
    assert sorted(p.name for p in (out / "timelines").iterdir()) == sorted(f"{Path(p).stem}.png" for p in paths)
    assert summary["top_context"] == 512 and summary["top_precision"] == "fp32"
    assert summary["allocator_check"]["max_relative_difference"] == 0
    ratios = {(r["mode"], r["context"]): r["ratio"] for r in summary["bf16_vs_fp32"]}
    assert ratios[("forward", 128)] == pytest.approx(peaks[(128, "forward", "bf16")] / peaks[(128, "forward", "fp32")])
    assert ("train-step", 512) not in ratios
    assert "cs336_basics/model.py:90 softmax" in (out / "top_allocations.md").read_text()


@pytest.mark.parametrize("follows", [True, False])
def test_the_lowest_bf16_ratio_is_set_against_the_step_s_own_part_of_the_fp32_peak(seed, follows):
    """Autocast can shrink only what lies above what was live before the step; the section says whether
    the lowest bf16/fp32 ratio is where that part is the largest share of fp32's peak (checked, not
    assumed), and names the points where bf16's peak is above fp32's by more than ``ABOVE``."""
    rng = random.Random(seed)
    before, GIB = 3 * 2**30, 2**30
    own = {(128, "forward"): rng.uniform(0.1, 0.5), (512, "forward"): rng.uniform(0.6, 1.0),
           (128, "train-step"): rng.uniform(2, 4), (512, "train-step"): rng.uniform(8, 12)}
    largest = (512, "train-step")
    lowest = largest if follows else (128, "forward")
    ratio = {point: (0.80 if point == lowest else rng.uniform(0.9, 0.99)) for point in own}
    ratio[(128, "train-step")] = 1 + 2 * a5.ABOVE        # above fp32's where it shows
    records = []
    for (context, mode), gib in own.items():
        fp32 = before + int(gib * GIB)
        records += [record(context, mode, "fp32", fp32), record(context, mode, "bf16", int(ratio[(context, mode)] * fp32))]
    for r in records:
        r["metrics"]["initial_bytes"] = before
    read = a5.ratios_read(a5.precision_ratios(records))
    assert (read.lowest.context, read.lowest.mode) == lowest
    assert read.follows is follows
    assert [(r.context, r.mode) for r in read.above] == [(128, "train-step")]
    shares = {(r.context, r.mode): r.step_share for r in a5.precision_ratios(records)}
    assert shares[largest] == pytest.approx(own[largest] * GIB / (before + own[largest] * GIB), rel=1e-6)


def test_a_timeline_per_record_and_a_note_where_there_is_none(tmp_path, monkeypatch, seed):
    """Each record's PNG is drawn from the bands it keeps; a step that recorded nothing gets a note
    saying so instead."""
    rng = random.Random(seed)
    drawn, notes = {}, {}
    monkeypatch.setattr(a5, "draw", lambda t, path, title, allocations=(): (
        drawn.__setitem__(Path(path).name, (t, title)), a5_timeline.draw(t, path, title, allocations)))
    monkeypatch.setattr(a5, "draw_placeholder", lambda path, title, message: (
        notes.__setitem__(Path(path).name, message), a5_timeline.draw_placeholder(path, title, message)))
    ok = record(128, "forward", "fp32", 2**30, timeline=synthetic_timeline(rng))
    oom_late = record(128, "train-step", "fp32", status="oom", timeline=synthetic_timeline(rng, oom=True))
    oom_early = record(512, "train-step", "fp32", status="oom")                       # "timeline": None
    paths = write(tmp_path, [ok, oom_late, oom_early])
    out = tmp_path / "A5"
    assert a5.main(["--records", *paths, "--out-dir", str(out)]) == 0
    assert drawn == {"ctx128_forward_fp32.png": (ok["timeline"], "A5 active memory: 2.7B, context 128, batch 4, "
                                                                  "forward, fp32"),
                     "ctx128_train-step_fp32.png": (oom_late["timeline"], "A5 active memory: 2.7B, context 128, "
                                                                          "batch 4, train-step, fp32 (out of memory)")}
    assert notes == {"ctx512_train-step_fp32.png": "OOM: OutOfMemoryError: CUDA out of memory"}
    sizes = {name: png_size(out / "timelines" / name) for name in [*drawn, *notes]}
    assert all(sizes[t][1] > 1.5 * sizes[n][1] for t in drawn for n in notes)      # a plot, not a line of text
    summary = json.loads((out / "summary.json").read_text())
    assert [(t["path"], t["status"]) for t in summary["timelines"]] == [
        ("timelines/ctx128_forward_fp32.png", "ok"), ("timelines/ctx128_train-step_fp32.png", "oom"), ("timelines/ctx512_train-step_fp32.png", "oom")]


@pytest.mark.parametrize("gib", [False, True])
def test_the_drawing_stacks_the_stored_bands(monkeypatch, seed, gib):
    """What ``draw`` puts on the axes: the bands stacked in order (legend top to bottom), the top
    edge their sum, the exact peak as a dashed line in the unit the peak calls for, the phases
    named, an out-of-memory line."""
    timeline = synthetic_timeline(random.Random(seed), oom=True)
    if not gib:     # a small step: everything in MiB
        timeline["values_mib"] = [[round(v / 64, 2) for v in row] for row in timeline["values_mib"]]
        timeline["peak_bytes"] //= 64
    saved = []
    monkeypatch.setattr(a5_timeline, "save_figure", lambda fig, path: saved.append(fig))
    a5_timeline.draw(timeline, "unused.png", "title")
    (ax,) = saved[0].axes
    unit, scale = ("GiB", 1024) if gib else ("MiB", 1)
    assert timeline["peak_bytes"] >= 2 * 2**30 if gib else timeline["peak_bytes"] < 2 * 2**30
    floor = a5_timeline.y_floor(timeline) / scale
    assert ax.get_ylabel() == f"live allocations ({unit})" + (f", axis from {floor:,.1f}" if floor else "")
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        a5_timeline.legend_name(b, []) for b in timeline["labels"][::-1]]
    assert timeline["labels"][0] == INITIAL_BAND
    edge = [line for line in ax.lines if line.get_drawstyle() == "steps-post"]
    assert len(edge) == 1
    np.testing.assert_allclose(edge[0].get_ydata(), np.sum(timeline["values_mib"], axis=0) / scale)
    peak = timeline["peak_bytes"] / 2**20 / scale
    assert [line.get_ydata()[0] for line in ax.lines if line.get_linestyle() == "--"] == [peak]
    texts = [t.get_text() for t in ax.texts]
    assert f"peak {peak:,.2f} {unit}" in texts
    assert {"forward", "backward", "optimizer", " out of memory"} <= set(texts)
    assert [line.get_xdata()[0] for line in ax.lines if line.get_color() == "red"] == timeline["oom_ms"]
    assert ax.get_ylim() == pytest.approx((floor, floor + (peak - floor) * 1.12))


def test_a_step_that_adds_little_to_what_was_live_gets_an_axis_from_near_that(monkeypatch, seed):
    """A forward pass over the weights: what was live before is most of the peak, so the axis starts
    just below it and says so; from zero its rise would be a sliver on a slab. Where the step itself
    holds most of the peak the axis starts at zero."""
    timeline = synthetic_timeline(random.Random(seed), oom=False)
    before = timeline["labels"].index(INITIAL_BAND)
    rise = max(sum(col) for col in zip(*timeline["values_mib"])) - min(timeline["values_mib"][before])
    for share, floored in ((0.9, True), (0.3, False)):
        least = rise * share / (1 - share)              # what was live: `share` of the peak
        shifted = dict(timeline, values_mib=list(timeline["values_mib"]))
        shifted["values_mib"][before] = [v - min(timeline["values_mib"][before]) + least
                                         for v in timeline["values_mib"][before]]
        shifted["peak_bytes"] = int(max(sum(col) for col in zip(*shifted["values_mib"])) * 2**20)
        saved = []
        monkeypatch.setattr(a5_timeline, "save_figure", lambda fig, path: saved.append(fig))
        a5_timeline.draw(shifted, "unused.png", "title")
        (ax,) = saved[0].axes
        scale = 1024 if shifted["peak_bytes"] >= 2 * 2**30 else 1
        expected = 0.95 * least / scale if floored else 0.0
        assert ax.get_ylim()[0] == pytest.approx(expected, rel=1e-6)
        assert ("axis from" in ax.get_ylabel()) is floored


def test_missing_file_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit):
        a5.main(["--records", str(tmp_path / "missing.json"), "--out-dir", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert "missing.json" in err[-1] and "Traceback" not in "".join(err)


def test_section_renders_from_the_summary(tmp_path):
    from cs336_systems.report.writeup import Renderer

    records = [record(c, m, "fp32", 10 * 2**30) for c in (128, 512) for m in ("forward", "train-step")]
    records[-1] = record(512, "train-step", "fp32", status="oom")
    paths = write(tmp_path, records)
    out = tmp_path / "A5"
    a5.main(["--records", *paths, "--out-dir", str(out)])
    text = Renderer("md", tmp_path / "w" / "writeup.md", TEMPLATES).section("A5", out / "summary.json")
    assert "| OOM" in text or "OOM |" in text
    assert "4 × 512 × 2560 × 4 B = 20.00 MB" in text
    assert text.count("![A5: active memory") == 4


@pytest.mark.parametrize("gpu_ms", [None, 7.5])
def test_phase_times_name_their_clock(tmp_path, gpu_ms):
    """A5's phase spans are the host's clock (when work was issued); the GPU's time per phase is
    shown beside them only where the record has it, and the text says which the reader sees."""
    from cs336_systems.report.writeup import Renderer

    r = record(128, "forward", "fp32", 4 * 2**30)
    if gpu_ms is not None:
        r["metrics"]["phase_gpu_ms"] = {"forward": gpu_ms}
    paths = write(tmp_path, [r])
    out = tmp_path / "A5"
    a5.main(["--records", *paths, "--out-dir", str(out)])
    (phase,) = json.loads((out / "summary.json").read_text())["phases"][0]["phases"]
    assert phase["host_ms"] == 2.0 and phase["gpu_ms"] == gpu_ms
    text = Renderer("md", tmp_path / "w" / "writeup.md", TEMPLATES).section("A5", out / "summary.json")
    assert "Forward (2.0 ms host" in text
    assert ("7.5 ms GPU" in text) == (gpu_ms is not None)
    assert ("issue times, not run times" in text) == (gpu_ms is None)


@pytest.mark.gpu
def test_phase_marks_time_the_gpu_work_of_each_phase():
    import time

    import torch

    from cs336_systems.memory.snapshot import PhaseMarks

    marks = PhaseMarks(torch.device("cuda"))
    a = torch.randn(4096, 4096, device="cuda")
    with marks("forward"):
        for _ in range(20):
            a = a @ a / 64
    started = time.perf_counter()
    torch.cuda.synchronize()
    waited_ms = (time.perf_counter() - started) * 1e3
    gpu = marks.gpu_ms()["forward"]
    host = marks.phases[0].end_us - marks.phases[0].start_us
    # 20 matmuls of 4096³ are ~2.7 TFLOP: the GPU time exceeds the host's issue time, which returns early
    assert gpu > host / 1e3 and gpu >= waited_ms * 0.5


def test_the_answer_is_read_off_the_rows_it_summarises():
    mib = 1024.0
    phases = [a5.Step(c, m, "fp32", 30 * mib, peak * mib, None, [], [])
              for c, m, peak in ((128, "forward", 12.0), (512, "forward", 14.0), (128, "train-step", 50.0),
                                 (512, "train-step", 70.0))]
    phases.append(a5.Step(128, "train-step", "bf16", 1.0, 999 * mib, None, [], []))
    ratios = [a5.Ratio("forward", 128, 0.93, 0.01), a5.Ratio("forward", 512, 1.02, 0.04)]
    top = [{"size_bytes": 2**27, "count": 32, "op": "matmul", "node": None, "frame": "m.py:1"},
           {"size_bytes": 2**27, "count": 32, "op": "exp", "node": None, "frame": "m.py:2"},
           {"size_bytes": 2**20, "count": 99, "op": "add", "node": None, "frame": "m.py:3"}]
    a = a5.answer(phases, ratios)
    assert a.train_peak_gib == [50.0, 70.0] and a.forward_peak_gib == [12.0, 14.0]
    assert a.live_before_gib == 30.0 and a.contexts == [128, 512] and a.bf16_ratio == [0.93, 1.02]
    assert a5.largest(top) == a5.Largest(128.0, 64, ["matmul", "exp"])
    assert a5.answer([p for p in phases if p.precision == "bf16"], []) is None
    # what was live before is named the training state only where it is three copies of the parameters
    assert not a.live_before_is_state and a.live_before_copies is None
    named = a5.answer(phases, ratios, copy_mib=10 * mib)
    assert named.live_before_copies == pytest.approx(3.0) and named.live_before_is_state
    assert not a5.answer(phases, ratios, copy_mib=8 * mib).live_before_is_state      # 3.75 copies


def test_a_band_is_named_by_the_operations_that_allocated_at_its_code_site():
    """The legend names what a code site computed (from the record's largest allocations), not only
    its file and line; bands that are not a code site keep their names."""
    allocations = [{"frame": "cs336_basics/model.py:129 scaled_dot_product_attention", "op": "matmul"},
                   {"frame": "cs336_basics/model.py:129 scaled_dot_product_attention", "op": "div_Tensor"},
                   {"frame": "cs336_basics/model.py:89 softmax", "op": "exp"},
                   {"frame": "cs336_basics/model.py:131 scaled_dot_product_attention", "op": "masked_fill_Scalar"},
                   {"frame": "cs336_basics/model.py:129 scaled_dot_product_attention", "op": "matmul"}]
    name = a5_timeline.legend_name
    assert name("cs336_basics/model.py:129 scaled_dot_product_attention", allocations) == \
        "scaled_dot_product_attention: matmul, div (model.py:129)"
    assert name("cs336_basics/model.py:89 softmax", allocations) == "softmax: exp (model.py:89)"
    assert name("cs336_basics/model.py:131 scaled_dot_product_attention", allocations) == \
        "scaled_dot_product_attention: masked_fill (model.py:131)"
    assert name("cs336_basics/model.py:50 forward", allocations) == "forward (model.py:50)"
    for band in (INITIAL_BAND, "other, allocated in forward", "MmBackward0 (autograd)", "aten::mm", "unattributed"):
        assert name(band, allocations) == band


def train_step(context, initial, kept, left, rises):
    """A fp32 train-step record built from what its phases do: forward keeps ``kept`` bytes for
    backward, backward ends with ``left`` above what was live before, the optimizer step ends where
    it began; each phase rises by its entry of ``rises`` above its start. The peak is the highest."""
    marks = [("forward", initial, initial + kept), ("backward", initial + kept, initial + left),
             ("optimizer", initial + left, initial + left)]
    phases = [{"name": name, "start_ms": float(i), "end_ms": i + 1.0, "bytes_at_start": start, "bytes_at_end": end,
               "peak_bytes": start + rise, "allocated_bytes": 1, "freed_bytes": 1, "events": 2}
              for i, ((name, start, end), rise) in enumerate(zip(marks, rises))]
    top = max(phases, key=lambda p: p["peak_bytes"])
    r = record(context, "train-step", "fp32", top["peak_bytes"])
    r["metrics"].update(initial_bytes=initial, phases=phases,
                        peak={"bytes": top["peak_bytes"], "time_ms": 1.0, "phase": top["name"], "event": 3})
    return r


@pytest.mark.parametrize("case", ["gradients", "not the gradients", "a rise decides"])
def test_the_peak_is_named_by_what_the_phases_left_and_added(tmp_path, seed, case):
    """What a training step's peak holds above what was live before it comes from its phases' marks:
    in the optimizer step, what forward and backward left (named the gradients only where it is one
    fp32 copy of the parameters) and the optimizer's rise; in backward, what forward kept and
    backward's rise. The words say which is larger, and where a phase's rise, not the larger of the
    two, put the peak."""
    rng = random.Random(seed)
    grads = a5.gradient_mib("2.7B") * 2**20
    left = grads * (rng.uniform(1.05, 1.5) if case == "not the gradients" else 1)
    initial = rng.randrange(20, 40) * 2**30
    steps = {}
    for context, kept_share in ((128, rng.uniform(0.2, 0.6)), (512, rng.uniform(1.5, 3))):
        rises = [rng.uniform(0.001, 0.02) * grads for _ in range(3)]
        steps[context] = (kept_share * left, rises)
    if case == "a rise decides":        # forward keeps a little more than backward leaves; the optimizer rises more
        kept, rises = steps[128]
        steps[128] = (left * 1.01, [rises[0], 0.0, left * 0.05])
    records = [train_step(c, initial, kept, left, rises) for c, (kept, rises) in steps.items()]
    out = tmp_path / "A5"
    assert a5.main(["--records", *write(tmp_path, records), "--out-dir", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    carried = a5.GRADIENTS if case != "not the gradients" else a5.LEFT
    for s in summary["phases"]:
        kept, rises = steps[s["context"]]
        at_optimizer = left + rises[2] > kept + rises[1]
        assert s["peak_phase"] == ("optimizer" if at_optimizer else "backward")
        expected = [(carried, left / 2**20), (a5.ADDED, rises[2] / 2**20)] if at_optimizer else \
            [(a5.KEPT, kept / 2**20), (a5.ADDED, rises[1] / 2**20)]
        assert [(p["what"], p["mib"]) for p in s["peak_parts"]] == [
            (w, pytest.approx(m)) for w, m in sorted(expected, key=lambda e: -e[1])]
    tp = summary["train_peaks"]
    assert tp["left_is_gradients"] is (case != "not the gradients")
    assert tp["on_smaller"] == ([128] if case == "a rise decides" else [])
    from cs336_systems.report.writeup import Renderer
    text = Renderer("md", tmp_path / "w" / "writeup.md", TEMPLATES).section("A5", out / "summary.json")
    assert ("the gradients (one fp32 copy of the\nparameters" in text) is (case != "not the gradients")
    assert ("At every context the step peaks on the larger of the two." in text) is (case != "a rise decides")
    assert ("At context 128 it peaks on the smaller of the two" in text) is (case == "a rise decides")
    assert "grow with the weights" not in text
