"""B1 sweep: memory accounting, extension until out of memory, and the report's numbers."""
import json

import pytest
import torch

from cs336_systems.attention import sweep
from cs336_systems.report import b1


def test_memory_accounting_closed_form():
    acc = sweep.attention_memory(batch=8, seq=1024, d=64)
    assert acc["saved"] == 4 * (4 * 8 * 1024 * 64 + 8 * 1024 * 1024)
    assert acc["forward_peak"] - acc["saved"] == 4 * 8 * 1024 * 1024
    assert acc["backward_peak"] - acc["saved"] == 2 * 4 * 8 * 1024 * 1024


def test_sequence_lengths_extend_by_doubling():
    assert list(sweep.sequence_lengths([256, 64], 1024)) == [64, 256, 512, 1024]
    assert list(sweep.sequence_lengths([64], None)) == [64]


def test_extension_stops_at_the_first_out_of_memory(monkeypatch):
    def fake(fn, q, k, v, grad, device, where):
        where["phase"] = "forward"
        if q.shape[1] >= 256:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1 GiB")
        return {"memory_before_backward_bytes": None}

    monkeypatch.setattr(sweep, "warm_up", fake)
    records = sweep.sweep(16, [64, 256], batch=2, iters=1, compiled=False, device="cpu", extend_to=4096)
    assert [(r["params"]["seq"], r["status"]) for r in records] == [(64, "ok"), (256, "oom"), (512, "oom")]
    assert records[1]["metrics"]["accounting_bytes"] == sweep.attention_memory(2, 256, 16)
    assert records[1]["metrics"]["failed_during"] == "forward"


def test_eager_and_compiled_take_turns_in_one_job_and_each_extends_to_its_own_first_oom(monkeypatch, tmp_path):
    """One job per head dimension writes both variants' records, sharing the job's id and holding
    every round; eager running out of memory at an extended length stops eager's extension and
    not compiled's, which goes on to its own first failure."""
    from cs336_systems.report.spread import judge

    real = sweep.warm_up

    def warm_up(fn, q, k, v, grad, device, where):
        limit = 64 if fn is sweep.plain_attention else 128
        if q.shape[1] > limit:
            where["phase"] = "backward"
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(fn, q, k, v, grad, device, where)

    monkeypatch.setattr(sweep, "warm_up", warm_up)
    assert sweep.main(["--d", "16", "--seqs", "32", "48", "--extend-to", "1024", "--batch", "2", "--iters", "3",
                       "--variants", "eager", "compiled", "--backend", "aot_eager", "--device", "cpu",
                       "--out-dir", str(tmp_path)]) == 0
    rows = {v: json.loads(sweep.row_path(tmp_path, v, 16).read_text()) for v in sweep.VARIANTS}
    assert [(r["params"]["seq"], r["status"]) for r in rows["eager"]] == [(32, "ok"), (48, "ok"), (96, "oom")]
    assert [(r["params"]["seq"], r["status"]) for r in rows["compiled"]] == \
        [(32, "ok"), (48, "ok"), (96, "ok"), (192, "oom")]
    ok = [r for records in rows.values() for r in records if r["status"] == "ok"]
    assert len({r["metrics"]["turns"]["job"] for r in ok}) == 1
    assert all(len(r["metrics"]["rounds"]) == sweep.ROUNDS >= 3 for r in ok)
    assert all(r["metrics"]["turns"]["with"] == ["eager", "compiled"] for r in ok)
    # a turn's calls: the iterations over the rounds, rounded up
    assert all(r["metrics"]["turns"]["steps_per_turn"] == r["metrics"]["calls_per_turn"] == 1 for r in ok)
    for r in ok:        # a time is the mean of its rounds' means
        assert r["metrics"]["forward_ms"] == pytest.approx(
            sum(one["forward"][0] for one in r["metrics"]["rounds"]) / sweep.ROUNDS)
    verdict = judge(rows["eager"][0], rows["compiled"][0], phase="forward")
    assert verdict.paired and verdict.rounds == sweep.ROUNDS and verdict.set_aside == sweep.ROUNDS // 4
    assert rows["eager"][2]["metrics"]["failed_during"] == "backward"


def test_a_row_refuses_fewer_than_three_rounds(tmp_path, capsys):
    with pytest.raises(SystemExit):
        sweep.main(["--d", "16", "--seqs", "32", "--rounds", "2", "--variants", "eager", "compiled",
                    "--out-dir", str(tmp_path)])
    assert "--rounds must be at least 3" in capsys.readouterr().err


def test_real_points_on_cpu_and_report(tmp_path):
    eager = sweep.sweep(16, [32, 48], batch=2, iters=2, compiled=False, device="cpu", extend_to=None)
    assert all(r["status"] == "ok" and r["metrics"]["forward_ms"] > 0 for r in eager)
    oom = dict(eager[-1], status="oom", params=dict(eager[-1]["params"], seq=96, d=16),
               metrics={"accounting_bytes": sweep.attention_memory(2, 96, 16)})
    path = tmp_path / "eager_d16.json"
    path.write_text(json.dumps(eager + [oom]))
    assert b1.main(["--rows", str(path), "--out-dir", str(tmp_path / "B1")]) == 0
    summary = json.loads((tmp_path / "B1" / "summary.json").read_text())
    assert summary["smallest_oom"]["seq"] == 96
    assert summary["smallest_oom"]["predicted_backward_peak_MiB"] == pytest.approx(
        sweep.attention_memory(2, 96, 16)["backward_peak"] / 2**20)
    assert summary["before_backward"] is None and summary["peaks"] is None   # no CUDA memory readings on a CPU
    assert summary["smallest_oom"]["cause"] == b1.NOT_SETTLED                  # a made-up failure with no message


def test_allocator_state_reads_pytorchs_oom_message():
    message = ("OutOfMemoryError: CUDA out of memory. Tried to allocate 32.00 GiB. GPU 0 has a total capacity of "
               "139.80 GiB of which 10.96 GiB is free. Including non-PyTorch memory, this process has 128.84 GiB "
               "memory in use. Of the allocated memory 96.13 GiB is allocated by PyTorch, and 31.99 GiB is reserved")
    assert b1.allocator_state(message) == pytest.approx(
        {"capacity_MiB": 139.80 * 1024, "free_MiB": 10.96 * 1024, "requested_MiB": 32 * 1024,
         "allocated_MiB": 96.13 * 1024, "reserved_unallocated_MiB": 31.99 * 1024})
    assert b1.allocator_state("DefaultCPUAllocator: can't allocate memory") == {}
    assert b1.allocator_state(None) == {}


def test_compiled_row_with_the_smoke_backend():
    """The smoke preset's back end (aot_eager) through the compiled path; the records name it."""
    records = sweep.sweep(16, [32], batch=2, iters=1, compiled=True, device="cpu", extend_to=None, backend="aot_eager")
    assert [r["status"] for r in records] == ["ok"]
    assert records[0]["params"]["backend"] == "aot_eager" and records[0]["params"]["compiled"]
    eager = sweep.sweep(16, [32], batch=2, iters=1, compiled=False, device="cpu", extend_to=None)
    assert "backend" not in eager[0]["params"]
