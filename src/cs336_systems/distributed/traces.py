"""One training step's intervals, stored as a gzipped Chrome trace (``<variant>.json.gz``).

``train_bench`` reduces a profiled step to intervals ``{lane, name, start_us, end_us}`` on three
lanes: ``phase`` (when the CPU issued forward, backward, the wait and the optimizer), ``compute``
and ``communication`` (the GPU's kernels; on the CPU, matrix products and collectives). They are
stored in the Chrome trace event format, one thread per lane, so a trace opens as it is in
Perfetto (ui.perfetto.dev) or chrome://tracing, and gzipped: a step of the xl model is ~15 000
kernels, ~2.5 MB of JSON, ~10 times less compressed.

``read`` gives back exactly the intervals that were written, so reports computed from a stored trace
are the same as from the live one: where start + duration does not give the end to the last bit in
floating point (a few in 100 000), the event carries the end itself in ``args.end_us``. Kept free
of torch: the reports read it.
"""
from __future__ import annotations

import gzip
import io
import json
import os
import tempfile
from pathlib import Path

LANES = ("phase", "compute", "communication")
_LANE_TITLES = {"phase": "issued (CPU)", "compute": "compute", "communication": "communication"}
_PID = 0      # rank 0, the one rank whose step is kept


def _event(interval: dict) -> dict:
    start, end = interval["start_us"], interval["end_us"]
    event = {"name": interval["name"], "cat": interval["lane"], "ph": "X", "pid": _PID,
             "tid": LANES.index(interval["lane"]), "ts": start, "dur": end - start}
    if start + (end - start) != end:
        event["args"] = {"end_us": end}
    return event


def to_chrome(variant: str, intervals: list[dict]) -> dict:
    """The Chrome trace ("JSON object format") of one step's intervals."""
    meta = [{"name": "process_name", "ph": "M", "pid": _PID, "args": {"name": f"rank 0: one step of {variant}"}}]
    meta += [{"name": "thread_name", "ph": "M", "pid": _PID, "tid": tid, "args": {"name": _LANE_TITLES[lane]}}
             for tid, lane in enumerate(LANES)]
    events = [_event(i) for i in intervals]
    return {"traceEvents": meta + events, "displayTimeUnit": "ms", "otherData": {"variant": variant}}


def from_chrome(trace: dict) -> tuple[str, list[dict]]:
    """(variant, intervals) back from ``to_chrome``'s output."""
    intervals = [{"lane": e["cat"], "name": e["name"], "start_us": e["ts"],
                  "end_us": e.get("args", {}).get("end_us", e["ts"] + e["dur"])}
                 for e in trace["traceEvents"] if e.get("ph") == "X"]
    return trace["otherData"]["variant"], intervals


def write(path: str | os.PathLike, variant: str, intervals: list[dict]) -> None:
    """Gzipped Chrome trace, written atomically (temp file + rename, the temp file removed if
    writing fails); byte-identical for the same intervals (no time stamp or file name in the gzip
    header)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0) as zipped:
        zipped.write(json.dumps(to_chrome(variant, intervals), separators=(",", ":")).encode())
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(buffer.getvalue())
        os.replace(tmp, path)
    except BaseException:
        # A failed write (a full disk, an interrupt) would otherwise leave the partial temp file
        # behind, taking space and never read again.
        Path(tmp).unlink(missing_ok=True)
        raise


def read(path: str | os.PathLike) -> tuple[str, list[dict]]:
    with gzip.open(path, "rt") as f:
        return from_chrome(json.load(f))
