"""The A5 job end to end on the CPU (torch.profiler's memory events), and its command line."""
import json

import pytest

from cs336_systems.memory import snapshot
from cs336_systems.models import VOCAB_SIZE, get_size


def test_cpu_run_writes_record_and_timeline(tmp_path):
    batch, context = 2, 16
    out, png = tmp_path / "rec.json", tmp_path / "t.png"
    assert snapshot.main(["--size", "tiny", "--context", str(context), "--batch", str(batch), "--mode", "train-step",
                          "--warmup", "1", "--device", "cpu", "--out", str(out), "--timeline", str(png)]) == 0
    record = json.loads(out.read_text())
    m = record["metrics"]
    assert record["status"] == "ok" and m["source"] == "torch.profiler (CPU)"
    assert record["artifacts"] == {"timeline": "t.png", "snapshot": None}
    assert png.read_bytes()[:4] == b"\x89PNG"
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


@pytest.mark.parametrize("argv, message", [
    (["--context", "0"], "--context must be at least 1"),
    (["--warmup", "-1"], "--warmup must be 0 or more"),
    (["--device", "nonsense"], "--device"),
])
def test_bad_input_is_one_line(tmp_path, capsys, argv, message):
    base = ["--size", "tiny", "--context", "8", "--out", str(tmp_path / "r.json"), "--timeline", str(tmp_path / "t.png")]
    with pytest.raises(SystemExit) as exc:
        snapshot.parse_args(base + argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1] and "Traceback" not in "".join(err)
