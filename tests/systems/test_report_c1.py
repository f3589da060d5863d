"""C1's report checks what its prose says: which machine each row came from, a smaller tensor
slower than a larger one (noise or not, from the calls' spread), and algorithm bandwidth against
the rank count. Synthetic records with known answers, including ones where each claim must flip."""
from __future__ import annotations

import json
import random
from itertools import pairwise

import pytest

from cs336_systems.records import make_record, write_json_atomic
from cs336_systems.report import c1


def _row(backend, world, size_mb, ms, spread, gpus):
    low, high = ms * (1 - spread), ms * (1 + spread)
    record = make_record("C1", {"backend": backend, "world_size": world, "size_mb": size_mb}, "ok",
                         {"ms": ms, "ms_min": low, "ms_max": high, "algbw_GBps": size_mb / ms,
                          "busbw_GBps": size_mb / ms * 2 * (world - 1) / world})
    record["provenance"]["gpu_count"] = gpus
    return record


def _run(tmp_path, rows):
    path = tmp_path / "rows.json"
    write_json_atomic(path, rows)
    assert c1.main(["--rows", str(path), "--out-dir", str(tmp_path / "out")]) == 0
    return json.loads((tmp_path / "out" / "summary.json").read_text())


@pytest.mark.parametrize("spread, within", [(0.5, True), (0.01, False)])
def test_a_smaller_size_slower_than_a_larger_one_is_noise_only_when_the_ranges_overlap(tmp_path, spread, within):
    rows = [_row("nccl", 2, 1, 0.12, spread, 2), _row("nccl", 2, 10, 0.10, spread, 2),
            _row("nccl", 2, 100, 0.40, spread, 2)]
    found = _run(tmp_path, rows)["slower_smaller"]
    assert [(f["small_mb"], f["large_mb"], f["within_spread"]) for f in found] == [(1.0, 10.0, within)]


def test_rows_from_machines_with_different_gpu_counts_are_named(tmp_path):
    rows = [_row("nccl", 2, s, 0.1 * s, 0.1, 2) for s in (1, 10)] + \
           [_row("nccl", 4, s, 0.15 * s, 0.1, 4) for s in (1, 10)]
    summary = _run(tmp_path, rows)
    assert summary["hosts"] == [{"host_gpus": 2, "series": ["nccl with 2 ranks"]},
                                {"host_gpus": 4, "series": ["nccl with 4 ranks"]}]
    same = _run(tmp_path, [_row("nccl", 2, s, 0.1 * s, 0.1, 2) for s in (1, 10)])
    assert len(same["hosts"]) == 1


@pytest.mark.parametrize("ms_at_4, trend", [(2.0, "falls"), (0.9, "not settled"), (0.5, "does not fall")])
def test_algorithm_bandwidth_is_said_to_fall_with_ranks_only_when_it_does(tmp_path, ms_at_4, trend):
    rows = [_row("nccl", 2, 1000, 1.0, 0.1, 4), _row("nccl", 4, 1000, ms_at_4, 0.1, 4)]
    (entry,) = _run(tmp_path, rows)["algbw_by_ranks"]
    assert entry["world_sizes"] == [2, 4] and entry["trend"] == trend


@pytest.mark.parametrize("seed", [0, 1])
def test_algorithm_bandwidth_falls_with_ranks_only_beyond_the_host_swing(tmp_path, seed):
    """Each rank count is a process group of its own, which the judge does not pair: the bandwidth
    falls with the rank count only where each step drops it by more than ``spread.HOST_SWING``;
    within it the records do not settle it (h200's Gloo at 2.15, 1.54, 1.33 GB/s was said to fall
    "as the ring predicts" on bare comparisons)."""
    from cs336_systems.report.spread import HOST_SWING
    rng = random.Random(seed)
    # gloo falls at every step, each by less than the swing; nccl by more than it at every step
    drop = {"gloo": rng.uniform(1.05, 0.9 * HOST_SWING), "nccl": rng.uniform(1.1 * HOST_SWING, 3.0)}
    rows = [_row(backend, world, 1000, 10.0 * drop[backend] ** i, 0.01, 6)
            for backend in drop for i, world in enumerate((2, 4, 6))]
    entries = {e["backend"]: e for e in _run(tmp_path, rows)["algbw_by_ranks"]}
    gloo = entries["gloo"]["algbw_GBps"]
    assert all(b < a for a, b in pairwise(gloo))
    assert entries["gloo"]["trend"] == "not settled" and entries["nccl"]["trend"] == "falls"


def test_the_section_opens_with_both_back_ends_at_the_largest_size(tmp_path):
    from pathlib import Path

    from cs336_systems.report.writeup import Renderer

    rows = [_row(b, 2, s, ms * s, 0.1, 2) for b, ms in (("nccl", 0.003), ("gloo", 0.5)) for s in (1, 10, 1000)]
    summary = _run(tmp_path, rows)
    h = summary["headline"]
    assert h["world_size"] == 2 and h["size_mb"] == 1000.0
    assert h["gloo_over_nccl"] == pytest.approx(0.5 / 0.003)
    assert h["nccl"]["o_ms"] == summary["fits"]["nccl_x2"]["o_ms"]
    templates = Path(__file__).resolve().parents[2] / "writeup" / "templates"
    text = Renderer("md", tmp_path / "w" / "w.md", templates).section("C1", tmp_path / "out" / "summary.json")
    opening = text.split("**Answer.** ", 1)[1].split("\n\n")[0]      # the answer, first in the section
    assert opening.startswith("With 2 ranks, NCCL all-reduces 1,000 MB in 3.000 ms") and "167 times as long" in opening
    # no shared world size: no comparison is made
    alone = _run(tmp_path, [_row("nccl", 2, s, 0.003 * s, 0.1, 2) for s in (1, 10)] +
                 [_row("gloo", 4, s, 0.5 * s, 0.1, 2) for s in (1, 10)])
    assert alone["headline"] is None


@pytest.mark.parametrize("gloo_ms, beyond", [(0.5, True), (0.004, False)])
def test_gloo_against_nccl_is_a_verdict_only_beyond_what_two_processes_differ_by(tmp_path, gloo_ms, beyond):
    """Each back end is its own process: Gloo's time over NCCL's is said as a difference only beyond
    spread.HOST_SWING (167x is; 1.33x is not, and is said to be two processes' medians)."""
    from pathlib import Path

    from cs336_systems.report.spread import HOST_SWING
    from cs336_systems.report.writeup import Renderer

    rows = [_row(b, 2, s, ms * s, 0.1, 2) for b, ms in (("nccl", 0.003), ("gloo", gloo_ms)) for s in (1, 10, 1000)]
    h = _run(tmp_path, rows)["headline"]
    assert h["beyond_processes"] is beyond and h["host_swing"] == HOST_SWING
    templates = Path(__file__).resolve().parents[2] / "writeup" / "templates"
    text = " ".join(Renderer("md", tmp_path / "w" / "w.md", templates).section("C1", tmp_path / "out" / "summary.json").split())
    assert (f"two processes, beyond the {HOST_SWING}× two processes of one command differ by" in text) is beyond
    assert ("by two processes' medians, which these records cannot judge" in text) is not beyond


def test_a_row_whose_ranks_ran_on_several_nodes_is_said_to_cross_the_network(tmp_path):
    from pathlib import Path

    from cs336_systems.report.writeup import Renderer

    rows = [_row("nccl", 4, s, 0.1 * s, 0.1, 2) for s in (1, 10)] + [_row("nccl", 2, s, 0.05 * s, 0.1, 2) for s in (1, 10)]
    for r in rows[:2]:            # four ranks, two on each of two nodes; the two-rank row on one
        r["metrics"]["launch"] = {"launcher": "srun", "hosts": ["n1", "n2"], "nodes": 2, "ranks_per_node": 2}
    for r in rows[2:]:
        r["metrics"]["launch"] = {"launcher": "torchrun", "hosts": ["n1"], "nodes": 1, "ranks_per_node": 2}
    summary = _run(tmp_path, rows)
    assert summary["across_nodes"] == [{"backend": "nccl", "world_size": 4, "nodes": 2, "hosts": ["n1", "n2"],
                                        "ranks_per_node": 2}]
    templates = Path(__file__).resolve().parents[2] / "writeup" / "templates"
    text = Renderer("md", tmp_path / "w" / "w.md", templates).section("C1", tmp_path / "out" / "summary.json")
    assert "**Across nodes.** nccl with 4 ranks ran on 2 nodes (n1, n2, 2 a node)" in text
    assert "nccl with 2 ranks ran on" not in text
    assert _run(tmp_path, [_row("nccl", 2, s, 0.05 * s, 0.1, 2) for s in (1, 10)])["across_nodes"] == []


def test_the_latency_bandwidth_fit_recovers_o_and_w_and_does_not_depend_on_the_row_order():
    """t = o + bytes / w at every size: the fit returns o (ms) and w (GB/s) to float64 precision; the
    rows in another order give the same bits (a rebuild on another machine must write the same summary)."""
    import random

    import pandas as pd

    rng = random.Random(random.getrandbits(32))      # the global generator is seeded per test (tests/conftest.py)
    o_ms, w_GBps = rng.uniform(0.01, 0.5), rng.uniform(1.0, 400.0)
    sizes = [1, 10, 100, 1000]
    rows = pd.DataFrame({"status": "ok", "size_mb": sizes,
                         "ms": [o_ms + mb * c1.MB / (w_GBps * 1e9) * 1e3 for mb in sizes]})
    fit = c1.fit_latency_bandwidth(rows)
    assert fit.o_ms == pytest.approx(o_ms, rel=1e-9) and fit.w_GBps == pytest.approx(w_GBps, rel=1e-9)
    assert c1.fit_latency_bandwidth(rows.iloc[::-1].reset_index(drop=True)) == fit


def test_small_tensors_are_called_latency_bound_only_where_the_fit_says_so(tmp_path):
    """The fixed cost o binds a call where it is at least the bytes' time (sizes up to o·w). A back
    end whose o·w lies below its smallest tensor is bandwidth-bound at every size (h200's Gloo: 0.164
    ms per call, 1 MB taking 0.427 ms), though the section said "small tensors are latency-bound"
    of both back ends; one whose o·w lies between two sizes is latency-bound up to the smaller."""
    import random
    from pathlib import Path

    from cs336_systems.report.writeup import Renderer

    rng = random.Random(random.getrandbits(32))      # the global generator is seeded per test (tests/conftest.py)
    sizes = [1, 10, 100, 1000]
    # NCCL: o·w between 10 and 100 MB; Gloo: o·w below 1 MB
    nccl_w, gloo_w = rng.uniform(100.0, 400.0), rng.uniform(1.0, 5.0)
    nccl_o = rng.uniform(12.0, 90.0) / nccl_w          # ms, so that o·w is 12–90 MB
    gloo_o = rng.uniform(0.05, 0.9) / gloo_w            # o·w is 0.05–0.9 MB
    rows = [_row(b, 2, s, o + s * c1.MB / (w * 1e9) * 1e3, 0.05, 2)
            for b, o, w in (("nccl", nccl_o, nccl_w), ("gloo", gloo_o, gloo_w)) for s in sizes]
    summary = _run(tmp_path, rows)
    latency = {b["backend"]: b for b in summary["headline"]["latency"]}
    assert latency["nccl"]["kind"] == c1.UP_TO and latency["nccl"]["largest_mb"] == 10.0
    assert latency["gloo"]["kind"] == c1.NONE and latency["gloo"]["smallest_mb"] == 1.0
    assert latency["gloo"]["bytes_ms"] == pytest.approx(c1.MB / (gloo_w * 1e9) * 1e3, rel=1e-6)
    assert latency["gloo"]["bytes_ms"] > summary["headline"]["gloo"]["o_ms"]
    crossover = {(r["backend"], r["world_size"]): r["crossover_mb"] for r in summary["fit_table"]}
    assert crossover[("gloo", 2)] == pytest.approx(gloo_o * gloo_w, rel=1e-6)
    templates = Path(__file__).resolve().parents[2] / "writeup" / "templates"
    text = " ".join(Renderer("md", tmp_path / "w" / "w.md", templates).section("C1", tmp_path / "out" / "summary.json").split())
    assert "Small tensors are latency-bound" not in text
    assert "NCCL's calls are latency-bound up to 10 MB" in text
    assert "Gloo's calls are bandwidth-bound from the smallest tensor, 1 MB" in text
    # where the time does not grow with the bytes, every size is latency-bound
    flat = c1.latency_bound(c1.Fit(0.2, None), sizes, "gloo")
    assert flat.kind == c1.EVERY and flat.largest_mb == 1000


def test_what_back_to_back_calls_save_of_o_is_left_to_the_sections_that_measure_it(tmp_path):
    """C1 times each call alone between synchronisations: its records cannot say how much of o calls
    issued back to back hide ("overlap most of that" was said with nothing measuring it here)."""
    import random
    from pathlib import Path

    from cs336_systems.report.writeup import Renderer

    rng = random.Random(random.getrandbits(32))      # the global generator is seeded per test (tests/conftest.py)
    rows = [_row(b, 2, s, rng.uniform(0.02, 0.2) + ms * s, 0.1, 2)
            for b, ms in (("nccl", rng.uniform(0.002, 0.004)), ("gloo", rng.uniform(0.3, 0.6))) for s in (1, 10, 100)]
    _run(tmp_path, rows)
    templates = Path(__file__).resolve().parents[2] / "writeup" / "templates"
    text = " ".join(Renderer("md", tmp_path / "w" / "w.md", templates).section("C1", tmp_path / "out" / "summary.json").split())
    assert "overlap most of that" not in text
    assert "how much, these records do not say (each call here was timed alone): C4 and C8 measure what those calls pay" in text
