"""The A5 job end to end on the CPU (torch.profiler's memory events), and its command line."""
import json

import pytest

from cs336_systems.memory import snapshot
from cs336_systems.models import VOCAB_SIZE, get_size


def test_cpu_run_writes_a_record_with_its_timeline(tmp_path):
    batch, context = 2, 16
    out = tmp_path / "rec.json"
    assert snapshot.main(["--size", "tiny", "--context", str(context), "--batch", str(batch), "--mode", "train-step",
                          "--warmup", "1", "--device", "cpu", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    m = record["metrics"]
    assert record["status"] == "ok" and m["source"] == "torch.profiler (CPU)"
    assert record["artifacts"] == {"snapshot": None}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rec.json"]        # data only: the report draws
    assert [p["name"] for p in m["phases"]] == ["forward", "backward", "optimizer"]
    # Live before the step: weights and AdamW's two moments (fp32), and the token batch (int64).
    params = get_size("tiny").parameter_count()
    assert m["initial_bytes"] == 3 * 4 * params + batch * (context + 1) * 8
    assert m["peak"]["bytes"] > m["initial_bytes"]
    # The largest forward allocation is a (batch, context, vocab) fp32 tensor made in our code.
    top = m["top_allocations"][0]
    assert top["size_bytes"] == batch * context * VOCAB_SIZE * 4
    assert top["frame"].startswith(("cs336_basics/", "cs336_systems/"))
    assert max(v for _, v in m["series"]) == m["peak"]["bytes"]
    # The timeline's bands: the same peak and phases as the analysis, the batch and state at the bottom.
    t = record["timeline"]
    assert t["peak_bytes"] == m["peak"]["bytes"] and t["source"] == m["source"]
    assert [p["name"] for p in t["phases"]] == ["forward", "backward", "optimizer"]
    assert t["labels"][0] == "live before the step" and t["values_mib"][0][0] == round(m["initial_bytes"] / 2**20, 2)
    assert max(map(sum, zip(*t["values_mib"]))) == pytest.approx(m["peak"]["bytes"] / 2**20,
                                                                  abs=0.005 * len(t["labels"]))
    assert t["oom_ms"] == [] and len(t["times_ms"]) <= 2 * 200 + 2


def test_out_of_memory_in_the_step_keeps_the_timeline_up_to_it(tmp_path, monkeypatch):
    build = snapshot.build_workload

    def failing_workload(*args, **kwargs):
        workload = build(*args, **kwargs)

        def step(phase):
            with phase("forward"):
                logits = workload.runnable(workload.inputs)
                raise MemoryError(f"CPU out of memory allocating another {tuple(logits.shape)}")

        workload.step = step
        return workload

    monkeypatch.setattr(snapshot, "build_workload", failing_workload)
    out = tmp_path / "rec.json"
    assert snapshot.main(["--size", "tiny", "--context", "8", "--batch", "2", "--warmup", "0", "--device", "cpu",
                          "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["status"] == "oom" and record["metrics"] == {}
    partial, t = record["partial_metrics"], record["timeline"]
    assert t["peak_bytes"] == partial["peak"]["bytes"] > partial["initial_bytes"]
    assert [p["name"] for p in t["phases"]] == ["forward"]
    assert len(t["times_ms"]) == partial["events"] + 1


def test_a_failure_before_the_step_leaves_no_timeline(tmp_path, monkeypatch):
    def fail(*args, **kwargs):
        raise RuntimeError("no workload")

    monkeypatch.setattr(snapshot, "build_workload", fail)
    out = tmp_path / "rec.json"
    assert snapshot.main(["--size", "tiny", "--context", "8", "--device", "cpu", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["status"] == "error" and "no workload" in record["message"]
    assert record["timeline"] is None and record["artifacts"] == {"snapshot": None}


@pytest.mark.parametrize("argv, message", [
    (["--context", "0"], "--context must be at least 1"),
    (["--warmup", "-1"], "--warmup must be 0 or more"),
    (["--device", "nonsense"], "--device"),
])
def test_bad_input_is_one_line(tmp_path, capsys, argv, message):
    base = ["--size", "tiny", "--context", "8", "--out", str(tmp_path / "r.json")]
    with pytest.raises(SystemExit) as exc:
        snapshot.parse_args(base + argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1] and "Traceback" not in "".join(err)
