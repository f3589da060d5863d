"""A2(a)–(c)'s prose checks on synthetic forward profiles with known answers: host-bound points,
a shorter context slower than a longer one (host or GPU) only where several processes a point settle
it, A1's independent timing, and the top-kernel and non-matmul summaries."""
from __future__ import annotations

import json
import math
import random
import statistics

import pytest

from cs336_systems.report import a2
from cs336_systems.report.spread import NOT_SETTLED


def _a2(size, context, range_ms, kernels, steps_ms=None):
    """An A2 record whose forward mode ran ``kernels`` = [(name, category, ms, calls)]; its Python
    timer measured ``steps_ms`` (by default two steps 0.1 % apart around the range)."""
    table = [{"name": n, "category": c, "total_ns": ms * 1e6, "instances": k} for n, c, ms, k in kernels]
    steps = steps_ms or [range_ms * 0.9985, range_ms * 0.9995]
    timer = {"mean": statistics.fmean(steps), "std": statistics.stdev(steps), "n": len(steps), "samples": steps}
    forward = {"status": "ok", "python_ms": {"forward": timer},
               "ranges": [{"range": "forward", "instances": 2, "avg_ns": range_ms * 1e6}],
               "tables": {"forward": table}}
    return {"id": "A2", "status": "ok", "params": {"size": size, "context": context, "batch": 4},
            "metrics": {"modes": {"forward": forward}}}


def _a1(size, context, mean, std):
    return {"id": "A1", "status": "ok", "params": {"size": size, "context": context, "batch": 4, "mode": "forward",
                                                   "precision": "fp32", "compile": False, "attention": "naive"},
            "metrics": {"forward": {"mean": mean, "std": std}}}


GEMM = "sm90_xmma_gemm_f32f32_tn_n_kernel"


def test_a_host_bound_shorter_context_is_explained_by_the_host_only_when_its_kernels_are_fewer(seed):
    rng = random.Random(seed)
    busy_ms = rng.uniform(20, 30)
    records = [_a2("medium", 128, 75.0, [(GEMM, "GEMM", 10.0, 48), ("mul", "elementwise", 4.0, 100)]),
               _a2("medium", 256, 41.0, [(GEMM, "GEMM", busy_ms, 48), ("mul", "elementwise", 5.0, 100)])]
    found = a2.a_findings(a2.table_a(records))
    assert [h["point"] for h in found["host_bound"]] == ["medium ctx 128"]
    # one process a point: the longer time is not settled, but its kernels and pace are described
    assert found["slower_shorter"] == []
    (slower,) = found["shorter_not_settled"]
    assert (slower["short"], slower["long"], slower["kernels_grow"]) == (128, 256, True)
    # as many kernels in more wall time: the host issued them more slowly in that process
    assert slower["slower_issue"] and slower["short_kernels"] == slower["long_kernels"] == 148
    # the GPU's own work shrinking with context as well: not the host's doing
    records[0] = _a2("medium", 128, 75.0, [(GEMM, "GEMM", 70.0, 48)])
    (slower,) = a2.a_findings(a2.table_a(records))["shorter_not_settled"]
    assert slower["kernels_grow"] is False


def test_a_kernel_time_per_kernel_is_not_the_range_time_per_kernel(seed):
    """Two "per kernel" times: the GPU's (kernel time / kernels) and the range's wall time per kernel."""
    rng = random.Random(seed)
    range_ms = rng.uniform(10, 20)
    kernels = [(GEMM, "GEMM", rng.uniform(1, 3), rng.randint(50, 80)), ("mul", "elementwise", rng.uniform(0.5, 1), 700)]
    row = a2.table_a([_a2("small", 128, range_ms, kernels)]).iloc[0]
    count = sum(k for *_, k in kernels)
    assert row["kernel_us_per_kernel"] == pytest.approx(1e3 * sum(ms for _, _, ms, _ in kernels) / count)
    assert row["range_us_per_kernel"] == pytest.approx(1e3 * range_ms / count)
    assert row["kernel_us_per_kernel"] < row["range_us_per_kernel"]
    (host,) = a2.a_findings(a2.table_a([_a2("small", 128, range_ms, kernels)]))["host_bound"]
    assert host["kernel_us_per_kernel"] == pytest.approx(row["kernel_us_per_kernel"])


@pytest.mark.parametrize("between_ms, processes, verdict", [(0.2, 3, "higher"), (6.0, 3, "within the spread"),
                                                          (0.2, 1, NOT_SETTLED)])
def test_a_shorter_context_is_slower_only_beyond_the_scatter_between_processes(seed, between_ms, processes, verdict):
    """A shorter context whose forward took longer is a finding only where processes of one point
    (a record each) scatter less than the two points differ; with one process a point it is named
    as not settled, however tight each process's own steps."""
    rng = random.Random(seed)
    short_ms, long_ms = rng.uniform(68, 70), rng.uniform(62, 63)
    offsets = [between_ms * k for k in (-1, 0, 1)][:processes] if processes > 1 else [0.0]
    records = [_a2("large", context, centre + o, [(GEMM, "GEMM", kernel_ms, 2286)])
               for context, centre, kernel_ms in ((128, short_ms, 30.0), (256, long_ms, 60.0)) for o in offsets]
    found = a2.a_findings(a2.table_a(records))
    # independent reference: Welch's interval on the processes' means, t with 4 degrees of freedom
    if processes > 1:
        table = a2.table_a(records)
        ms = {c: list(table[table["point"] == f"large ctx {c}"]["python_forward_ms"]) for c in (128, 256)}
        half = 2.776 * math.sqrt(statistics.variance(ms[128]) / 3 + statistics.variance(ms[256]) / 3)
        gap = statistics.fmean(ms[128]) - statistics.fmean(ms[256])
        assert (gap > half) is (verdict == "higher")
    lists = {"higher": "slower_shorter", "within the spread": "shorter_within_spread", NOT_SETTLED: "shorter_not_settled"}
    for kind, key in lists.items():
        assert [x["short"] for x in found[key]] == ([128] if kind == verdict else [])


@pytest.mark.parametrize("a1_mean, processes, outside, unsettled", [(40.5, 3, [], 0), (30.0, 3, ["medium ctx 256"], 0),
                                                                    (30.0, 1, [], 1)])
def test_the_nvtx_forward_is_compared_with_a1_beyond_the_scatter_of_a2_processes(a1_mean, processes, outside, unsettled):
    """A1 times the same forward in another process: a difference only beyond the interval a new A2
    process of the point would fall in, and none settled with one A2 process."""
    records = [_a2("medium", 256, 41.0 + o, [(GEMM, "GEMM", 38.0, 48)]) for o in (-0.2, 0.0, 0.2)[:processes]]
    a1 = [_a1("medium", 256, a1_mean, 0.5), _a1("large", 256, 10.0, 0.1)]
    table = a2.table_a(records, a1)
    assert table.loc[0, "a1_forward_ms"] == a1_mean
    found = a2.a_findings(table)
    assert found["a1_compared"] == 1 and found["a1_outside_spread"] == outside
    assert found["a1_not_settled"] == unsettled


def test_top_kernel_and_non_matmul_summaries():
    mul4 = "void at::native::elementwise_kernel<128, 4, at::native::MulFunctor<float>>(int, T1)"
    mul2 = "void at::native::elementwise_kernel<128, 2, at::native::MulFunctor<float>>(int, T1)"
    # each Mul variant is 0.7 % of the forward, below the 1 % threshold; together they are above it
    records = [_a2("small", c, 20.0, [(GEMM, "GEMM", 10.0, 73), (mul4, "elementwise", 0.075, 50),
                                      (mul2, "elementwise", 0.075, 5),
                                      ("gather", "other", 0.5 if c == 128 else 0.01, 48)])
               for c in (128, 256)]
    table_b = a2.table_b(records)
    b = a2.b_findings(table_b)
    assert b["categories"] == ["GEMM"] and b["calls"] == [73, 73] and b["compared"] == 0
    c = a2.c_findings(records)
    assert c["points"] == 2
    shares = {k["kernel"]: (k["points"], k["median_share"]) for k in c["kernels"]}
    assert shares["at::native::elementwise_kernel[MulFunctor]"][0] == 2   # the variants together, once per point
    assert shares[a2.short_name("gather")][0] == 1


def _three_modes(size, context, forward, backward):
    """An A2 record whose three modes ran: ``forward``/``backward`` map each mode to its passes'
    kernels {name: ms} (the optimizer's table left out)."""
    def table(kernels):
        return [{"name": n, "category": "GEMM", "total_ns": ms * 1e6, "instances": 4}
                for n, ms in sorted(kernels.items(), key=lambda kv: -kv[1])]
    modes = {mode: {"status": "ok", "tables": {"forward": table(forward[mode]),
                                                **({"backward": table(backward[mode])} if mode in backward else {})}}
             for mode in ("forward", "forward-backward", "train-step")}
    return {"id": "A2", "status": "ok", "params": {"size": size, "context": context, "batch": 4},
            "metrics": {"modes": modes}}


def test_b_a_top_kernel_counts_only_where_it_is_clear_of_its_runner_up_over_the_modes_repeats(seed):
    """Whether the forward's top kernel is also the top over forward and backward is a ranking of
    one profiled pass each: it counts only where, over every mode's repeat of the passes, the top's
    totals lie apart from the runner-up's; a point where they overlap is too close to call."""
    rng = random.Random(seed)
    fwd, bwd = "sm90_xmma_gemm_f32f32_tn_n_kernel", "sm90_xmma_gemm_f32f32_nn_n_kernel"
    records = []
    for context, close in ((128, False), (256, True)):
        base, jitter = rng.uniform(5, 500), rng.uniform(0.002, 0.01)
        # the forward's top kernel: far ahead in the forward; over both passes level with the backward's
        # top (close: inside its range over the modes) or clearly behind it
        spread = [base * (1 + jitter * k) for k in (0, 1)]
        backward_total = [base * (1 + jitter * rng.uniform(0.2, 0.8)) for _ in range(2)] if close \
            else [base * (1.5 + jitter * k) for k in (0, 1)]
        forward = {m: {fwd: spread[0] * 0.3, "other": spread[0] * 0.01} for m in ("forward", "forward-backward", "train-step")}
        backward = {m: {fwd: spread[i] - spread[0] * 0.3, bwd: backward_total[i]}
                    for i, m in enumerate(("forward-backward", "train-step"))}
        records.append(_three_modes("small", context, forward, backward))
    clear = a2.top_clear(records)
    assert {p: c["clear"] for p, c in clear.items()} == {"small ctx 128": True, "small ctx 256": False}
    b = a2.b_findings(a2.table_b(records), clear)
    # the old count took the one profiled ranking at its word: the close point counted as "differ" too
    assert b["compared"] == 2 and b["differ"] == 1 and b["same"] == 0
    assert b["too_close"] == [{"points": ["small ctx 256"]}]
    assert b["repeats"] == {"forwards": 3, "both": 2}
    # nothing said of the repeats: no point is clear
    assert a2.b_findings(a2.table_b(records))["too_close"] == [{"points": ["small ctx 128", "small ctx 256"]}]


def _d_rows(shares):
    """table_d rows from {(size, context, mode): (GEMM, elementwise, optimizer)} shares."""
    return a2.pd.DataFrame([{"point": f"{size} ctx {context}", "mode": mode, "step_kernel_ms": 1.0,
                             "GEMM_share": g, "attention-softmax_share": 0.0, "elementwise_share": e,
                             "optimizer_share": o, "other_share": 1 - g - e - o}
                            for (size, context, mode), (g, e, o) in shares.items()])


def test_d_gemm_share_rises_with_size_only_where_every_size_step_rises(seed):
    rng = random.Random(seed)
    sizes, shares = ["small", "medium", "large"], {}
    rising = sorted(rng.uniform(0.5, 0.9) for _ in sizes)
    for size, g in zip(sizes, rising):
        shares[(size, 128, "forward")] = (g, 0.95 - g, 0.0)
        # at context 256 the middle size dips below the smallest: not rising with size
        shares[(size, 256, "forward")] = (g - (0.3 if size == "medium" else 0.0), 0.0, 0.0)
        opt = {"small": 0.2, "medium": 0.1, "large": 0.05}[size]
        shares[(size, 128, "train-step")] = (g - opt, 0.95 - g, opt)
    d = _d_rows(shares)
    growth = [{"point": f"{s} ctx 128", "GEMM": -shares[(s, 128, "train-step")][2], "attention-softmax": 0.0,
               "elementwise": 0.0, "optimizer": shares[(s, 128, "train-step")][2], "other": 0.0,
               "gemm_forward": shares[(s, 128, "forward")][0], "gemm_train": shares[(s, 128, "train-step")][0]}
              for s in sizes]
    found = a2.d_findings(d, growth, {g["point"]: 0.001 for g in growth})
    assert found["gemm_by_mode"]["forward"]["rising_with_size"] == [128]
    assert found["gemm_by_mode"]["forward"]["series"][128]["shares"] == pytest.approx(rising)
    assert found["empty_categories"] == ["attention-softmax"]
    assert found["train"]["largest_gain"] == {"optimizer": 3}
    assert found["train"]["gemm_drop"] == pytest.approx([0.05, 0.2])
    # one profiled step a point has no spread: the words carry the smallest step of the rise
    assert found["gemm_by_mode"]["forward"]["smallest_rise_points"] == pytest.approx(
        100 * min(b - a for a, b in zip(rising, rising[1:])))


def test_d_the_largest_gain_counts_only_beyond_what_a_share_moves_between_the_modes_repeats(seed):
    """Which category a training step gains the most share in is one profiled step a mode: a point
    counts only where the two largest gains lie apart even with every share off by as much as a
    category's share of the forward moves between the point's modes (each runs the same forward)."""
    rng = random.Random(seed)
    wobble = rng.uniform(0.005, 0.02)          # how far the forward's GEMM share moves between the modes
    records, growth = [], []
    for context, margin in ((128, 10 * wobble), (256, 6 * wobble)):      # apart beyond 4 × the scatter (2 × wobble)
        gemm = rng.uniform(0.6, 0.8)
        def table(share):
            return [{"name": "gemm_tn", "category": "GEMM", "total_ns": share * 1e6, "instances": 4},
                    {"name": "mul", "category": "elementwise", "total_ns": (1 - share) * 1e6, "instances": 4}]
        modes = {mode: {"status": "ok", "tables": {"forward": table(gemm + wobble * k)}}
                 for k, mode in enumerate(("forward", "forward-backward", "train-step"))}
        records.append({"id": "A2", "status": "ok", "params": {"size": "small", "context": context, "batch": 4},
                        "metrics": {"modes": modes}})
        elementwise = rng.uniform(0.01, 0.03)
        growth.append({"point": f"small ctx {context}", "GEMM": -(2 * elementwise + margin), "attention-softmax": 0.0,
                       "elementwise": elementwise, "optimizer": elementwise + margin, "other": 0.0,
                       "gemm_forward": gemm, "gemm_train": gemm - 2 * elementwise - margin})
    scatter = a2.share_scatter(records)
    assert scatter == pytest.approx({g["point"]: 2 * wobble for g in growth})
    d = _d_rows({("small", c, "forward"): (0.7, 0.3, 0.0) for c in (128, 256)})
    found = a2.d_findings(d, growth, scatter)["train"]
    # the old count took each single step's order at its word: optimizer at both points
    assert found["largest_gain"] == {"optimizer": 1} and found["too_close"] == ["small ctx 256"]
    assert found["scatter_points"] == pytest.approx([200 * wobble, 200 * wobble])
    assert not found["mostly_optimizer"]       # 1 of 2 points is not most of them
    # with nothing measuring a scatter no point is settled
    assert a2.d_findings(d, growth)["train"]["too_close"] == ["small ctx 128", "small ctx 256"]


def test_d_optimizer_share_falls_with_context_by_its_smallest_step(seed):
    """The optimizer's share in a training step falls with the context for every size; the words get
    the least it falls from one context to the next, over all sizes."""
    rng = random.Random(seed)
    contexts, growth = [128, 256, 512], []
    falls = {}
    for size in ("small", "medium"):
        share = rng.uniform(0.2, 0.3)
        for i, c in enumerate(contexts):
            growth.append({"point": f"{size} ctx {c}", "GEMM": -share, "attention-softmax": 0.0, "elementwise": 0.0,
                           "optimizer": share, "other": 0.0, "gemm_forward": 0.8, "gemm_train": 0.8 - share})
            step = rng.uniform(0.01, 0.08)
            falls.setdefault(size, []).append(step) if i < len(contexts) - 1 else None
            share -= step
    d = _d_rows({(g["point"].split(" ctx ")[0], int(g["point"].split(" ctx ")[1]), "forward"): (0.8, 0.2, 0.0)
                 for g in growth})
    found = a2.d_findings(d, growth)["train"]
    assert found["optimizer_falls_for_every_size"]
    assert found["smallest_optimizer_fall_points"] == pytest.approx(100 * min(min(v) for v in falls.values()))


def test_d_table_and_figure_leave_out_empty_categories(tmp_path):
    d = _d_rows({("small", 128, "forward"): (0.7, 0.3, 0.0), ("small", 128, "train-step"): (0.5, 0.3, 0.2)})
    assert a2.empty_categories(d) == ["attention-softmax"]
    assert a2.empty_categories(d.assign(**{"attention-softmax_share": [0.0, 0.01]})) == []
    a2.plot_shares(d, tmp_path / "shares.png", "CUDA kernels")
    assert (tmp_path / "shares.png").stat().st_size > 1000


def _softmax_records(rng, share):
    """Forward profiles at two sizes and contexts whose softmax, at the longer context, moves its
    bytes at ``share`` of the H100's bandwidth."""
    records = []
    for size, heads in (("small", 12), ("medium", 16)):
        for context in (256, 512):
            moved = 8 * 4 * heads * context ** 2 * 4                   # 8 fp32 passes over B·H·T² scores
            softmax_ns = moved / (share * 3.35e12) * 1e9 if context == 512 else rng.uniform(1e4, 1e5)
            times = {"computing attention scores": 3e5, "computing softmax": softmax_ns, "final matmul": 1e5}
            forward = {"status": "ok", "tables": {}, "gpu_projection": [
                {"range": name, "instances": 2, "proj_ns": 2 * t, "gpu_ops": 10} for name, t in times.items()]}
            records.append({"status": "ok", "provenance": {"gpu": "NVIDIA H100 80GB HBM3"},
                            "params": {"size": size, "context": context, "batch": 4, "num_heads": heads,
                                       "d_model": 64 * heads, "precision": "fp32"},
                            "metrics": {"modes": {"forward": forward}}})
    return records


@pytest.mark.parametrize("share, bound", [(0.8, "memory"), (0.3, "below")])
def test_e_softmax_is_called_memory_bound_only_near_the_cards_bandwidth(seed, share, bound):
    """The prose blames memory traffic only where the softmax's bytes move at over half the card's
    bandwidth at every size's longest context."""
    records = _softmax_records(random.Random(seed), share)
    found = a2.e_findings(a2.table_e(records))
    assert [x["point"] for x in found["longest"]] == ["small ctx 512", "medium ctx 512"]
    assert found["softmax_hbm_share"] == pytest.approx([share, share])
    assert found["memory_bound"] == bound
    # a card without a known bandwidth settles nothing
    for r in records:
        r["provenance"]["gpu"] = "NVIDIA GeForce RTX 4090"
    assert a2.e_findings(a2.table_e(records))["memory_bound"] is None


def test_most_of_a_grid_is_named_by_what_it_leaves_out():
    """A sentence lists the shorter of the chosen points and the rest: "all but" the rest where the
    chosen are most of the grid, so it never lists 17 of 20 points."""
    grid = [f"p{i}" for i in range(20)]
    chosen = [p for p in grid if p not in ("p3", "p7", "p11")]
    assert a2.named_briefly(chosen, grid) == {"all_but": True, "points": ["p3", "p7", "p11"]}
    assert a2.named_briefly(["p1", "p2"], grid) == {"all_but": False, "points": ["p1", "p2"]}
    assert a2.named_briefly([], grid) == {"all_but": False, "points": []}


def test_the_training_step_s_shares_are_worded_only_where_the_summary_has_them(tmp_path):
    """Every key of a contract is present, so the section asks whether a block is null, not whether
    it is there: h200's A2 summary words the training step's shares, and without them says nothing of it."""
    import shutil
    from pathlib import Path

    from cs336_systems.report.writeup import Renderer

    repo = Path(__file__).resolve().parents[2]
    folder = shutil.copytree(repo / "results" / "h200" / "A2", tmp_path / "A2", ignore=shutil.ignore_patterns("records"))
    renderer = Renderer("md", tmp_path / "w" / "w.md", repo / "writeup" / "templates")
    assert "a training step gives" in renderer.section("A2", folder / "summary.json")
    summary = json.loads((folder / "summary.json").read_text())
    summary["d_findings"]["train"] = None
    (folder / "summary.json").write_text(json.dumps(summary))
    assert "a training step gives" not in renderer.section("A2", folder / "summary.json")


@pytest.mark.parametrize("host_bound_longest", [False, True])
def test_e_longest_contexts_compare_the_work_only_where_their_forward_keeps_the_gpu_busy(seed, host_bound_longest):
    """The spans at each size's longest context are called the kernels' work only where the forward
    around them, in the same process, kept the GPU busy above the host-bound line; a host-bound one
    is named, and without table (a) nothing is said of it."""
    rng = random.Random(seed)
    records, slow = [], None
    for size, heads in (("small", 12), ("medium", 16)):
        for context in (256, 512):
            range_ms = rng.uniform(20, 60)
            busy = rng.uniform(0.55, 0.99)
            if host_bound_longest and size == "medium" and context == 512:
                busy, slow = rng.uniform(0.05, 0.45), f"{size} ctx {context}"
            record = _a2(size, context, range_ms, [(GEMM, "GEMM", busy * range_ms, 40)])
            record["params"] |= {"num_heads": heads, "d_model": 64 * heads, "precision": "fp32"}
            record["provenance"] = {"gpu": "NVIDIA H100 80GB HBM3"}
            record["metrics"]["modes"]["forward"]["gpu_projection"] = [
                {"range": name, "instances": 2, "proj_ns": 2 * rng.uniform(1e4, 1e6), "gpu_ops": 4}
                for name in ("computing attention scores", "computing softmax", "final matmul")]
            records.append(record)
    a = a2.table_a(records)
    work = a2.e_findings(a2.table_e(records), a)["longest_work"]
    longest = a[a["point"].isin(["small ctx 512", "medium ctx 512"])]["gpu_busy"]
    assert work == [{"busy": [pytest.approx(longest.min()), pytest.approx(longest.max())],
                     "verdict": "host-bound" if host_bound_longest else "work",
                     "host_bound": [slow] if host_bound_longest else []}]
    assert a2.e_findings(a2.table_e(records))["longest_work"] == []


def test_e_softmax_is_called_memory_bound_only_where_its_bytes_floor_is_above_its_flops_floor(seed, monkeypatch):
    """Near the card's bandwidth is not enough to say "not arithmetic": the softmax's bytes at the
    bandwidth must take longer than its FLOPs at the card's fp32 peak. On a card whose fp32 peak
    makes the FLOPs' floor the longer one, the prose does not blame memory traffic."""
    import dataclasses

    from cs336_systems.accounting.hardware import H100_SXM

    rng = random.Random(seed)
    records = _softmax_records(rng, rng.uniform(0.55, 0.95))
    found = a2.e_findings(a2.table_e(records))
    assert found["memory_bound"] == "memory"
    # 8 fp32 passes (32 bytes a score) at 3.35 TB/s against one exp a score on the special-function
    # units (67e12 / 16 a second) and the other 4 operations a score one instruction an fp32 lane (67e12 / 2)
    context = 512
    per_score_ops = (5 * context - 2) / context
    expected = (32 / 3.35e12) / (1 / (67e12 / 16) + (per_score_ops - 1) / (67e12 / 2))
    assert found["memory_over_arithmetic"] == pytest.approx([expected, expected])
    # the same bytes on a card whose fp32 peak is under a hundredth of the H100's
    slow = dataclasses.replace(H100_SXM, fp32_flops=67e12 / rng.uniform(200, 2000))
    monkeypatch.setitem(a2.BY_DEVICE_NAME, "NVIDIA H100 80GB HBM3", slow)
    found = a2.e_findings(a2.table_e(records))
    assert found["softmax_hbm_share"][0] > a2.MEMORY_BOUND
    assert found["memory_over_arithmetic"][1] < 1
    assert found["memory_bound"] == "arithmetic"


def test_e_softmax_s_exps_count_at_the_special_function_units_rate_not_the_fp32_peak(seed, monkeypatch):
    """An exp runs on the special-function units, at an eighth of the fp32 lanes' rate on Hopper, and
    max, subtract, sum and divide are one instruction a lane each, not half a multiply-add. On a
    card whose fp32 peak puts the softmax's FLOPs, counted at that peak, below its bytes' time but
    its arithmetic at those rates above it, the prose does not call it bound by memory."""
    import dataclasses

    from cs336_systems.accounting.hardware import H100_SXM

    rng = random.Random(seed)
    records = _softmax_records(rng, rng.uniform(0.55, 0.95))
    # 32 bytes a score at 3.35 TB/s against about 5 FLOPs a score at the peak: 32 F / (5 * 3.35e12)
    # above 1; against an exp at F / 16 and 4 instructions at F / 2: 32 F / (24 * 3.35e12) below it
    lanes = rng.uniform(0.7e12, 2.2e12)
    slow = dataclasses.replace(H100_SXM, fp32_flops=lanes, special_function_ops=lanes / 16)
    monkeypatch.setitem(a2.BY_DEVICE_NAME, "NVIDIA H100 80GB HBM3", slow)
    found = a2.e_findings(a2.table_e(records))
    assert found["softmax_hbm_share"][0] > a2.MEMORY_BOUND
    assert found["memory_over_arithmetic"][1] < 1
    assert found["memory_bound"] == "arithmetic"


def test_e_scores_range_s_extra_time_is_set_against_its_passes_bandwidth_floor(seed):
    """The scores range's time beyond the final matmul's is worded as its scaling and mask passes
    only beside the least those passes take at the card's bandwidth: "fits" where that floor is
    inside the extra time at every longest context, "exceeds" where it is longer somewhere."""
    rng = random.Random(seed)
    records = _softmax_records(rng, rng.uniform(0.55, 0.95))
    table = a2.table_e(records)
    longest = table[table["point"].str.endswith("ctx 512")]
    # 4 fp32 passes over the B·H·T² scores at 3.35 TB/s, in µs
    floor_us = [4 * 4 * 4 * heads * 512 ** 2 / 3.35e12 * 1e6 for heads in (12, 16)]
    share = rng.uniform(0.2, 0.9)
    table.loc[longest.index, "scores_us"] = [table.at[i, "final_matmul_us"] + f / share for i, f in zip(longest.index, floor_us)]
    found = a2.e_findings(table)["scores_extra"]
    assert found["verdict"] == "fits" and found["floor_share"] == pytest.approx([share, share])
    table.loc[longest.index[0], "scores_us"] = table.at[longest.index[0], "final_matmul_us"] + floor_us[0] * rng.uniform(0.3, 0.9)
    assert a2.e_findings(table)["scores_extra"]["verdict"] == "exceeds"


def test_a_forward_is_host_bound_only_where_its_kernels_leave_the_gpu_idle_against_every_timed_length(seed):
    """The busy share (the first measured forward's kernels over the range's mean length) is called
    host-bound only where it lies below the line against the longest and the shortest timed forward
    alike; a forward whose timed lengths put it on both sides is named as not settled, not as host-bound."""
    rng = random.Random(seed)
    range_ms = rng.uniform(40, 80)
    kernel_ms = rng.uniform(0.3, 0.45) * range_ms               # below half the mean range
    # one timed forward short enough that the kernels fill more than half of it, the other long
    short = kernel_ms / rng.uniform(0.55, 0.9)
    straddle = _a2("medium", 128, range_ms, [(GEMM, "GEMM", kernel_ms, 48)], steps_ms=[short, 2 * range_ms - short])
    steady = _a2("small", 128, range_ms, [(GEMM, "GEMM", kernel_ms, 48)])
    found = a2.a_findings(a2.table_a([steady, straddle]))
    assert [h["point"] for h in found["host_bound"]] == ["small ctx 128"]
    (unsettled,) = found["host_bound_not_settled"]
    assert unsettled["point"] == "medium ctx 128"
    assert unsettled["busy"] == [pytest.approx(kernel_ms / (2 * range_ms - short)), pytest.approx(kernel_ms / short)]
    assert unsettled["busy"][0] < a2.LAUNCH_BOUND_BUSY < unsettled["busy"][1]
