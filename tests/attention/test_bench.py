"""B5 benchmark and report on the CPU: records per (sequence, pass), skips, FLOP counts, ratios."""
from pathlib import Path
import json

import pytest
import torch

from cs336_systems.attention import bench
from cs336_systems.records import make_record
from cs336_systems.report import b5

TEMPLATES = Path(__file__).resolve().parents[2] / "writeup" / "templates"


def test_causal_flops_closed_form():
    # QKᵀ and PV: 2·N²·d multiply-adds each = 4·N²·d FLOPs, halved by the causal mask.
    assert bench.causal_flops(2, 128, 64, "forward") == 2 * 128 * 128 * 64 * 2
    assert bench.causal_flops(1, 10, 16, "backward") == 2.5 * bench.causal_flops(1, 10, 16, "forward")
    assert bench.causal_flops(1, 10, 16, "forward-backward") == 3.5 * bench.causal_flops(1, 10, 16, "forward")


# The benchmark's own device. Asking for "cpu" on a CUDA machine would switch the whole test
# process to Triton's interpreter (bench sets TRITON_INTERPRET for CPU runs) and spoil later tests.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def test_leaderboard_times_the_case_then_its_forward_and_backward(tmp_path):
    out = tmp_path / "board.json"
    assert bench.main(["leaderboard", "--shape", "1", "40", "16", "--warmup-ms", "1", "--rep-ms", "5",
                       "--device", DEVICE, "--out", str(out)]) == 0
    records = json.loads(out.read_text())
    ours = {r["params"]["pass"]: r for r in records if r["params"]["impl"] == "ours"}
    assert list(ours) == list(bench.LEADERBOARD_PASSES) and all(r["status"] == "ok" for r in ours.values())
    assert len(records) == 3 * len(bench.LEADERBOARD_PASSES)


def test_grid_row(tmp_path):
    out = tmp_path / "row.json"
    assert bench.main(["grid", "--impl", "ours", "--dtype", "fp32", "--d", "16", "--seqs", "20", "33",
                       "--device", DEVICE, "--out", str(out)]) == 0
    records = json.loads(out.read_text())
    assert [(r["params"]["seq"], r["params"]["pass"]) for r in records] == \
        [(s, p) for s in (20, 33) for p in bench.PASSES]
    for r in records:
        assert r["status"] == "ok", r
        assert r["metrics"]["ms"] > 0
        assert r["metrics"]["tflops"] == pytest.approx(r["metrics"]["flops"] / r["metrics"]["ms"] / 1e9)


def test_sdpa_anchors_are_skipped_with_a_reason_on_cpu_and_in_fp32():
    records = bench.grid_row("sdpa-cudnn", "bf16", 16, [16], "cpu")
    assert {r["status"] for r in records} == {"skipped"} and "CUDA" in records[0]["reason"]
    assert "only fp16 and bf16" in bench.skip_reason("sdpa-flash", "cuda", "fp32")


def _record(impl, seq, which, ms, status="ok"):
    params = {"impl": impl, "dtype": "bf16", "d": 64, "seq": seq, "batch": 1, "causal": True, "pass": which,
              "device": "cuda"}
    return make_record("B5", params, status, {"ms": ms, "flops": 1e9, "tflops": 1e9 / ms / 1e9} if status == "ok" else {})


def _grid_files(tmp_path):
    rows, timings = [], {}
    for impl, factor in (("ours", 1.0), ("plain", 3.0), ("sdpa-cudnn", 0.5)):
        records = []
        for seq in (128, 256):
            for which in bench.PASSES:
                ms = factor * seq / 100
                timings[(impl, seq, which)] = ms
                records.append(_record(impl, seq, which, ms, "oom" if (impl, seq) == ("plain", 256) else "ok"))
        path = tmp_path / f"{impl}.json"
        path.write_text(json.dumps(records))
        rows.append(str(path))
    return rows


def test_report_ratios_and_tables(tmp_path):
    rows = _grid_files(tmp_path)
    board = tmp_path / "board.json"
    times = {"forward-backward": (("ours", 5.0), ("sdpa-cudnn", 4.0), ("sdpa-flash", 7.5)),
             "forward": (("ours", 1.5), ("sdpa-cudnn", 1.2), ("sdpa-flash", 2.0)),
             "backward": (("ours", 3.5), ("sdpa-cudnn", 2.8), ("sdpa-flash", 5.5))}
    board.write_text(json.dumps([make_record("B5-leaderboard", {"impl": i, "batch": 16, "seq": 16384, "d": 64,
                                                                "pass": which}, "ok", {"ms": ms, "tflops": 1.0})
                                 for which, pairs in times.items() for i, ms in pairs]))
    out = tmp_path / "B5"
    assert b5.main(["--rows", *rows, "--leaderboard", str(board), "--out-dir", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ratios"]["plain"]["median"] == pytest.approx(3.0)
    assert summary["ratios"]["sdpa-cudnn"]["median"] == pytest.approx(0.5)
    assert summary["plain_first_oom_seq"] == 256 and summary["ours_first_oom_seq"] is None
    assert summary["ours_over_cudnn"] == pytest.approx(5.0 / 4.0)
    assert summary["flash_over_ours"] == pytest.approx(7.5 / 5.0)
    assert summary["leaderboard_split"]["forward"]["ours"] == 1.5
    assert summary["leaderboard_split"]["backward"]["sdpa-cudnn"] == 2.8
    import pandas as pd
    board_csv = pd.read_csv(out / "leaderboard.csv")
    ours_bwd = board_csv[(board_csv["impl"] == "ours") & (board_csv["pass"] == "backward")]
    assert ours_bwd["vs cuDNN"].iloc[0] == pytest.approx(3.5 / 2.8)
    table = (out / "table.md").read_text()
    assert "OOM" in table
    for name in ("speedup.png", "tflops.png", "leaderboard.csv", "table.csv"):
        assert (out / name).stat().st_size > 0


@pytest.mark.parametrize("split", [True, False], ids=["with-split", "headline-only"])
def test_section_renders_with_and_without_the_forward_backward_split(tmp_path, split):
    """Leaderboard records from before the split (no "pass") still render, and say so."""
    from cs336_systems.report.writeup import Renderer

    passes = bench.LEADERBOARD_PASSES if split else ("forward-backward",)
    board = tmp_path / "board.json"
    board.write_text(json.dumps([make_record("B5-leaderboard", {"impl": i, "batch": 2, "seq": 64, "d": 16,
                                                                **({"pass": which} if split else {})},
                                             "ok", {"ms": ms, "tflops": 1.0})
                                 for which in passes for i, ms in (("ours", 2.0), ("sdpa-cudnn", 1.6), ("sdpa-flash", 3.0))]))
    out = tmp_path / "B5"
    assert b5.main(["--rows", *_grid_files(tmp_path), "--leaderboard", str(board), "--out-dir", str(out)]) == 0
    text = Renderer("md", tmp_path / "writeup" / "w.md", TEMPLATES).section("B5", out / "summary.json")
    assert "1.25× the time of cuDNN" in text
    assert ("Split into its parts" in text) == split and ("predates the forward-alone" in text) != split
