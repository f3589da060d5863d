"""C1 and the data-parallel benchmark on CPU ranks, and the closed forms their reports use."""
import json
import os
import subprocess
import sys

import pandas as pd
import pytest
import torch

from cs336_systems.distributed import allreduce_bench, traces, train_bench, variants
from cs336_systems.distributed.launcher import run_on_ranks
from cs336_systems.report import c1, c8, ddp_rows, ddp_traces, spread


def test_bus_bandwidth_is_the_ring_share():
    assert allreduce_bench.bus_bandwidth(10.0, 2) == pytest.approx(10.0)
    assert allreduce_bench.bus_bandwidth(10.0, 4) == pytest.approx(15.0)      # 2·3/4
    assert allreduce_bench.bus_bandwidth(12.0, 6) == pytest.approx(20.0)      # 2·5/6


def test_allreduce_row_on_gloo(tmp_path):
    out = tmp_path / "row.json"
    assert allreduce_bench.main(["--backend", "gloo", "--world-size", "2", "--sizes-mb", "0.01", "0.1",
                                 "--warmup", "1", "--iters", "3", "--out", str(out)]) == 0
    records = json.loads(out.read_text())
    assert [r["params"]["size_mb"] for r in records] == [0.01, 0.1]
    for r in records:
        m = r["metrics"]
        assert r["status"] == "ok" and len(m["per_rank_median_ms"]) == 2 and m["sum_checked"]
        assert m["algbw_GBps"] == pytest.approx(r["params"]["size_mb"] * 1e6 / (m["ms"] / 1e3) / 1e9)
        assert m["ms_min"] <= m["ms"] <= m["ms_max"]
    # The table gives each median its spread: the fastest and slowest timed call.
    assert list(c1.frame(records)["ms_range"]) == [f"{r['metrics']['ms_min']:.4g}–{r['metrics']['ms_max']:.4g}"
                                                   for r in records]


def test_a_world_the_machine_cannot_host_is_skipped(monkeypatch):
    monkeypatch.setattr(allreduce_bench, "capacity", lambda backend: (2, "GPUs"))
    records = allreduce_bench.run("nccl", 4, [1, 10], warmup=1, iters=1, timeout_s=10)
    assert [r["status"] for r in records] == ["skipped", "skipped"]
    assert records[0]["reason"] == "4 ranks need 4 GPUs; this machine has 2"


def test_a_row_the_profiles_nodes_cannot_hold_is_skipped_with_why(tmp_path):
    """`--skip` (placement.Unplaced's reason): no rank starts, and the row's records say why."""
    out = tmp_path / "row.json"
    assert allreduce_bench.main(["--backend", "gloo", "--world-size", "6", "--sizes-mb", "1", "10",
                                 "--skip", "6 ranks do not fit", "--out", str(out)]) == 0
    records = json.loads(out.read_text())
    assert [(r["status"], r["reason"], r["params"]["size_mb"]) for r in records] == [
        ("skipped", "6 ranks do not fit", 1.0), ("skipped", "6 ranks do not fit", 10.0)]


def test_fit_recovers_latency_and_bandwidth():
    o_ms, w = 0.25, 5e9
    sizes = [0.1, 1, 10, 100]
    part = pd.DataFrame({"size_mb": sizes, "status": "ok", "ms": [o_ms + s * 1e6 / w * 1e3 for s in sizes]})
    fit = c1.fit_latency_bandwidth(part)
    assert fit.o_ms == pytest.approx(o_ms, rel=1e-6) and fit.w_GBps == pytest.approx(5.0, rel=1e-6)


def test_compute_gaps_merge_overlapping_kernels():
    lane = [{"lane": "compute", "start_us": a, "end_us": b} for a, b in [(0, 100), (50, 150), (900, 1000), (1010, 1100)]]
    lane.append({"lane": "communication", "start_us": 150, "end_us": 900})
    gaps = ddp_traces.compute_gaps(lane)
    assert gaps["idle_ms"] == pytest.approx((750 + 10) / 1e3)
    assert gaps["longest_gap_ms"] == pytest.approx(0.75) and gaps["gaps_over_half_ms"] == 1
    assert gaps["span_ms"] == pytest.approx(1.1)


def _tensor_bytes_left_after_turns(rank, world_size, names):
    """Bytes of the tensors alive (seen by the garbage collector) after each variant's turn and its
    release, in this rank: what a turn leaves behind for the next."""
    import gc

    import torch

    from cs336_systems.models import random_batch

    cfg = {"size": "tiny", "context": 16, "warmup": 1, "steps": 1, "per_rank_batch": 2, "precision": "fp32"}
    device = torch.device("cpu")
    batch = random_batch(2, 16, device=device)
    left = []
    for name in names:
        found = {"memory": {}, "details": {}, "turns": 0}
        train_bench._turn(name, cfg, device, batch, train_bench.autocast_for("fp32", device), found)
        train_bench._let_go(device)
        gc.collect()
        left.append(sum(o.numel() * o.element_size() for o in gc.get_objects() if isinstance(o, torch.Tensor)))
    return left


def test_a_turn_leaves_nothing_behind_for_the_next():
    """Every variant's turn lets go of its model, wrapper and optimizer: on a GPU, a turn that kept
    its model (an FSDP hook holding the wrapper from C++) put every later turn out of memory."""
    names = [v.name.replace(variants.FAMILY, "0.5") for v in variants.VARIANTS]
    left = run_on_ranks(_tensor_bytes_left_after_turns, 2, args=(names + names[:1],))
    for rank_left in left:
        assert rank_left[-1] == rank_left[0] and max(rank_left) - min(rank_left) < 10_000, dict(zip(names, rank_left))


GROUP = ["no-comm", "naive", "bucketed-0.5", "overlap-sharded", "bucketed-ready-0.5", "bucketed-avg-0.5",
         "bucketed-bf16-0.5", "fsdp"]
TRACED = ["no-comm", "naive", "bucketed-bf16-0.5"]


@pytest.fixture(scope="module", params=["fp32", "bf16"])
def group(request, tmp_path_factory):
    """One job per precision: the baseline and the variants taking turns in one Gloo process group."""
    out = tmp_path_factory.mktemp(f"group-{request.param}")
    assert train_bench.main(["--variants", *GROUP, "--size", "tiny", "--context", "16", "--global-batch", "4",
                             "--backend", "gloo", "--warmup", "1", "--rounds", "5", "--steps", "2",
                             "--out-dir", str(out), "--traced", *TRACED, "--precision", request.param,
                             "--accuracy-steps", "2"]) == 0
    return request.param, out


@pytest.mark.parametrize("variant", GROUP)
def test_training_variant_in_the_group(group, variant):
    precision, out = group
    ident = variants.lookup(variant).deliverable
    record = json.loads((out / ident / "records" / f"{variants.stem(variant, precision)}.json").read_text())
    assert record["status"] == "ok", record.get("message")
    assert record["params"]["precision"] == precision and variants.precision_of(record) == precision
    assert record["params"]["rounds"] == 5 and record["params"]["steps"] == 2
    accuracy = record["metrics"].get("accuracy")
    if variants.fp32_twin(variant):      # bf16 communication against fp32's, from the same start
        assert accuracy["reference"] == "bucketed-avg-0.5" and accuracy["steps"] == 2
        assert 0 < accuracy["weights_rel_diff"] < 1e-3 and accuracy["diff_over_update"] > 0
        assert len(accuracy["losses"]) == len(accuracy["reference_losses"]) == 2
        assert accuracy["losses"][0] == accuracy["reference_losses"][0]     # the first loss precedes any update
        assert record["metrics"]["casts_on_side_stream"] is False            # Gloo ranks on CPUs: no streams
    else:
        assert accuracy is None and "accuracy_steps" not in record["params"]
    if variant.startswith(("bucketed-ready", "bucketed-avg")):
        assert record["metrics"]["rebuilt_in_ready_order"] is True
    m = record["metrics"]
    parts = m["forward_ms"] + m["backward_ms"] + m["comm_wait_ms"] + m["optimizer_ms"]
    assert len(m["steps"]) == 5 * 2 and all(s["step_ms"] == pytest.approx(
        s["forward_ms"] + s["backward_ms"] + s["comm_wait_ms"] + s["optimizer_ms"], abs=1e-3) for s in m["steps"])
    assert parts > 0 and m["step_ms_slowest_rank"] >= min(s["step_ms"] for s in m["steps"])
    assert (m["buckets"] is not None) == variant.startswith("bucketed")
    assert len(m["memory_per_rank"]) == 2                  # the baseline too runs every rank
    # Every round's samples, the same steps as the flat list, and the job every variant shared.
    assert [x for r in m["rounds"] for x in r["step"]] == pytest.approx([s["step_ms"] for s in m["steps"]], abs=1e-3)
    assert all(len(r["step"]) == 2 and len(r["step_slowest_rank"]) == 2 for r in m["rounds"]) and len(m["rounds"]) == 5
    assert all(r["step_slowest_rank"][i] >= r["step"][i] for r in m["rounds"] for i in range(2))
    assert m["turns"]["with"] == GROUP and m["turns"]["rounds"] == 5 and m["turns"]["steps"] == 2
    assert m["turns"]["steps_per_turn"] == 2 and m["turns"]["warmup"] == 1 and m["turns"]["settle"] == 0
    base = json.loads((out / "C3" / "records" / f"no-comm_{precision}.json").read_text())
    assert spread.same_job(record, base) and spread.judge(record, base).rounds == 5
    step_range = ddp_rows.step_table([record])["step_range_ms"][0]          # the median's spread in the table
    assert step_range == f"{min(s['step_ms'] for s in m['steps']):.1f}–{max(s['step_ms'] for s in m['steps']):.1f}"
    trace = out / ident / "traces" / f"{variants.stem(variant, precision)}.json.gz"
    assert trace.exists() == (variant in TRACED)
    if variant in TRACED:
        stored_variant, intervals = traces.read(trace)
        lanes = {i["lane"] for i in intervals}
        assert stored_variant == variant and {"phase", "compute"} <= lanes
        assert ("communication" in lanes) == (variant != "no-comm")            # the baseline communicates nothing
    assert record["id"] == ident


def test_the_report_pairs_each_overhead_with_the_baseline_of_its_job(group):
    precision, out = group
    records = [json.loads(p.read_text()) for p in sorted(out.glob("C*/records/*.json"))]
    found = c8.overheads(records)[precision]
    assert all(row["paired"] for row in found["rows"].values()) and ddp_rows.paired_by_precision(records) == {precision: True}
    by = {r["params"]["variant"]: r for r in records}
    naive = spread.judge(by["naive"], by["no-comm"])
    assert naive.verdict != spread.NOT_SETTLED and found["rows"]["naive"]["verdict"] == naive.verdict
    assert found["rows"]["naive"]["ms"] == pytest.approx(naive.difference)
    assert (found["rows"]["naive"]["low_ms"], found["rows"]["naive"]["high_ms"]) == pytest.approx((naive.low, naive.high))


def _collectives_per_variant(rank, world_size, names):
    """Run the group job's rank function with torch.distributed's collectives counted, each call
    charged to the variant whose step is running (calls between steps, as the turns' agreement, are
    not). PyTorch's DDP calls its process group from C++, past these wrappers: not among ``names``."""
    import torch.distributed as dist

    counts, current = {n: 0 for n in names}, [None]
    for fn in ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
               "reduce_scatter_tensor", "reduce", "gather", "scatter", "all_to_all", "barrier", "send", "recv",
               "isend", "irecv", "all_gather_object", "broadcast_object_list"):
        real = getattr(dist, fn)

        def counted(*args, _real=real, **kwargs):
            if current[0] is not None:
                counts[current[0]] += 1
            return _real(*args, **kwargs)
        setattr(dist, fn, counted)
    real_step = train_bench.train_step

    def step(built, *args, **kwargs):
        current[0] = built.name
        try:
            return real_step(built, *args, **kwargs)
        finally:
            current[0] = None
    train_bench.train_step = step
    cfg = {"variants": names, "precision": "fp32", "size": "tiny", "context": 16, "per_rank_batch": 2,
           "warmup": 1, "rounds": 3, "steps": 2, "traced": [], "accuracy_steps": 0}
    out = train_bench._group(rank, world_size, "gloo", cfg)
    assert all(v["status"] == "ok" for v in out.values()), out
    return counts


def _one_rank_runs_out_of_memory(rank, world_size, names, failing, turn):
    """The group job's rank function with rank 1's build of ``failing`` running out of memory in
    its ``turn``-th turn (counted from 1); the other ranks and variants as they are."""
    real_build, built = train_bench.build, []

    def build(name, cfg, device):
        if rank == 1 and name == failing:
            built.append(name)
            if len(built) == turn:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real_build(name, cfg, device)
    train_bench.build = build
    cfg = {"variants": names, "precision": "fp32", "size": "tiny", "context": 16, "per_rank_batch": 2,
           "warmup": 1, "rounds": 3, "steps": 1, "traced": [], "accuracy_steps": 0, "job": "j"}
    return train_bench._group(rank, world_size, "gloo", cfg)


def test_a_variant_that_fails_on_one_rank_fails_on_every_rank_and_the_others_go_on():
    """Every rank leaves the failing variant in the same turn (else the next turn's collectives
    would pair one variant's with another's), with the failing rank and its message named; the
    other variants take every round. The baseline fails: its turn issues no collective that the
    failing rank would leave the other waiting in (that hangs until the collective's time limit)."""
    names = ["no-comm", "naive", "flat"]
    per_rank = run_on_ranks(_one_rank_runs_out_of_memory, 2, args=(names, "no-comm", 2), timeout_s=120,
                            collective_timeout_s=30)
    for out in per_rank:
        assert out["no-comm"]["status"] == "oom" and len(out["no-comm"]["rounds"]) == 1
        assert out["no-comm"]["message"] == "rank 1: OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
        assert all(out[n]["status"] == "ok" and len(out[n]["rounds"]) == 3 for n in ("naive", "flat"))
        assert out["flat"]["turns"]["job"] == "j" and out["flat"]["turns"]["with"] == names


def test_the_baseline_issues_no_collective():
    names = ["no-comm", "naive", "bucketed-0.5", "fsdp"]
    counts = run_on_ranks(_collectives_per_variant, 2, args=(names,))
    for per_rank in counts:
        assert per_rank["no-comm"] == 0, per_rank
        assert all(per_rank[n] > 0 for n in names[1:]), per_rank      # the counting sees the others' calls


def test_bad_variant_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as info:
        train_bench.main(["--variants", "naive", "zero3", "--size", "tiny", "--context", "16", "--global-batch", "4",
                          "--backend", "gloo", "--out-dir", "x"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "unknown data-parallel variant 'zero3'" in err
    assert all(name in err for name in variants.names())


@pytest.mark.slow
def test_an_allreduce_row_under_torchrun_is_written_by_rank_0_and_says_where_it_ran(tmp_path):
    """The rule's command: torch's launcher starts the ranks; one row, its sums' times from every rank."""
    out = tmp_path / "row.json"
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "-m", "cs336_systems.distributed.allreduce_bench", "--backend", "gloo", "--world-size", "2",
                           "--sizes-mb", "0.01", "0.1", "--warmup", "1", "--iters", "3", "--out", str(out)],
                          capture_output=True, text=True, timeout=240, env=os.environ | {"OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    records = json.loads(out.read_text())
    assert [r["params"]["size_mb"] for r in records] == [0.01, 0.1] and all(r["status"] == "ok" for r in records)
    for r in records:
        assert r["metrics"]["launch"] == {"launcher": "torchrun", "hosts": r["metrics"]["launch"]["hosts"],
                                          "nodes": 1, "ranks_per_node": 2}
        assert len(r["metrics"]["per_rank_median_ms"]) == 2
    bad = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          "-m", "cs336_systems.distributed.allreduce_bench", "--backend", "gloo", "--world-size", "3",
                          "--sizes-mb", "0.01", "--out", str(tmp_path / "bad.json")],
                         capture_output=True, text=True, timeout=240)
    assert bad.returncode != 0 and "--world-size 3, but torchrun started 2 ranks" in bad.stderr


@pytest.mark.slow
def test_the_data_parallel_job_under_torchrun_pairs_its_variants_in_one_job_written_by_rank_0(tmp_path):
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "-m", "cs336_systems.distributed.train_bench", "--variants", "no-comm", "naive",
                           "--size", "tiny", "--context", "16", "--global-batch", "4", "--world-size", "2",
                           "--backend", "gloo", "--warmup", "1", "--rounds", "3", "--steps", "1",
                           "--out-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, env=os.environ | {"OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads((tmp_path / "C3" / "records" / f"{v}_fp32.json").read_text()) for v in ("no-comm", "naive")]
    assert all(r["status"] == "ok" for r in records)
    assert records[0]["metrics"]["turns"]["job"] == records[1]["metrics"]["turns"]["job"]      # one job: paired
    assert all(r["metrics"]["launch"]["launcher"] == "torchrun" and r["metrics"]["launch"]["ranks_per_node"] == 2
               for r in records)
    assert len(records[1]["metrics"]["memory_per_rank"]) == 2          # both ranks' numbers reached rank 0
