"""distributed.variants (the one list of data-parallel variants) and distributed.traces (stored steps)."""

import errno
import gzip
import json
import os
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


def test_a_trace_write_that_fails_midway_leaves_the_old_trace_and_no_temp_file(tmp_path, monkeypatch):
    path = tmp_path / "t.json.gz"
    traces.write(path, "overlap", _intervals(10))
    before = path.read_bytes()
    real_fdopen = os.fdopen

    class HalfWritten:
        """Writes half of what it is given, then fails as a full disk does."""

        def __init__(self, fd, mode):
            self.file = real_fdopen(fd, mode)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.file.close()

        def write(self, data):
            self.file.write(data[: len(data) // 2])
            self.file.flush()
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fdopen", HalfWritten)
    with pytest.raises(OSError, match="No space left on device"):
        traces.write(path, "overlap", _intervals(2000))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json.gz"]
    assert path.read_bytes() == before


def test_a_trace_written_to_a_full_device_leaves_no_temp_file(tmp_path, monkeypatch):
    """The temp file's descriptor is /dev/full, so the kernel itself refuses the bytes (ENOSPC)."""
    if not os.access("/dev/full", os.W_OK):
        pytest.skip("no writable /dev/full")
    made = []

    def full_mkstemp(dir, prefix, suffix):
        tmp = os.path.join(dir, f"{prefix}full{suffix}")
        open(tmp, "w").close()
        made.append(tmp)
        return os.open("/dev/full", os.O_WRONLY), tmp

    monkeypatch.setattr(traces.tempfile, "mkstemp", full_mkstemp)
    with pytest.raises(OSError) as raised:
        traces.write(tmp_path / "t.json.gz", "overlap", _intervals(2000))
    assert raised.value.errno == errno.ENOSPC
    assert len(made) == 1 and list(tmp_path.iterdir()) == []
