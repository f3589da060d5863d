"""The A5 report on synthetic records, one of them out of memory."""
from pathlib import Path
import json
import random

import pandas as pd
import pytest

from cs336_systems.report import a5

TEMPLATES = Path(__file__).resolve().parents[2] / "writeup" / "templates"

PROVENANCE = {"gpu": "test GPU", "host": "h", "commit": "0" * 40, "dirty": False, "torch": "x", "utc": "2026-01-01T00:00:00"}


def record(context, mode, precision, peak=None, status="ok"):
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
    name = f"ctx{context}_{mode}_{precision}.png"
    r = {"id": "A5", "params": params, "metrics": metrics, "status": status, "provenance": PROVENANCE,
         "artifacts": {"timeline": name, "snapshot": None}}
    if status == "oom":
        r["message"] = "OutOfMemoryError: CUDA out of memory"
    return r


def write(tmp_path, records):
    paths, pngs = [], []
    (tmp_path / "A5" / "timelines").mkdir(parents=True)
    for i, r in enumerate(records):
        path = tmp_path / f"r{i}.json"
        path.write_text(json.dumps(r))
        paths.append(str(path))
        png = tmp_path / "A5" / "timelines" / r["artifacts"]["timeline"]
        png.write_bytes(b"\x89PNG")
        pngs.append(str(png))
    return paths, pngs


def test_tables_summary_and_oom(tmp_path, seed):
    rng = random.Random(seed)
    peaks = {(c, m, p): rng.randrange(4 * 2**30, 60 * 2**30) for c in (128, 512) for m in ("forward", "train-step")
             for p in ("fp32", "bf16")}
    records = [record(c, m, p, peak) for (c, m, p), peak in peaks.items() if (c, m, p) != (512, "train-step", "fp32")]
    records.append(record(512, "train-step", "fp32", status="oom"))
    paths, pngs = write(tmp_path, records)
    out = tmp_path / "A5"
    assert a5.main(["--records", *paths, "--timelines", *pngs, "--out-dir", str(out)]) == 0
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
    assert summary["top_context"] == 512 and summary["top_precision"] == "fp32"
    assert summary["allocator_check"]["max_relative_difference"] == 0
    ratios = {(r["mode"], r["context"]): r["ratio"] for r in summary["bf16_vs_fp32"]}
    assert ratios[("forward", 128)] == pytest.approx(peaks[(128, "forward", "bf16")] / peaks[(128, "forward", "fp32")])
    assert ("train-step", 512) not in ratios
    assert "cs336_basics/model.py:90 softmax" in (out / "top_allocations.md").read_text()


def test_missing_timeline_or_file_is_one_line(tmp_path, capsys):
    paths, pngs = write(tmp_path, [record(128, "forward", "fp32", 2**30)])
    with pytest.raises(SystemExit):
        a5.main(["--records", *paths, "--timelines", str(tmp_path / "other.png"), "--out-dir", str(tmp_path / "o")])
    assert "no timeline 'ctx128_forward_fp32.png'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        a5.main(["--records", str(tmp_path / "missing.json"), "--timelines", *pngs, "--out-dir", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert "missing.json" in err[-1] and "Traceback" not in "".join(err)


def test_section_renders_from_the_summary(tmp_path):
    from cs336_systems.report.writeup import Renderer

    records = [record(c, m, "fp32", 10 * 2**30) for c in (128, 512) for m in ("forward", "train-step")]
    records[-1] = record(512, "train-step", "fp32", status="oom")
    paths, pngs = write(tmp_path, records)
    out = tmp_path / "A5"
    a5.main(["--records", *paths, "--timelines", *pngs, "--out-dir", str(out)])
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
    paths, pngs = write(tmp_path, [r])
    out = tmp_path / "A5"
    a5.main(["--records", *paths, "--timelines", *pngs, "--out-dir", str(out)])
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
