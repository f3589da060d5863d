"""The A2 command end to end on the CPU (torch.profiler fallback), its tables, and the report."""
import argparse
import copy
import json
from pathlib import Path

import pytest

from cs336_systems.profiling import profile
from cs336_systems.profiling.torch_tables import Event, range_table, range_totals
from cs336_systems.report import a2, contract, writeup

TEMPLATES = Path(__file__).resolve().parents[2] / "writeup" / "templates"


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    out = tmp_path_factory.mktemp("a2") / "tiny_ctx16.json"
    assert profile.main(["--size", "tiny", "--context", "16", "--batch", "2", "--warmup", "1", "--steps", "2",
                         "--device", "cpu", "--nsys", "nsys", "--out", str(out)]) == 0
    return json.loads(out.read_text())


def test_cpu_run_uses_torch_profiler_for_every_mode(record):
    m = record["metrics"]
    assert record["status"] == "ok" and m["source"] == "torch.profiler" and m["fallback_reason"] == "the device is the CPU"
    assert set(m["modes"]) == {"forward", "forward-backward", "train-step"}
    layers = record["params"]["num_layers"]
    for mode, phases in profile.MODE_PHASES.items():
        d = m["modes"][mode]
        assert d["status"] == "ok" and set(d["python_ms"]) == {*(p.split()[0] for p in phases), "step"}
        ranges = {r["range"]: r for r in d["ranges"]}
        assert "warm-up" not in ranges                       # warm-up ran outside the profiler
        assert ranges["forward"]["instances"] == 2 and ranges["computing softmax"]["instances"] == 2 * layers
        for phase in phases:
            assert d["tables"][phase], (mode, phase)
    fwd_tables = m["modes"]["forward"]["tables"]
    assert {r["category"] for r in fwd_tables["computing softmax"]} == {"attention-softmax"}
    assert any(r["name"] == "aten::bmm" and r["category"] == "GEMM" for r in fwd_tables["computing attention scores"])
    assert {r["category"] for r in m["modes"]["train-step"]["tables"]["optimizer step"]} == {"optimizer"}
    # the first forward's operators take no longer than the forward range itself
    fwd_ns = sum(r["total_ns"] for r in fwd_tables["forward"])
    assert 0 < fwd_ns <= {r["range"]: r for r in m["modes"]["forward"]["ranges"]}["forward"]["max_ns"]


def test_the_nsys_child_gets_this_commands_own_arguments(monkeypatch, tmp_path):
    argv = ["--size", "tiny", "--context", "16", "--modes", "train-step", "forward", "--steps", "2",
            "--device", "cpu", "--nsys", "/opt/nsys", "--out", str(tmp_path / "tiny_ctx16.json")]
    ran = []
    monkeypatch.setattr(profile.nsys_tools, "profile_command", lambda nsys, stem, child: child)
    monkeypatch.setattr(profile.subprocess, "run", lambda cmd: ran.append(cmd) or argparse.Namespace(returncode=1))
    with pytest.raises(RuntimeError, match="without a result"):
        profile.with_nsys(profile.parse_args(argv), "/opt/nsys")
    child = ran[0]
    assert child[1:3] == ["-m", "cs336_systems.profiling.profile"] and child[3:3 + len(argv)] == argv
    parent, forwarded = vars(profile.parse_args(argv)), vars(profile.parse_args(child[3:]))
    changed = {k for k in parent if parent[k] != forwarded[k]}
    assert changed == {"nsys", "child", "out", "argv"}
    assert forwarded["nsys"] == "" and forwarded["child"] and forwarded["out"] != parent["out"]


def test_under_nsys_each_phase_gets_the_kernel_table_of_its_own_filter(monkeypatch, tmp_path):
    """The `nsys stats` calls run side by side and finish in any order; every phase's table is still
    the one its own --filter-nvtx returned (a fake nsys: each filter's table names the filter)."""
    import random
    import time

    import pandas as pd

    argv = ["--size", "tiny", "--context", "16", "--steps", "2", "--device", "cpu", "--nsys", "/opt/nsys",
            "--out", str(tmp_path / "tiny_ctx16.json")]
    args = profile.parse_args(argv)

    def fake_profile(cmd):
        out = Path(cmd[len(cmd) - 1 - cmd[::-1].index("--out") + 1])     # the child's: the last --out
        out.write_text(json.dumps({"modes": {m: {"status": "ok"} for m in args.modes}}))
        profile.nsys_report_paths(Path(args.out))[1].write_text("report")
        return argparse.Namespace(returncode=0)

    rng = random.Random(7)
    delays = {}

    def fake_stats(nsys, sqlite, reports, nvtx=None):
        if nvtx is None:
            return {r: pd.DataFrame() for r in reports}
        time.sleep(delays.setdefault(nvtx, rng.uniform(0, 0.05)))
        return {"cuda_gpu_kern_sum": pd.DataFrame({"Name": [f"kernel of {nvtx}"], "Total Time (ns)": [1000.0],
                                                   "Instances": [1]})}

    monkeypatch.setattr(profile.nsys_tools, "profile_command", lambda nsys, stem, child: child)
    monkeypatch.setattr(profile.subprocess, "run", fake_profile)
    monkeypatch.setattr(profile.nsys_tools, "export_sqlite", lambda nsys, report: tmp_path / "x.sqlite")
    monkeypatch.setattr(profile.nsys_tools, "run_stats", fake_stats)
    monkeypatch.setattr(profile.nsys_tools, "nsys_version", lambda nsys: "fake")
    metrics = profile.with_nsys(args, "/opt/nsys")
    assert len(delays) == sum(len(profile.MODE_PHASES[m]) for m in args.modes)
    for mode in args.modes:
        tables = metrics["modes"][mode]["tables"]
        assert list(tables) == list(profile.MODE_PHASES[mode])
        for range_name, rows in tables.items():
            assert [r["name"] for r in rows] == [f"kernel of {profile.nsys_tools.nvtx_filter(range_name, mode)}"]


def test_a_trace_nsys_could_not_import_is_named_as_such(monkeypatch, tmp_path):
    """nsys exits 0 when its importer fails and leaves the raw .qdstrm beside the record: the error
    says that, and where the trace is, instead of only that no report came."""
    argv = ["--size", "tiny", "--context", "16", "--device", "cpu", "--nsys", "/opt/nsys",
            "--out", str(tmp_path / "tiny_ctx16.json")]
    args = profile.parse_args(argv)
    stem, _ = profile.nsys_report_paths(Path(args.out))

    def fake_profile(cmd):
        Path(cmd[len(cmd) - 1 - cmd[::-1].index("--out") + 1]).write_text(json.dumps({"modes": {}}))
        (stem.parent / (stem.name + ".qdstrm")).write_text("raw trace")
        return argparse.Namespace(returncode=0)

    monkeypatch.setattr(profile.nsys_tools, "profile_command", lambda nsys, stem, child: child)
    monkeypatch.setattr(profile.subprocess, "run", fake_profile)
    with pytest.raises(RuntimeError, match="could not turn it into a report") as info:
        profile.with_nsys(args, "/opt/nsys")
    assert "tiny_ctx16.qdstrm" in str(info.value)


def test_window_attribution_ignores_threads_and_nesting():
    events = [Event("backward", False, 0, 100, 1), Event("aten::mm", False, 10, 20, 10),
              Event("aten::mm", False, 30, 50, 20), Event("k_gemm", True, 40, 60, 20),
              Event("aten::add", False, 120, 130, 10), Event("backward", False, 200, 300, 1)]
    assert range_table(events, "backward", gpu=False) == [{"name": "aten::mm", "total_ns": 30e3, "instances": 2}]
    assert range_table(events, "backward", gpu=True) == [{"name": "k_gemm", "total_ns": 20e3, "instances": 1}]
    total = range_totals(events)[0]
    assert total["instances"] == 2 and total["total_ns"] == 200e3 and total["med_ns"] == 100e3


def test_report_on_records_with_an_oom(record, tmp_path):
    other = copy.deepcopy(record)
    other["params"]["context"] = 32
    other["metrics"]["modes"]["train-step"] = {"status": "oom", "message": "CUDA out of memory"}
    dead = copy.deepcopy(record)
    dead["params"].update(size="small", context=1024)
    dead.update(status="oom", message="OOM", metrics={"modes": {m: {"status": "oom", "message": "OOM"} for m in profile.MODE_PHASES}})
    paths = []
    for i, r in enumerate((record, other, dead)):
        paths.append(tmp_path / f"r{i}.json")
        paths[-1].write_text(json.dumps(r))
    assert a2.main(["--records", *map(str, paths), "--out-dir", str(tmp_path / "out")]) == 0
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert {(f["point"], f["mode"]) for f in s["failed"]} == {
        ("tiny ctx 32", "train-step"), *(("small ctx 1024", m) for m in profile.MODE_PHASES)}
    assert [row["point"] for row in s["a"]] == ["tiny ctx 16", "tiny ctx 32"]
    d16 = [row for row in s["d"] if row["point"] == "tiny ctx 16"]
    assert len(d16) == 3 and all(sum(row[f"{c}_share"] for c in a2.CATEGORIES) == pytest.approx(1) for row in d16)
    e = s["e"][0]
    assert e["flops_softmax_over_both_matmuls"] == pytest.approx(2 * 4 * 16 * (5 * 16 - 2) / (2 * 2 * 2 * 4 * 16 * 16 * 16))
    assert e["flops_softmax_over_final"] == pytest.approx(2 * 4 * 16 * (5 * 16 - 2) / (2 * 2 * 4 * 16 * 16 * 16))
    assert (tmp_path / "out" / "category_shares.png").stat().st_size > 0
    assert s["sources"] == ["torch.profiler"]
    # the section renders from a CPU profile and opens with its answer, right after the run line
    text = writeup.Renderer("md", tmp_path / "w.md", TEMPLATES).section("A2", tmp_path / "out" / "summary.json")
    assert text.split("\n\n")[2].startswith("**Answer.**"), text[:600]


def test_report_where_no_forward_ran(record, tmp_path):
    """Every point out of memory: (a)'s table is empty, and the summary still fits its contract (no
    busy range, nothing compared) instead of failing to fill it."""
    dead = copy.deepcopy(record)
    dead.update(status="oom", message="OOM", metrics={"modes": {m: {"status": "oom", "message": "OOM"} for m in profile.MODE_PHASES}})
    path = tmp_path / "r.json"
    path.write_text(json.dumps(dead))
    assert a2.main(["--records", str(path), "--out-dir", str(tmp_path / "out")]) == 0
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["a"] == [] and s["a_findings"]["busy_range"] is None and s["a_findings"]["a1_compared"] == 0
    contract.check("A2", s)
    # and the section renders, saying that (a) has no rows, rather than stopping the writeup
    templates = Path(__file__).resolve().parents[2] / "writeup" / "templates"
    text = writeup.Renderer("md", tmp_path / "w" / "w.md", templates).section("A2", tmp_path / "out" / "summary.json")
    assert "*No rows in this run: `table_a.csv` is empty.*" in text


@pytest.mark.parametrize("argv, message", [
    (["--size", "huge", "--context", "16"], "invalid choice"),
    (["--size", "tiny", "--context", "0"], "--context must be at least 1"),
    (["--size", "tiny", "--context", "16", "--modes", "forward", "forward"], "each mode once"),
    (["--size", "tiny", "--context", "16", "--device", "nonsense"], "--device"),
])
def test_bad_input_is_one_line(argv, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        profile.main([*argv, "--out", str(tmp_path / "x.json")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_report_rejects_a_missing_record(capsys, tmp_path):
    with pytest.raises(SystemExit):
        a2.main(["--records", str(tmp_path / "missing.json"), "--out-dir", str(tmp_path)])
    assert "Traceback" not in capsys.readouterr().err


def test_attention_times_come_from_the_gpu_projection_under_nsys():
    """An nsys record's attention times are its projection per instance, not its (time-window)
    kernel tables; FLOP ratios are the closed forms."""
    import random

    from cs336_systems.profiling.flops import attention_flops
    from cs336_systems.report.a2 import table_e

    calls = random.randint(2, 9)
    per_call = {"computing attention scores": random.uniform(1e4, 1e5), "computing softmax": random.uniform(1e4, 1e5),
                "final matmul": random.uniform(1e4, 1e5)}
    decoy = [{"name": "sm80_xmma_gemm_f32f32", "total_ns": 1e9, "instances": 1, "category": "GEMM"}]
    forward = {"status": "ok", "tables": {name: decoy for name in per_call},
               "gpu_projection": [{"domain": "forward", "range": name, "instances": calls, "proj_ns": t * calls,
                                   "range_ns": 1.0, "gpu_ops": 3 * calls} for name, t in per_call.items()]}
    params = {"size": "small", "context": 64, "batch": 2, "num_heads": 4, "d_model": 32, "precision": "fp32"}
    df = table_e([{"params": params, "status": "ok", "metrics": {"modes": {"forward": forward}},
                   "provenance": {"gpu": "NVIDIA H100 80GB HBM3"}}])
    row = df.iloc[0]
    assert row["softmax_us"] == pytest.approx(per_call["computing softmax"] / 1e3)
    expected = per_call["computing softmax"] / (per_call["computing attention scores"] + per_call["final matmul"])
    assert row["time_softmax_over_scores_and_final"] == pytest.approx(expected)
    f = attention_flops(2, 4, 64, 8)
    assert row["flops_softmax_over_both_matmuls"] == pytest.approx(f["softmax"] / (f["scores_matmul"] + f["final_matmul"]))
    # the softmax against the final matmul alone: its range holds no scaling or mask
    per_flop = (per_call["computing softmax"] / per_call["final matmul"]) / (f["softmax"] / f["final_matmul"])
    assert row["per_flop_vs_final"] == pytest.approx(per_flop)
    assert row["per_flop_vs_scores_and_final"] == pytest.approx(expected / (f["softmax"] / (2 * f["final_matmul"])))
    assert row["kernels_per_call"] == "3 / 3 / 3"                  # each range's GPU operations per call
    # the softmax's bytes: 8 fp32 passes over the 2·4·64² scores, against the H100's 3.35 TB/s
    moved = 8 * 2 * 4 * 64 * 64 * 4
    assert row["softmax_hbm_share"] == pytest.approx(moved / (per_call["computing softmax"] / 1e9) / 3.35e12)
    assert row["source"] == "nsys GPU projection"
