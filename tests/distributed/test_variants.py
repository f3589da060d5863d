"""distributed.variants (the one list of data-parallel variants) and distributed.traces (stored steps)."""

import gzip
import json
import random

import pytest

from cs336_systems.distributed import traces, train_bench, variants


def test_every_name_resolves_to_a_builder_and_a_deliverable():
    for v in variants.VARIANTS:
        name = v.name.replace(variants.FAMILY, "25")
        assert variants.lookup(name) is v
        assert callable(variants.builder(name))
        assert variants.builder(name).__module__ == train_bench.__name__


def test_bucket_sizes_come_from_the_name():
    size = round(random.uniform(0.1, 2000), 2)
    assert variants.bucket_size_mb(f"bucketed-{size}") == size
    assert variants.bucket_size_mb("naive") is None
    for bad in ("bucketed-", "bucketed-x", "bucketed-1e3", "Naive", "naive-2"):
        with pytest.raises(ValueError, match="unknown data-parallel variant"):
            variants.lookup(bad)


def test_of_keeps_the_config_order_and_owner():
    chosen = ["torch-ddp", "bucketed-100", "naive", "fsdp", "bucketed-1"]
    assert variants.of("C3", chosen) == ["torch-ddp", "naive"]
    assert variants.of("C8", chosen) == ["bucketed-100", "bucketed-1"]
    assert variants.of("C4", chosen) == []
    assert variants.deliverables() == ["C3", "C4", "C6", "C8", "C11", "C12"]


def _intervals(n: int) -> list[dict]:
    rng = random.Random(n)
    out = []
    for _ in range(n):
        start = rng.uniform(0, 1e6)
        out.append({"lane": rng.choice(traces.LANES), "name": f"kernel{rng.randint(0, 99)}",
                    "start_us": start, "end_us": start + rng.uniform(0, 5e4)})
    # The case that made args.end_us necessary: start + (end - start) != end in floating point.
    out.append({"lane": "phase", "name": "backward", "start_us": 165924.854, "end_us": 693369.107})
    return out


def test_a_stored_trace_reads_back_exactly_and_is_a_chrome_trace(tmp_path):
    intervals = _intervals(2000)
    path = tmp_path / "t.json.gz"
    traces.write(path, "overlap", intervals)
    assert traces.read(path) == ("overlap", intervals)
    chrome = json.loads(gzip.decompress(path.read_bytes()))
    events = chrome["traceEvents"]
    assert {e["ph"] for e in events} == {"M", "X"} and chrome["displayTimeUnit"] == "ms"
    assert all(e["dur"] >= 0 and isinstance(e["ts"], float) for e in events if e["ph"] == "X")
    names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert sorted(names.values()) == ["communication", "compute", "issued (CPU)"]
    before = path.read_bytes()
    traces.write(path, "overlap", intervals)       # no time stamp in the gzip header: same bytes
    assert path.read_bytes() == before
